package apibench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/outpost-mesh/outpost/bench/internal/childhub"
	"github.com/outpost-mesh/outpost/bench/report"
)

// Run starts a hub from cfg.Binary on a fresh data dir under cfg.Dir, runs
// the workload against it and returns the report. In order:
//
//  1. cfg.Watchers watches on the namespace's pods are opened;
//  2. cfg.Workers workers create cfg.Pods pods;
//  3. every pod is listed at once, then in pages of cfg.PageSize;
//  4. Run waits, at most cfg.DeliveryTimeout, for every watcher to have
//     seen every pod;
//  5. the hub's memory and CPU time are read.
//
// The hub is then stopped (SIGTERM, killed after cfg.StopTimeout) and its
// data dir removed, also when Run fails or ctx ends. Progress lines go to
// progress unless it is nil.
func Run(ctx context.Context, cfg Config, progress io.Writer) (rep *Report, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("invalid config: %w", err)
	}
	if progress == nil {
		progress = io.Discard
	}
	dir, err := os.MkdirTemp(cfg.Dir, "outpost-apibench-")
	if err != nil {
		return nil, fmt.Errorf("create data dir: %w", err)
	}
	defer func() {
		if rmErr := os.RemoveAll(dir); rmErr != nil && err == nil {
			err = fmt.Errorf("remove data dir: %w", rmErr)
		}
	}()

	res := &Result{}
	clk := clock{base: time.Now()}
	step := newStepper(progress, clk)

	step.begin("starting hub")
	// The API server alone: no controllers or scheduler acting on the
	// pods it creates (outpost bench controllers measures those).
	hub, err := childhub.Start(cfg.Binary, filepath.Join(dir, "hub"), "127.0.0.1:0", "", apiOnly)
	if err != nil {
		step.fail()
		return nil, err
	}
	defer func() {
		fmt.Fprint(progress, "stopping hub ... ")
		res.Hub.Exit = hub.Stop(cfg.StopTimeout)
		fmt.Fprintln(progress, res.Hub.Exit)
	}()
	kubeconfig, err := hub.Kubeconfig(ctx, cfg.ReadyTimeout)
	if err != nil {
		step.fail()
		return nil, err
	}
	res.Hub.ReadySeconds = step.end().Seconds()
	hubPID := strconv.Itoa(hub.PID())
	hubStart, procErr := childhub.ReadProc(hubPID)
	selfStart, _ := childhub.ReadProc("self")
	res.Hub.StartRSSBytes = hubStart.RSS
	res.Hub.StartCPUSeconds = hubStart.CPUSeconds

	restCfg, err := loadConfig(kubeconfig, cfg.JSON)
	if err != nil {
		return nil, err
	}
	creator, err := newClient(restCfg)
	if err != nil {
		return nil, err
	}
	defer creator.close()
	rv, err := prepareNamespace(ctx, creator, cfg.Namespace)
	if err != nil {
		return nil, err
	}
	if cfg.RBAC {
		if restCfg, err = grantRBACUser(ctx, creator, restCfg, filepath.Join(dir, "hub", "pki"), cfg.Namespace); err != nil {
			return nil, err
		}
		creator.close()
		if creator, err = newClient(restCfg); err != nil {
			return nil, err
		}
		defer creator.close()
	}

	sent := make(sendTimes, cfg.Pods)
	step.begin(fmt.Sprintf("opening %d watches", cfg.Watchers))
	watchCtx, stopWatches := context.WithCancel(ctx)
	watchers, stopWatchers, err := startWatchers(watchCtx, restCfg, cfg, rv, clk, sent)
	defer stopWatchers()
	defer stopWatches() // before stopWatchers waits
	if err != nil {
		step.fail()
		return nil, err
	}
	step.end()

	step.begin(fmt.Sprintf("creating %s pods with %d workers", report.Count(int64(cfg.Pods)), cfg.Workers))
	prof, err := childhub.NewProfiler(cfg.ProfileDir, "client", cfg.ProfileDuration, restCfg)
	if err != nil {
		step.fail()
		return nil, err
	}
	if err := prof.Start(ctx); err != nil {
		step.fail()
		return nil, err
	}
	before, _ := childhub.ReadProc(hubPID)
	res.Creates = createPods(ctx, creator, cfg, clk, sent)
	createsDone := clk.now()
	after, _ := childhub.ReadProc(hubPID)
	if err := prof.Stop(); err != nil {
		step.fail()
		return nil, err
	}
	res.Hub.CreateCPUSeconds = after.CPUSeconds - before.CPUSeconds
	step.end()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if res.Creates.Created == 0 {
		return nil, fmt.Errorf("no pod created: %v", res.Creates.Errors)
	}

	step.begin("listing pods")
	res.List = listPods(ctx, creator, cfg.Namespace, 0)
	res.PagedList = listPods(ctx, creator, cfg.Namespace, cfg.PageSize)
	step.end()

	step.begin("waiting for watch deliveries")
	res.Watch.Watchers = cfg.Watchers
	res.Watch.Expected = cfg.Watchers * res.Creates.Created
	waitDelivered(ctx, watchers, int64(res.Watch.Expected), cfg.DeliveryTimeout)
	res.Watch.DrainSeconds = (clk.now() - createsDone).Seconds()
	step.end()
	if err := ctx.Err(); err != nil {
		return nil, err
	}

	hubEnd, err := childhub.ReadProc(hubPID)
	if err != nil && procErr == nil {
		procErr = err
	}
	res.Hub.RSSBytes = hubEnd.RSS
	res.Hub.HWMBytes = hubEnd.HWM
	res.Hub.CPUSeconds = hubEnd.CPUSeconds
	if procErr != nil {
		res.Hub.ProcError = procErr.Error()
	}
	if selfEnd, err := childhub.ReadProc("self"); err == nil {
		res.ClientCPUSeconds = selfEnd.CPUSeconds - selfStart.CPUSeconds
	}

	stopWatches()
	stopWatchers()
	res.Watch.summarize(watchers)
	return NewReport(cfg, res), nil
}

