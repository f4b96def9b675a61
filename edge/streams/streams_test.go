package streams_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/outpost-mesh/outpost/edge/logs"
	"github.com/outpost-mesh/outpost/edge/runtime"
	"github.com/outpost-mesh/outpost/edge/streams"
	"github.com/outpost-mesh/outpost/internal/tunneltest"
	"github.com/outpost-mesh/outpost/internal/wait"
	"github.com/outpost-mesh/outpost/sync/wire"
)

var t0 = time.Date(2026, 12, 6, 10, 0, 0, 0, time.UTC)

// writeLog writes lines to the log of attempt of container c, one second
// apart from start.
func (e *env) writeLog(ref runtime.PodRef, c string, attempt int, start time.Time, lines ...string) {
	e.t.Helper()
	clock := start
	cfg := logs.DefaultConfig()
	cfg.Clock = func() time.Time { t := clock; clock = clock.Add(time.Second); return t }
	f, err := logs.Open(e.logs.LogPath(ref, c, attempt), cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	defer f.Close()
	w := f.Stream(logs.Stdout)
	for _, l := range lines {
		w.Write([]byte(l))
	}
	w.Close()
}

func readAll(t *testing.T, r io.Reader) string {
	t.Helper()
	b, err := io.ReadAll(r)
	if err != nil {
		t.Fatalf("read: %v", err)
	}
	return string(b)
}

func TestRefusals(t *testing.T) {
	e := newEnv(t, nil)
	e.addPod("web", "u1")
	for _, tc := range []struct {
		name string
		open *wire.TunnelOpen
		code wire.ErrorCode
		msg  string
	}{
		{"unknown pod", open("logs", "nope", "u1", "container", "c"), wire.CodeNotFound, `pod "default/nope" (uid u1) is not on this node`},
		{"other uid", open("exec", "web", "u2", "container", "c", "command", "ls"), wire.CodeNotFound, `pod "default/web" (uid u2) is not on this node`},
		{"no uid", open("portforward", "web", "", "port", "80"), wire.CodeBadRequest, "namespace, name and uid"},
		{"bad container", open("logs", "web", "u1", "container", "x"), wire.CodeBadRequest, "container x is not valid for pod web"},
		{"no previous", open("logs", "web", "u1", "container", "c", "previous", "true"), wire.CodeNotFound, `previous terminated container "c" in pod "web" not found`},
		{"no log", open("logs", "web", "u1", "container", "c"), wire.CodeNotFound, `container "c" in pod "web" is not available`},
		{"bad tail", open("logs", "web", "u1", "container", "c", "tailLines", "-1"), wire.CodeBadRequest, "tailLines"},
		{"no command", open("exec", "web", "u1", "container", "c"), wire.CodeBadRequest, "needs a command"},
		{"attach stdin", open("attach", "web", "u1", "container", "c", "stdin", "true"), wire.CodeBadRequest, "not started with stdin: true"},
		{"bad port", open("portforward", "web", "u1", "port", "0"), wire.CodeBadRequest, "not a port number"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := e.start(tc.open)
			we := refusal(t, err)
			if we.Code != tc.code || !strings.Contains(we.Message, tc.msg) {
				t.Errorf("refusal = %v, want %v containing %q", we, tc.code, tc.msg)
			}
		})
	}
	if err := e.rt.Exit("u1", "c", 0); err != nil {
		t.Fatal(err)
	}
	_, err := e.start(open("exec", "web", "u1", "container", "c", "command", "ls"))
	if we := refusal(t, err); we.Code != wire.CodeNotFound || !strings.Contains(we.Message, "not running") {
		t.Errorf("exec in an exited container: refusal %v", we)
	}
}

