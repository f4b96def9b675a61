package streamsbench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/pkg/cio"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/remotecommand"

	"github.com/outpost-mesh/outpost/bench/report"
	"github.com/outpost-mesh/outpost/edge/runtime/containerd"
)

// ExecResult is what exec measured over one protocol, or, with
// Protocol "", straight on the node's containerd.
type ExecResult struct {
	Protocol string `json:"protocol"`
	// Run is `exec true`, from the request to its exit code.
	Run report.Latency `json:"run"`
	// Echo is a line's round trip through one `exec -i cat`: a
	// keystroke's, as a shell without a terminal would echo it.
	Echo report.Latency `json:"echo"`
}

// executor returns client-go's executor of command in the server pod
// over proto, as kubectl exec makes it.
func (r *runner) executor(proto string, stdin bool, command ...string) (remotecommand.Executor, error) {
	req := r.client.CoreV1().RESTClient().Post().Resource("pods").Namespace(r.cfg.Namespace).Name(serverPod).SubResource("exec").
		VersionedParams(&corev1.PodExecOptions{Container: container, Command: command, Stdin: stdin, Stdout: true, Stderr: true}, scheme.ParameterCodec)
	switch proto {
	case ProtoSPDY:
		return remotecommand.NewSPDYExecutor(r.rest, http.MethodPost, req.URL())
	case ProtoWebSocket:
		return remotecommand.NewWebSocketExecutor(r.rest, http.MethodGet, req.URL().String())
	}
	return nil, fmt.Errorf("unknown protocol %q", proto)
}

// measureExec runs `exec true` cfg.Execs times per protocol and straight
// on the node's containerd, and echoes cfg.Keystrokes lines through an
// `exec -i cat` per protocol, the protocols taking turns.
func (r *runner) measureExec(ctx context.Context) ([]ExecResult, error) {
	node, err := r.nodeExec(ctx)
	if err != nil {
		return nil, err
	}
	defer node.close()
	var direct []time.Duration
	runs := make([][]time.Duration, len(r.cfg.Protocols))
	for i := range r.cfg.Execs {
		d, err := node.execTrue(ctx, r.cfg.OpTimeout)
		if err != nil {
			return nil, fmt.Errorf("exec true on the node's containerd: %w", err)
		}
		direct = append(direct, d)
		for pi, proto := range r.cfg.Protocols {
			d, err := r.execTrue(ctx, proto)
			if err != nil {
				return nil, fmt.Errorf("exec true over %s: %w", proto, err)
			}
			runs[pi] = append(runs[pi], d)
		}
		if i == 0 {
			r.logf("exec true: first %v", runs[0][0])
		}
	}
	cats := make([]*catSession, len(r.cfg.Protocols))
	defer func() {
		for _, c := range cats {
			if c != nil {
				c.close()
			}
		}
	}()
	for pi, proto := range r.cfg.Protocols {
		c, err := r.startCat(ctx, proto)
		if err != nil {
			return nil, fmt.Errorf("exec -i cat over %s: %w", proto, err)
		}
		cats[pi] = c
		// The first line waits for the session to be set up: not timed.
		if _, err := c.roundTrip(-1, r.cfg.OpTimeout); err != nil {
			return nil, fmt.Errorf("exec -i cat over %s: %w", proto, err)
		}
	}
	echoes := make([][]time.Duration, len(r.cfg.Protocols))
	for n := range r.cfg.Keystrokes {
		for pi, proto := range r.cfg.Protocols {
			d, err := cats[pi].roundTrip(n, r.cfg.OpTimeout)
			if err != nil {
				return nil, fmt.Errorf("exec -i cat over %s: %w", proto, err)
			}
			echoes[pi] = append(echoes[pi], d)
		}
	}
	out := []ExecResult{{Run: report.Summarize(direct)}}
	for pi, proto := range r.cfg.Protocols {
		out = append(out, ExecResult{Protocol: proto, Run: report.Summarize(runs[pi]), Echo: report.Summarize(echoes[pi])})
	}
	r.logf("exec measured")
	return out, nil
}

// execTrue runs `true` in the server pod and returns how long it took to
// its exit code.
func (r *runner) execTrue(ctx context.Context, proto string) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, r.cfg.OpTimeout)
	defer cancel()
	start := time.Now()
	ex, err := r.executor(proto, false, "true")
	if err != nil {
		return 0, err
	}
	var stdout, stderr bytes.Buffer
	if err := ex.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: &stdout, Stderr: &stderr}); err != nil {
		return 0, fmt.Errorf("%w: %s%s", err, stdout.String(), stderr.String())
	}
	return time.Since(start), nil
}

// catSession is one `exec -i cat` in the server pod.
type catSession struct {
	stdin  *io.PipeWriter
	out    *lineNotifier
	done   chan struct{} // closed at the stream's end, err set
	err    error
	cancel context.CancelFunc
}

