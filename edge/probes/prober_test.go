package probes

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/outpost-mesh/outpost/edge/runtime"
)

// shortTimeout is the timeout of probes that are meant to time out; a
// probe meant to succeed gets longTimeout, which a slow machine does not
// reach.
const (
	shortTimeout = 100 * time.Millisecond
	longTimeout  = 10 * time.Second
)

var testPod = runtime.PodRef{UID: "uid-1", Namespace: "ns", Name: "web"}

// localTarget is a target whose pod IP is 127.0.0.1 and whose container
// has ports named by ports (name -> port).
func localTarget(ports map[string]int) target {
	c := &corev1.Container{Name: "app"}
	for name, p := range ports {
		c.Ports = append(c.Ports, corev1.ContainerPort{Name: name, ContainerPort: int32(p)})
	}
	return target{pod: testPod, container: c, podIP: "127.0.0.1"}
}

func serverPort(t *testing.T, addr string) int {
	t.Helper()
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.Atoi(p)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// stuckListener returns the address of a listener on loopback whose
// accept queue is full, so that connecting to it hangs until the dialer
// gives up (the kernel drops the SYN).
func stuckListener(t *testing.T) string {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Listen(fd, 0); err != nil {
		t.Fatal(err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(sa.(*syscall.SockaddrInet4).Port))
	// Fill the accept queue (backlog 0 holds one) and the SYN queue:
	// connections that complete but are never accepted.
	for range 4 {
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err != nil {
			break
		}
		t.Cleanup(func() { c.Close() })
	}
	return addr
}

func TestHTTPProbe(t *testing.T) {
	var mu sync.Mutex
	var got *http.Request
	mux := http.NewServeMux()
	mux.HandleFunc("/ok", func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = r.Clone(context.Background())
		mu.Unlock()
		io.WriteString(w, "fine")
	})
	mux.HandleFunc("/fail", func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "broken", http.StatusServiceUnavailable)
	})
	mux.HandleFunc("/big", func(w http.ResponseWriter, r *http.Request) {
		b := []byte(strings.Repeat("x", 1<<10))
		for range 1 << 10 { // 1 MiB, of which the probe reads 10 KiB
			if _, err := w.Write(b); err != nil {
				return
			}
		}
	})
	mux.HandleFunc("/hang", func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() })
	mux.HandleFunc("/here", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/ok", http.StatusFound)
	})
	mux.HandleFunc("/loop", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/loop", http.StatusFound)
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	port := serverPort(t, srv.Listener.Addr().String())
	mux.HandleFunc("/elsewhere", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, fmt.Sprintf("http://localhost:%d/ok", port), http.StatusFound)
	})
	tlsSrv := httptest.NewTLSServer(mux)
	t.Cleanup(tlsSrv.Close)
	tlsPort := serverPort(t, tlsSrv.Listener.Addr().String())

	tg := localTarget(map[string]int{"web": port, "secure": tlsPort})
	c := newHTTPClient("probe")
	get := func(path string) *corev1.HTTPGetAction {
		return &corev1.HTTPGetAction{Path: path, Port: intstr.FromString("web")}
	}
	for _, tc := range []struct {
		name    string
		g       *corev1.HTTPGetAction
		tg      *target
		timeout time.Duration
		want    Outcome
		msg     string // the message, or with a "~" prefix a part of it
	}{
		{"ok by named port", get("/ok"), nil, longTimeout, Success, "fine"},
		{"ok by number", &corev1.HTTPGetAction{Path: "/ok", Port: intstr.FromInt(port)}, nil, longTimeout, Success, "fine"},
		{"status 503", get("/fail"), nil, longTimeout, Failure, "HTTP probe failed with statuscode: 503"},
		{"status 404", get("/nothing"), nil, longTimeout, Failure, "HTTP probe failed with statuscode: 404"},
		{"redirect to the same host followed", get("/here"), nil, longTimeout, Success, "fine"},
		{"redirect to another host not followed", get("/elsewhere"), nil, longTimeout, Success, "~Probe terminated redirects"},
		{"redirect loop", get("/loop"), nil, longTimeout, Failure, "~stopped after 10 redirects"},
		{"body read to 10 KiB", get("/big"), nil, longTimeout, Success, strings.Repeat("x", 10<<10)},
		{"timeout", get("/hang"), nil, shortTimeout, Failure, "~Client.Timeout exceeded"},
		{"https without verification", &corev1.HTTPGetAction{Path: "/ok", Port: intstr.FromString("secure"), Scheme: corev1.URISchemeHTTPS}, nil, longTimeout, Success, "fine"},
		{"https scheme in lower case", &corev1.HTTPGetAction{Path: "/ok", Port: intstr.FromString("secure"), Scheme: "https"}, nil, longTimeout, Success, "fine"},
		{"explicit host", &corev1.HTTPGetAction{Host: "127.0.0.1", Path: "/ok", Port: intstr.FromInt(port)}, &target{pod: testPod, container: tg.container}, longTimeout, Success, "fine"},
		{"no pod IP", get("/ok"), &target{pod: testPod, container: tg.container}, longTimeout, Errored, "the pod has no IP yet"},
		{"missing named port", &corev1.HTTPGetAction{Path: "/ok", Port: intstr.FromString("nope")}, nil, longTimeout, Errored, `port "nope" is not the name of one of the container's ports`},
		{"connection refused", &corev1.HTTPGetAction{Path: "/ok", Port: intstr.FromInt(closedPort(t))}, nil, longTimeout, Failure, "~connection refused"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			target := tg
			if tc.tg != nil {
				target = *tc.tg
			}
			o := c.probe(t.Context(), tc.g, target, tc.timeout)
			checkObservation(t, o, tc.want, tc.msg)
		})
	}

	t.Run("headers", func(t *testing.T) {
		for _, tc := range []struct {
			name       string
			headers    []corev1.HTTPHeader
			wantUA     string
			wantAccept []string
			wantHost   string
		}{
			{"kubelet's defaults", nil, "kube-probe/" + KubeVersion, []string{"*/*"}, "127.0.0.1:" + strconv.Itoa(port)},
			{"the pod's own", []corev1.HTTPHeader{{Name: "User-Agent", Value: "mine"}, {Name: "Accept", Value: "text/plain"}, {Name: "Host", Value: "svc.local"}},
				"mine", []string{"text/plain"}, "svc.local"},
			{"an empty Accept removes it", []corev1.HTTPHeader{{Name: "Accept", Value: ""}}, "kube-probe/" + KubeVersion, nil, "127.0.0.1:" + strconv.Itoa(port)},
		} {
			g := get("/ok?check=1")
			g.HTTPHeaders = append(tc.headers, corev1.HTTPHeader{Name: "X-Probe", Value: "a"}, corev1.HTTPHeader{Name: "X-Probe", Value: "b"})
			o := c.probe(t.Context(), g, tg, longTimeout)
			checkObservation(t, o, Success, "fine")
			mu.Lock()
			r := got
			mu.Unlock()
			if ua := r.Header.Get("User-Agent"); ua != tc.wantUA {
				t.Errorf("%s: User-Agent %q, want %q", tc.name, ua, tc.wantUA)
			}
			if a := r.Header.Values("Accept"); fmt.Sprint(a) != fmt.Sprint(tc.wantAccept) {
				t.Errorf("%s: Accept %q, want %q", tc.name, a, tc.wantAccept)
			}
			if r.Host != tc.wantHost {
				t.Errorf("%s: Host %q, want %q", tc.name, r.Host, tc.wantHost)
			}
			if x := r.Header.Values("X-Probe"); fmt.Sprint(x) != "[a b]" {
				t.Errorf("%s: X-Probe %q, want [a b]", tc.name, x)
			}
			if q := r.URL.Query().Get("check"); q != "1" {
				t.Errorf("%s: query check=%q, want 1", tc.name, q)
			}
			if ae := r.Header.Get("Accept-Encoding"); ae != "" {
				t.Errorf("%s: Accept-Encoding %q, want none", tc.name, ae)
			}
		}
	})
}

