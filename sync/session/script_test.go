package session

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/outpost-mesh/outpost/sync/wire"
)

var rewrite = flag.Bool("rewrite", false, "rewrite the expected output of the testdata scripts")

// TestScripts replays the scripts of testdata/*.txt. A script is a series
// of blocks: commands, one a line, then "----" and what they print, up to
// a blank line. Lines starting with "#" between blocks are comments.
// go test -run TestScripts -rewrite rewrites the outputs. The commands:
//
//	welcome last=N hub=N [inventory] [version=N]
//	    the hub's Welcome to a node whose view is complete through last
//	batch rev=N bytes=N [last=N]
//	    a batch of that revision (0: more follows) in a frame of n bytes;
//	    last is the node's revision then, by default what it recorded last
//	liveness idle=D keepalive=D tick=D probe=D [noprobe] [heartbeat=D answer=D] [at=D packets=N]
//	    a new Liveness, started at (default 0s) with packets (default 0)
//	at D packets=N
//	    a look at time D since the script's start
func TestScripts(t *testing.T) {
	files, err := filepath.Glob("testdata/*.txt")
	if err != nil || len(files) == 0 {
		t.Fatalf("no scripts: %v", err)
	}
	for _, file := range files {
		t.Run(strings.TrimSuffix(filepath.Base(file), ".txt"), func(t *testing.T) { runScript(t, file) })
	}
}

func runScript(t *testing.T, file string) {
	text, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	r := &scriptRun{}
	lines := strings.Split(strings.TrimRight(string(text), "\n"), "\n")
	for i := 0; i < len(lines); i++ {
		l := lines[i]
		if l == "" || strings.HasPrefix(l, "#") {
			out.WriteString(l + "\n")
			continue
		}
		start := i
		var got []string
		for ; i < len(lines) && lines[i] != "----"; i++ {
			out.WriteString(lines[i] + "\n")
			printed, err := r.run(lines[i])
			if err != nil {
				t.Fatalf("%s:%d: %s: %v", file, i+1, lines[i], err)
			}
			got = append(got, printed...)
		}
		if i == len(lines) {
			t.Fatalf("%s:%d: commands without ----", file, start+1)
		}
		var want []string
		for i++; i < len(lines) && lines[i] != ""; i++ {
			want = append(want, lines[i])
		}
		out.WriteString("----\n")
		for _, g := range got {
			out.WriteString(g + "\n")
		}
		if i < len(lines) {
			out.WriteString("\n")
		}
		if !*rewrite && strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Errorf("%s:%d: got\n%s\nwant\n%s", file, start+1, strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
	}
	if *rewrite {
		if err := os.WriteFile(file, []byte(out.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// scriptRun is the state of one script: the receiver of the session, the
// revision the node last recorded, and the liveness under test.
type scriptRun struct {
	recv     Receiver
	last     int64
	liveness *Liveness
}

var epoch = time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)

func (r *scriptRun) run(line string) ([]string, error) {
	fields := strings.Fields(line)
	args := map[string]string{}
	for _, f := range fields[1:] {
		k, v, _ := strings.Cut(f, "=")
		args[k] = v
	}
	num := func(k string, def int64) int64 {
		v, ok := args[k]
		if !ok {
			return def
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			panic(fmt.Sprintf("%s=%q: %v", k, v, err))
		}
		return n
	}
	dur := func(k string) time.Duration {
		d, err := time.ParseDuration(args[k])
		if err != nil {
			panic(fmt.Sprintf("%s=%q: %v", k, args[k], err))
		}
		return d
	}
	_, hasLast := args["last"]
	switch fields[0] {
	case "welcome":
		r.recv = Receiver{}
		r.last = num("last", 0)
		_, inv := args["inventory"]
		res, err := Welcome(r.last, &wire.Welcome{CapabilityVersion: uint32(num("version", wire.CapabilityVersion)), HubRevision: num("hub", 0), SendInventory: inv})
		if err != nil {
			return []string{"refuse: " + err.Error()}, nil
		}
		out := fmt.Sprintf("speak version %d", res.Version)
		if res.Rewind {
			out += ", rewind to 0"
			r.last = 0
		}
		if res.SendInventory {
			out += ", send inventory"
		}
		return []string{out}, nil
	case "batch":
		if hasLast {
			r.last = num("last", 0)
		}
		a := r.recv.Batch(r.last, &wire.Batch{Revision: num("rev", 0)}, num("bytes", 0))
		r.last = a.Revision
		out := fmt.Sprintf("record at %d", a.Revision)
		if a.Ack {
			out += fmt.Sprintf(", ack %d", a.Revision)
		}
		if a.Resumed {
			out += fmt.Sprintf(", resumed in %d bytes", a.ResumeBytes)
		}
		return []string{out}, nil
	case "liveness":
		_, noprobe := args["noprobe"]
		r.liveness = &Liveness{IdleTimeout: dur("idle"), KeepAlive: dur("keepalive"), Tick: dur("tick"), ProbeEvery: dur("probe"), CanProbe: !noprobe}
		if _, ok := args["heartbeat"]; ok {
			r.liveness.Heartbeat, r.liveness.AnswerWithin = dur("heartbeat"), dur("answer")
		}
		at := time.Duration(0)
		if _, ok := args["at"]; ok {
			at = dur("at")
		}
		r.liveness.Start(epoch.Add(at), uint64(num("packets", 0)))
		return nil, nil
	case "at":
		if r.liveness == nil {
			return nil, fmt.Errorf("no liveness yet")
		}
		at, err := time.ParseDuration(fields[1])
		if err != nil {
			return nil, err
		}
		v, silent := r.liveness.Look(epoch.Add(at), uint64(num("packets", 0)))
		return []string{fmt.Sprintf("%v: %v, silent %v", at, v, silent)}, nil
	}
	return nil, fmt.Errorf("unknown command %q", fields[0])
}
