package streams_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/httpstream"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/tools/remotecommand"
	"k8s.io/client-go/transport/spdy"
	"k8s.io/client-go/util/exec"

	"github.com/outpost-mesh/outpost/hub/hubd"
	"github.com/outpost-mesh/outpost/internal/wait"
	"github.com/outpost-mesh/outpost/sync/wire"
	"github.com/outpost-mesh/outpost/test/hubtest"
)

// env is a real hub whose nodes are played by a fakeNode.
type env struct {
	hub  *hubtest.Hub
	node *fakeNode
	pod  *corev1.Pod
}

func start(t *testing.T, opts ...func(*hubd.Config)) *env {
	t.Helper()
	node := newFakeNode()
	h := hubtest.Start(t, append([]func(*hubd.Config){func(c *hubd.Config) {
		c.Controllers = false
		c.Streams.Tunnels = node
	}}, opts...)...)
	t.Cleanup(node.wait) // before the hub stops
	e := &env{hub: h, node: node}
	e.pod = e.createPod(t, "web", "edge-1", "main")
	return e
}

func (e *env) createPod(t *testing.T, name, node string, containers ...string) *corev1.Pod {
	t.Helper()
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"}, Spec: corev1.PodSpec{NodeName: node}}
	for _, c := range containers {
		pod.Spec.Containers = append(pod.Spec.Containers, corev1.Container{Name: c, Image: "busybox"})
	}
	pod, err := e.hub.Client.CoreV1().Pods("default").Create(context.Background(), pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create pod %s: %v", name, err)
	}
	if node != "" {
		e.node.addPod(node, "default", name, string(pod.UID))
	}
	return pod
}

func (e *env) podURL(name, sub string, q url.Values) *url.URL {
	u, _ := url.Parse(e.hub.Config.Host)
	u.Path = "/api/v1/namespaces/default/pods/" + name + "/" + sub
	u.RawQuery = q.Encode()
	return u
}

func execQuery(tty, stdin bool, command ...string) url.Values {
	q := url.Values{"stdout": {"true"}, "command": command}
	if !tty {
		q.Set("stderr", "true")
	}
	if tty {
		q.Set("tty", "true")
	}
	if stdin {
		q.Set("stdin", "true")
	}
	return q
}

// executors are client-go's, over SPDY and WebSocket (v5 first).
var executors = []struct {
	name string
	new  func(cfg *rest.Config, u *url.URL) (remotecommand.Executor, error)
}{
	{"spdy", func(cfg *rest.Config, u *url.URL) (remotecommand.Executor, error) {
		return remotecommand.NewSPDYExecutor(cfg, "POST", u)
	}},
	{"websocket", func(cfg *rest.Config, u *url.URL) (remotecommand.Executor, error) {
		return remotecommand.NewWebSocketExecutor(cfg, "GET", u.String())
	}},
}

func TestExec(t *testing.T) {
	e := start(t)
	for _, ex := range executors {
		t.Run(ex.name, func(t *testing.T) {
			run := func(sub string, q url.Values, stdin io.Reader, tty bool, sizes remotecommand.TerminalSizeQueue) (string, string, error) {
				t.Helper()
				x, err := ex.new(e.hub.Config, e.podURL("web", sub, q))
				if err != nil {
					t.Fatal(err)
				}
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				var out, errOut bytes.Buffer
				opts := remotecommand.StreamOptions{Stdin: stdin, Stdout: &out, Tty: tty, TerminalSizeQueue: sizes}
				if !tty {
					opts.Stderr = &errOut
				}
				err = x.StreamWithContext(ctx, opts)
				return out.String(), errOut.String(), err
			}
			// The exit code comes back as kubelet's NonZeroExitCode.
			_, _, err := run("exec", execQuery(false, false, "sh", "-c", "exit 3"), nil, false, nil)
			var ee exec.ExitError
			if !errors.As(err, &ee) || ee.ExitStatus() != 3 {
				t.Errorf("exec sh -c 'exit 3' = %v, want exit status 3", err)
			}
			if out, errOut, err := run("exec", execQuery(false, false, "echo", "hello", "world"), nil, false, nil); err != nil || out != "hello world\n" || errOut != "oops\n" {
				t.Errorf("exec echo = %q, %q, %v; want %q, %q, nil", out, errOut, err, "hello world\n", "oops\n")
			}
			// stdin reaches the command, and its end ends cat.
			in := strings.Repeat("0123456789", 10000)
			if out, _, err := run("exec", execQuery(false, true, "cat"), strings.NewReader(in), false, nil); err != nil || out != in {
				t.Errorf("exec -i cat = %d bytes, %v; want the %d bytes of stdin", len(out), err, len(in))
			}
			if _, _, err := run("exec", execQuery(false, false, "nosuch"), nil, false, nil); err == nil || !strings.Contains(err.Error(), "executable file not found") {
				t.Errorf("exec nosuch = %v, want an error saying the executable is not found", err)
			}
			// A TTY's size reaches the node as a resize.
			if out, _, err := run("exec", execQuery(true, false, "size"), nil, true, &sizes{{Width: 120, Height: 40}}); err != nil || out != "120x40\n" {
				t.Errorf("exec -t size = %q, %v; want %q", out, err, "120x40\n")
			}
			// A client that goes away ends the command on the node.
			x, err := ex.new(e.hub.Config, e.podURL("web", "exec", execQuery(false, false, "sleep")))
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			ended := make(chan error, 1)
			go func() {
				ended <- x.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: io.Discard, Stderr: io.Discard})
			}()
			wait.For(t, 10*time.Second, "the sleep's tunnel open", func() (bool, string) { return e.node.openCount() == 1, "" })
			cancel()
			<-ended
			waitNoTunnels(t, e.node)
			// attach: the container's stdin and stdout.
			q := url.Values{"stdin": {"true"}, "stdout": {"true"}, "stderr": {"true"}}
			if out, _, err := run("attach", q, strings.NewReader("attached\n"), false, nil); err != nil || out != "attached\n" {
				t.Errorf("attach = %q, %v; want %q", out, err, "attached\n")
			}
		})
	}
	waitNoTunnels(t, e.node)
}

