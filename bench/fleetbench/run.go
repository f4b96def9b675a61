package fleetbench

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	goruntime "runtime"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/outpost-mesh/outpost/bench/internal/childhub"
	"github.com/outpost-mesh/outpost/bench/report"
)

// Run starts a hub from cfg.Binary and a fleet of cfg.Nodes agents in this
// process, runs the workload and returns the report. In order:
//
//  1. join: every agent starts at once and joins with one bootstrap
//     token; Run waits for every Node to be Ready;
//  2. pods: cfg.Workers workers create cfg.PodsPerNode pods per node,
//     bound by spec.nodeName; Run waits for every pod to be Running;
//  3. idle: after cfg.Settle, the fleet is left alone for cfg.Idle while
//     its bytes on the wire and both processes' CPU are counted;
//  4. restart: the hub is killed with SIGKILL and started again on the
//     same data dir and addresses; a probe pod is created on each probe
//     node once it is ready; Run waits for every agent to have a new
//     session and every probe to be Running, then checks leases and pods.
//
// The agents, the relays and the hub are then stopped and the run's
// directory removed, also when Run fails or ctx ends. Progress lines go to
// progress unless it is nil.
func Run(ctx context.Context, cfg Config, progress io.Writer) (rep *Report, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("invalid config: %w", err)
	}
	if progress == nil {
		progress = io.Discard
	}
	dir, err := os.MkdirTemp(cfg.Dir, "outpost-fleetbench-")
	if err != nil {
		return nil, fmt.Errorf("create run dir: %w", err)
	}
	defer func() {
		if rmErr := os.RemoveAll(dir); rmErr != nil && err == nil {
			err = fmt.Errorf("remove run dir: %w", rmErr)
		}
	}()
	agentDir := filepath.Join(dir, "agents")
	if cfg.AgentDir != "" {
		if agentDir, err = os.MkdirTemp(cfg.AgentDir, "outpost-fleetbench-agents-"); err != nil {
			return nil, fmt.Errorf("create agents' dir: %w", err)
		}
		defer func() {
			if rmErr := os.RemoveAll(agentDir); rmErr != nil && err == nil {
				err = fmt.Errorf("remove agents' dir: %w", rmErr)
			}
		}()
	}
	r := &runner{cfg: cfg, dir: dir, agentDir: agentDir, res: &Result{}, clk: clock{base: time.Now()}}
	r.step = &stepper{w: progress, clk: r.clk}
	r.selfStart, _ = childhub.ReadProc("self")
	defer r.close(progress)
	if err := r.run(ctx); err != nil {
		return nil, err
	}
	return NewReport(cfg, r.res), nil
}

// runner holds what the phases of one run share.
type runner struct {
	cfg      Config
	dir      string
	agentDir string
	res      *Result
	clk      clock
	step     *stepper

	hub       *childhub.Hub // the current hub process
	hubDir    string
	syncAddr  string
	apiAddr   string
	restCfg   *rest.Config
	creator   *client
	watchC    *client
	watches   *watches
	fleet     *fleet
	nodes     *slots
	pods      *slots
	selfStart childhub.Sample
	procErr   error
}

// close stops what run started, in order: the fleet and the watches,
// then the hub.
func (r *runner) close(progress io.Writer) {
	if r.fleet != nil {
		r.fleet.stop()
	}
	if r.watches != nil {
		r.watches.stop()
		r.res.Watch.Restarts, r.res.Watch.Errors = r.watches.summary()
	}
	for _, c := range []*client{r.creator, r.watchC} {
		if c != nil {
			c.close()
		}
	}
	if r.hub != nil {
		fmt.Fprint(progress, "stopping hub ... ")
		r.res.Hub.Exit = r.hub.Stop(r.cfg.StopTimeout)
		fmt.Fprintln(progress, r.res.Hub.Exit)
	}
}

func (r *runner) run(ctx context.Context) error {
	if err := r.startHub(ctx); err != nil {
		return err
	}
	if err := r.join(ctx); err != nil {
		return err
	}
	if err := r.startPods(ctx); err != nil {
		return err
	}
	if err := r.idle(ctx); err != nil {
		return err
	}
	if err := r.restart(ctx); err != nil {
		return err
	}
	if r.procErr != nil {
		r.res.Hub.ProcError = r.procErr.Error()
	}
	return nil
}

// hubProc reads the current hub's memory and CPU time, keeping the first
// error.
func (r *runner) hubProc() childhub.Sample {
	s, err := childhub.ReadProc(r.hubPID())
	if err != nil && r.procErr == nil {
		r.procErr = err
	}
	return s
}

