package apibench

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/outpost-mesh/outpost/bench/internal/childhub"
	"github.com/outpost-mesh/outpost/bench/report"
)

// RunMemory starts a hub from cfg.Binary on a fresh data dir under
// cfg.Dir and measures its memory, phase by phase (see the Phase
// constants and listSpecs):
//
//  1. ready: the fresh hub starts;
//  2. create: cfg.JSONWatches and cfg.ProtobufWatches watches on the
//     namespace's ConfigMaps are opened, cfg.Writers writers create
//     cfg.Objects ConfigMaps of cfg.ObjectSize bytes, and every watch
//     receives them;
//  3. lists: the ConfigMaps are listed unpaged in JSON and in protobuf,
//     paged in both, paged by cfg.SmallPageSize in JSON, and as kubectl's
//     Table, each read as a stream and discarded;
//  4. settle: the hub is left idle, watches open, until its RSS stops
//     falling;
//  5. restart: the hub is stopped and started again on the same data dir.
//
// For each it records the hub's RSS at the end and its peak. The hub is
// then stopped and its data dir removed, also when RunMemory fails or ctx
// ends. Progress lines go to progress unless it is nil.
func RunMemory(ctx context.Context, cfg MemoryConfig, progress io.Writer) (rep *MemoryReport, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("invalid config: %w", err)
	}
	if progress == nil {
		progress = io.Discard
	}
	dir, err := os.MkdirTemp(cfg.Dir, "outpost-apibench-memory-")
	if err != nil {
		return nil, fmt.Errorf("create data dir: %w", err)
	}
	defer func() {
		if rmErr := os.RemoveAll(dir); rmErr != nil && err == nil {
			err = fmt.Errorf("remove data dir: %w", rmErr)
		}
	}()
	clk := clock{base: time.Now()}
	r := &memRunner{
		cfg:    cfg,
		hubDir: filepath.Join(dir, "hub"),
		res:    &MemoryResult{},
		step:   newStepper(progress, clk),
	}
	defer r.close(progress)
	if err := r.run(ctx); err != nil {
		return nil, err
	}
	return NewMemoryReport(cfg, r.res), nil
}

// memRunner holds what the phases of one memory run share.
type memRunner struct {
	cfg    MemoryConfig
	hubDir string
	res    *MemoryResult
	step   *stepper

	hub       *childhub.Hub // the hub running, or nil
	restarted bool          // hub is the second one
	restCfg   *rest.Config
	creator   *client // creates, and makes the namespace
	lister    *client // lists, over a connection of its own
	heap      *childhub.HeapProfiler
	meter     *meter

	watchStop context.CancelFunc // ends the watches, or nil
	watchWG   sync.WaitGroup
	watches   []*streamWatch
	watchCs   []*client

	profErrs report.ErrorSet
	procErr  error
}

// close stops what run started and is still running: the watches, then
// the hub.
func (r *memRunner) close(progress io.Writer) {
	if r.meter != nil {
		r.meter.abort()
	}
	r.stopWatches()
	for _, c := range []*client{r.creator, r.lister} {
		if c != nil {
			c.close()
		}
	}
	r.stopHub(progress)
}

func (r *memRunner) run(ctx context.Context) error {
	if err := r.start(ctx, PhaseReady); err != nil {
		return err
	}
	if err := r.create(ctx); err != nil {
		return err
	}
	for _, l := range listSpecs(r.cfg) {
		r.step.begin(l.name)
		r.meter.begin()
		res := streamList(ctx, r.lister.http, r.restCfg.Host, r.cfg.Namespace, l.accept, l.limit)
		r.endPhase(ctx, l.name, &res)
		if err := ctx.Err(); err != nil {
			return err
		}
		r.step.endWith(fmt.Sprintf("%s in %d requests", report.Bytes(res.BodyBytes), res.Requests))
	}
	if err := r.settle(ctx); err != nil {
		return err
	}
	r.stopWatches()
	r.stopHub(r.step.w)
	var err error
	if r.res.DataDirBytes, r.res.DataDirApparentBytes, err = childhub.DirSize(r.hubDir); err != nil {
		return err
	}
	if err := r.start(ctx, PhaseRestart); err != nil {
		return err
	}
	if self, err := childhub.ReadProc("self"); err == nil {
		r.res.ClientPeakRSSBytes = self.HWM
	}
	r.res.PeakFrom = "VmHWM"
	if r.meter.noReset != nil {
		r.res.PeakFrom = "sampled"
		r.res.ResetError = r.meter.noReset.Error()
	}
	if r.procErr == nil {
		r.procErr = r.meter.procErr
	}
	if r.procErr != nil {
		r.res.ProcError = r.procErr.Error()
	}
	r.res.ProfileErrors = r.profErrs.List()
	return nil
}

