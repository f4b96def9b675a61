package e2e

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/outpost-mesh/outpost/internal/netem"

	"github.com/outpost-mesh/outpost/internal/wait"
)

// This file holds the helpers of the sync tests: a hub whose sync endpoint
// keeps its address across restarts, edge agents each behind its own netem
// relay, a log with timestamps, and polling with deadlines.

const (
	// edgeStopGrace is how long an agent may take to exit after SIGTERM
	// before it is killed.
	edgeStopGrace = 15 * time.Second
	// pollInterval is how often a condition is polled.
	pollInterval = 250 * time.Millisecond
	// tailLines is how much of each process's stderr a failed test shows.
	tailLines = 60
)

// fleet is the processes of one sync test and its log. Its cleanup, which
// runs after every process was stopped, fails the test on a data race
// report and, when the test failed, shows the end of every process's
// stderr, including the processes killed along the way.
type fleet struct {
	t     *testing.T
	start time.Time
	// edgeBin, if set, is the binary the fleet's agents start as:
	// an outpost-edge, which takes the flags of `outpost edge` without
	// the command's name.
	edgeBin string

	mu    sync.Mutex
	procs []trackedProc
}

type trackedProc struct {
	label string // "hub#1", "edge-2#2"
	p     *proc
}

func newFleet(t *testing.T) *fleet {
	f := &fleet{t: t, start: time.Now()}
	t.Cleanup(f.finish)
	return f
}

// logf logs with the wall-clock time, to line up with the processes' own
// logs, and the time since the test began.
func (f *fleet) logf(format string, args ...any) {
	f.t.Helper()
	now := time.Now()
	f.t.Logf("%s +%5.1fs  %s", now.Format("15:04:05.000"), now.Sub(f.start).Seconds(), fmt.Sprintf(format, args...))
}

func (f *fleet) track(label string, p *proc) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.procs = append(f.procs, trackedProc{label, p})
}

func (f *fleet) finish() {
	f.mu.Lock()
	procs := append([]trackedProc(nil), f.procs...)
	f.mu.Unlock()
	for _, tp := range procs {
		if strings.Contains(tp.p.stderr.String(), "WARNING: DATA RACE") {
			f.t.Errorf("%s reported a data race\n%s", tp.label, tp.p.describe())
		}
	}
	if !f.t.Failed() {
		return
	}
	for _, tp := range procs {
		state := "running"
		if !tp.p.running() {
			state = fmt.Sprintf("exited: %v", tp.p.waitErr)
		}
		f.t.Logf("=== %s (%s): %s\n--- last %d lines of stderr:\n%s", tp.label, state, tp.p.name, tailLines, tail(tp.p.stderr.String(), tailLines))
	}
}

// tail returns the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// eventually polls cond until it holds and fails the test with cond's last
// reason when timeout passes first.
func (f *fleet) eventually(timeout time.Duration, what string, cond func() (bool, string)) {
	f.t.Helper()
	wait.ForEvery(f.t, pollInterval, timeout, what, cond)
}

// waitUntil blocks until the wall clock reaches at. It is for waits whose
// length is the point, such as a link kept down for the time an issue
// names, or a hub kept down until a crash the runtime scheduled is past;
// anything observable is polled with eventually instead.
func (f *fleet) waitUntil(at time.Time, why string) {
	f.t.Helper()
	d := time.Until(at)
	if d <= 0 {
		return
	}
	f.logf("holding %.1fs: %s", d.Seconds(), why)
	tm := time.NewTimer(d)
	defer tm.Stop()
	<-tm.C
}

// usedPorts keeps the sync ports handed out in this run, so that parallel
// tests never get the same one.
var usedPorts = struct {
	sync.Mutex
	m map[int]bool
}{m: map[int]bool{}}

// freeSyncAddr returns a loopback UDP address that is free now. The port
// is picked below the kernel's ephemeral range (32768 and up on Linux), so
// that no socket bound to port 0 (a relay's, an agent's) can take it while
// its hub is down between a kill and a restart.
func freeSyncAddr(t *testing.T) string {
	t.Helper()
	usedPorts.Lock()
	defer usedPorts.Unlock()
	for range 200 {
		port := 20000 + rand.IntN(12000)
		if usedPorts.m[port] {
			continue
		}
		pc, err := net.ListenPacket("udp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			continue
		}
		pc.Close()
		usedPorts.m[port] = true
		return pc.LocalAddr().String()
	}
	t.Fatal("no free UDP port in 20000-31999")
	return ""
}