// closedPort returns a loopback port nothing listens on.
func closedPort(t *testing.T) int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := serverPort(t, ln.Addr().String())
	ln.Close()
	return p
}

func checkObservation(t *testing.T, o Observation, want Outcome, msg string) {
	t.Helper()
	if o.Outcome != want {
		t.Errorf("outcome %v (%q), want %v", o.Outcome, o.Message, want)
	}
	if part, ok := strings.CutPrefix(msg, "~"); ok {
		if !strings.Contains(o.Message, part) {
			t.Errorf("message %q, want it to hold %q", o.Message, part)
		}
	} else if o.Message != msg {
		if len(o.Message) > 200 {
			t.Errorf("message of %d bytes, want %d", len(o.Message), len(msg))
		} else {
			t.Errorf("message %q, want %q", o.Message, msg)
		}
	}
}

func TestTCPProbe(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	})
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	port := serverPort(t, ln.Addr().String())
	stuck := serverPort(t, stuckListener(t))
	tg := localTarget(map[string]int{"db": port})
	for _, tc := range []struct {
		name    string
		a       *corev1.TCPSocketAction
		timeout time.Duration
		want    Outcome
		msg     string
	}{
		{"named port", &corev1.TCPSocketAction{Port: intstr.FromString("db")}, longTimeout, Success, ""},
		{"port number and host", &corev1.TCPSocketAction{Host: "127.0.0.1", Port: intstr.FromInt(port)}, longTimeout, Success, ""},
		{"refused", &corev1.TCPSocketAction{Port: intstr.FromInt(closedPort(t))}, longTimeout, Failure, "~connection refused"},
		{"timeout", &corev1.TCPSocketAction{Port: intstr.FromInt(stuck)}, shortTimeout, Failure, "~i/o timeout"},
		{"missing named port", &corev1.TCPSocketAction{Port: intstr.FromString("x")}, longTimeout, Errored, `port "x" is not the name of one of the container's ports`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := tcpProbe(t.Context(), tc.a, tg, tc.timeout)
			checkObservation(t, o, tc.want, tc.msg)
		})
	}
}

