package fleetbench

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/outpost-mesh/outpost/bench/internal/childhub"
	"github.com/outpost-mesh/outpost/bench/report"
)

// ControllersConfig is the workload of the controllers benchmark: a fleet
// joins, then Deployments are created at once for the hub's controllers
// and scheduler to place, then a DaemonSet over every node.
type ControllersConfig struct {
	// Fleet is the fleet and the hub: its Nodes, AgentDir, Namespace and
	// timeouts are used (its pod and idle settings are not).
	Fleet Config `json:"fleet"`
	// Deployments of Replicas each are created at once by Workers
	// workers: 100 of 100.
	Deployments int `json:"deployments"`
	Replicas    int `json:"replicas"`
	// DaemonSet, when set, creates one DaemonSet once the Deployments'
	// pods all run, and times its pod on every node: true.
	DaemonSet bool `json:"daemonset"`
	// HeapProfileDir, unless "", receives the hub's heap profile at the
	// end of each workload, live objects only (after a collection):
	// hub.heap.deployments.pprof, hub.heap.daemonset.pprof.
	HeapProfileDir string `json:"-"`
}

// DefaultControllersConfig returns the workload the targets are set for:
// 1,000 nodes, 100 Deployments of 100 replicas, and a DaemonSet.
func DefaultControllersConfig() ControllersConfig {
	f := DefaultConfig()
	f.RunningTimeout = 3 * time.Minute
	return ControllersConfig{Fleet: f, Deployments: 100, Replicas: 100, DaemonSet: true}
}

// QuickControllersConfig is a smoke run: 50 nodes, 10 Deployments of 20.
func QuickControllersConfig() ControllersConfig {
	c := DefaultControllersConfig()
	c.Fleet.Nodes, c.Fleet.Workers = 50, 10
	c.Deployments, c.Replicas = 10, 20
	return c
}

// Validate reports the first invalid field.
func (c ControllersConfig) Validate() error {
	f := c.Fleet
	f.PodsPerNode = max(f.PodsPerNode, 1) // not used here
	if err := f.Validate(); err != nil {
		return err
	}
	if c.Deployments < 1 || c.Deployments > 10_000 || c.Replicas < 1 || c.Replicas > 10_000 {
		return fmt.Errorf("deployments %d of %d replicas: want 1 to 10,000 of each", c.Deployments, c.Replicas)
	}
	return nil
}

// ControllersResult is what a controllers run measured.
type ControllersResult struct {
	Join        JoinResult     `json:"join"`
	Deployments WorkloadResult `json:"deployments"`
	DaemonSet   WorkloadResult `json:"daemonset"`
	Hub         HubResult      `json:"hub"`
	Watch       WatchResult    `json:"watch"`
	CPU         []PhaseCPU     `json:"cpu"`
}

// WorkloadResult is one workload placed by the controllers and the
// scheduler, timed from just before its first create by a watch on the
// namespace's pods.
type WorkloadResult struct {
	// Pods is how many pods the workload should make; Seen, Bound and
	// Running how many the watch saw exist, with a node, and Running.
	Pods    int `json:"pods"`
	Seen    int `json:"seen"`
	Bound   int `json:"bound"`
	Running int `json:"running"`
	// CreateSeconds is how long the workload's own creates took.
	CreateSeconds float64 `json:"create_seconds"`
	// BoundPerSec is the scheduler's throughput: pods bound over the
	// time from the first pod seen to the last one bound.
	BoundPerSec float64 `json:"bound_per_sec"`
	// AllRunningSeconds is from the first create to the last pod seen
	// Running (the timeout when some never were).
	AllRunningSeconds float64 `json:"all_running_seconds"`
	// ToRunning is each pod's time from the watch first seeing it (the
	// controller's create) to seeing it Running; ToBound to seeing its
	// node.
	ToRunning report.Latency `json:"to_running"`
	ToBound   report.Latency `json:"to_bound"`
	// HubPeakRSSBytes is the hub's VmHWM at the end of the phase (reset
	// before it where the kernel lets us); HubRSSBytes its VmRSS then;
	// HubCPUSeconds its CPU time over the phase.
	HubPeakRSSBytes uint64   `json:"hub_peak_rss_bytes"`
	HubRSSBytes     uint64   `json:"hub_rss_bytes"`
	HubCPUSeconds   float64  `json:"hub_cpu_seconds"`
	Errors          []string `json:"errors,omitempty"`
}

// podClock records when a watch first saw each pod, saw it bound and saw
// it Running. It is safe for concurrent use.
type podClock struct {
	mu   sync.Mutex
	pods map[string]*podTimes
}

type podTimes struct{ seen, bound, running time.Duration }

func newPodClock() *podClock { return &podClock{pods: map[string]*podTimes{}} }