// syncHub is an `outpost hub` process, restartable on its data directory
// and sync address.
type syncHub struct {
	f        *fleet
	dataDir  string
	syncAddr string   // the same across restarts: agents dial it through relays
	extra    []string // more flags of `outpost hub`

	starts  int
	proc    *proc
	readyAt time.Time // when the current process printed its export line
	cs      kubernetes.Interface
	hc      *http.Client
	rest    *rest.Config // the admin's, of the current process
}

// startHub runs a hub on a fresh data directory with the API on a free
// port and the sync endpoint on a fixed free port, and returns it once it
// is ready. The test's cleanup stops it with SIGTERM and fails the test
// unless it exits cleanly. extra are more flags of `outpost hub`.
func (f *fleet) startHub(extra ...string) *syncHub {
	f.t.Helper()
	outpostBinary(f.t) // build before the clock of any step starts
	h := &syncHub{f: f, dataDir: filepath.Join(f.t.TempDir(), "hub"), syncAddr: freeSyncAddr(f.t), extra: extra}
	f.t.Cleanup(h.shutdown)
	h.start()
	return h
}

// start starts the hub process and waits until it is ready.
func (h *syncHub) start() {
	t := h.f.t
	t.Helper()
	h.starts++
	args := append([]string{"hub", "--data-dir", h.dataDir, "--api-addr", "127.0.0.1:0", "--sync-addr", h.syncAddr}, h.extra...)
	cmd := exec.Command(outpostBinary(t), args...)
	p := startProc(t, cmd)
	h.proc = p
	h.f.track(fmt.Sprintf("hub#%d", h.starts), p)
	h.f.logf("hub#%d starting: sync %s, data %s", h.starts, h.syncAddr, h.dataDir)

	const prefix = "export KUBECONFIG="
	out := p.waitOutput(t, hubReadyTimeout, "the export line", false, func(s string) bool {
		i := strings.Index(s, prefix)
		return i >= 0 && strings.Contains(s[i:], "\n")
	})
	h.readyAt = time.Now()
	kubeconfig := ""
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), prefix); ok {
			kubeconfig = v
		}
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatalf("hub kubeconfig %s: %v", kubeconfig, err)
	}
	cfg.Timeout = 15 * time.Second
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatalf("hub client: %v", err)
	}
	cs, err := kubernetes.NewForConfigAndClient(cfg, hc)
	if err != nil {
		t.Fatalf("hub client: %v", err)
	}
	h.closeClient()
	h.cs, h.hc, h.rest = cs, hc, cfg
	h.f.logf("hub#%d ready: api %s", h.starts, cfg.Host)
}

func (h *syncHub) closeClient() {
	if h.hc != nil {
		h.hc.CloseIdleConnections()
		h.hc = nil
	}
}

// kill ends the hub with SIGKILL, as a power cut would, and reaps it.
func (h *syncHub) kill() {
	h.f.t.Helper()
	h.proc.cmd.Process.Kill()
	<-h.proc.exited
	h.closeClient()
	h.f.logf("hub#%d killed (SIGKILL)", h.starts)
}

// stop ends the hub with SIGTERM and fails the test unless it exits with
// status 0 within hubStopGrace.
func (h *syncHub) stop() {
	t := h.f.t
	t.Helper()
	err, killed := h.proc.stop(hubStopGrace)
	h.closeClient()
	switch {
	case killed:
		t.Errorf("hub#%d did not exit within %v of SIGTERM; killed it", h.starts, hubStopGrace)
	case err != nil:
		t.Errorf("hub#%d exited with %v after SIGTERM, want status 0", h.starts, err)
	default:
		h.f.logf("hub#%d stopped (SIGTERM, exit 0)", h.starts)
	}
}

// shutdown is the cleanup: it stops a running hub.
func (h *syncHub) shutdown() {
	if h.proc != nil && h.proc.running() {
		h.stop()
	}
	h.closeClient()
}