// start starts a hub on the data dir and records phase, PhaseReady or
// PhaseRestart, from its start to ready: a new process's peak is VmHWM
// as it is.
func (r *memRunner) start(ctx context.Context, phase string) error {
	if phase == PhaseRestart {
		r.step.begin("starting hub again on the same data dir")
	} else {
		r.step.begin("starting hub")
	}
	started := time.Now()
	// With a sync endpoint, as `outpost hub` runs by default: its view of
	// what nodes may need holds objects too. Without the controllers: this
	// measures what the API itself holds, and the objects are the
	// benchmark's alone (no kube-root-ca.crt beside them).
	h, err := childhub.Start(r.cfg.Binary, r.hubDir, "127.0.0.1:0", "127.0.0.1:0", append([]string{apiOnly}, r.cfg.HubArgs...)...)
	if err != nil {
		r.step.fail()
		return err
	}
	r.hub, r.restarted = h, phase == PhaseRestart
	kubeconfig, err := h.Kubeconfig(ctx, r.cfg.ReadyTimeout)
	if err != nil {
		r.step.fail()
		return err
	}
	ready := time.Since(started)
	pid := strconv.Itoa(h.PID())
	s, err := childhub.ReadProc(pid)
	if err != nil && r.procErr == nil {
		r.procErr = err
	}
	r.res.Phases = append(r.res.Phases, MemoryPhase{
		Name: phase, Duration: ready,
		RSSBytes: s.RSS, RSSAnonBytes: s.RSSAnon, RSSFileBytes: s.RSSFile, PeakBytes: s.HWM,
	})
	if phase == PhaseRestart {
		r.res.RestartReadySeconds = ready.Seconds()
	} else {
		r.res.ReadySeconds = ready.Seconds()
		r.meter = &meter{pid: pid, interval: r.cfg.SampleInterval}
	}
	if r.restCfg, err = loadConfig(kubeconfig, false); err != nil {
		return err
	}
	if r.heap, err = childhub.NewHeapProfiler(r.cfg.ProfileDir, r.restCfg); err != nil {
		return err
	}
	r.profile(ctx, phase, false)
	r.step.endWith(report.Bytes(s.RSS) + " RSS")
	return nil
}

// stopHub stops the hub running, if any, and records how it ended.
func (r *memRunner) stopHub(progress io.Writer) {
	if r.hub == nil {
		return
	}
	fmt.Fprint(progress, "stopping hub ... ")
	exit := r.hub.Stop(r.cfg.StopTimeout)
	fmt.Fprintln(progress, exit)
	if r.restarted {
		r.res.RestartExit = exit
	} else {
		r.res.Exit = exit
	}
	r.hub = nil
}

// endPhase records the phase the meter began, and a heap profile of the
// hub at its end. The profile after PhaseSettle, the last of the first
// hub, is taken after a forced collection, to show what stays live; the
// others are not, so as not to change the phases after them.
func (r *memRunner) endPhase(ctx context.Context, name string, list *StreamList) MemoryPhase {
	p := r.meter.end(name)
	p.List = list
	r.res.Phases = append(r.res.Phases, p)
	r.profile(ctx, name, name == PhaseSettle)
	return p
}

// profile writes a heap profile of the hub named after phase, if asked.
func (r *memRunner) profile(ctx context.Context, phase string, gc bool) {
	if err := r.heap.Write(ctx, slug(phase), gc); err != nil {
		r.profErrs.Add(err.Error())
	}
}

// slug returns name in lower case with runs of other than letters and
// digits as one dash: "list JSON, limit 500" is "list-json-limit-500".
func slug(name string) string {
	var b strings.Builder
	dash := false
	for _, c := range strings.ToLower(name) {
		if c >= 'a' && c <= 'z' || c >= '0' && c <= '9' {
			if dash && b.Len() > 0 {
				b.WriteByte('-')
			}
			b.WriteRune(c)
			dash = false
			continue
		}
		dash = true
	}
	return b.String()
}

// create is PhaseCreate: it opens the watches, creates the objects, and
// waits for every watch to have them.
func (r *memRunner) create(ctx context.Context) error {
	cfg := r.cfg
	var err error
	if r.creator, err = newClient(r.restCfg); err != nil {
		return err
	}
	if r.lister, err = newClient(r.restCfg); err != nil {
		return err
	}
	r.step.begin(fmt.Sprintf("creating %s ConfigMaps of %s, %d JSON and %d protobuf watches open",
		report.Count(int64(cfg.Objects)), report.Bytes(uint64(cfg.ObjectSize)), cfg.JSONWatches, cfg.ProtobufWatches))
	r.meter.begin()
	rv, err := prepareConfigMaps(ctx, r.creator, cfg.Namespace)
	if err != nil {
		r.step.fail()
		return err
	}
	if err := r.startWatches(ctx, rv); err != nil {
		r.step.fail()
		return err
	}
	c := createConfigMaps(ctx, r.creator, cfg)
	r.res.Created, r.res.Failed, r.res.CreateErrors, r.res.StoredBytes = c.created, c.failed, c.errs, c.stored
	waitStreams(ctx, r.watches, int64(c.created), cfg.DeliveryTimeout)
	r.endPhase(ctx, PhaseCreate, nil)
	if err := ctx.Err(); err != nil {
		return err
	}
	if c.created == 0 {
		r.step.fail()
		return fmt.Errorf("no ConfigMap created: %v", c.errs)
	}
	r.step.endWith(report.Bytes(r.res.StoredBytes) + " stored")
	return nil
}