func (c *podClock) observe(o runtime.Object, at time.Duration) {
	p, ok := o.(*corev1.Pod)
	if !ok {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	t := c.pods[p.Name]
	if t == nil {
		t = &podTimes{seen: at}
		c.pods[p.Name] = t
	}
	if t.bound == 0 && p.Spec.NodeName != "" {
		t.bound = at
	}
	if t.running == 0 && p.Status.Phase == corev1.PodRunning {
		t.running = at
	}
}

// count returns how many pods whose name has prefix were seen, bound and
// Running.
func (c *podClock) count(prefix string) (seen, bound, running int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for name, t := range c.pods {
		if !strings.HasPrefix(name, prefix) {
			continue
		}
		seen++
		if t.bound > 0 {
			bound++
		}
		if t.running > 0 {
			running++
		}
	}
	return seen, bound, running
}

// summarize fills the timing fields of res for the pods with prefix of
// a workload whose first create began at start.
func (c *podClock) summarize(prefix string, start time.Duration, res *WorkloadResult) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var toRun, toBound []time.Duration
	first, lastBound, lastRun := time.Duration(-1), time.Duration(0), time.Duration(0)
	for name, t := range c.pods {
		if !strings.HasPrefix(name, prefix) {
			continue
		}
		if first < 0 || t.seen < first {
			first = t.seen
		}
		if t.bound > 0 {
			toBound = append(toBound, t.bound-t.seen)
			lastBound = max(lastBound, t.bound)
		}
		if t.running > 0 {
			toRun = append(toRun, t.running-t.seen)
			lastRun = max(lastRun, t.running)
		}
	}
	res.ToRunning, res.ToBound = report.Summarize(toRun), report.Summarize(toBound)
	if first >= 0 && lastBound > first {
		res.BoundPerSec = float64(len(toBound)) / (lastBound - first).Seconds()
	}
	res.AllRunningSeconds = (lastRun - start).Seconds()
}

// RunControllers starts a hub from cfg.Fleet.Binary (with its controllers
// and scheduler, the default) and a fleet of agents in this process, and
// then, in order:
//
//  1. join: every agent starts at once; wait for every Node to be Ready;
//  2. deployments: cfg.Deployments Deployments of cfg.Replicas replicas
//     each are created at once; wait for every pod to be Running;
//  3. daemonset: one DaemonSet; wait for its pod on every node to be
//     Running.
//
// It stops everything and removes the run's directory on return.
func RunControllers(ctx context.Context, cfg ControllersConfig, progress io.Writer) (rep *ControllersReport, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("invalid config: %w", err)
	}
	if progress == nil {
		progress = io.Discard
	}
	fc := cfg.Fleet
	fc.PodsPerNode = 0 // the runner's own pod slots stay empty
	dir, err := os.MkdirTemp(fc.Dir, "outpost-controllerbench-")
	if err != nil {
		return nil, fmt.Errorf("create run dir: %w", err)
	}
	defer func() {
		if rmErr := os.RemoveAll(dir); rmErr != nil && err == nil {
			err = fmt.Errorf("remove run dir: %w", rmErr)
		}
	}()
	agentDir := filepath.Join(dir, "agents")
	if fc.AgentDir != "" {
		if agentDir, err = os.MkdirTemp(fc.AgentDir, "outpost-controllerbench-agents-"); err != nil {
			return nil, fmt.Errorf("create agents' dir: %w", err)
		}
		defer func() {
			if rmErr := os.RemoveAll(agentDir); rmErr != nil && err == nil {
				err = fmt.Errorf("remove agents' dir: %w", rmErr)
			}
		}()
	}
	r := &runner{cfg: fc, dir: dir, agentDir: agentDir, res: &Result{}, clk: clock{base: time.Now()}}
	r.step = &stepper{w: progress, clk: r.clk}
	defer r.close(progress)
	res := &ControllersResult{}
	if err := r.startHub(ctx); err != nil {
		return nil, err
	}
	if err := r.join(ctx); err != nil {
		return nil, err
	}
	res.Join = r.res.Join
	heap, err := childhub.NewHeapProfiler(cfg.HeapProfileDir, r.restCfg)
	if err != nil {
		return nil, err
	}

	pods := newPodClock()
	podLW := listWatch{
		list: func(ctx context.Context, opts metav1.ListOptions) ([]runtime.Object, string, error) {
			l, err := r.watchC.CoreV1().Pods(fc.Namespace).List(ctx, opts)
			if err != nil {
				return nil, "", err
			}
			objs := make([]runtime.Object, len(l.Items))
			for i := range l.Items {
				objs[i] = &l.Items[i]
			}
			return objs, l.ResourceVersion, nil
		},
		watch: r.watchC.CoreV1().Pods(fc.Namespace).Watch,
	}
	wctx, stopWatch := context.WithCancel(ctx)
	w, wi, err := startWatcher(wctx, podLW, r.clk, pods.observe)
	if err != nil {
		stopWatch()
		return nil, fmt.Errorf("watch pods: %w", err)
	}
	var wg sync.WaitGroup
	wg.Go(func() { w.run(wctx, wi) })
	defer func() {
		stopWatch()
		wg.Wait()
		res.Watch.Restarts, res.Watch.Errors = w.restarts, w.errs.List()
	}()

	deploys := make([]*appsv1.Deployment, cfg.Deployments)
	for i := range deploys {
		deploys[i] = benchDeployment(fc.Namespace, fmt.Sprintf("web-%03d", i), int32(cfg.Replicas))
	}
	total := cfg.Deployments * cfg.Replicas
	res.Deployments = r.workload(ctx, "deployments", fmt.Sprintf("creating %d Deployments of %d replicas", cfg.Deployments, cfg.Replicas),
		"web-", total, pods, func(ctx context.Context) []string {
			return createAll(ctx, fc.Workers, len(deploys), func(ctx context.Context, i int) error {
				_, err := r.creator.AppsV1().Deployments(fc.Namespace).Create(ctx, deploys[i], metav1.CreateOptions{})
				return err
			})
		})
	if err := heap.Write(ctx, "deployments", true); err != nil {
		return nil, fmt.Errorf("heap profile: %w", err)
	}
	if cfg.DaemonSet && ctx.Err() == nil {
		ds := benchDaemonSet(fc.Namespace, "agent")
		res.DaemonSet = r.workload(ctx, "daemonset", "creating a DaemonSet", "agent-", fc.Nodes, pods, func(ctx context.Context) []string {
			_, err := r.creator.AppsV1().DaemonSets(fc.Namespace).Create(ctx, ds, metav1.CreateOptions{})
			if err != nil {
				return []string{err.Error()}
			}
			return nil
		})
		if err := heap.Write(ctx, "daemonset", true); err != nil {
			return nil, fmt.Errorf("heap profile: %w", err)
		}
	}
	res.Hub.ReadySeconds = r.res.Hub.ReadySeconds
	res.CPU = r.res.CPU
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return newControllersReport(cfg, res), nil
}