// createToken runs `outpost token create` against the hub and returns the
// token and CA hash it printed.
func (h *syncHub) createToken(site string) (token, caHash string) {
	t := h.f.t
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), kubectlTimeout)
	defer cancel()
	args := []string{"token", "create", "--kubeconfig", filepath.Join(h.dataDir, "admin.kubeconfig"), "--ttl", "1h"}
	if site != "" {
		args = append(args, "--site", site)
	}
	cmd := exec.CommandContext(ctx, outpostBinary(t), args...)
	dieWithTest(cmd)
	out, err := cmd.Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		t.Fatalf("outpost %s: %v\n%s%s", strings.Join(args, " "), err, out, stderr)
	}
	for l := range strings.SplitSeq(string(out), "\n") {
		if v, ok := strings.CutPrefix(l, "token: "); ok {
			token = v
		}
		if v, ok := strings.CutPrefix(l, "ca-cert-hash: "); ok {
			caHash = v
		}
	}
	if token == "" || !strings.HasPrefix(caHash, "sha256:") {
		t.Fatalf("outpost token create printed no token and CA hash:\n%s", out)
	}
	return token, caHash
}

// ctx returns the context of one API call.
func (h *syncHub) ctx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), 15*time.Second)
}

// pods returns the pods of the default namespace by name.
func (h *syncHub) pods() (map[string]*corev1.Pod, error) {
	ctx, cancel := h.ctx()
	defer cancel()
	l, err := h.cs.CoreV1().Pods(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	out := make(map[string]*corev1.Pod, len(l.Items))
	for i := range l.Items {
		out[l.Items[i].Name] = &l.Items[i]
	}
	return out, nil
}

// pod returns the named pod of the default namespace.
func (h *syncHub) pod(name string) (*corev1.Pod, error) {
	ctx, cancel := h.ctx()
	defer cancel()
	return h.cs.CoreV1().Pods(metav1.NamespaceDefault).Get(ctx, name, metav1.GetOptions{})
}

// createPod creates p in the default namespace and returns it as created.
func (h *syncHub) createPod(p *corev1.Pod) *corev1.Pod {
	h.f.t.Helper()
	ctx, cancel := h.ctx()
	defer cancel()
	out, err := h.cs.CoreV1().Pods(metav1.NamespaceDefault).Create(ctx, p, metav1.CreateOptions{})
	if err != nil {
		h.f.t.Fatalf("create pod %s: %v", p.Name, err)
	}
	return out
}

// deletePod deletes the named pod as a user does, with its grace period:
// the pod stays, marked, until its node confirms its end.
func (h *syncHub) deletePod(name string) {
	h.f.t.Helper()
	ctx, cancel := h.ctx()
	defer cancel()
	if err := h.cs.CoreV1().Pods(metav1.NamespaceDefault).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		h.f.t.Fatalf("delete pod %s: %v", name, err)
	}
}

// node returns the named node.
func (h *syncHub) node(name string) (*corev1.Node, error) {
	ctx, cancel := h.ctx()
	defer cancel()
	return h.cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
}

// edge is an `outpost edge` agent on the fake runtime, dialing its hub
// through its own relay, restartable on its data directory.
type edge struct {
	f       *fleet
	name    string
	dataDir string
	relay   *netem.Relay // nil: the agent dials the hub itself
	args    []string
	// netns, if set, is the network namespace the agent runs in,
	// entered with nsenter(1).
	netns string

	starts int
	proc   *proc
}

// startEdge starts the agent of node name behind a new relay to h's sync
// endpoint, extra being more flags of `outpost edge`. The test's cleanup
// stops it with SIGTERM, failing the test unless it exits cleanly, then
// closes the relay.
func (f *fleet) startEdge(h *syncHub, name, token, caHash string, extra ...string) *edge {
	f.t.Helper()
	relay, err := netem.Listen(h.syncAddr)
	if err != nil {
		f.t.Fatalf("relay for %s: %v", name, err)
	}
	f.t.Cleanup(func() { relay.Close() })
	return f.runEdge(h, name, token, caHash, relay, extra...)
}

// startEdgeDirect starts the agent of node name dialing h's sync endpoint
// itself, without a relay.
func (f *fleet) startEdgeDirect(h *syncHub, name, token, caHash string) *edge {
	f.t.Helper()
	return f.runEdge(h, name, token, caHash, nil)
}

func (f *fleet) runEdge(h *syncHub, name, token, caHash string, relay *netem.Relay, extra ...string) *edge {
	f.t.Helper()
	e := &edge{f: f, name: name, dataDir: filepath.Join(f.t.TempDir(), name), relay: relay}
	hub := h.syncAddr
	if relay != nil {
		hub = relay.Addr()
	}
	e.args = []string{"edge", "--hub", hub, "--token", token, "--ca-cert-hash", caHash,
		"--node-name", name, "--data-dir", e.dataDir, "--runtime", "fake"}
	e.args = append(e.args, meshFlags(extra)...)
	f.t.Cleanup(e.shutdown) // runs before the relay closes
	e.start()
	return e
}

