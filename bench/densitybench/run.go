package densitybench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/outpost-mesh/outpost/bench/edgenode"
	"github.com/outpost-mesh/outpost/bench/internal/childhub"
	"github.com/outpost-mesh/outpost/bench/report"
)

// Run measures the node as cfg says and returns the report. It must run
// as root in a network namespace of its own (see Isolate and
// LoopbackUp). For each mode of cfg.Modes it starts a hub and an agent on
// fresh data dirs, imports the pods' image, reads the node's memory idle
// and at each count of cfg.Pods after creating pods up to it in batches,
// then removes both. The reboot, unless cfg.RebootPods is 0, runs on a
// hub and agent of its own: with its pods running it kills the hub and
// the agent, powers the node off (every process, mount, network
// namespace, link and cgroup of it gone), starts the agent again with
// the hub still down and times its pods' return. Everything the run made
// is removed before it returns, on error and on ctx's end too. progress
// receives a line per step.
func Run(ctx context.Context, cfg Config, progress io.Writer) (*Report, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := Check(cfg); err != nil {
		return nil, err
	}
	if err := edgenode.CheckIsolated(); err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp(cfg.Dir, "density")
	if err != nil {
		return nil, fmt.Errorf("make the run's directory: %w", err)
	}
	r := &runner{cfg: cfg, dir: dir, progress: progress, res: &Result{}}
	defer func() {
		if err := os.RemoveAll(dir); err != nil {
			fmt.Fprintf(progress, "remove %s: %v\n", dir, err)
		}
	}()
	r.load("start")
	for _, rt := range cfg.OCIRuntimes {
		for _, mode := range cfg.Modes {
			if len(cfg.Pods) == 0 {
				break
			}
			mr, err := r.runMode(ctx, mode, rt)
			if err != nil {
				return nil, fmt.Errorf("mode %s with %s: %w", mode, rt, err)
			}
			r.res.Modes = append(r.res.Modes, *mr)
		}
	}
	if cfg.Baseline {
		for _, rt := range cfg.OCIRuntimes {
			reboot := 0
			if rt == RuntimeRunc {
				reboot = cfg.RebootPods
			}
			if len(cfg.Pods) == 0 && reboot == 0 {
				continue
			}
			b, err := r.runBaseline(ctx, rt, reboot)
			if err != nil {
				return nil, fmt.Errorf("baseline with %s: %w", rt, err)
			}
			r.res.Baselines = append(r.res.Baselines, *b)
		}
	}
	if cfg.RebootPods > 0 {
		rb, err := r.runReboot(ctx)
		if err != nil {
			return nil, fmt.Errorf("reboot: %w", err)
		}
		r.res.Reboot = rb
	}
	r.load("end")
	return NewReport(cfg, r.res), nil
}

// Result is what Run measured.
type Result struct {
	Modes  []ModeResult `json:"modes"`
	Reboot *Reboot      `json:"reboot,omitempty"`
	// Baselines are containerd and each OCI runtime alone, unless
	// Config.Baseline is false.
	Baselines []Baseline `json:"baselines,omitempty"`
	// Load is the machine's load average at the start and end of each
	// phase.
	Load []report.LoadAvg `json:"load"`
}

// ModeResult is one shim mode's run with one OCI runtime.
type ModeResult struct {
	Mode        string  `json:"mode"`
	OCIRuntime  string  `json:"oci_runtime"`
	JoinSeconds float64 `json:"join_seconds"` // agent start to Node Ready with a pod CIDR
	Idle        Memory  `json:"idle"`
	Steps       []Step  `json:"steps"`
	// Start is the pod start latency over every pod of the mode, and
	// Local the time to its task's start.
	Start report.Latency `json:"start"`
	Local report.Latency `json:"local"`
}

// Label names m in tables: "shim per pod", and ", crun" after it for
// crun.
func (m ModeResult) Label() string {
	l := "shim per " + m.Mode
	if m.OCIRuntime != "" && m.OCIRuntime != RuntimeRunc {
		l += ", " + m.OCIRuntime
	}
	return l
}

