package containerd

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/outpost-mesh/outpost/edge/runtime"
	"github.com/outpost-mesh/outpost/edge/streams"
	"github.com/outpost-mesh/outpost/internal/netnstest"
	"github.com/outpost-mesh/outpost/internal/tunneltest"
	"github.com/outpost-mesh/outpost/internal/wait"
	"github.com/outpost-mesh/outpost/sync/wire"
)

// The node's side of the hub's tunnels (edge/streams) on real
// containers: exec, attach, logs and port-forward of a busybox pod on
// the host's network (the test's own network namespace), driven through
// in-memory tunnel streams as the sync client would hand them over.

// onePod is streams.Pods of one pod on the host's network.
type onePod struct {
	r    *Runtime
	spec *corev1.Pod
}

func (o onePod) Pod(ctx context.Context, ns, name string) (*streams.Pod, error) {
	if ns != o.spec.Namespace || name != o.spec.Name {
		return nil, nil
	}
	l, err := o.r.List(ctx)
	if err != nil {
		return nil, err
	}
	p := &streams.Pod{Spec: o.spec}
	for i := range l {
		if l[i].Pod.UID == string(o.spec.UID) {
			p.Status = &l[i]
		}
	}
	return p, nil
}

type podLogs string

func (d podLogs) LogPath(p runtime.PodRef, c string, attempt int) string {
	return filepath.Join(string(d), p.UID, c, strconv.Itoa(attempt)+".log")
}

