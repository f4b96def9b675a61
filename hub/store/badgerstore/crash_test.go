package badgerstore

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/outpost-mesh/outpost/hub/store"
)

const crashChildEnv = "OUTPOST_BADGERSTORE_CRASH_CHILD"

// TestCrashChild is the writer the crash test kills: it is a test only so
// that the test binary can run it in a child process.
func TestCrashChild(t *testing.T) {
	dir := os.Getenv(crashChildEnv)
	if dir == "" {
		t.Skip("run by TestCrashRecovery in a child process")
	}
	round := os.Getenv(crashChildEnv + "_ROUND")
	s, err := Open(DefaultConfig(dir))
	if err != nil {
		fmt.Fprintln(os.Stderr, "open:", err)
		os.Exit(2)
	}
	var mu sync.Mutex
	ctx := context.Background()
	var wg sync.WaitGroup
	for w := 0; w < 16; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; ; n++ {
				key := fmt.Sprintf("/crash/r%s/w%02d/%06d", round, w, n)
				kv, err := s.Create(ctx, key, []byte(key))
				if err != nil {
					fmt.Fprintln(os.Stderr, "create:", err)
					os.Exit(3)
				}
				// Acknowledged: report it. One write call per line.
				mu.Lock()
				os.Stdout.WriteString(fmt.Sprintf("%s %d\n", key, kv.ModRevision))
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
}

// TestCrashRecovery kills a writing child with SIGKILL at random moments and
// checks that every write it acknowledged survives, that revisions continue
// and that a watch can resume from before the crash.
func TestCrashRecovery(t *testing.T) {
	if os.Getenv(crashChildEnv) != "" {
		t.Skip("in the child")
	}
	rounds := 20
	if testing.Short() {
		rounds = 5
	}
	dir := t.TempDir()
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1))
	var lastRev int64
	total := 0
	for round := 0; round < rounds; round++ {
		cmd := exec.Command(os.Args[0], "-test.run=^TestCrashChild$", "-test.count=1")
		cmd.Env = append(os.Environ(), crashChildEnv+"="+dir, fmt.Sprintf("%s_ROUND=%d", crashChildEnv, round))
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		// Kill after a random number of acknowledged writes (so the kill
		// lands while writes are in flight), then read what it had printed.
		killAfter := 1 + rng.IntN(3000)
		acked := map[string]int64{}
		sc := bufio.NewScanner(out)
		killed := false
		for sc.Scan() {
			var key string
			var rev int64
			if _, err := fmt.Sscanf(sc.Text(), "%s %d", &key, &rev); err != nil {
				continue // a line cut by the kill: not a complete acknowledgement
			}
			acked[key] = rev
			if !killed && len(acked) >= killAfter {
				cmd.Process.Kill() // SIGKILL
				killed = true
			}
		}
		if !killed {
			cmd.Process.Kill()
		}
		cmd.Wait()
		if len(acked) == 0 {
			t.Fatalf("round %d: child acknowledged nothing; stderr: %s", round, stderr.String())
		}
		total += len(acked)

		s, err := Open(DefaultConfig(dir))
		if err != nil {
			t.Fatalf("round %d: reopen after kill -9: %v", round, err)
		}
		ctx := context.Background()
		var maxRev int64
		for key, rev := range acked {
			kv, err := s.Get(ctx, key, 0)
			if err != nil || string(kv.Value) != key || kv.ModRevision != rev {
				s.Close()
				t.Fatalf("round %d: acknowledged %s at %d: got %+v, %v", round, key, rev, kv, err)
			}
			maxRev = max(maxRev, rev)
		}
		cur, _ := s.Revision(ctx)
		if cur < maxRev || cur < lastRev {
			s.Close()
			t.Fatalf("round %d: revision %d after reopen, acknowledged up to %d, previous round ended at %d", round, cur, maxRev, lastRev)
		}
		// A watcher resumes from before the crash and sees every later write.
		// From 1 at least: a watch from 0 starts at the current revision,
		// and would wait out its minute for writes that came before it.
		from := max(lastRev, cur-50, 1)
		wctx, cancel := context.WithTimeout(ctx, time.Minute)
		ch, err := s.Watch(wctx, "/crash/", from)
		if err != nil {
			cancel()
			s.Close()
			t.Fatalf("round %d: watch from %d: %v", round, from, err)
		}
		next := from + 1
		for next <= cur {
			resp, ok := <-ch
			if !ok || resp.Err != nil {
				cancel()
				s.Close()
				t.Fatalf("round %d: watch from %d ended at %d: %v", round, from, next, resp.Err)
			}
			for _, ev := range resp.Events {
				if ev.Revision() != next {
					t.Fatalf("round %d: watch event at %d, want %d", round, ev.Revision(), next)
				}
				next++
			}
		}
		cancel()
		// The next write continues the revision sequence.
		kv, err := s.Create(ctx, fmt.Sprintf("/crash/after/%d", round), nil)
		if err != nil || kv.ModRevision != cur+1 {
			s.Close()
			t.Fatalf("round %d: write after reopen = %+v, %v; want revision %d", round, kv, err, cur+1)
		}
		lastRev = kv.ModRevision
		if err := s.Close(); err != nil && !errors.Is(err, store.ErrClosed) {
			t.Fatal(err)
		}
	}
	t.Logf("%d rounds, %d acknowledged writes, all recovered; final revision %d", rounds, total, lastRev)
}