// Step is the node at one pod count.
type Step struct {
	Pods int `json:"pods"`
	// Start is the time from Create to a watch seeing the pod Running
	// and Ready, of the pods created in this step.
	Start report.Latency `json:"start"`
	// Local is the time from Create to the pod's task starting in the
	// node's containerd (its event seen): the node's part of Start,
	// without the report to the hub and the hub's watch.
	Local  report.Latency `json:"local"`
	Memory Memory         `json:"memory"`
	// PerPodOverhead is PerPodOverhead(idle, Memory, Pods), in bytes.
	PerPodOverhead int64 `json:"per_pod_overhead"`
}

type runner struct {
	cfg      Config
	dir      string
	progress io.Writer
	res      *Result
}

func (r *runner) logf(format string, args ...any) {
	fmt.Fprintf(r.progress, time.Now().Format("15:04:05 ")+format+"\n", args...)
}

func (r *runner) load(phase string) { r.res.Load = append(r.res.Load, report.ReadLoadAvg(phase)) }

// session is a hub and one node on it.
type session struct {
	label  string
	hub    *childhub.Hub
	client kubernetes.Interface
	node   *edgenode.Node
	pods   *tracker
	tasks  *taskStarts        // the node's containerd's task starts
	stop   context.CancelFunc // ends the watch and the task starts' stream
	joined time.Duration
}

// start starts a hub and a node in mode with ociRuntime on fresh data
// dirs under r.dir named label, waits for the node to be Ready with a pod
// CIDR and imports the pods' image into its containerd. The caller must
// close it, also on error.
func (r *runner) start(ctx context.Context, label, mode, ociRuntime string) (*session, error) {
	s := &session{label: label, pods: newTracker(), stop: func() {}}
	syncAddr, err := childhub.FreeUDPAddr()
	if err != nil {
		return s, err
	}
	r.logf("%s: starting the hub", label)
	hubDir := filepath.Join(r.dir, label+"-hub")
	if s.hub, err = childhub.Start(r.cfg.Binary, hubDir, "127.0.0.1:0", syncAddr,
		"--controllers", "--allocate-node-cidrs", "--cluster-cidr", edgenode.ClusterCIDR); err != nil {
		return s, err
	}
	kubeconfig, err := s.hub.Kubeconfig(ctx, r.cfg.ReadyTimeout)
	if err != nil {
		return s, err
	}
	rc, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return s, fmt.Errorf("load kubeconfig: %w", err)
	}
	rc.QPS, rc.Burst, rc.UserAgent = -1, 1<<20, "outpost-bench-density"
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return s, err
	}
	s.client = cs
	token, err := edgenode.Prepare(ctx, cs, r.cfg.Namespace, "outpost bench density")
	if err != nil {
		return s, err
	}
	hash, err := edgenode.CAHash(rc)
	if err != nil {
		return s, err
	}
	list, err := cs.CoreV1().Pods(r.cfg.Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return s, fmt.Errorf("list pods: %w", err)
	}
	wctx, cancel := context.WithCancel(context.Background())
	s.stop = cancel
	go watchPods(wctx, cs, r.cfg.Namespace, list.ResourceVersion, s.pods)

	suffix := make([]byte, 2)
	rand.Read(suffix)
	name := "density-" + label + "-" + hex.EncodeToString(suffix)
	logDir := r.cfg.LogDir
	if logDir == "" {
		logDir = r.dir
	} else if err := os.MkdirAll(logDir, 0o755); err != nil {
		return s, fmt.Errorf("log dir: %w", err)
	}
	logPath := filepath.Join(logDir, "agent-"+label+".log")
	_ = os.Remove(logPath)
	s.node = edgenode.New(edgenode.Options{
		Binary: r.cfg.EdgeBinary, ContainerdBinary: r.cfg.ContainerdBinary,
		Name: name, Dir: filepath.Join(r.dir, label), Bridge: "dens-" + label, LogPath: logPath,
		Hub: syncAddr, Token: token, CAHash: hash,
		OCIRuntime: ociRuntime, ShimPerNode: mode == ModeNode,
	})
	r.logf("%s: starting agent %s (shim per %s, %s)", label, name, mode, ociRuntime)
	started := time.Now()
	if err := s.node.Start(); err != nil {
		return s, err
	}
	if err := edgenode.WaitReady(ctx, s.client, s.node, r.cfg.JoinTimeout); err != nil {
		return s, err
	}
	s.joined = time.Since(started)
	r.logf("%s: node Ready with a pod CIDR after %s; importing %s", label, report.Duration(s.joined), image)
	if err := edgenode.ImportBusybox(ctx, s.node, image, r.cfg.JoinTimeout); err != nil {
		return s, err
	}
	if s.tasks, err = watchTaskStarts(wctx, s.node.Sock(), s.node.Namespace()); err != nil {
		return s, err
	}
	return s, nil
}