type sizes []remotecommand.TerminalSize

func (s *sizes) Next() *remotecommand.TerminalSize {
	if len(*s) == 0 {
		return nil // no more: client-go stops asking
	}
	sz := (*s)[0]
	*s = (*s)[1:]
	return &sz
}

func waitNoTunnels(t *testing.T, f *fakeNode) {
	t.Helper()
	wait.For(t, 10*time.Second, "tunnels closed after their streams ended", func() (bool, string) {
		n := f.openCount()
		return n == 0, fmt.Sprintf("%d open", n)
	})
}

// readLogs reads the log of pod name in default as kubectl does.
func readLogs(c kubernetes.Interface, name string, o *corev1.PodLogOptions) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rc, err := c.CoreV1().Pods("default").GetLogs(name, o).Stream(ctx)
	if err != nil {
		return "", err
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	return string(b), err
}

func TestLogs(t *testing.T) {
	e := start(t)
	e.createPod(t, "two", "edge-1", "a", "b")
	read := func(name string, o *corev1.PodLogOptions) (string, error) { return readLogs(e.hub.Client, name, o) }
	two := int64(2)
	if got, err := read("web", &corev1.PodLogOptions{}); err != nil || got != fakeLog {
		t.Errorf("logs web = %q, %v; want %q", got, err, fakeLog)
	}
	want := "2026-12-06T06:00:00.000000000Z line 2\n2026-12-06T06:00:00.000000000Z line 3\n"
	if got, err := read("web", &corev1.PodLogOptions{TailLines: &two, Timestamps: true}); err != nil || got != want {
		t.Errorf("logs --tail 2 --timestamps = %q, %v; want %q", got, err, want)
	}
	limit := int64(5)
	if got, err := read("web", &corev1.PodLogOptions{LimitBytes: &limit}); err != nil || got != "line " {
		t.Errorf("logs --limit-bytes 5 = %q, %v; want %q", got, err, "line ")
	}
	_, err := read("web", &corev1.PodLogOptions{Previous: true})
	if !apierrors.IsNotFound(err) || !strings.Contains(err.Error(), `previous terminated container "main" in pod "web" not found`) {
		t.Errorf("logs --previous = %v, want the node's NotFound", err)
	}
	_, err = read("two", &corev1.PodLogOptions{})
	if !apierrors.IsBadRequest(err) || !strings.Contains(err.Error(), "a container name must be specified for pod two, choose one of: [a b]") {
		t.Errorf("logs of a pod of two containers = %v, want a 400 asking for one", err)
	}
	if got, err := read("two", &corev1.PodLogOptions{Container: "b"}); err != nil || got != fakeLog {
		t.Errorf("logs two -c b = %q, %v", got, err)
	}
	_, err = read("web", &corev1.PodLogOptions{Container: "nosuch"})
	if !apierrors.IsBadRequest(err) {
		t.Errorf("logs -c nosuch = %v, want 400", err)
	}
	zero := int64(0)
	_, err = read("web", &corev1.PodLogOptions{SinceSeconds: &zero})
	if !apierrors.IsBadRequest(err) {
		t.Errorf("logs sinceSeconds=0 = %v, want 400", err)
	}
	e.createPod(t, "pending", "", "main")
	_, err = read("pending", &corev1.PodLogOptions{})
	if !apierrors.IsBadRequest(err) || !strings.Contains(err.Error(), "does not have a host assigned") {
		t.Errorf("logs of an unscheduled pod = %v, want 400", err)
	}
	waitNoTunnels(t, e.node)
}