func TestLogs(t *testing.T) {
	e := newEnv(t, nil)
	ref := e.addPod("web", "u1")
	e.writeLog(ref, "c", 0, t0, "one\n", "two\n", "three\n")
	ts := func(s int) string { return t0.Add(time.Duration(s) * time.Second).Format(logs.TimeFormat) }
	for _, tc := range []struct {
		name   string
		params []string
		want   string
	}{
		{"plain", nil, "one\ntwo\nthree\n"},
		{"tail", []string{"tailLines", "2"}, "two\nthree\n"},
		{"tail 0", []string{"tailLines", "0"}, ""},
		{"tail more", []string{"tailLines", "10"}, "one\ntwo\nthree\n"},
		{"timestamps", []string{"timestamps", "true", "tailLines", "1"}, ts(2) + " three\n"},
		{"limit", []string{"limitBytes", "6"}, "one\ntw"},
		{"since time", []string{"sinceTime", t0.Add(time.Second).Format(time.RFC3339)}, "two\nthree\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hub, err := e.start(open("logs", "web", "u1", append([]string{"container", "c"}, tc.params...)...))
			if err != nil {
				t.Fatal(err)
			}
			if got := readAll(t, hub); got != tc.want {
				t.Errorf("log = %q, want %q", got, tc.want)
			}
		})
	}

	// A restart: the previous instance's log is the one before.
	if err := e.rt.Exit("u1", "c", 1); err != nil {
		t.Fatal(err)
	}
	if err := e.rt.StartContainer(context.Background(), ref, runtime.ContainerSpec{Name: "c", Image: "busybox"}, 1); err != nil {
		t.Fatal(err)
	}
	e.writeLog(ref, "c", 1, t0.Add(time.Hour), "four\n")
	for params, want := range map[string]string{"false": "four\n", "true": "one\ntwo\nthree\n"} {
		hub, err := e.start(open("logs", "web", "u1", "container", "c", "previous", params))
		if err != nil {
			t.Fatal(err)
		}
		if got := readAll(t, hub); got != want {
			t.Errorf("log with previous=%s = %q, want %q", params, got, want)
		}
	}
}

// buffer collects what a tunnel's hub end reads.
type buffer struct {
	mu   sync.Mutex
	b    bytes.Buffer
	err  error
	done chan struct{}
}

func collect(r io.Reader) *buffer {
	b := &buffer{done: make(chan struct{})}
	go func() {
		defer close(b.done)
		p := make([]byte, 4096)
		for {
			n, err := r.Read(p)
			b.mu.Lock()
			b.b.Write(p[:n])
			if err != nil {
				if !errors.Is(err, io.EOF) {
					b.err = err
				}
				b.mu.Unlock()
				return
			}
			b.mu.Unlock()
		}
	}()
	return b
}