// workload runs create, then waits until want pods named with prefix are
// Running, and measures it.
func (r *runner) workload(ctx context.Context, phase, what, prefix string, want int, pods *podClock, create func(context.Context) []string) WorkloadResult {
	res := WorkloadResult{Pods: want}
	pid := r.hubPID()
	peakReset := childhub.ResetPeak(pid) == nil
	cpu := r.cpu()
	r.step.begin(what)
	start := r.clk.now()
	var errs report.ErrorSet
	for _, e := range create(ctx) {
		errs.Add(e)
	}
	res.CreateSeconds = (r.clk.now() - start).Seconds()
	r.step.end()
	r.step.begin(fmt.Sprintf("waiting for %s pods to be Running", report.Count(int64(want))))
	waitFor(ctx, r.cfg.RunningTimeout, 50*time.Millisecond, func() bool {
		_, _, running := pods.count(prefix)
		return running >= want
	})
	res.Seen, res.Bound, res.Running = pods.count(prefix)
	pods.summarize(prefix, start, &res)
	if res.Running < want {
		res.AllRunningSeconds = r.cfg.RunningTimeout.Seconds()
		r.step.fail()
	} else {
		r.step.end()
	}
	end := r.cpu()
	res.HubCPUSeconds = end.hub - cpu.hub
	r.res.CPU = append(r.res.CPU, phaseCPU(phase, cpu, end, false))
	if s, err := childhub.ReadProc(pid); err == nil {
		res.HubRSSBytes = s.RSS
		if peakReset {
			res.HubPeakRSSBytes = s.HWM
		}
	}
	res.Errors = errs.List()
	return res
}

// createAll runs create(i) for every i below n with workers workers and
// returns the distinct errors.
func createAll(ctx context.Context, workers, n int, create func(context.Context, int) error) []string {
	var (
		mu   sync.Mutex
		errs report.ErrorSet
		wg   sync.WaitGroup
		next = make(chan int)
	)
	for range max(1, workers) {
		wg.Go(func() {
			for i := range next {
				if err := create(ctx, i); err != nil {
					mu.Lock()
					errs.Add(err.Error())
					mu.Unlock()
				}
			}
		})
	}
	for i := range n {
		select {
		case next <- i:
		case <-ctx.Done():
		}
	}
	close(next)
	wg.Wait()
	return errs.List()
}

func benchDeployment(namespace, name string, replicas int32) *appsv1.Deployment {
	labels := map[string]string{"app": name}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
		Spec: appsv1.DeploymentSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: "web:1"}}},
			},
		},
	}
}

func benchDaemonSet(namespace, name string) *appsv1.DaemonSet {
	labels := map[string]string{"app": name}
	return &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "agent", Image: "agent:1"}}},
			},
		},
	}
}
