package checkpoint

import (
	"bufio"
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outpost-mesh/outpost/sync/wire"
)

const crashChildEnv = "OUTPOST_CHECKPOINT_CRASH_CHILD"

// crashBatch is batch i of the crash test, at revision i: it puts
// pods/ns/b<i>-0..9 and deletes those of batch i-2, so that after any
// revision R exactly the objects of batches R-1 and R exist. Object 0 is
// over Config.ValueThreshold, so a batch spans the value log and the tree.
func crashBatch(i int64) []wire.Change {
	var cs []wire.Change
	for j := range 10 {
		cs = append(cs, wire.Change{Op: wire.OpPut, Key: crashKey(i, j), Revision: i, Object: crashObject(i, j)})
		if i > 2 {
			cs = append(cs, wire.Change{Op: wire.OpDelete, Key: crashKey(i-2, j), Revision: i})
		}
	}
	return cs
}

func crashKey(i int64, j int) wire.Key { return podKey("ns", fmt.Sprintf("b%d-%d", i, j)) }

func crashObject(i int64, j int) []byte {
	n := 200
	if j == 0 {
		n = 40 << 10
	}
	return bytes.Repeat([]byte(fmt.Sprintf("%d-%d;", i, j)), n/8)
}

// TestCrashChild is the writer the crash test kills: it is a test only so
// that the test binary can run it in a child process. It applies batches
// from LastRevision+1 on, enqueues a status and an event after each, and
// prints "<revision> <last seq>" once all three have returned.
func TestCrashChild(t *testing.T) {
	dir := os.Getenv(crashChildEnv)
	if dir == "" {
		t.Skip("run by TestCrashRecovery in a child process")
	}
	s, err := Open(dir, DefaultConfig())
	if err != nil {
		fmt.Fprintln(os.Stderr, "open:", err)
		os.Exit(2)
	}
	for i := s.LastRevision() + 1; ; i++ {
		if err := s.ApplyBatch(crashBatch(i), i); err != nil {
			fmt.Fprintln(os.Stderr, "apply:", err)
			os.Exit(3)
		}
		if _, err := s.Enqueue(wire.KindPodStatus, podKey("ns", "status"), crashObject(i, 1)); err != nil {
			fmt.Fprintln(os.Stderr, "enqueue:", err)
			os.Exit(4)
		}
		seq, err := s.Enqueue(wire.KindEvent, wire.Key{Resource: wire.ResourceEvents, Namespace: "ns", Name: "e"}, nil)
		if err != nil {
			fmt.Fprintln(os.Stderr, "enqueue:", err)
			os.Exit(4)
		}
		os.Stdout.WriteString(fmt.Sprintf("%d %d\n", i, seq)) // one write per line
	}
}

// TestCrashRecovery kills a writing child with SIGKILL at random points and
// checks after each kill that every acknowledged batch survived, that the
// batch of LastRevision is there in full and no later batch in part, and
// that seqs go on increasing.
func TestCrashRecovery(t *testing.T) {
	if os.Getenv(crashChildEnv) != "" {
		t.Skip("in the child")
	}
	const rounds = 10
	dir := t.TempDir()
	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, 1))
	t.Logf("seed %d", seed)
	var lastAcked int64
	var lastSeq uint64
	for round := range rounds {
		cmd := exec.Command(os.Args[0], "-test.run=^TestCrashChild$", "-test.count=1")
		cmd.Env = append(os.Environ(), crashChildEnv+"="+dir)
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		// A child that stops printing is killed at the deadline and fails.
		var timedOut atomic.Bool
		deadline := time.AfterFunc(time.Minute, func() { timedOut.Store(true); cmd.Process.Kill() })
		// Kill a random time (up to a few batches) after a random number of
		// acknowledged batches, so that the kill lands anywhere in a batch.
		killAfter := 1 + rng.IntN(20)
		jitter := time.Duration(rng.IntN(20_000)) * time.Microsecond
		acked := 0
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			var rev int64
			var seq uint64
			if _, err := fmt.Sscanf(sc.Text(), "%d %d", &rev, &seq); err != nil {
				continue // a line cut by the kill is no acknowledgement
			}
			lastAcked, lastSeq = rev, seq
			if acked++; acked == killAfter {
				time.AfterFunc(jitter, func() { cmd.Process.Kill() }) // SIGKILL
			}
		}
		cmd.Process.Kill()
		cmd.Wait()
		deadline.Stop()
		if timedOut.Load() || acked == 0 {
			t.Fatalf("round %d: child acknowledged %d batches in a minute; stderr:\n%s", round, acked, stderr.String())
		}

		s, err := Open(dir, DefaultConfig())
		if err != nil {
			t.Fatalf("round %d: Open after kill -9 = %v", round, err)
		}
		rev := s.LastRevision()
		if rev != lastAcked && rev != lastAcked+1 {
			s.Close()
			t.Fatalf("round %d: LastRevision() = %d after kill -9, acknowledged through %d", round, rev, lastAcked)
		}
		var want []Object
		for i := max(1, rev-1); i <= rev; i++ {
			for j := range 10 {
				want = append(want, Object{Key: crashKey(i, j), Revision: i, Raw: crashObject(i, j)})
			}
		}
		got, err := s.List(wire.ResourcePods)
		if err != nil || !objectsEqual(got, want) {
			s.Close()
			t.Fatalf("round %d: List(pods) at revision %d = %d objects %v, %v; want those of batches %d and %d", round, rev, len(got), keysOf(got), err, rev-1, rev)
		}
		seq, err := s.Enqueue(wire.KindEvent, podKey("ns", "after"), nil)
		if err != nil || seq <= lastSeq {
			s.Close()
			t.Fatalf("round %d: Enqueue() after kill -9 = %d, %v; want a seq above %d", round, seq, err, lastSeq)
		}
		lastSeq = seq
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("%d rounds, through revision %d", rounds, lastAcked)
}

func objectsEqual(a, b []Object) bool {
	if len(a) != len(b) {
		return false
	}
	// As sets: List's order is checked by other tests.
	byKey := map[wire.Key]Object{}
	for _, o := range b {
		byKey[o.Key] = o
	}
	for _, o := range a {
		w, ok := byKey[o.Key]
		if !ok || w.Revision != o.Revision || !bytes.Equal(w.Raw, o.Raw) {
			return false
		}
	}
	return true
}

func keysOf(objs []Object) []string {
	var ks []string
	for _, o := range objs {
		ks = append(ks, fmt.Sprintf("%s@%d", o.Key.Name, o.Revision))
	}
	return ks
}