// A mirror pod's streams go to the static pod it stands for, by the UID
// its annotation carries: the node knows the pod by that one.
func TestMirrorPod(t *testing.T) {
	e := start(t)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "static-edge-1", Namespace: "default", Annotations: map[string]string{wire.AnnotationMirror: "hash-1"}},
		Spec:       corev1.PodSpec{NodeName: "edge-1", Containers: []corev1.Container{{Name: "main", Image: "busybox"}}},
	}
	if _, err := e.hub.Client.CoreV1().Pods("default").Create(context.Background(), pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.node.addPod("edge-1", "default", pod.Name, "hash-1")
	if got, err := readLogs(e.hub.Client, pod.Name, &corev1.PodLogOptions{}); err != nil || got != fakeLog {
		t.Errorf("logs of a mirror pod = %q, %v; want the static pod's", got, err)
	}
	waitNoTunnels(t, e.node)
}

// TestNotConnected checks that a pod on a node without a session is
// answered at once with a clear error, and served again once it is back.
func TestNotConnected(t *testing.T) {
	e := start(t)
	e.node.setDown("edge-1", true)
	const msg = "node edge-1 is not connected to the hub"
	begin := time.Now()
	_, err := readLogs(e.hub.Client, "web", &corev1.PodLogOptions{})
	if !apierrors.IsServiceUnavailable(err) || !strings.Contains(err.Error(), msg) {
		t.Errorf("logs = %v, want 503 %q", err, msg)
	}
	for _, ex := range executors {
		x, _ := ex.new(e.hub.Config, e.podURL("web", "exec", execQuery(false, false, "echo")))
		err := x.StreamWithContext(context.Background(), remotecommand.StreamOptions{Stdout: io.Discard, Stderr: io.Discard})
		if err == nil || !strings.Contains(err.Error(), msg) {
			t.Errorf("exec over %s = %v, want %q", ex.name, err, msg)
		}
	}
	for _, d := range dialers(t, e) {
		_, _, err := d.dial.Dial("portforward.k8s.io")
		if err == nil || !strings.Contains(err.Error(), msg) {
			t.Errorf("port-forward over %s = %v, want %q", d.name, err, msg)
		}
	}
	if took := time.Since(begin); took > 10*time.Second {
		t.Errorf("refusals took %v, want them at once", took)
	}
	e.node.setDown("edge-1", false)
	if got, err := readLogs(e.hub.Client, "web", &corev1.PodLogOptions{}); err != nil || got != fakeLog {
		t.Errorf("logs after the node is back = %q, %v", got, err)
	}
}

// silentNode is a node whose link went dark before the hub noticed: it
// is still connected, and never answers an open.
type silentNode struct{}

