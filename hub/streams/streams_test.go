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
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/tools/remotecommand"
	"k8s.io/client-go/transport/spdy"
	"k8s.io/client-go/util/exec"

	"github.com/outpost-mesh/outpost/hub/hubd"
	"github.com/outpost-mesh/outpost/internal/wait"
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

var (
	_ = net.Dial
	_ = http.MethodGet
	_ sync.Mutex
	_ = authnv1.TokenRequest{}
	_ = apierrors.IsNotFound
	_ kubernetes.Interface
	_ = portforward.New
	_ = spdy.RoundTripperFor
)