func TestStreams(t *testing.T) {
	need(t)
	if !netnstest.Enter(t) {
		return
	}
	r := newRuntime(t, nil)
	p := pod("streams")
	dir := podLogs(t.TempDir())
	spec := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: p.Namespace, Name: p.Name, UID: types.UID(p.UID)},
		Spec: corev1.PodSpec{HostNetwork: true, Containers: []corev1.Container{
			{Name: "main"}, {Name: "logger"}, {Name: "ticker"}, {Name: "web"},
		}},
	}
	cfg := streams.DefaultConfig()
	cfg.Pods, cfg.Logs, cfg.Exec, cfg.Attach = onePod{r, spec}, dir, r, r
	cfg.FollowPoll = 50 * time.Millisecond
	srv, err := streams.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	handlers := srv.Handlers()
	var served sync.WaitGroup
	t.Cleanup(served.Wait) // after the tunnels are closed
	start := func(kind string, params ...string) (*tunneltest.End, error) {
		t.Helper()
		o := &wire.TunnelOpen{Kind: kind, Params: []wire.Param{{Name: "namespace", Value: p.Namespace}, {Name: "name", Value: p.Name}, {Name: "uid", Value: p.UID}}}
		for i := 0; i+1 < len(params); i += 2 {
			o.Params = append(o.Params, wire.Param{Name: params[i], Value: params[i+1]})
		}
		serve, err := handlers[kind](bg, o)
		if err != nil {
			return nil, err
		}
		hub, node := tunneltest.Pair()
		served.Go(func() { serve(node) })
		t.Cleanup(func() { hub.Close() })
		return hub, nil
	}
	startC := func(c runtime.ContainerSpec, attempt int) {
		t.Helper()
		c.LogPath = dir.LogPath(p, c.Name, attempt)
		if err := r.StartContainer(bg, p, c, attempt); err != nil {
			t.Fatal(err)
		}
		waitState(t, r, p, c.Name, runtime.StateRunning)
	}
	startC(sh("main", "sleep 3600"), 0)

	t.Run("exec", func(t *testing.T) {
		hub, err := start("exec", "container", "main", "command", "sh", "command", "-c", "command", "echo out; echo err >&2; exit 3", "stdout", "true", "stderr", "true")
		if err != nil {
			t.Fatal(err)
		}
		out, errb, code, msg := chunksOf(t, hub)
		if out != "out\n" || errb != "err\n" || code != 3 {
			t.Errorf("exec = %q %q exit %d %q, want out, err, 3", out, errb, code, msg)
		}
		hub, err = start("exec", "container", "main", "command", "no-such-command", "stdout", "true")
		if err != nil {
			t.Fatal(err)
		}
		if _, _, code, msg := chunksOf(t, hub); code != -1 || msg == "" {
			t.Errorf("exec of a missing command: exit %d %q, want -1 with why", code, msg)
		}
	})
	t.Run("stdin", func(t *testing.T) {
		hub, err := start("exec", "container", "main", "command", "cat", "stdin", "true", "stdout", "true")
		if err != nil {
			t.Fatal(err)
		}
		cw := wire.NewChunkWriter(hub)
		go func() {
			cw.Write(wire.ChanStdin, []byte("echoed\n"))
			cw.End(wire.ChanStdin)
		}()
		if out, _, code, msg := chunksOf(t, hub); out != "echoed\n" || code != 0 {
			t.Errorf("cat = %q exit %d %q", out, code, msg)
		}
	})
	t.Run("tty resize", func(t *testing.T) {
		hub, err := start("exec", "container", "main", "command", "sh", "command", "-c", "command", `read x; for i in $(seq 50); do s=$(stty size 2>&1); [ "$s" = "37 100" ] && break; sleep 0.1; done; echo "$s"`, "stdin", "true", "stdout", "true", "tty", "true")
		if err != nil {
			t.Fatal(err)
		}
		cw := wire.NewChunkWriter(hub)
		go func() {
			cw.Write(wire.ChanResize, wire.AppendResize(nil, 100, 37))
			// The size is applied once the process started: it may
			// read the line before, so it asks until it sees the size.
			cw.Write(wire.ChanStdin, []byte("go\r"))
		}()
		out, _, code, msg := chunksOf(t, hub)
		if !strings.Contains(out, "37 100") || code != 0 {
			t.Errorf("stty size after a resize = %q exit %d %q, want 37 100", out, code, msg)
		}
	})
	t.Run("attach", func(t *testing.T) {
		startC(sh("logger", "while [ ! -e /tmp/go ]; do sleep 0.05; done; for i in 1 2 3; do echo line $i; done; echo oops >&2; sleep 0.3; exit 5"), 0)
		hub, err := start("attach", "container", "logger", "stdout", "true", "stderr", "true")
		if err != nil {
			t.Fatal(err)
		}
		id := strings.TrimPrefix(container(t, r, p, "logger").ID, "containerd://")
		wait.For(t, 10*time.Second, "the attach", func() (bool, string) { return attachers(r, id) == 1, "" })
		if code, err := r.Exec(bg, p, "logger", runtime.ExecOptions{Command: []string{"touch", "/tmp/go"}}); code != 0 || err != nil {
			t.Fatalf("touch = %d, %v", code, err)
		}
		out, errb, code, msg := chunksOf(t, hub)
		if out != "line 1\nline 2\nline 3\n" || errb != "oops\n" || code != 5 {
			t.Errorf("attach = %q %q exit %d %q, want 3 lines, oops, 5", out, errb, code, msg)
		}
	})
	t.Run("logs", func(t *testing.T) {
		waitState(t, r, p, "logger", runtime.StateExited)
		for _, tc := range []struct {
			params []string
			want   func(string) bool
		}{
			{nil, func(s string) bool {
				// stdout and stderr come through pipes of their own, copied
				// side by side: oops may land anywhere among the lines.
				return strings.Count(s, "oops\n") == 1 && strings.Replace(s, "oops\n", "", 1) == "line 1\nline 2\nline 3\n"
			}},
			{[]string{"tailLines", "1"}, func(s string) bool { return s == "oops\n" || s == "line 3\n" }},
			{[]string{"limitBytes", "3"}, func(s string) bool { return len(s) == 3 }},
			{[]string{"timestamps", "true", "tailLines", "1"}, func(s string) bool {
				ts, _, _ := strings.Cut(s, " ")
				_, err := time.Parse(time.RFC3339Nano, ts)
				return err == nil
			}},
			{[]string{"sinceTime", time.Now().Add(time.Hour).Format(time.RFC3339)}, func(s string) bool { return s == "" }},
		} {
			hub, err := start("logs", append([]string{"container", "logger"}, tc.params...)...)
			if err != nil {
				t.Fatal(err)
			}
			b, err := io.ReadAll(hub)
			if err != nil || !tc.want(string(b)) {
				t.Errorf("logs %v = %q, %v", tc.params, b, err)
			}
		}
		// A restart: the first instance's log is the previous one.
		startC(sh("logger", "echo second; sleep 3600"), 1)
		for prev, want := range map[string]string{"true": "line 1\n", "false": "second\n"} {
			wait.For(t, 10*time.Second, "logs with previous="+prev, func() (bool, string) {
				hub, err := start("logs", "container", "logger", "previous", prev)
				if err != nil {
					return false, err.Error()
				}
				b, _ := io.ReadAll(hub)
				return strings.Contains(string(b), want), string(b)
			})
		}
	})
	t.Run("follow", func(t *testing.T) {
		startC(sh("ticker", "for i in 1 2 3 4 5; do echo tick $i; sleep 0.2; done"), 0)
		hub, err := start("logs", "container", "ticker", "follow", "true")
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan []byte)
		go func() { b, _ := io.ReadAll(hub); done <- b }()
		select {
		case b := <-done:
			if string(b) != "tick 1\ntick 2\ntick 3\ntick 4\ntick 5\n" {
				t.Errorf("followed log = %q", b)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("follow did not end 30s after the container's start")
		}
	})
	t.Run("port-forward", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
		ln.Close()
		startC(sh("web", "mkdir -p /tmp/www && echo hello > /tmp/www/index.html && exec httpd -f -p 127.0.0.1:"+port+" -h /tmp/www"), 0)
		var hubs []*tunneltest.End
		wait.For(t, 10*time.Second, "httpd to listen", func() (bool, string) {
			hub, err := start("portforward", "port", port)
			if err != nil {
				return false, err.Error()
			}
			hubs = append(hubs, hub)
			return true, ""
		})
		hub2, err := start("portforward", "port", port)
		if err != nil {
			t.Fatal(err)
		}
		for _, hub := range []*tunneltest.End{hubs[0], hub2} {
			go fmt.Fprintf(hub, "GET /index.html HTTP/1.0\r\nHost: pod\r\n\r\n")
			resp, err := http.ReadResponse(bufio.NewReader(hub), nil)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 || string(b) != "hello\n" {
				t.Errorf("GET through the forward = %s %q", resp.Status, b)
			}
		}
		_, err = start("portforward", "port", "1")
		var we *wire.Error
		if !errors.As(err, &we) || we.Code != wire.CodeUnavailable || !strings.Contains(we.Message, "connection refused") {
			t.Errorf("forward to a closed port = %v, want Unavailable, connection refused", err)
		}
	})
}

// attachers returns how many attachers the container's output has.
func attachers(r *Runtime, id string) int {
	r.mu.Lock()
	l := r.ios[id]
	r.mu.Unlock()
	if l == nil || l.fan == nil {
		return 0
	}
	l.fan.mu.Lock()
	defer l.fan.mu.Unlock()
	return len(l.fan.subs)
}

// chunksOf reads an exec or attach tunnel to its end.
func chunksOf(t *testing.T, r io.Reader) (stdout, stderr string, code int, msg string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = -2
	cr := wire.NewChunkReader(r)
	for {
		ch, data, err := cr.Next()
		if errors.Is(err, io.EOF) {
			return out.String(), errb.String(), code, msg
		}
		if err != nil {
			t.Fatalf("read chunks: %v", err)
		}
		switch ch {
		case wire.ChanStdout:
			out.Write(data)
		case wire.ChanStderr:
			errb.Write(data)
		case wire.ChanExit:
			code, msg, err = wire.ParseExit(data)
			if err != nil {
				t.Fatal(err)
			}
		}
	}
}