func (silentNode) OpenTunnel(ctx context.Context, node string, open *wire.TunnelOpen) (wire.TunnelStream, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

// TestSilentNode: a node that does not answer the open is given up after
// OpenTimeout with a clear error, not waited for as long as the client
// waits.
func TestSilentNode(t *testing.T) {
	e := start(t, func(c *hubd.Config) {
		c.Streams.Tunnels = silentNode{}
		c.Streams.OpenTimeout = 300 * time.Millisecond
	})
	const msg = "node edge-1 did not answer within 300ms: its link to the hub may be down"
	begin := time.Now()
	_, err := readLogs(e.hub.Client, "web", &corev1.PodLogOptions{})
	if !apierrors.IsServiceUnavailable(err) || !strings.Contains(err.Error(), msg) {
		t.Errorf("logs = %v, want 503 %q", err, msg)
	}
	if took := time.Since(begin); took > 10*time.Second {
		t.Errorf("the refusal took %v, want it after the open timeout", took)
	}
}

// dialers are client-go's port-forward dialers for pod web: SPDY, and
// SPDY tunnelled through a WebSocket (kubectl 1.31 and later).
func dialers(t *testing.T, e *env) []struct {
	name string
	dial httpstream.Dialer
} {
	t.Helper()
	u := e.podURL("web", "portforward", nil)
	ws, err := portforward.NewSPDYOverWebsocketDialer(u, e.hub.Config)
	if err != nil {
		t.Fatal(err)
	}
	rt, up, err := spdy.RoundTripperFor(e.hub.Config)
	if err != nil {
		t.Fatal(err)
	}
	return []struct {
		name string
		dial httpstream.Dialer
	}{
		{"spdy", spdy.NewDialer(up, &http.Client{Transport: rt}, "POST", u)},
		{"websocket", ws},
	}
}

func TestPortForward(t *testing.T) {
	e := start(t)
	for _, d := range dialers(t, e) {
		t.Run(d.name, func(t *testing.T) {
			ready := make(chan struct{})
			stop := make(chan struct{})
			fw, err := portforward.NewOnAddresses(d.dial, []string{"127.0.0.1"}, []string{"0:80"}, stop, ready, io.Discard, io.Discard)
			if err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { done <- fw.ForwardPorts() }()
			defer func() {
				close(stop)
				if err := <-done; err != nil {
					t.Errorf("ForwardPorts = %v", err)
				}
			}()
			select {
			case <-ready:
			case err := <-done:
				t.Fatalf("ForwardPorts = %v before ready", err)
			case <-time.After(30 * time.Second):
				t.Fatal("port-forward not ready in 30s")
			}
			ports, err := fw.GetPorts()
			if err != nil {
				t.Fatal(err)
			}
			addr := fmt.Sprintf("127.0.0.1:%d", ports[0].Local)
			// Two connections at once through one forward, each echoed
			// and half-closed.
			var wg sync.WaitGroup
			for i := range 2 {
				wg.Go(func() {
					c, err := net.DialTimeout("tcp", addr, 10*time.Second)
					if err != nil {
						t.Errorf("dial the forward: %v", err)
						return
					}
					defer c.Close()
					c.SetDeadline(time.Now().Add(30 * time.Second))
					msg := strings.Repeat(fmt.Sprintf("conn %d ", i), 20000)
					go func() {
						io.WriteString(c, msg)
						c.(*net.TCPConn).CloseWrite()
					}()
					got, err := io.ReadAll(c)
					if err != nil || string(got) != msg {
						t.Errorf("connection %d echoed %d bytes, %v; want the %d sent, then EOF", i, len(got), err, len(msg))
					}
				})
			}
			wg.Wait()
		})
	}
	waitNoTunnels(t, e.node)
}

// TestPortForwardErrorStream checks that a connection the node cannot
// make is reported on its own error stream while another goes on.
func TestPortForwardErrorStream(t *testing.T) {
	e := start(t)
	for _, d := range dialers(t, e) {
		t.Run(d.name, func(t *testing.T) {
			conn, _, err := d.dial.Dial("portforward.k8s.io")
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			pair := func(id, port string) (data, errs httpstream.Stream) {
				h := http.Header{}
				h.Set(corev1.StreamType, corev1.StreamTypeError)
				h.Set(corev1.PortHeader, port)
				h.Set(corev1.PortForwardRequestIDHeader, id)
				errs, err := conn.CreateStream(h)
				if err != nil {
					t.Fatal(err)
				}
				errs.Close()
				h.Set(corev1.StreamType, corev1.StreamTypeData)
				data, err = conn.CreateStream(h)
				if err != nil {
					t.Fatal(err)
				}
				return data, errs
			}
			good, goodErr := pair("1", "80")
			bad, badErr := pair("2", "81")
			msg, err := io.ReadAll(badErr)
			if err != nil || !strings.Contains(string(msg), "connection refused") || !strings.Contains(string(msg), "error forwarding port 81 to pod web") {
				t.Errorf("error stream of port 81 = %q, %v; want the refused dial", msg, err)
			}
			bad.Reset()
			io.WriteString(good, "still here")
			good.Close()
			got, err := io.ReadAll(good)
			if err != nil || string(got) != "still here" {
				t.Errorf("port 80 beside the failed one echoed %q, %v", got, err)
			}
			if msg, _ := io.ReadAll(goodErr); len(msg) > 0 {
				t.Errorf("error stream of port 80 = %q, want empty", msg)
			}
		})
	}
	waitNoTunnels(t, e.node)
}

// TestLimit checks that the streams open to one node are limited, with a
// 429 past the limit, and that a stalled stream is cut when idle.
func TestLimit(t *testing.T) {
	e := start(t, func(c *hubd.Config) {
		c.Streams.MaxPerNode = 2
		c.Streams.IdleTimeout = 2 * time.Second
	})
	pods := e.hub.Client.CoreV1().Pods("default")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var held []io.ReadCloser
	for range 2 {
		rc, err := pods.GetLogs("web", &corev1.PodLogOptions{Follow: true}).Stream(ctx)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, rc)
	}
	_, err := readLogs(e.hub.Client, "web", &corev1.PodLogOptions{})
	if !apierrors.IsTooManyRequests(err) || !strings.Contains(err.Error(), "too many streams open to node edge-1") {
		t.Errorf("a third stream = %v, want 429", err)
	}
	for _, rc := range held {
		rc.Close()
	}
	waitNoTunnels(t, e.node)
	if _, err := readLogs(e.hub.Client, "web", &corev1.PodLogOptions{}); err != nil {
		t.Errorf("a stream after the others closed = %v", err)
	}
	// A command that says nothing is cut after the idle timeout.
	x, _ := remotecommand.NewSPDYExecutor(e.hub.Config, "POST", e.podURL("web", "exec", execQuery(false, false, "sleep")))
	begin := time.Now()
	err = x.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: io.Discard, Stderr: io.Discard})
	if took := time.Since(begin); took > 20*time.Second {
		t.Errorf("an idle exec ended after %v (%v), want about 2s", took, err)
	}
	waitNoTunnels(t, e.node)
}