// meshFlags returns extra, more flags of an agent sharing the test
// machine's network namespace, with --mesh=false first unless they say
// something of the site mesh: such agents would all listen on the
// machine's address at the mesh's port, and a node whose peers see it
// alive is neither evicted nor cut off when its uplink is (it relays
// through them). The mesh's tests give each node a loopback address.
func meshFlags(extra []string) []string {
	for _, a := range extra {
		if strings.HasPrefix(a, "--mesh") {
			return extra
		}
	}
	return append([]string{"--mesh=false"}, extra...)
}

// start starts the agent process.
func (e *edge) start() {
	e.f.t.Helper()
	e.starts++
	bin, args := outpostBinary(e.f.t), e.args
	if e.f.edgeBin != "" {
		bin, args = e.f.edgeBin, args[1:] // without "edge"
	}
	cmd := exec.Command(bin, args...)
	if e.netns != "" {
		// nsenter enters the namespace and execs the agent: the process
		// stopped is the agent itself.
		cmd = exec.Command("nsenter", append([]string{"--net=" + e.netns, "--", bin}, args...)...)
	}
	p := startProc(e.f.t, cmd)
	e.proc = p
	e.f.track(fmt.Sprintf("%s#%d", e.name, e.starts), p)
	switch {
	case e.netns != "":
		e.f.logf("%s#%d started in %s", e.name, e.starts, e.netns)
	case e.relay != nil:
		e.f.logf("%s#%d started, dialing the hub via relay %s", e.name, e.starts, e.relay.Addr())
	default:
		e.f.logf("%s#%d started, dialing the hub directly", e.name, e.starts)
	}
}

// kill ends the agent with SIGKILL and reaps it.
func (e *edge) kill() {
	e.f.t.Helper()
	e.proc.cmd.Process.Kill()
	<-e.proc.exited
	e.f.logf("%s#%d killed (SIGKILL)", e.name, e.starts)
}

// shutdown is the cleanup: SIGTERM, and the test fails unless the agent
// exits with status 0 in time.
func (e *edge) shutdown() {
	if e.proc == nil || !e.proc.running() {
		return
	}
	err, killed := e.proc.stop(edgeStopGrace)
	switch {
	case killed:
		e.f.t.Errorf("%s#%d did not exit within %v of SIGTERM; killed it", e.name, e.starts, edgeStopGrace)
	case err != nil:
		e.f.t.Errorf("%s#%d exited with %v after SIGTERM, want status 0", e.name, e.starts, err)
	}
}

// Lines of the agent's log (slog text, on stderr).
const (
	logConnected = `msg="connected to hub"`
	logEnded     = `msg="hub connection ended"`
)

// logLines returns the lines of the current process's stderr holding msg.
func (e *edge) logLines(msg string) []string {
	var out []string
	for l := range strings.SplitSeq(e.proc.stderr.String(), "\n") {
		if strings.Contains(l, msg) {
			out = append(out, l)
		}
	}
	return out
}

// connects returns how many sessions the current process opened.
func (e *edge) connects() int { return len(e.logLines(logConnected)) }

// waitConnects waits until the current process opened more than n
// sessions and returns the line of the newest.
func (e *edge) waitConnects(n int, timeout time.Duration) string {
	e.f.t.Helper()
	var line string
	e.f.eventually(timeout, e.name+" connects to the hub", func() (bool, string) {
		if !e.proc.running() {
			e.f.t.Fatalf("%s#%d exited: %v", e.name, e.starts, e.proc.waitErr)
		}
		ls := e.logLines(logConnected)
		if len(ls) > n {
			line = ls[len(ls)-1]
			return true, ""
		}
		return false, fmt.Sprintf("%d sessions so far", len(ls))
	})
	return line
}

// logField returns the value of key in a slog text line.
func logField(line, key string) string {
	i := strings.Index(line, " "+key+"=")
	if i < 0 {
		return ""
	}
	v := line[i+len(key)+2:]
	if strings.HasPrefix(v, `"`) {
		if s, err := strconv.QuotedPrefix(v); err == nil {
			u, _ := strconv.Unquote(s)
			return u
		}
	}
	if j := strings.IndexByte(v, ' '); j >= 0 {
		v = v[:j]
	}
	return v
}