func (r *runner) hubPID() string { return strconv.Itoa(r.hub.PID()) }

// cpu samples the CPU times phases are measured with.
func (r *runner) cpu() cpuSample { return sampleCPU(r.hubPID()) }

// phase records the CPU use of a phase that began at start.
func (r *runner) phase(name string, start cpuSample, hubRestarted bool) {
	r.res.CPU = append(r.res.CPU, phaseCPU(name, start, r.cpu(), hubRestarted))
}

// startHub starts the hub on a fresh data dir, a free API port and a free
// sync port, and prepares the namespace, the token and the watches.
func (r *runner) startHub(ctx context.Context) error {
	var err error
	if r.syncAddr, err = childhub.FreeUDPAddr(); err != nil {
		return err
	}
	r.hubDir = filepath.Join(r.dir, "hub")
	r.step.begin("starting hub")
	if r.hub, err = childhub.Start(r.cfg.Binary, r.hubDir, "127.0.0.1:0", r.syncAddr); err != nil {
		r.step.fail()
		return err
	}
	kubeconfig, err := r.hub.Kubeconfig(ctx, r.cfg.ReadyTimeout)
	if err != nil {
		r.step.fail()
		return err
	}
	r.res.Hub.ReadySeconds = r.step.end().Seconds()
	if r.restCfg, err = loadConfig(kubeconfig); err != nil {
		return err
	}
	if r.apiAddr, err = childhub.APIAddr(r.restCfg.Host); err != nil {
		return err
	}
	if r.creator, err = newClient(r.restCfg); err != nil {
		return err
	}
	if r.watchC, err = newClient(r.restCfg); err != nil {
		return err
	}
	names := make([]string, r.cfg.Nodes)
	for i := range names {
		names[i] = nodeName(i)
	}
	r.nodes = newSlots(names)
	r.pods = newSlots(podNames(r.cfg))
	if r.watches, err = startWatches(ctx, r.watchC, r.cfg.Namespace, r.clk, r.nodes, r.pods); err != nil {
		return err
	}
	return nil
}

// join starts every agent at once and waits for every node to be Ready.
func (r *runner) join(ctx context.Context) error {
	token, err := prepare(ctx, r.creator, r.cfg.Namespace)
	if err != nil {
		return err
	}
	hash, err := childhub.CAHash(r.restCfg)
	if err != nil {
		return err
	}
	target, err := net.ResolveUDPAddr("udp", r.syncAddr)
	if err != nil {
		return fmt.Errorf("hub sync address: %w", err)
	}
	n := r.cfg.Nodes
	r.step.begin(fmt.Sprintf("making %s agents and relays", report.Count(int64(n))))
	r.fleet, err = newFleet(r.cfg, r.agentDir, target, token, hash)
	if err != nil {
		r.step.fail()
		return err
	}
	r.step.end()

	r.step.begin(fmt.Sprintf("joining %s nodes", report.Count(int64(n))))
	prof, err := r.profile(ctx, PhaseJoin)
	if err != nil {
		r.step.fail()
		return err
	}
	cpu := r.cpu()
	start := r.clk.now()
	for i := range n {
		r.nodes.start(i, start)
	}
	r.fleet.start(ctx)
	waitFor(ctx, r.cfg.JoinTimeout, 20*time.Millisecond, func() bool {
		return int(r.nodes.count.Load()) >= n || int(r.fleet.exited.Load()) == n
	})
	lat, last := r.nodes.latencies(0, n)
	j := &r.res.Join
	j.Nodes = n
	j.Ready = len(lat)
	j.Latency = report.Summarize(lat)
	j.Seconds = (last - start).Seconds()
	if j.Ready < n {
		j.Seconds = r.cfg.JoinTimeout.Seconds()
	}
	j.AgentErrors = r.fleet.errors()
	r.phase(PhaseJoin, cpu, false)
	if err := prof.Stop(); err != nil {
		r.step.fail()
		return err
	}
	r.step.end()
	if err := ctx.Err(); err != nil {
		return err
	}
	if j.Ready < n {
		return fmt.Errorf("%d of %d nodes Ready within %v; agent errors: %q; agent logs: %q",
			j.Ready, n, r.cfg.JoinTimeout, j.AgentErrors, r.fleet.logs.samples())
	}
	return nil
}