// TestForbidden checks that a user without the right to exec, read logs
// or forward ports is refused.
func TestForbidden(t *testing.T) {
	e := start(t)
	ctx := context.Background()
	if _, err := e.hub.Client.CoreV1().ServiceAccounts("default").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "viewer"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	tok, err := e.hub.Client.CoreV1().ServiceAccounts("default").CreateToken(ctx, "viewer", &authnv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cfg := rest.AnonymousClientConfig(e.hub.Config)
	cfg.BearerToken = tok.Status.Token
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := readLogs(client, "web", &corev1.PodLogOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("logs as a service account = %v, want 403", err)
	}
	for _, ex := range executors {
		x, _ := ex.new(cfg, e.podURL("web", "exec", execQuery(false, false, "echo")))
		err := x.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: io.Discard, Stderr: io.Discard})
		if err == nil || !strings.Contains(err.Error(), "forbidden") {
			t.Errorf("exec over %s as a service account = %v, want forbidden", ex.name, err)
		}
	}
	e.node.mu.Lock()
	opened := e.node.opened
	e.node.mu.Unlock()
	if opened != 0 {
		t.Errorf("%d tunnels opened for a forbidden user, want none", opened)
	}
}

func TestDiscovery(t *testing.T) {
	e := start(t)
	list, err := e.hub.Client.Discovery().ServerResourcesForGroupVersion("v1")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"pods/log": "get", "pods/exec": "create", "pods/attach": "create", "pods/portforward": "create"}
	for _, r := range list.APIResources {
		if v, ok := want[r.Name]; ok && strings.Contains(strings.Join(r.Verbs, " "), v) {
			delete(want, r.Name)
		}
	}
	if len(want) > 0 {
		t.Errorf("discovery lacks %v", want)
	}
}

// TestSyncEndpoint checks the wiring to the real sync endpoint: a pod on a
// node with no session is answered at once, for logs, exec and
// port-forward alike.
func TestSyncEndpoint(t *testing.T) {
	h := hubtest.Start(t, func(c *hubd.Config) {
		c.Controllers = false
		c.SyncAddr = "127.0.0.1:0"
	})
	e := &env{hub: h, node: newFakeNode()} // the fake only records pods here
	e.createPod(t, "web", "edge-9", "main")
	const msg = "node edge-9 is not connected to the hub"
	if _, err := readLogs(h.Client, "web", &corev1.PodLogOptions{}); !apierrors.IsServiceUnavailable(err) || !strings.Contains(err.Error(), msg) {
		t.Errorf("logs = %v, want 503 %q", err, msg)
	}
	x, _ := remotecommand.NewSPDYExecutor(h.Config, "POST", e.podURL("web", "exec", execQuery(false, false, "echo")))
	if err := x.StreamWithContext(context.Background(), remotecommand.StreamOptions{Stdout: io.Discard, Stderr: io.Discard}); err == nil || !strings.Contains(err.Error(), msg) {
		t.Errorf("exec = %v, want %q", err, msg)
	}
	for _, d := range dialers(t, e) {
		if _, _, err := d.dial.Dial("portforward.k8s.io"); err == nil || !strings.Contains(err.Error(), msg) {
			t.Errorf("port-forward over %s = %v, want %q", d.name, err, msg)
		}
	}
}