// logTime returns the time of a slog text line.
func logTime(t *testing.T, line string) time.Time {
	t.Helper()
	ts, err := time.Parse(time.RFC3339Nano, logField(" "+line, "time"))
	if err != nil {
		t.Fatalf("log line without a time: %q: %v", line, err)
	}
	return ts
}

// newPod returns a pod bound to node with one container "main".
func newPod(name, node, image string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: metav1.NamespaceDefault},
		Spec: corev1.PodSpec{
			NodeName:   node,
			Containers: []corev1.Container{{Name: "main", Image: image}},
		},
	}
}

// mainStatus returns the status of container "main", or nil.
func mainStatus(p *corev1.Pod) *corev1.ContainerStatus {
	for i := range p.Status.ContainerStatuses {
		if p.Status.ContainerStatuses[i].Name == "main" {
			return &p.Status.ContainerStatuses[i]
		}
	}
	return nil
}

func podCondition(p *corev1.Pod, typ corev1.PodConditionType) corev1.ConditionStatus {
	for _, c := range p.Status.Conditions {
		if c.Type == typ {
			return c.Status
		}
	}
	return ""
}

// runningProblem returns what keeps p from being a running pod as a node
// reports one, or "" if nothing does: phase Running, Ready, its container
// running and ready, hostIP and podIP set, not being deleted.
func runningProblem(p *corev1.Pod) string {
	cs := mainStatus(p)
	switch {
	case p.DeletionTimestamp != nil:
		return p.Name + " is being deleted"
	case p.Status.Phase != corev1.PodRunning:
		return fmt.Sprintf("%s phase %q", p.Name, p.Status.Phase)
	case podCondition(p, corev1.PodReady) != corev1.ConditionTrue:
		return fmt.Sprintf("%s Ready=%q: %v", p.Name, podCondition(p, corev1.PodReady), p.Status.Conditions)
	case podCondition(p, corev1.ContainersReady) != corev1.ConditionTrue:
		return fmt.Sprintf("%s ContainersReady=%q", p.Name, podCondition(p, corev1.ContainersReady))
	case cs == nil:
		return fmt.Sprintf("%s has no status of container main: %v", p.Name, p.Status.ContainerStatuses)
	case cs.State.Running == nil || !cs.Ready || cs.Started == nil || !*cs.Started:
		return fmt.Sprintf("%s container main not running and ready: %+v", p.Name, cs.State)
	case cs.ContainerID == "" || cs.ImageID == "":
		return fmt.Sprintf("%s container main without containerID or imageID", p.Name)
	case p.Status.HostIP == "" || net.ParseIP(p.Status.HostIP) == nil:
		return fmt.Sprintf("%s hostIP %q", p.Name, p.Status.HostIP)
	case p.Status.PodIP == "" || net.ParseIP(p.Status.PodIP) == nil:
		return fmt.Sprintf("%s podIP %q", p.Name, p.Status.PodIP)
	case p.Status.StartTime == nil:
		return p.Name + " without startTime"
	}
	return ""
}

// nodeProblem returns what keeps n from being a Ready node with the labels
// a node has, or "".
func nodeProblem(n *corev1.Node, site, goos, goarch string) string {
	want := map[string]string{
		"kubernetes.io/hostname":    n.Name,
		"kubernetes.io/os":          goos,
		"kubernetes.io/arch":        goarch,
		"topology.outpost.dev/site": site,
	}
	for k, v := range want {
		if n.Labels[k] != v {
			return fmt.Sprintf("node %s label %s=%q, want %q (labels %v)", n.Name, k, n.Labels[k], v, n.Labels)
		}
	}
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			if c.Status != corev1.ConditionTrue {
				return fmt.Sprintf("node %s Ready=%s (%s)", n.Name, c.Status, c.Message)
			}
			return ""
		}
	}
	return fmt.Sprintf("node %s has no Ready condition: %v", n.Name, n.Status.Conditions)
}

// isNotFound reports whether err says the object does not exist.
func isNotFound(err error) bool { return apierrors.IsNotFound(err) }

// apiProblem is the reason of a poll whose API call failed.
func apiProblem(err error) string { return "api: " + err.Error() }

// kib formats a byte count.
func kib(n int64) string { return fmt.Sprintf("%.1f KiB", float64(n)/1024) }