// startPods creates the workload's pods and waits for every one to be
// Running.
func (r *runner) startPods(ctx context.Context) error {
	total := r.cfg.Nodes * r.cfg.PodsPerNode
	r.step.begin(fmt.Sprintf("creating %s pods with %d workers", report.Count(int64(total)), r.cfg.Workers))
	prof, err := r.profile(ctx, PhasePods)
	if err != nil {
		r.step.fail()
		return err
	}
	cpu := r.cpu()
	cr := createPods(ctx, r.creator, r.cfg, r.pods, 0, total, r.clk)
	createsDone := r.clk.now()
	r.step.end()
	p := &r.res.Pods
	p.Created, p.Failed, p.Errors = cr.created, cr.failed, cr.errs.List()
	p.CreateSeconds = cr.seconds
	if cr.seconds > 0 {
		p.CreatesPerSec = float64(cr.created) / cr.seconds
	}
	p.CreateLatency = report.Summarize(cr.latency)
	if err := ctx.Err(); err != nil {
		prof.Stop()
		return err
	}

	r.step.begin("waiting for every pod to be Running")
	waitFor(ctx, r.cfg.RunningTimeout, 20*time.Millisecond, func() bool {
		return r.pods.reachedIn(0, total) >= p.Created
	})
	lat, last := r.pods.latencies(0, total)
	p.Running = len(lat)
	p.Start = report.Summarize(lat)
	p.AfterCreate = report.Summarize(r.pods.sinceReturn(0, total))
	p.DrainSeconds = (last - createsDone).Seconds()
	if p.Running < p.Created {
		p.DrainSeconds = r.cfg.RunningTimeout.Seconds()
	}
	r.phase(PhasePods, cpu, false)
	if err := prof.Stop(); err != nil {
		r.step.fail()
		return err
	}
	r.step.end()
	if err := ctx.Err(); err != nil {
		return err
	}
	if p.Created == 0 {
		return fmt.Errorf("no pod created: %q", p.Errors)
	}
	return nil
}

// idle leaves the converged fleet alone for the idle window and counts
// its traffic, and both processes' memory and CPU.
func (r *runner) idle(ctx context.Context) error {
	if r.cfg.Settle > 0 {
		r.step.begin(fmt.Sprintf("settling for %v", r.cfg.Settle))
		if !sleepCtx(ctx, r.cfg.Settle) {
			r.step.fail()
			return ctx.Err()
		}
		r.step.end()
	}
	r.step.begin(fmt.Sprintf("idle for %v", r.cfg.Idle))
	prof, err := r.profile(ctx, PhaseIdle)
	if err != nil {
		r.step.fail()
		return err
	}
	_, _, before := r.fleet.traffic(nil)
	syncBefore := r.fleet.syncTotals()
	cpu := r.cpu()
	if !sleepCtx(ctx, r.cfg.Idle) {
		prof.Stop()
		r.step.fail()
		return ctx.Err()
	}
	sum, maxWire, _ := r.fleet.traffic(before)
	syncAfter := r.fleet.syncTotals()
	r.phase(PhaseIdle, cpu, false)
	secs := r.res.CPU[len(r.res.CPU)-1].Seconds
	hub := r.hubProc()
	self, selfErr := childhub.ReadProc("self")
	var ms goruntime.MemStats
	goruntime.ReadMemStats(&ms)
	if err := prof.Stop(); err != nil {
		r.step.fail()
		return err
	}
	r.step.end()

	n, mins := float64(r.cfg.Nodes), secs/60
	id := &r.res.Idle
	id.Seconds = secs
	id.UpBytes, id.DownBytes, id.Datagrams = sum.Up, sum.Down, sum.Packets
	id.WireBytesPerNodeMin = float64(sum.Wire()) / n / mins
	id.KbitPerNode = float64(sum.Wire()) * 8 / 1000 / n / secs
	id.PayloadBytesPerNodeMin = float64(sum.Up+sum.Down) / n / mins
	id.DatagramsPerNodeMin = float64(sum.Packets) / n / mins
	id.MaxNodeWireBytesPerMin = float64(maxWire) / mins
	id.StatusItems = syncAfter.statusSent - syncBefore.statusSent
	id.SyncFrameBytes = syncAfter.bytesReceived - syncBefore.bytesReceived
	id.Reconnects = syncAfter.connects - syncBefore.connects
	id.SmallDatagrams = sum.Small
	id.SmallWireBytes = sum.SmallWire()
	r.res.Hub.RSSBytes, r.res.Hub.HWMBytes, r.res.Hub.CPUSeconds = hub.RSS, hub.HWM, hub.CPUSeconds
	fl := &r.res.Fleet
	if selfErr == nil {
		fl.RSSBytes, fl.HWMBytes = self.RSS, self.HWM
		fl.PerNodeBytes = self.RSS / uint64(r.cfg.Nodes)
	}
	fl.HeapBytes = ms.HeapInuse
	fl.Goroutines = goruntime.NumGoroutine()
	return nil
}