// startWatches opens the watches from rv, each over a client of its own,
// and starts reading them until stopWatches.
func (r *memRunner) startWatches(ctx context.Context, rv string) error {
	wctx, cancel := context.WithCancel(ctx)
	r.watchStop = cancel
	for i := range r.cfg.JSONWatches + r.cfg.ProtobufWatches {
		c, err := newClient(r.restCfg)
		if err != nil {
			return err
		}
		r.watchCs = append(r.watchCs, c)
		w, err := openWatch(wctx, c.http, r.restCfg.Host, r.cfg.Namespace, rv, i >= r.cfg.JSONWatches)
		if err != nil {
			return err
		}
		r.watches = append(r.watches, w)
		r.watchWG.Go(func() { w.run(wctx) })
	}
	return nil
}

// stopWatches ends the watches, waits for them and records what they
// received. It is safe to call more than once.
func (r *memRunner) stopWatches() {
	if r.watchStop == nil {
		return
	}
	r.watchStop()
	r.watchWG.Wait()
	for _, c := range r.watchCs {
		c.close()
	}
	for _, w := range r.watches {
		r.res.Watches = append(r.res.Watches, w.res)
	}
	r.watchStop, r.watches, r.watchCs = nil, nil, nil
}

// settle is PhaseSettle: cfg.MinIdle of idle, then RSS read every second
// until it stops falling, for at most cfg.SettleLimit.
func (r *memRunner) settle(ctx context.Context) error {
	r.step.begin(fmt.Sprintf("waiting %v, then for RSS to stop falling (at most %v)", r.cfg.MinIdle, r.cfg.SettleLimit))
	r.meter.begin()
	idle := time.NewTimer(r.cfg.MinIdle)
	select {
	case <-ctx.Done():
		idle.Stop()
		return ctx.Err()
	case <-idle.C:
	}
	read := func() (childhub.Sample, error) { return childhub.ReadProc(r.meter.pid) }
	first, err := read()
	if err != nil {
		return err
	}
	_, waited, err := childhub.Settle(ctx, read, first, r.cfg.SettleLimit)
	if err != nil {
		return err
	}
	r.res.SettleSeconds = waited.Seconds()
	p := r.endPhase(ctx, PhaseSettle, nil)
	r.step.endWith(report.Bytes(p.RSSBytes) + " RSS")
	return nil
}

// listSpec is one list phase.
type listSpec struct {
	name   string
	accept string
	limit  int
}

// listSpecs returns the list phases of cfg, in order: unpaged lists first,
// each of every object at once, then paged ones.
func listSpecs(cfg MemoryConfig) []listSpec {
	paged := func(enc string, n int) string { return fmt.Sprintf("list %s, limit %d", enc, n) }
	l := []listSpec{
		{"list JSON", acceptJSON, 0},
		{"list protobuf", acceptProtobuf, 0},
		{paged("JSON", cfg.PageSize), acceptJSON, cfg.PageSize},
		{paged("protobuf", cfg.PageSize), acceptProtobuf, cfg.PageSize},
	}
	if cfg.SmallPageSize > 0 {
		l = append(l, listSpec{paged("JSON", cfg.SmallPageSize), acceptJSON, cfg.SmallPageSize})
	}
	if cfg.Table {
		l = append(l, listSpec{paged("Table", cfg.PageSize), acceptTable, cfg.PageSize})
	}
	return l
}

// prepareConfigMaps creates the namespace and returns the resourceVersion
// of its (empty) ConfigMap list, from which watches see every object
// created later.
func prepareConfigMaps(ctx context.Context, c *client, namespace string) (string, error) {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}
	if _, err := c.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return "", fmt.Errorf("create namespace %s: %w", namespace, err)
	}
	list, err := c.CoreV1().ConfigMaps(namespace).List(ctx, metav1.ListOptions{Limit: 1})
	if err != nil {
		return "", fmt.Errorf("list configmaps: %w", err)
	}
	if len(list.Items) > 0 {
		return "", fmt.Errorf("namespace %s of the fresh hub already holds ConfigMaps", namespace)
	}
	return list.ResourceVersion, nil
}