func (b *buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

func (b *buffer) ended() bool {
	select {
	case <-b.done:
		return true
	default:
		return false
	}
}

// followWeb runs pod web of container c, its log file opened with cfg
// and "first" written to it, follows the log through a tunnel until that
// line came, and returns the log's stdout, the hub's end of the tunnel
// and what it received. The file is closed when the test ends.
func followWeb(t *testing.T, e *env, cfg logs.Config) (io.Writer, *tunneltest.End, *buffer) {
	t.Helper()
	ref := e.addPod("web", "u1")
	f, err := logs.Open(e.logs.LogPath(ref, "c", 0), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	w := f.Stream(logs.Stdout)
	w.Write([]byte("first\n"))
	hub, err := e.start(open("logs", "web", "u1", "container", "c", "follow", "true"))
	if err != nil {
		t.Fatal(err)
	}
	got := collect(hub)
	wait.For(t, 5*time.Second, "the first line", func() (bool, string) { return got.String() == "first\n", got.String() })
	return w, hub, got
}

func TestLogsFollow(t *testing.T) {
	e := newEnv(t, nil)
	cfg := logs.DefaultConfig()
	cfg.MaxSize = 1024
	w, _, got := followWeb(t, e, cfg)
	w.Write([]byte("second\n"))
	wait.For(t, 5*time.Second, "a line written while followed", func() (bool, string) { return got.String() == "first\nsecond\n", got.String() })

	// Enough lines to rotate the file twice over (1 KiB each).
	var want strings.Builder
	want.WriteString("first\nsecond\n")
	for i := range 100 {
		l := fmt.Sprintf("line %03d %s\n", i, strings.Repeat("x", 20))
		w.Write([]byte(l))
		want.WriteString(l)
		if i%5 == 4 { // let the follow see each rotation before the next
			wait.For(t, 5*time.Second, "the follow to catch up", func() (bool, string) { return got.String() == want.String(), "" })
		}
	}
	ref := runtime.PodRef{UID: "u1", Namespace: "default", Name: "web"} // followWeb's pod
	if rot, _ := logs.Rotated(e.logs.LogPath(ref, "c", 0)); len(rot) < 2 {
		t.Fatalf("rotated files %v, want at least 2", rot)
	}
	wait.For(t, 5*time.Second, "every line across rotations", func() (bool, string) { return got.String() == want.String(), got.String() })
	if got.ended() {
		t.Fatal("follow ended while the container runs")
	}
	w.Write([]byte("last\n"))
	if err := e.rt.Exit("u1", "c", 0); err != nil {
		t.Fatal(err)
	}
	wait.For(t, 5*time.Second, "the follow to end with the container", func() (bool, string) { return got.ended(), "" })
	if got.err != nil || got.String() != want.String()+"last\n" {
		t.Errorf("follow ended with %v, %q more", got.err, strings.TrimPrefix(got.String(), want.String()))
	}
}

// A followed log hands on a line as soon as it is written, not at the
// next look: with looks an hour apart, the line still comes through.
func TestLogsFollowWakesOnWrite(t *testing.T) {
	e := newEnv(t, nil, func(c *streams.Config) { c.FollowPoll = time.Hour })
	w, hub, got := followWeb(t, e, logs.DefaultConfig())
	w.Write([]byte("second\n"))
	wait.For(t, 5*time.Second, "a line written while followed, before the next look", func() (bool, string) {
		return got.String() == "first\nsecond\n", got.String()
	})
	hub.Close()
	wait.For(t, 5*time.Second, "the follow to end with its stream", func() (bool, string) { return got.ended(), "" })
}

func TestExec(t *testing.T) {
	var mu sync.Mutex
	var sizes []runtime.TermSize
	killed := make(chan struct{}, 1)
	exec := func(ctx context.Context, pod runtime.PodRef, c string, opts runtime.ExecOptions) (int, error) {
		switch opts.Command[0] {
		case "sh": // echo out; echo err >&2; exit 3
			fmt.Fprintln(opts.Stdout, "out")
			fmt.Fprintln(opts.Stderr, "err")
			return 3, nil
		case "cat":
			_, err := io.Copy(opts.Stdout, opts.Stdin)
			return 0, err
		case "stty": // prints the sizes it gets until stdin ends
			go io.Copy(io.Discard, opts.Stdin)
			for {
				select {
				case sz := <-opts.Resize:
					mu.Lock()
					sizes = append(sizes, sz)
					mu.Unlock()
					fmt.Fprintf(opts.Stdout, "%d %d\n", sz.Height, sz.Width)
					if sz.Width == 0 {
						return 0, nil
					}
				case <-ctx.Done():
					return -1, ctx.Err()
				}
			}
		case "sleep":
			<-ctx.Done()
			killed <- struct{}{}
			return -1, ctx.Err()
		}
		return -1, fmt.Errorf("exec: %q: executable file not found in $PATH", opts.Command[0])
	}
	e := newEnv(t, exec)
	e.addPod("web", "u1")

	t.Run("exit code and streams", func(t *testing.T) {
		hub, err := e.start(open("exec", "web", "u1", "container", "c", "command", "sh", "command", "-c", "stdout", "true", "stderr", "true"))
		if err != nil {
			t.Fatal(err)
		}
		res := readChunks(t, hub)
		if res.stdout.String() != "out\n" || res.stderr.String() != "err\n" || res.code != 3 || res.exits != 1 {
			t.Errorf("exec = out %q err %q exit %d (%d exits), want out, err, 3", res.stdout.String(), res.stderr.String(), res.code, res.exits)
		}
	})
	t.Run("not found", func(t *testing.T) {
		hub, err := e.start(open("exec", "web", "u1", "container", "c", "command", "nope", "stdout", "true"))
		if err != nil {
			t.Fatal(err)
		}
		res := readChunks(t, hub)
		if res.code != -1 || !strings.Contains(res.msg, "executable file not found") {
			t.Errorf("exec of a missing executable: exit %d %q", res.code, res.msg)
		}
	})
	t.Run("stdin", func(t *testing.T) {
		hub, err := e.start(open("exec", "web", "u1", "container", "c", "command", "cat", "stdin", "true", "stdout", "true"))
		if err != nil {
			t.Fatal(err)
		}
		cw := wire.NewChunkWriter(hub)
		go func() {
			cw.Write(wire.ChanStdin, []byte("hello\n"))
			cw.Write(wire.ChanStdin, bytes.Repeat([]byte("y"), 100<<10))
			cw.End(wire.ChanStdin)
			// A hub that breaks the contract: stdin after its end, and
			// its end again, are dropped.
			cw.Write(wire.ChanStdin, []byte("late"))
			cw.End(wire.ChanStdin)
		}()
		res := readChunks(t, hub)
		if want := "hello\n" + strings.Repeat("y", 100<<10); res.stdout.String() != want || res.code != 0 {
			t.Errorf("cat: %d bytes out, exit %d; want %d bytes, 0", res.stdout.Len(), res.code, len(want))
		}
	})
	t.Run("tty resize", func(t *testing.T) {
		hub, err := e.start(open("exec", "web", "u1", "container", "c", "command", "stty", "stdin", "true", "stdout", "true", "stderr", "true", "tty", "true"))
		if err != nil {
			t.Fatal(err)
		}
		cw := wire.NewChunkWriter(hub)
		go cw.Write(wire.ChanResize, wire.AppendResize(nil, 80, 24))
		br := bufio.NewReader(hub)
		cr := wire.NewChunkReader(br)
		ch, data, err := cr.Next()
		if err != nil || ch != wire.ChanStdout || string(data) != "24 80\n" {
			t.Fatalf("after a resize: chunk %d %q %v, want stdout \"24 80\"", ch, data, err)
		}
		cw.Write(wire.ChanResize, wire.AppendResize(nil, 0, 0))
		res := readChunks(t, br)
		if res.code != 0 {
			t.Errorf("stty exit %d %q", res.code, res.msg)
		}
	})
	t.Run("hub closes", func(t *testing.T) {
		hub, err := e.start(open("exec", "web", "u1", "container", "c", "command", "sleep", "stdout", "true"))
		if err != nil {
			t.Fatal(err)
		}
		hub.Close()
		select {
		case <-killed:
		case <-time.After(10 * time.Second):
			t.Fatal("command not killed 10s after the hub closed the tunnel")
		}
	})
}

func TestAttach(t *testing.T) {
	e := newEnv(t, nil)
	e.addPod("web", "u1")
	hub, err := e.start(open("attach", "web", "u1", "container", "c", "stdout", "true", "stderr", "true"))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan *result)
	go func() { done <- readChunks(t, hub) }()
	// Output before the attach is running is not the attach's.
	wait.For(t, 5*time.Second, "the attach", func() (bool, string) { return e.rt.Attached("u1", "c") == 1, "" })
	if err := e.rt.Output("u1", "c", false, []byte("hello\n")); err != nil {
		t.Fatal(err)
	}
	e.rt.Output("u1", "c", true, []byte("oops\n"))
	if err := e.rt.Exit("u1", "c", 7); err != nil {
		t.Fatal(err)
	}
	res := <-done
	if res.code != 7 || res.stdout.String() != "hello\n" || res.stderr.String() != "oops\n" {
		t.Errorf("attach = out %q err %q exit %d, want hello, oops, 7", res.stdout.String(), res.stderr.String(), res.code)
	}
}

func TestPortForward(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	defer func() { ln.Close(); wg.Wait() }()
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() { // reads to the half-close, then answers and closes
				defer c.Close()
				b, _ := io.ReadAll(c)
				fmt.Fprintf(c, "got %q", b)
			})
		}
	})
	e := newEnv(t, nil)
	e.addPod("web", "u1")
	port := fmt.Sprint(ln.Addr().(*net.TCPAddr).Port)
	var hubs []*tunneltest.End
	for range 2 {
		hub, err := e.start(open("portforward", "web", "u1", "port", port))
		if err != nil {
			t.Fatal(err)
		}
		hubs = append(hubs, hub)
	}
	for i, hub := range hubs {
		go func() {
			fmt.Fprintf(hub, "req %d", i)
			hub.CloseWrite()
		}()
	}
	for i, hub := range hubs {
		if got, want := readAll(t, hub), fmt.Sprintf("got \"req %d\"", i); got != want {
			t.Errorf("connection %d: %q, want %q", i, got, want)
		}
	}

	ln2, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := fmt.Sprint(ln2.Addr().(*net.TCPAddr).Port)
	ln2.Close()
	_, err = e.start(open("portforward", "web", "u1", "port", closed))
	if we := refusal(t, err); we.Code != wire.CodeUnavailable || !strings.Contains(we.Message, "connection refused") {
		t.Errorf("forward to a closed port: %v", we)
	}
}