func (r *runner) startCat(ctx context.Context, proto string) (*catSession, error) {
	ex, err := r.executor(proto, true, "cat")
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	pr, pw := io.Pipe()
	c := &catSession{stdin: pw, out: newLineNotifier(), done: make(chan struct{}), cancel: cancel}
	go func() {
		c.err = ex.StreamWithContext(ctx, remotecommand.StreamOptions{Stdin: pr, Stdout: c.out, Stderr: c.out})
		pr.CloseWithError(io.ErrClosedPipe)
		close(c.done)
	}()
	return c, nil
}

// roundTrip writes line n to cat and returns how long it took to come
// back.
func (c *catSession) roundTrip(n int, timeout time.Duration) (time.Duration, error) {
	line := "key " + strconv.Itoa(n) + "\n"
	start := time.Now()
	wrote := make(chan error, 1)
	go func() {
		_, err := io.WriteString(c.stdin, line)
		wrote <- err
	}()
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case got := <-c.out.lines:
		if got != line {
			return 0, fmt.Errorf("echoed %q, want %q", got, line)
		}
		d := time.Since(start)
		if err := <-wrote; err != nil {
			return 0, err
		}
		return d, nil
	case <-c.done:
		if c.err == nil {
			return 0, errors.New("cat ended")
		}
		return 0, c.err
	case <-t.C:
		return 0, fmt.Errorf("no echo within %v", timeout)
	}
}

// close ends cat's stdin, so that it exits and the stream ends; one
// that does not end within catExit is cut.
func (c *catSession) close() {
	c.stdin.Close()
	t := time.NewTimer(catExit)
	defer t.Stop()
	select {
	case <-c.done:
	case <-t.C:
	}
	c.cancel()
	<-c.done
}

// catExit is how long cat gets to exit once its stdin closed.
const catExit = 10 * time.Second

// lineNotifier hands each complete line written to it to lines.
type lineNotifier struct {
	mu    sync.Mutex
	buf   []byte
	lines chan string
}

func newLineNotifier() *lineNotifier { return &lineNotifier{lines: make(chan string, 16)} }

func (l *lineNotifier) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf = append(l.buf, p...)
	for {
		i := bytes.IndexByte(l.buf, '\n')
		if i < 0 {
			return len(p), nil
		}
		line := string(l.buf[:i+1])
		l.buf = l.buf[i+1:]
		select {
		case l.lines <- line:
		default:
			return 0, errors.New("lines not read")
		}
	}
}

// nodeExec runs processes in the server pod's container straight on the
// node's containerd, as crictl exec would there: the baseline of exec
// through the hub, the agent and the tunnel.
type nodeExec struct {
	client  *client.Client
	task    client.Task
	process specs.Process
	fifoDir string
	ns      string
	n       int
}

func (r *runner) nodeExec(ctx context.Context) (*nodeExec, error) {
	pod, err := r.client.CoreV1().Pods(r.cfg.Namespace).Get(ctx, serverPod, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	c, err := client.New(r.node.Sock())
	if err != nil {
		return nil, fmt.Errorf("connect to the node's containerd: %w", err)
	}
	ns := r.node.Namespace()
	ctx = namespaces.WithNamespace(ctx, ns)
	ctrs, err := c.Containers(ctx, fmt.Sprintf("labels.%q==%s,labels.%q==%s",
		containerd.LabelPodUID, pod.UID, containerd.LabelContainerName, container))
	if err == nil && len(ctrs) == 0 {
		err = errors.New("not found")
	}
	var task client.Task
	var spec *specs.Spec
	if err == nil {
		task, err = ctrs[0].Task(ctx, nil)
	}
	if err == nil {
		spec, err = ctrs[0].Spec(ctx)
	}
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("the server's container in the node's containerd: %w", err)
	}
	p := *spec.Process
	p.Args, p.Terminal, p.ConsoleSize = []string{"true"}, false, nil
	return &nodeExec{client: c, task: task, process: p, fifoDir: filepath.Join(r.dir, "exec-fifos"), ns: ns}, nil
}

// execTrue runs true in the container, its output through FIFOs as the
// agent's are, and returns how long it took to its exit.
func (e *nodeExec) execTrue(ctx context.Context, timeout time.Duration) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(namespaces.WithNamespace(ctx, e.ns), timeout)
	defer cancel()
	start := time.Now()
	e.n++
	var stdout, stderr bytes.Buffer
	p, err := e.task.Exec(ctx, "bench-"+strconv.Itoa(e.n), &e.process,
		cio.NewCreator(cio.WithStreams(nil, &stdout, &stderr), cio.WithFIFODir(e.fifoDir)))
	if err != nil {
		return 0, err
	}
	defer p.Delete(context.WithoutCancel(ctx), client.WithProcessKill)
	exited, err := p.Wait(ctx)
	if err != nil {
		return 0, err
	}
	if err := p.Start(ctx); err != nil {
		return 0, err
	}
	select {
	case st := <-exited:
		p.IO().Wait()
		if code := st.ExitCode(); code != 0 {
			return 0, fmt.Errorf("exit code %d: %s%s", code, stdout.String(), stderr.String())
		}
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	return time.Since(start), nil
}

func (e *nodeExec) close() { e.client.Close() }