// restart kills the hub, starts it again on the same data dir and
// addresses, and waits for the fleet to converge on it.
func (r *runner) restart(ctx context.Context) error {
	n := r.cfg.Nodes
	total := n * r.cfg.PodsPerNode
	probes := r.cfg.probes()
	rs := &r.res.Restart
	connectsBefore := r.fleet.connects()
	syncBefore := r.fleet.syncTotals()
	_, _, trafficBefore := r.fleet.traffic(nil)

	r.step.begin("killing the hub (SIGKILL) and starting it again")
	cpu := r.cpu()
	killed := r.clk.now()
	killedWall := time.Now()
	r.hub.Kill()
	h, err := childhub.Start(r.cfg.Binary, r.hubDir, r.apiAddr, r.syncAddr)
	if err != nil {
		r.hub = nil
		r.step.fail()
		return err
	}
	r.hub = h
	if _, err := h.Kubeconfig(ctx, r.cfg.ReadyTimeout); err != nil {
		r.step.fail()
		return err
	}
	ready := r.clk.now()
	rs.HubReadySeconds = (ready - killed).Seconds()
	r.step.end()

	r.step.begin(fmt.Sprintf("waiting for %s agents to reconnect and %s probe pods to run", report.Count(int64(n)), report.Count(int64(probes))))
	prof, err := r.profile(ctx, PhaseRestart)
	if err != nil {
		r.step.fail()
		return err
	}
	// Agents are polled for their new session while the probes are
	// created.
	reconnected := make([]time.Duration, n)
	noticed := make([]time.Duration, n)
	sessions := 0
	poll := func() bool {
		now := r.clk.now()
		for i, node := range r.fleet.nodes {
			if reconnected[i] != 0 {
				continue
			}
			connected := node.agent.Connected()
			s := node.agent.SyncStats()
			renewed := s != nil && s.Connects.Load() > connectsBefore[i]
			if noticed[i] == 0 && (!connected || renewed) {
				noticed[i] = now
			}
			if renewed && connected {
				reconnected[i] = now
				sessions++
			}
		}
		return sessions == n
	}
	deadline := killed + r.cfg.ConvergeTimeout
	pollCtx, stopPoll := context.WithCancel(ctx)
	pollDone := make(chan struct{})
	go func() {
		defer close(pollDone)
		waitFor(pollCtx, deadline-r.clk.now(), 20*time.Millisecond, poll)
	}()
	cr := createPods(ctx, r.creator, r.cfg, r.pods, total, total+probes, r.clk)
	rs.Probes = cr.created
	rs.ProbeErrors = cr.errs.List()
	waitFor(ctx, max(deadline-r.clk.now(), 0), 20*time.Millisecond, func() bool {
		return r.pods.reachedIn(total, total+probes) >= cr.created
	})
	<-pollDone // the same deadline, or all sessions back
	stopPoll()
	r.phase(PhaseRestart, cpu, true)
	if err := prof.Stop(); err != nil {
		r.step.fail()
		return err
	}

	var lastSession time.Duration
	var lat, notice []time.Duration
	for i, t := range reconnected {
		if t != 0 {
			lat = append(lat, t-killed)
			lastSession = max(lastSession, t)
		}
		if noticed[i] != 0 {
			notice = append(notice, noticed[i]-killed)
		}
	}
	rs.Sessions = sessions
	rs.Reconnect = report.Summarize(lat)
	rs.Noticed = report.Summarize(notice)
	rs.SessionsSeconds = (lastSession - killed).Seconds()
	plat, lastProbe := r.pods.latencies(total, total+probes)
	rs.ProbesRunning = len(plat)
	rs.ProbeStart = report.Summarize(plat)
	rs.ProbesSeconds = (lastProbe - killed).Seconds()
	rs.Converged = sessions == n && rs.ProbesRunning == probes
	rs.ConvergedSeconds = max(rs.SessionsSeconds, rs.ProbesSeconds)
	if sessions < n {
		rs.SessionsSeconds = r.cfg.ConvergeTimeout.Seconds()
	}
	if rs.ProbesRunning < probes {
		rs.ProbesSeconds = r.cfg.ConvergeTimeout.Seconds()
	}
	if !rs.Converged {
		rs.ConvergedSeconds = r.cfg.ConvergeTimeout.Seconds()
	}
	sum, _, _ := r.fleet.traffic(trafficBefore)
	rs.WireBytes = sum.Wire()
	syncAfter := r.fleet.syncTotals()
	rs.Inventories = syncAfter.inventories - syncBefore.inventories
	rs.SyncFrameBytes = syncAfter.bytesReceived - syncBefore.bytesReceived
	rs.ResumeBytes = syncAfter.resumeBytes
	r.step.end()
	if err := ctx.Err(); err != nil {
		return err
	}

	r.step.begin("checking leases, pods and containers")
	if err := r.check(ctx, killedWall); err != nil {
		rs.CheckError = err.Error()
	}
	r.res.Hub.RestartRSSBytes = r.hubProc().RSS
	if self, err := childhub.ReadProc("self"); err == nil {
		r.res.Fleet.TotalCPUSeconds = self.CPUSeconds - r.selfStart.CPUSeconds
	}
	r.res.Fleet.AgentWarnings = r.fleet.logs.warnings.Load()
	r.res.Fleet.AgentLogs = r.fleet.logs.snapshot()
	r.res.Fleet.AgentLogSamples = r.fleet.logs.samples()
	r.res.Fleet.RelayTruncated = r.fleet.truncated()
	r.step.end()
	return ctx.Err()
}