// execFunc is an Execer that calls itself.
type execFunc func(ctx context.Context, pod runtime.PodRef, container string, opts runtime.ExecOptions) (int, error)

func (f execFunc) Exec(ctx context.Context, pod runtime.PodRef, container string, opts runtime.ExecOptions) (int, error) {
	return f(ctx, pod, container, opts)
}

// scriptedExec runs the commands "exit N [output]", "hang" and "gone".
var scriptedExec = execFunc(func(ctx context.Context, pod runtime.PodRef, container string, opts runtime.ExecOptions) (int, error) {
	if pod != testPod || container != "app" {
		return 0, fmt.Errorf("exec in %v/%s: %w", pod, container, runtime.ErrNotFound)
	}
	switch opts.Command[0] {
	case "exit":
		code, _ := strconv.Atoi(opts.Command[1])
		if len(opts.Command) > 2 {
			io.WriteString(opts.Stdout, opts.Command[2])
			io.WriteString(opts.Stderr, "!\n")
		}
		return code, nil
	case "hang":
		<-ctx.Done()
		return -1, ctx.Err()
	case "big":
		for range 10 {
			opts.Stdout.Write([]byte(strings.Repeat("y", 4<<10)))
		}
		return 1, nil
	}
	return 0, fmt.Errorf("exec in %v/%s: %w", pod, container, runtime.ErrNotFound)
})

func TestExecProbe(t *testing.T) {
	tg := localTarget(nil)
	for _, tc := range []struct {
		name    string
		ex      runtime.Execer
		cmd     []string
		timeout time.Duration
		want    Outcome
		msg     string
	}{
		{"exit 0", scriptedExec, []string{"exit", "0", "ok"}, longTimeout, Success, "ok!\n"},
		{"exit 1 with output", scriptedExec, []string{"exit", "1", "not ready"}, longTimeout, Failure, "not ready!"},
		{"exit 2 without output", scriptedExec, []string{"exit", "2"}, longTimeout, Failure, `command ["exit" "2"] exited with code 2`},
		{"output kept to 10 KiB", scriptedExec, []string{"big"}, longTimeout, Failure, strings.Repeat("y", 10<<10)},
		{"timeout", scriptedExec, []string{"hang"}, shortTimeout, Failure, `command ["hang"] timed out after 100ms`},
		{"container gone", scriptedExec, []string{"gone"}, longTimeout, Errored, `exec ["gone"]: exec in ns/web (uid-1)/app: not found`},
		{"runtime without exec", nil, []string{"exit", "0"}, longTimeout, Errored, "exec probe: the container runtime cannot run commands in containers"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := execProbe(t.Context(), tc.ex, tg, tc.cmd, tc.timeout)
			checkObservation(t, o, tc.want, tc.msg)
		})
	}
}

// TestProbeDispatch: a probe goes to the prober of its handler, and one
// that cannot run is Errored, saying why, not a panic.
func TestProbeDispatch(t *testing.T) {
	pr := newProber(scriptedExec)
	tg := localTarget(nil)
	for _, tc := range []struct {
		name string
		p    *corev1.Probe
		want Outcome
		msg  string
	}{
		{"exec", &corev1.Probe{ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"exit", "0"}}}}, Success, ""},
		{"no handler", &corev1.Probe{}, Errored, "no handler, it needs one of exec, httpGet, tcpSocket or grpc"},
		{"tcp and grpc", &corev1.Probe{ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt(1)}, GRPC: &corev1.GRPCAction{Port: 1}}},
			Errored, "2 handlers (tcpSocket, grpc), it needs exactly one"},
		{"tcp", &corev1.Probe{ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt(closedPort(t))}}}, Failure, "~connection refused"},
		{"http", &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Port: intstr.FromInt(closedPort(t))}}}, Failure, "~connection refused"},
		{"grpc", &corev1.Probe{ProbeHandler: corev1.ProbeHandler{GRPC: &corev1.GRPCAction{Port: int32(closedPort(t))}}}, Failure, "~connection refused"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := pr.probe(t.Context(), tc.p, longTimeout, tg)
			checkObservation(t, o, tc.want, tc.msg)
		})
	}
}

func TestLimitedBuffer(t *testing.T) {
	b := &limitedBuffer{max: 5}
	for _, s := range []string{"ab", "cde", "fg"} {
		if n, err := b.Write([]byte(s)); n != len(s) || err != nil {
			t.Fatalf("Write(%q) = %d, %v", s, n, err)
		}
	}
	if g := b.String(); g != "abcde" {
		t.Errorf("String() = %q, want abcde", g)
	}
}