// close removes the node and stops the hub; it is safe on a session start
// left half made.
func (r *runner) close(s *session) {
	s.stop()
	if s.tasks != nil {
		s.tasks.close()
	}
	if s.node != nil {
		if err := s.node.Remove(r.cfg.StopTimeout); err != nil {
			r.logf("%s: clean up the node: %v", s.label, err)
		}
	}
	if s.hub != nil {
		s.hub.Stop(r.cfg.StopTimeout)
	}
}

// create creates pods from..to-1 in batches of r.cfg.Batch, each run
// before the next, and returns their times from Create to Ready, and
// from Create to their task's start in the node's containerd.
func (r *runner) create(ctx context.Context, s *session, from, to int) (ready, local []time.Duration, err error) {
	for i := from; i < to; i += r.cfg.Batch {
		names, d, err := createBatch(ctx, s.client, s.pods, r.cfg.Namespace, s.node.Name, i, min(i+r.cfg.Batch, to), r.cfg.BatchTimeout)
		if err == nil {
			err = s.node.Running()
		}
		if err != nil {
			return nil, nil, fmt.Errorf("pods %d..%d: %w%s", i, min(i+r.cfg.Batch, to)-1, err, s.node.LogTail())
		}
		ready = append(ready, d...)
		l, err := s.localStarts(ctx, names)
		if err != nil {
			return nil, nil, err
		}
		local = append(local, l...)
	}
	return ready, local, nil
}

// localStarts returns the time from each pod's Create to its task's
// start, as containerd's events told it; the events of pods seen Ready
// may still be on their way, so it waits a little for them.
func (s *session) localStarts(ctx context.Context, names []string) ([]time.Duration, error) {
	deadline := time.Now().Add(5 * time.Second)
	for {
		starts, err := s.tasks.byPod(ctx, names)
		if err != nil {
			return nil, err
		}
		if len(starts) == len(names) {
			out := make([]time.Duration, len(names))
			for i, n := range names {
				out[i] = starts[n].Sub(s.pods.createdAt(n))
			}
			return out, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("containerd reported the task start of %d of %d pods seen Ready", len(starts), len(names))
		}
		if err := sleep(ctx, 50*time.Millisecond); err != nil {
			return nil, err
		}
	}
}

// measure waits r.cfg.Settle and reads the node's memory and CPU use.
// The CPU the node uses is measured over the settle's last half, once
// the work of the pods' start is over.
func (r *runner) measure(ctx context.Context, s *session) (Memory, error) {
	if err := sleep(ctx, r.cfg.Settle/2); err != nil {
		return Memory{}, err
	}
	ctrd := s.node.ContainerdPID()
	before, start := readCPU(s.node.PID(), ctrd, s.node.Sock(), s.node.Namespace()), time.Now()
	if err := sleep(ctx, r.cfg.Settle-r.cfg.Settle/2); err != nil {
		return Memory{}, err
	}
	if err := s.node.Running(); err != nil {
		return Memory{}, err
	}
	after, took := readCPU(s.node.PID(), ctrd, s.node.Sock(), s.node.Namespace()), time.Since(start)
	m, err := readMemory(s.node.PID(), ctrd, s.node.Sock(), s.node.Namespace())
	m.setCPU(before, after, took)
	return m, err
}