// leaseWait bounds the wait for every node's Lease to be renewed by the
// restarted hub, which renews a node's Lease within a second of its
// session starting.
const leaseWait = 20 * time.Second

// check counts, after the reconnect storm, the Leases the restarted hub
// renewed, the workload's pods still Running on the hub, and the
// containers the runtimes restarted.
func (r *runner) check(ctx context.Context, killed time.Time) error {
	rs := &r.res.Restart
	var leaseErr error
	waitFor(ctx, leaseWait, 500*time.Millisecond, func() bool {
		l, err := r.creator.CoordinationV1().Leases(corev1.NamespaceNodeLease).List(ctx, metav1.ListOptions{})
		if err != nil {
			leaseErr = err
			return false
		}
		leaseErr = nil
		rs.LeasesRenewed = 0
		for _, x := range l.Items {
			if _, ok := r.nodes.index[x.Name]; ok && x.Spec.RenewTime != nil && x.Spec.RenewTime.After(killed) {
				rs.LeasesRenewed++
			}
		}
		return rs.LeasesRenewed == r.cfg.Nodes
	})
	if leaseErr != nil {
		return fmt.Errorf("list leases: %w", leaseErr)
	}
	pods, err := r.creator.CoreV1().Pods(r.cfg.Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("list pods: %w", err)
	}
	total := r.cfg.Nodes * r.cfg.PodsPerNode
	for _, p := range pods.Items {
		if k, ok := r.pods.index[p.Name]; ok && k < total && p.Status.Phase == corev1.PodRunning {
			rs.PodsRunning++
		}
	}
	rs.ContainerRestarts, err = r.fleet.containerRestarts(ctx)
	return err
}

// profile starts a profile if phase is the one asked for; the returned
// profiler, nil otherwise, must be stopped.
func (r *runner) profile(ctx context.Context, phase string) (*childhub.Profiler, error) {
	if r.cfg.ProfileDir == "" || r.cfg.ProfilePhase != phase {
		return nil, nil
	}
	p, err := childhub.NewProfiler(r.cfg.ProfileDir, "fleet", r.cfg.ProfileDuration, r.restCfg)
	if err != nil {
		return nil, err
	}
	if err := p.Start(ctx); err != nil {
		return nil, err
	}
	return p, nil
}

// sleepCtx waits d or until ctx ends; it reports whether d passed.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// stepper prints one progress line per step: its name, then its duration.
type stepper struct {
	w     io.Writer
	clk   clock
	start time.Duration
}

func (s *stepper) begin(name string) {
	fmt.Fprintf(s.w, "%s ... ", name)
	s.start = s.clk.now()
}

func (s *stepper) end() time.Duration {
	d := s.clk.now() - s.start
	fmt.Fprintf(s.w, "%s\n", report.Duration(d))
	return d
}

func (s *stepper) fail() { fmt.Fprintln(s.w, "failed") }