func TestMaxStreams(t *testing.T) {
	e := newEnv(t, nil, func(c *streams.Config) { c.MaxStreams = 1 })
	e.addPod("web", "u1")
	ref := runtime.PodRef{UID: "u1", Namespace: "default", Name: "web"}
	e.writeLog(ref, "c", 0, t0, "one\n")
	hub, err := e.start(open("logs", "web", "u1", "container", "c", "follow", "true"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = e.start(open("logs", "web", "u1", "container", "c"))
	if we := refusal(t, err); we.Code != wire.CodeUnavailable {
		t.Errorf("a stream over the limit: %v", we)
	}
	hub.Close()
	wait.For(t, 5*time.Second, "the limit to free up", func() (bool, string) {
		_, err := e.start(open("logs", "web", "u1", "container", "c"))
		return err == nil, fmt.Sprint(err)
	})
}

// stalePods answers its first lookup with a snapshot taken earlier, as
// a lookup racing a container's restart does.
type stalePods struct {
	streams.Pods
	mu    sync.Mutex
	stale *streams.Pod
}

func (s *stalePods) Pod(ctx context.Context, namespace, name string) (*streams.Pod, error) {
	s.mu.Lock()
	p := s.stale
	s.stale = nil
	s.mu.Unlock()
	if p != nil {
		return p, nil
	}
	return s.Pods.Pod(ctx, namespace, name)
}

// TestPreviousLogAcrossRestart: kubectl logs --previous asked while a
// restart replaces the container (and removes the log from two
// instances back) reads the instance before the newest, not an error.
func TestPreviousLogAcrossRestart(t *testing.T) {
	var stale *stalePods
	e := newEnv(t, nil, func(c *streams.Config) {
		stale = &stalePods{Pods: c.Pods}
		c.Pods = stale
	})
	ref := e.addPod("web", "u1")
	ctx := context.Background()
	e.writeLog(ref, "c", 0, t0, "zero\n")
	restart := func(attempt int, line string) {
		t.Helper()
		if err := e.rt.Exit("u1", "c", 1); err != nil {
			t.Fatal(err)
		}
		if err := e.rt.StartContainer(ctx, ref, runtime.ContainerSpec{Name: "c", Image: "busybox"}, attempt); err != nil {
			t.Fatal(err)
		}
		e.writeLog(ref, "c", attempt, t0.Add(time.Duration(attempt)*time.Hour), line)
	}
	restart(1, "one\n")
	before, err := stale.Pods.Pod(ctx, "default", "web")
	if err != nil {
		t.Fatal(err)
	}
	restart(2, "two\n")
	if err := os.Remove(e.logs.LogPath(ref, "c", 0)); err != nil { // as the runtime does on the restart
		t.Fatal(err)
	}
	stale.mu.Lock()
	stale.stale = before
	stale.mu.Unlock()
	hub, err := e.start(open("logs", "web", "u1", "container", "c", "previous", "true"))
	if err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, hub); got != "one\n" {
		t.Errorf("previous log = %q, want the instance before the newest", got)
	}
}