// payloadAlphabet is what object data is made of: 64 characters, so that
// each carries six random bits and the store cannot compress it much.
const payloadAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"

// newConfigMap returns ConfigMap i of cfg: one data value of
// cfg.ObjectSize random characters, different for each i.
func newConfigMap(cfg MemoryConfig, i int) *corev1.ConfigMap {
	var seed [32]byte
	binary.LittleEndian.PutUint64(seed[:], uint64(i)+1)
	b := make([]byte, cfg.ObjectSize)
	rand.NewChaCha8(seed).Read(b)
	for j := range b {
		b[j] = payloadAlphabet[b[j]&63]
	}
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cm-%07d", i), Namespace: cfg.Namespace},
		Data:       map[string]string{"payload": string(b)},
	}
}

// creates is what createConfigMaps did.
type creates struct {
	created, failed int
	errs            []string
	stored          uint64 // protobuf bytes of the objects the hub returned
}

// createConfigMaps creates cfg.Objects ConfigMaps with cfg.Writers
// concurrent writers sharing c. It returns when every object was tried or
// ctx ended.
func createConfigMaps(ctx context.Context, c *client, cfg MemoryConfig) creates {
	cms := c.CoreV1().ConfigMaps(cfg.Namespace)
	var (
		next atomic.Int64
		mu   sync.Mutex // guards res and errs
		res  creates
		errs report.ErrorSet
		wg   sync.WaitGroup
	)
	for range cfg.Writers {
		wg.Go(func() {
			var mine creates
			var myErrs report.ErrorSet
			for ctx.Err() == nil {
				i := int(next.Add(1) - 1)
				if i >= cfg.Objects {
					break
				}
				got, err := cms.Create(ctx, newConfigMap(cfg, i), metav1.CreateOptions{})
				if err != nil {
					mine.failed++
					myErrs.Add(err.Error())
					continue
				}
				mine.created++
				mine.stored += uint64(got.Size())
			}
			mu.Lock()
			defer mu.Unlock()
			res.created += mine.created
			res.failed += mine.failed
			res.stored += mine.stored
			errs.Merge(myErrs)
		})
	}
	wg.Wait()
	res.errs = errs.List()
	return res
}

// waitStreams returns once every watch has seen want ADDED events or has
// ended, or after timeout, or when ctx ends.
func waitStreams(ctx context.Context, ws []*streamWatch, want int64, timeout time.Duration) {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(deliveryPoll)
	defer tick.Stop()
	for {
		done := true
		for _, w := range ws {
			select {
			case <-w.done:
				continue
			default:
			}
			if w.added.Load() < want {
				done = false
			}
		}
		if done {
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

// meter measures the hub's memory over a phase: its RSS at the end, and
// its peak, from VmHWM reset at the start where the kernel allows it and
// from RSS sampled every interval in any case. begin and end alternate;
// abort stops a phase begun and not ended.
type meter struct {
	pid      string
	interval time.Duration
	// noReset is why VmHWM could not be reset, once it could not; peaks
	// are then sampled only.
	noReset error
	procErr error // the first error reading /proc

	start   time.Time
	sampled atomic.Uint64 // the highest RSS sampled in this phase
	stop    chan struct{} // nil between phases
	done    chan struct{}
}

func (m *meter) begin() {
	if m.noReset == nil {
		m.noReset = childhub.ResetPeak(m.pid)
	}
	m.sampled.Store(0)
	m.start = time.Now()
	m.stop, m.done = make(chan struct{}), make(chan struct{})
	go m.sample(m.stop, m.done)
}

func (m *meter) sample(stop <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	tick := time.NewTicker(m.interval)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return
		case <-tick.C:
		}
		if s, err := childhub.ReadProc(m.pid); err == nil && s.RSS > m.sampled.Load() {
			m.sampled.Store(s.RSS)
		}
	}
}

// end ends the phase begun and returns its memory, named name.
func (m *meter) end(name string) MemoryPhase {
	m.abort()
	p := MemoryPhase{Name: name, Duration: time.Since(m.start), PeakBytes: m.sampled.Load()}
	s, err := childhub.ReadProc(m.pid)
	if err != nil {
		if m.procErr == nil {
			m.procErr = err
		}
		return p
	}
	p.RSSBytes, p.RSSAnonBytes, p.RSSFileBytes = s.RSS, s.RSSAnon, s.RSSFile
	if m.noReset == nil {
		p.PeakBytes = max(p.PeakBytes, s.HWM)
	}
	return p
}

// abort stops the sampling of a phase begun, if any.
func (m *meter) abort() {
	if m.stop == nil {
		return
	}
	close(m.stop)
	<-m.done
	m.stop, m.done = nil, nil
}

// apiOnly is the flag of `outpost hub` that the API benchmarks run their
// hub with: no controllers or scheduler.
const apiOnly = "--controllers=false"
