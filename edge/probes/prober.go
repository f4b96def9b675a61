package probes

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/outpost-mesh/outpost/edge/runtime"
)

// KubeVersion is the Kubernetes major.minor that probes and hooks give in
// their User-Agent ("kube-probe/1.33", "kube-lifecycle/1.33"), which
// servers may look for; it matches the kubelet version the node reports.
const KubeVersion = "1.33"

// maxOutput bounds what is read of a probe's or hook's output (an HTTP
// body, a command's stdout and stderr), as kubelet's 10 KiB.
const maxOutput = 10 << 10

// ErrExecNotSupported is wrapped by the errors of exec probes and hooks
// when the container runtime cannot run commands in containers.
var ErrExecNotSupported = errors.New("the container runtime cannot run commands in containers")

// ErrNoPodIP is wrapped by the errors of HTTP hooks without a host when
// the pod has no IP yet. Probes find it Errored.
var ErrNoPodIP = errors.New("the pod has no IP yet")

// target is where a probe or hook runs.
type target struct {
	pod       runtime.PodRef
	container *corev1.Container // non-nil
	podIP     string            // "" if the pod has none yet
}

// prober runs probes. Its methods are safe for concurrent use.
type prober struct {
	exec runtime.Execer // nil if the runtime cannot exec
	http *httpClient
}

func newProber(exec runtime.Execer) *prober {
	return &prober{exec: exec, http: newHTTPClient("probe")}
}

// probe runs p against t once, within timeout.
func (pr *prober) probe(ctx context.Context, p *corev1.Probe, timeout time.Duration, t target) Observation {
	if err := checkProbeHandler(&p.ProbeHandler, t.container); err != nil {
		return Observation{Errored, err.Error()}
	}
	switch {
	case p.Exec != nil:
		return execProbe(ctx, pr.exec, t, p.Exec.Command, timeout)
	case p.HTTPGet != nil:
		return pr.http.probe(ctx, p.HTTPGet, t, timeout)
	case p.TCPSocket != nil:
		return tcpProbe(ctx, p.TCPSocket, t, timeout)
	default:
		return grpcProbe(ctx, p.GRPC, t, timeout)
	}
}

// hostPort returns host:port, host defaulting to the pod's IP.
func hostPort(host string, port int, t target) (string, error) {
	if host == "" {
		host = t.podIP
	}
	if host == "" {
		return "", ErrNoPodIP
	}
	return net.JoinHostPort(host, strconv.Itoa(port)), nil
}

// dial dials addr as kubelet's probe dialer does: with SO_LINGER at one
// second, so that frequent probes do not fill the node with sockets in
// TIME_WAIT.
func dial(ctx context.Context, addr string, timeout time.Duration) (net.Conn, error) {
	d := net.Dialer{Timeout: timeout}
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	if tc, ok := conn.(*net.TCPConn); ok {
		_ = tc.SetLinger(1)
	}
	return conn, nil
}

func tcpProbe(ctx context.Context, a *corev1.TCPSocketAction, t target, timeout time.Duration) Observation {
	port, err := resolvePort(a.Port, t.container)
	if err != nil {
		return Observation{Errored, err.Error()}
	}
	addr, err := hostPort(a.Host, port, t)
	if err != nil {
		return Observation{Errored, err.Error()}
	}
	conn, err := dial(ctx, addr, timeout)
	if err != nil {
		return Observation{Failure, err.Error()}
	}
	_ = conn.Close()
	return Observation{Outcome: Success}
}

// limitedBuffer keeps the first max bytes written to it and drops the
// rest. Writes may come from several goroutines (a command's stdout and
// stderr).
type limitedBuffer struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (l *limitedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if room := l.max - len(l.b); room > 0 {
		l.b = append(l.b, p[:min(room, len(p))]...)
	}
	return len(p), nil
}

func (l *limitedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return string(l.b)
}

// runExec runs cmd in t's container through ex and returns its exit code
// and combined output, the first maxOutput bytes of it.
func runExec(ctx context.Context, ex runtime.Execer, t target, cmd []string) (int, string, error) {
	if ex == nil {
		return 0, "", ErrExecNotSupported
	}
	out := &limitedBuffer{max: maxOutput}
	code, err := ex.Exec(ctx, t.pod, t.container.Name, runtime.ExecOptions{Command: cmd, Stdout: out, Stderr: out})
	return code, out.String(), err
}

func execProbe(ctx context.Context, ex runtime.Execer, t target, cmd []string, timeout time.Duration) Observation {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	code, out, err := runExec(ctx, ex, t, cmd)
	switch {
	case err == nil && code == 0:
		return Observation{Success, out}
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		return Observation{Failure, fmt.Sprintf("command %q timed out after %v", cmd, timeout)}
	case err == nil:
		if out = strings.TrimSpace(out); out == "" {
			out = fmt.Sprintf("command %q exited with code %d", cmd, code)
		}
		return Observation{Failure, out}
	case errors.Is(err, ErrExecNotSupported):
		return Observation{Errored, "exec probe: " + err.Error()}
	}
	return Observation{Errored, fmt.Sprintf("exec %q: %v", cmd, err)}
}