// stepper prints one progress line per step: its name, then its duration.
type stepper struct {
	w     io.Writer
	clk   clock
	start time.Duration
}

func newStepper(w io.Writer, clk clock) *stepper { return &stepper{w: w, clk: clk} }

func (s *stepper) begin(name string) {
	fmt.Fprintf(s.w, "%s ... ", name)
	s.start = s.clk.now()
}

func (s *stepper) end() time.Duration {
	d := s.clk.now() - s.start
	fmt.Fprintf(s.w, "%s\n", report.Duration(d))
	return d
}

// endWith ends the step as end does, with a note after its duration.
func (s *stepper) endWith(note string) time.Duration {
	d := s.clk.now() - s.start
	fmt.Fprintf(s.w, "%s, %s\n", report.Duration(d), note)
	return d
}

func (s *stepper) fail() { fmt.Fprintln(s.w, "failed") }

// prepareNamespace creates the namespace and returns the resourceVersion
// of its (empty) pod list, from which watches see every pod created later.
func prepareNamespace(ctx context.Context, c *client, namespace string) (string, error) {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}
	if _, err := c.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return "", fmt.Errorf("create namespace %s: %w", namespace, err)
	}
	list, err := c.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{Limit: 1})
	if err != nil {
		return "", fmt.Errorf("list pods: %w", err)
	}
	if len(list.Items) > 0 {
		return "", fmt.Errorf("namespace %s of the fresh hub already holds pods", namespace)
	}
	return list.ResourceVersion, nil
}

// startWatchers opens cfg.Watchers watches from rv, each over a client of
// its own, and starts reading them. The watchers run until ctx ends; stop,
// to be called after that, waits for them and closes their clients. stop is
// non-nil even when err is not.
func startWatchers(ctx context.Context, restCfg *rest.Config, cfg Config, rv string, clk clock, sent sendTimes) (ws []*watcher, stop func(), err error) {
	var (
		wg      sync.WaitGroup
		clients []*client
		once    sync.Once
	)
	stop = func() {
		once.Do(func() {
			wg.Wait()
			for _, c := range clients {
				c.close()
			}
		})
	}
	for range cfg.Watchers {
		c, err := newClient(restCfg)
		if err != nil {
			return nil, stop, err
		}
		clients = append(clients, c)
		w, err := startWatch(ctx, c, cfg.Namespace, rv, clk, sent, cfg.MetadataWatchers)
		if err != nil {
			return nil, stop, err
		}
		ws = append(ws, w)
		wg.Go(func() { w.run(ctx) })
	}
	return ws, stop, nil
}

// deliveryPoll is how often waitDelivered checks the watchers' counts.
const deliveryPoll = 10 * time.Millisecond

// waitDelivered returns once the watchers have seen want pods in all, or
// after timeout, or when ctx ends.
func waitDelivered(ctx context.Context, ws []*watcher, want int64, timeout time.Duration) {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(deliveryPoll)
	defer tick.Stop()
	for {
		var got int64
		for _, w := range ws {
			got += w.delivered.Load()
		}
		if got >= want {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-deadline.C:
			return
		case <-tick.C:
		}
	}
}

// summarize fills r from the watchers, whose run has returned.
func (r *WatchResult) summarize(ws []*watcher) {
	var (
		lat  []time.Duration
		errs report.ErrorSet
	)
	for _, w := range ws {
		r.Delivered += int(w.delivered.Load())
		r.Duplicates += w.duplicates
		r.Foreign += w.foreign
		r.Restarts += w.restarts
		lat = append(lat, w.latency...)
		errs.Merge(w.errs)
	}
	r.Missing = max(r.Expected-r.Delivered, 0)
	r.Latency = report.Summarize(lat)
	r.Errors = errs.List()
}

// listPods lists the namespace's pods, in pages of limit unless it is 0,
// and times it.
func listPods(ctx context.Context, c *client, namespace string, limit int) ListResult {
	var r ListResult
	start := time.Now()
	opts := metav1.ListOptions{Limit: int64(limit)}
	for {
		list, err := c.CoreV1().Pods(namespace).List(ctx, opts)
		r.Pages++
		if err != nil {
			r.Error = err.Error()
			break
		}
		r.Items += len(list.Items)
		if list.Continue == "" {
			break
		}
		if limit == 0 {
			r.Error = errors.New("unpaged list returned a continue token").Error()
			break
		}
		opts.Continue = list.Continue
	}
	r.Duration = time.Since(start)
	return r
}