// runMode measures one shim mode with one OCI runtime.
func (r *runner) runMode(ctx context.Context, mode, ociRuntime string) (mr *ModeResult, err error) {
	label := mode
	if ociRuntime != RuntimeRunc {
		label += "-" + ociRuntime
	}
	r.load(label + " start")
	defer r.load(label + " end")
	s, err := r.start(ctx, label, mode, ociRuntime)
	defer r.close(s)
	if err != nil {
		return nil, err
	}
	mr = &ModeResult{Mode: mode, OCIRuntime: ociRuntime, JoinSeconds: s.joined.Seconds()}
	if mr.Idle, err = r.measure(ctx, s); err != nil {
		return nil, err
	}
	r.logf("%s: idle: agent RSS %s (anon %s, PSS %s), containerd PSS %s", label,
		report.Bytes(mr.Idle.AgentRSS), report.Bytes(mr.Idle.AgentAnon), report.Bytes(mr.Idle.AgentPSS), report.Bytes(mr.Idle.ContainerdPSS))
	var all, allLocal []time.Duration
	have := 0
	for _, n := range r.cfg.Pods {
		r.logf("%s: creating pods %d..%d in batches of %d", label, have, n-1, r.cfg.Batch)
		d, local, err := r.create(ctx, s, have, n)
		if err != nil {
			return nil, err
		}
		have = n
		all, allLocal = append(all, d...), append(allLocal, local...)
		st := Step{Pods: n, Start: report.Summarize(d), Local: report.Summarize(local)}
		if st.Memory, err = r.measure(ctx, s); err != nil {
			return nil, err
		}
		st.PerPodOverhead = PerPodOverhead(mr.Idle, st.Memory, n)
		mr.Steps = append(mr.Steps, st)
		r.logf("%s: %d pods: start p50 %s p99 %s (task started: p50 %s p99 %s); %d shims, total PSS %s, %s per pod", label, n,
			report.Duration(st.Start.P50), report.Duration(st.Start.P99), report.Duration(st.Local.P50), report.Duration(st.Local.P99), st.Memory.Shims,
			report.Bytes(st.Memory.TotalPSS()), signedBytes(st.PerPodOverhead))
	}
	mr.Start, mr.Local = report.Summarize(all), report.Summarize(allLocal)
	return mr, nil
}

// runReboot runs the offline reboot on a session of its own.
func (r *runner) runReboot(ctx context.Context) (*Reboot, error) {
	r.load("reboot start")
	defer r.load("reboot end")
	s, err := r.start(ctx, "reboot", r.cfg.RebootMode, RuntimeRunc)
	defer r.close(s)
	if err != nil {
		return nil, err
	}
	n := r.cfg.RebootPods
	r.logf("reboot: creating %d pods", n)
	if _, _, err := r.create(ctx, s, 0, n); err != nil {
		return nil, err
	}
	ips := s.pods.podIPs()
	for uid, ip := range ips {
		if ip == "" {
			return nil, fmt.Errorf("pod %s Ready without an IP", uid)
		}
	}
	if len(ips) != n {
		return nil, fmt.Errorf("%d pods seen Ready with an IP, want %d", len(ips), n)
	}
	r.logf("reboot: %d pods running; killing the hub and the agent (SIGKILL), powering the node off", n)
	s.stop()
	s.hub.Kill()
	s.hub = nil
	s.node.Kill()
	if err := s.node.PowerOff(); err != nil {
		return nil, fmt.Errorf("power the node off: %w", err)
	}
	if left := s.node.Processes(); len(left) > 0 {
		return nil, fmt.Errorf("node processes %v outlived the power-off", left)
	}
	r.logf("reboot: starting the agent again, the hub down")
	start := time.Now()
	if err := s.node.Start(); err != nil {
		return nil, err
	}
	rb, err := watchRecovery(ctx, s.node, ips, start, r.cfg.RecoverTimeout)
	if err != nil {
		return nil, err
	}
	rb.Mode = r.cfg.RebootMode
	if rb.Recovered {
		r.logf("reboot: every pod running with its IP %s after the agent's start (containerd answered at %.2fs, first pod at %.2fs)",
			report.Duration(time.Duration(rb.RecoverySeconds*float64(time.Second))), rb.ContainerdSeconds, rb.FirstPodSeconds)
	} else {
		r.logf("reboot: not recovered within %v: %s", r.cfg.RecoverTimeout, rb.Mismatch)
	}
	return &rb, nil
}

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
