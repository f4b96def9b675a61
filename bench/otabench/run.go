package otabench

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/outpost-mesh/outpost/bench/internal/childhub"
	"github.com/outpost-mesh/outpost/bench/report"
	fwv1 "github.com/outpost-mesh/outpost/firmware/apis/v1"
	"github.com/outpost-mesh/outpost/firmware/rollout"
)

// The releases rolled out: the full one, then the small change of it.
const (
	fullRelease, fullVersion   = "ota-bench-2-0-0", "2.0.0"
	deltaRelease, deltaVersion = "ota-bench-2-0-1", "2.0.1"
)

// Run measures cfg's workload, printing progress to progress, and
// returns the report. The hub, agents and relays it starts are stopped
// and the run's directories removed before it returns.
func Run(ctx context.Context, cfg Config, progress io.Writer) (*Report, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp(cfg.Dir, "outpost-bench-ota-")
	if err != nil {
		return nil, fmt.Errorf("run dir: %w", err)
	}
	defer os.RemoveAll(dir)
	agentDir := filepath.Join(dir, "agents")
	if cfg.AgentDir != "" {
		if agentDir, err = os.MkdirTemp(cfg.AgentDir, "outpost-bench-ota-agents-"); err != nil {
			return nil, fmt.Errorf("agent dir: %w", err)
		}
		defer os.RemoveAll(agentDir)
	}
	r := &runner{cfg: cfg, dir: dir, agentDir: agentDir, w: progress, res: &Result{}}
	err = r.run(ctx)
	r.close()
	if err != nil {
		return nil, err
	}
	return NewReport(cfg, r.res), nil
}

type runner struct {
	cfg           Config
	dir, agentDir string
	w             io.Writer
	res           *Result

	hub        *childhub.Hub
	kubeconfig string
	cs         kubernetes.Interface
	dyn        dynamic.Interface
	fleet      *fleet
	artifacts  [2]string // the full and the delta version's files
}

func (r *runner) close() {
	if r.fleet != nil {
		r.fleet.stop()
		r.res.AgentWarnings = r.fleet.logs.warnings.Load()
		r.res.AgentLogSamples = r.fleet.logs.samples()
	}
	if r.hub != nil {
		fmt.Fprint(r.w, "stopping hub ... ")
		r.res.Hub.Exit = r.hub.Stop(r.cfg.StopTimeout)
		fmt.Fprintln(r.w, r.res.Hub.Exit)
	}
}

func (r *runner) run(ctx context.Context) error {
	if err := r.startHub(ctx); err != nil {
		return err
	}
	if err := r.releases(ctx); err != nil {
		return err
	}
	if err := r.join(ctx); err != nil {
		return err
	}
	if s, err := childhub.ReadProc(r.hubPID()); err == nil {
		r.res.Hub.IdleRSS = s.RSS
	}
	var err error
	if r.res.Full, err = r.rollout(ctx, "ota-bench-full", fullRelease, fullVersion, r.cfg.CutNodes); err != nil {
		return err
	}
	// A completed Rollout still owns its nodes: an older Rollout wins a
	// node two select. It goes, as an operator's would, before the next.
	if err := r.dyn.Resource(rolloutsGVR).Delete(ctx, "ota-bench-full", metav1.DeleteOptions{}); err != nil {
		return fmt.Errorf("delete rollout ota-bench-full: %w", err)
	}
	if r.res.Delta, err = r.rollout(ctx, "ota-bench-delta", deltaRelease, deltaVersion, 0); err != nil {
		return err
	}
	if r.res.Full.ArtifactSize > 0 {
		r.res.DeltaPercent = 100 * r.res.Delta.DeltaBytesPerNode / float64(r.res.Full.ArtifactSize)
	}
	s, err := childhub.ReadProc(r.hubPID())
	if err != nil {
		r.res.Hub.ProcError = err.Error()
	}
	r.res.Hub.HWM, r.res.Hub.CPUSeconds = s.HWM, s.CPUSeconds
	return nil
}

func (r *runner) hubPID() string { return strconv.Itoa(r.hub.PID()) }

func (r *runner) step(name string) func(ok bool) time.Duration {
	fmt.Fprintf(r.w, "%s ... ", name)
	start := time.Now()
	return func(ok bool) time.Duration {
		d := time.Since(start)
		if ok {
			fmt.Fprintln(r.w, report.Duration(d))
		} else {
			fmt.Fprintln(r.w, "failed")
		}
		return d
	}
}

func (r *runner) startHub(ctx context.Context) error {
	syncAddr, err := childhub.FreeUDPAddr()
	if err != nil {
		return err
	}
	done := r.step("starting hub")
	if r.hub, err = childhub.Start(r.cfg.Binary, filepath.Join(r.dir, "hub"), "127.0.0.1:0", syncAddr); err != nil {
		done(false)
		return err
	}
	if r.kubeconfig, err = r.hub.Kubeconfig(ctx, r.cfg.ReadyTimeout); err != nil {
		done(false)
		return err
	}
	r.res.Hub.ReadySeconds = done(true).Seconds()
	rc, err := clientcmd.BuildConfigFromFlags("", r.kubeconfig)
	if err != nil {
		return fmt.Errorf("load kubeconfig: %w", err)
	}
	rc.QPS, rc.Burst = -1, 1<<20
	rc.UserAgent = "outpost-bench-ota"
	if r.cs, err = kubernetes.NewForConfig(rc); err != nil {
		return fmt.Errorf("hub client: %w", err)
	}
	if r.dyn, err = dynamic.NewForConfig(rc); err != nil {
		return fmt.Errorf("hub client: %w", err)
	}
	return r.startFleet(ctx, rc, syncAddr)
}

func (r *runner) startFleet(ctx context.Context, rc *rest.Config, syncAddr string) error {
	token, err := bootstrapToken(ctx, r.cs)
	if err != nil {
		return err
	}
	hash, err := caHash(rc)
	if err != nil {
		return err
	}
	target, err := net.ResolveUDPAddr("udp", syncAddr)
	if err != nil {
		return fmt.Errorf("hub sync address: %w", err)
	}
	if err := r.writeArtifacts(); err != nil {
		return err
	}
	done := r.step(fmt.Sprintf("making %s agents and relays", report.Count(int64(r.cfg.Nodes))))
	r.fleet, err = newFleet(r.cfg, r.agentDir, target, token, hash, map[string]string{fullVersion: r.artifacts[0]})
	done(err == nil)
	return err
}

// writeArtifacts writes the full version's pseudo-random artifact and the
// delta version's: the same with ChangedRegions regions rewritten, spread
// over it.
func (r *runner) writeArtifacts() error {
	rng := rand.New(rand.NewChaCha8([32]byte{'o', 't', 'a'}))
	a := make([]byte, r.cfg.ArtifactSize)
	for i := 0; i+8 <= len(a); i += 8 {
		v := rng.Uint64()
		for k := range 8 {
			a[i+k] = byte(v >> (8 * k))
		}
	}
	b := changed(a, r.cfg.ChangedRegions, r.cfg.ChangedBytes, rng)
	for i, data := range [][]byte{a, b} {
		r.artifacts[i] = filepath.Join(r.dir, "agent-"+[]string{fullVersion, deltaVersion}[i])
		if err := os.WriteFile(r.artifacts[i], data, 0o600); err != nil {
			return fmt.Errorf("write artifact: %w", err)
		}
	}
	return nil
}

// changed returns a copy of a with regions regions of size bytes each
// rewritten, one in each of regions equal spans.
func changed(a []byte, regions, size int, rng *rand.Rand) []byte {
	b := slices.Clone(a)
	span := len(b) / regions
	for i := range regions {
		off := i*span + rng.IntN(span-size)
		for k := range size {
			b[off+k] ^= byte(rng.IntN(255) + 1)
		}
	}
	return b
}

// outpost runs the outpost binary with args against the hub.
func (r *runner) outpost(ctx context.Context, args ...string) error {
	cmd := exec.CommandContext(ctx, r.cfg.Binary, args...)
	cmd.Dir = r.dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("outpost %s: %w\n%s", args[0]+" "+args[1], err, out)
	}
	return nil
}

// releases makes a signing key, trusts it on the hub, and creates both
// releases, uploading their artifacts.
func (r *runner) releases(ctx context.Context) error {
	done := r.step("making the key and the releases")
	key := filepath.Join(r.dir, "bench")
	steps := [][]string{
		{"release", "keygen", "--out", key},
		{"release", "trust", "add", key + ".pub", "--kubeconfig", r.kubeconfig},
		{"release", "create", fullRelease, "--version", fullVersion, "--component", "agent@" + simOS + "/" + simArch + "=" + r.artifacts[0],
			"--key", key + ".key", "--kubeconfig", r.kubeconfig, "-o", filepath.Join(r.dir, "full.json")},
		{"release", "create", deltaRelease, "--version", deltaVersion, "--component", "agent@" + simOS + "/" + simArch + "=" + r.artifacts[1],
			"--key", key + ".key", "--kubeconfig", r.kubeconfig, "-o", filepath.Join(r.dir, "delta.json")},
	}
	for _, s := range steps {
		if err := r.outpost(ctx, s...); err != nil {
			done(false)
			return err
		}
	}
	done(true)
	return nil
}

// join starts every agent and waits for every node to be Ready.
func (r *runner) join(ctx context.Context) error {
	n := r.cfg.Nodes
	done := r.step(fmt.Sprintf("joining %s nodes", report.Count(int64(n))))
	r.fleet.start(ctx)
	ready := 0
	ok := waitFor(ctx, r.cfg.JoinTimeout, time.Second, func() bool {
		l, err := r.cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false
		}
		ready = 0
		for _, x := range l.Items {
			for _, c := range x.Status.Conditions {
				if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
					ready++
				}
			}
		}
		return ready >= n
	})
	r.res.JoinSeconds = done(ok).Seconds()
	if !ok {
		return fmt.Errorf("%d of %d nodes Ready within %v; agent errors %q, logs %q", ready, n, r.cfg.JoinTimeout, r.fleet.errors(), r.fleet.logs.samples())
	}
	return nil
}

var rolloutsGVR = fwv1.SchemeGroupVersion.WithResource("rollouts")

// rollout creates a Rollout of release and waits for every node to
// commit version, cutting the links of cuts nodes mid-transfer in its
// last wave.
func (r *runner) rollout(ctx context.Context, name, release, version string, cuts int) (RolloutResult, error) {
	n := r.cfg.Nodes
	res := RolloutResult{Release: release, Version: version}
	steps, err := rollout.ParseWaves(r.cfg.Waves)
	if err != nil {
		return res, err
	}
	downBefore := make([]int64, n)
	for i, nd := range r.fleet.nodes {
		_, downBefore[i], _ = nd.relay.counts()
	}
	// Nodes are cut once the last wave has begun: the earlier waves'
	// targets are committed.
	cutAfter := 0
	if len(steps) > 1 {
		cutAfter = stepNodes(steps[len(steps)-2], n)
	}
	wireBefore := r.fleet.wire()
	cpu0, _ := childhub.ReadProc(r.hubPID())
	self0, _ := childhub.ReadProc("self")

	done := r.step(fmt.Sprintf("rolling out %s to %s nodes in waves %s", version, report.Count(int64(n)), r.cfg.Waves))
	created := time.Now()
	if err := r.outpost(ctx, "rollout", "create", name, "--release", release, "--waves", r.cfg.Waves,
		"--health-window", r.cfg.HealthWindow.String(), "--kubeconfig", r.kubeconfig); err != nil {
		done(false)
		return res, err
	}
	lastRSS := time.Time{}
	committed, armed := 0, false
	failedAt := time.Time{}
	waitFor(ctx, r.cfg.RolloutTimeout, 200*time.Millisecond, func() bool {
		if time.Since(lastRSS) >= time.Second {
			lastRSS = time.Now()
			if s, err := childhub.ReadProc(r.hubPID()); err == nil {
				res.HubRSSMax = max(res.HubRSSMax, s.RSS)
			}
			// Failures end the wait once nothing moved for a while.
			if f := r.failedNodes(ctx, version); f > 0 && committed+f >= n {
				if failedAt.IsZero() {
					failedAt = time.Now()
				}
				return time.Since(failedAt) > 10*time.Second
			}
		}
		committed = r.fleet.committed(version)
		if cuts > 0 && !armed && committed >= cutAfter {
			armed = true
			r.armCuts(version, cuts, &res, downBefore)
		}
		return committed >= n
	})
	elapsed := time.Since(created)
	done(committed >= n)
	cpu1, _ := childhub.ReadProc(r.hubPID())
	self1, _ := childhub.ReadProc("self")
	res.HubCPUSeconds = cpu1.CPUSeconds - cpu0.CPUSeconds
	res.HubCPUs = res.HubCPUSeconds / elapsed.Seconds()
	res.FleetCPUs = (self1.CPUSeconds - self0.CPUSeconds) / elapsed.Seconds()
	res.WirePerNode = float64(r.fleet.wire()-wireBefore) / float64(n)
	if err := ctx.Err(); err != nil {
		return res, err
	}

	// Each node's commit, and its time from fetch to commit.
	var commits []time.Time
	var lat []time.Duration
	for _, nd := range r.fleet.nodes {
		if t, ok := nd.slots.Times(version); ok && !t.Commit.IsZero() {
			commits = append(commits, t.Commit)
			if !t.Fetch.IsZero() {
				lat = append(lat, t.Commit.Sub(t.Fetch))
			}
		}
	}
	slices.SortFunc(commits, func(a, b time.Time) int { return a.Compare(b) })
	res.Updated = len(commits)
	res.Update = report.Summarize(lat)
	res.Seconds = elapsed.Seconds()
	if len(commits) == n {
		res.Seconds = commits[n-1].Sub(created).Seconds()
	}
	for i := range res.Cuts {
		c := &res.Cuts[i]
		rl := r.fleet.nodes[c.index].relay
		rl.armedAt.Store(0) // a cut that never came does not come later
		if d := rl.cutDown(); d > 0 {
			c.At = d - downBefore[c.index]
		}
	}
	if err := r.nodeStats(ctx, version, &res); err != nil {
		return res, err
	}
	if err := r.waves(ctx, name, created, commits, &res); err != nil {
		return res, err
	}
	if res.Updated == 0 {
		return res, fmt.Errorf("rollout of %s: %d of %d nodes updated within %v, %d failed: %q; node states %q; agent logs %q",
			version, res.Updated, n, r.cfg.RolloutTimeout, res.Failed, res.Errors, r.nodeStates(ctx, version), r.fleet.logs.samples())
	}
	if res.Updated < n {
		// Reported, not fatal: the table shows the failures, and the
		// next rollout goes on with the nodes that updated.
		fmt.Fprintf(r.w, "  %d of %d nodes updated, %d failed: %q\n", res.Updated, n, res.Failed, res.Errors)
	}
	return res, nil
}

// armCuts arms the relays of up to cuts nodes that have not fetched
// version yet to cut their link for CutFor once they have received half
// the artifact.
func (r *runner) armCuts(version string, cuts int, res *RolloutResult, downBefore []int64) {
	for i, nd := range r.fleet.nodes {
		if len(res.Cuts) >= cuts {
			return
		}
		if _, ok := nd.slots.Times(version); ok {
			continue
		}
		_, down, _ := nd.relay.counts()
		if down-downBefore[i] > int64(r.cfg.ArtifactSize)/4 {
			continue // under way already
		}
		nd.relay.armCut(int64(r.cfg.ArtifactSize)/2, r.cfg.CutFor)
		res.Cuts = append(res.Cuts, CutResult{Node: nd.name, index: i})
	}
}

// nodeFirmware returns each node's firmware state by name.
func (r *runner) nodeFirmware(ctx context.Context) (map[string]*fwv1.NodeFirmware, error) {
	l, err := r.cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list nodes: %w", err)
	}
	out := map[string]*fwv1.NodeFirmware{}
	for _, x := range l.Items {
		if s, ok := x.Annotations[fwv1.AnnotationState]; ok {
			if nf, err := fwv1.DecodeNodeFirmware(s); err == nil {
				out[x.Name] = nf
			}
		}
	}
	return out, nil
}

// failedNodes counts the nodes that report version failed.
func (r *runner) failedNodes(ctx context.Context, version string) int {
	m, err := r.nodeFirmware(ctx)
	if err != nil {
		return 0
	}
	f := 0
	for _, nf := range m {
		if nf.Target == version && (nf.State == fwv1.StateFailed || nf.State == fwv1.StateReverted) {
			f++
		}
	}
	return f
}

// nodeStats reads the nodes' transfer stats of version from their Nodes.
func (r *runner) nodeStats(ctx context.Context, version string, res *RolloutResult) error {
	var m map[string]*fwv1.NodeFirmware
	// The last commits' reports may trail the commits a moment.
	waitFor(ctx, 10*time.Second, 500*time.Millisecond, func() bool {
		var err error
		if m, err = r.nodeFirmware(ctx); err != nil {
			return false
		}
		c := 0
		for _, nf := range m {
			if nf.Target == version && nf.Transfer != nil && nf.State == fwv1.StateUpdated {
				c++
			}
		}
		return c >= res.Updated
	})
	if m == nil {
		return fmt.Errorf("no node firmware states of %s", version)
	}
	var errs report.ErrorSet
	var sum, deltaSum int64
	count := 0
	for _, nf := range m {
		if nf.Target != version {
			continue
		}
		if nf.State == fwv1.StateFailed || nf.State == fwv1.StateReverted {
			res.Failed++
			errs.Add(nf.Reason + ": " + nf.Message)
		}
		if t := nf.Transfer; t != nil {
			sum += t.Received
			count++
			res.ReceivedMax = max(res.ReceivedMax, t.Received)
			res.ArtifactSize = t.Full
			if t.Delta {
				res.DeltaNodes++
				deltaSum += t.Received
			}
		}
	}
	res.Errors = errs.List()
	if count > 0 {
		res.BytesPerNode = float64(sum) / float64(count)
	}
	if res.DeltaNodes > 0 {
		res.DeltaBytesPerNode = float64(deltaSum) / float64(res.DeltaNodes)
	}
	for i := range res.Cuts {
		c := &res.Cuts[i]
		if nf := m[c.Node]; nf != nil && nf.Transfer != nil {
			c.Received, c.Resumes, c.Updated = nf.Transfer.Received, nf.Transfer.Resumes, nf.State == fwv1.StateUpdated
			if nf.Transfer.Full > 0 {
				c.Cost = float64(c.Received) / float64(nf.Transfer.Full)
			}
		}
	}
	return nil
}

// waves reads the Rollout's waves' start times and times each wave to the
// commit that made its target.
func (r *runner) waves(ctx context.Context, name string, created time.Time, commits []time.Time, res *RolloutResult) error {
	u, err := r.dyn.Resource(rolloutsGVR).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("get rollout %s: %w", name, err)
	}
	var ro fwv1.Rollout
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &ro); err != nil {
		return fmt.Errorf("decode rollout %s: %w", name, err)
	}
	for _, w := range ro.Status.Waves {
		wr := WaveResult{Target: int(w.Target), Seconds: -1, StartedAt: -1}
		if w.Started != nil {
			// Started is kept to the second; the Rollout's creation is
			// the earliest a wave can start.
			start := w.Started.Time
			if start.Before(created) {
				start = created
			}
			wr.StartedAt = start.Sub(created).Seconds()
			if t := int(w.Target); t > 0 && t <= len(commits) {
				wr.Seconds = max(commits[t-1].Sub(start).Seconds(), 0)
			}
		}
		res.Waves = append(res.Waves, wr)
	}
	return nil
}

// waitFor polls cond every interval until it holds, timeout passes or ctx
// ends; it reports whether cond held.
func waitFor(ctx context.Context, timeout, interval time.Duration, cond func() bool) bool {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		if cond() {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-deadline.C:
			return cond()
		case <-tick.C:
		}
	}
}

// stepNodes returns roughly the nodes of n a wave step targets (percents
// rounded up); it only gates the cuts, the hub's planner decides.
func stepNodes(s rollout.Step, n int) int {
	if s.Percent > 0 {
		return min((s.Percent*n+99)/100, n)
	}
	return min(s.Count, n)
}

// nodeStates returns the distinct firmware states of the nodes not at
// version, for an error.
func (r *runner) nodeStates(ctx context.Context, version string) []string {
	m, err := r.nodeFirmware(ctx)
	if err != nil {
		return []string{err.Error()}
	}
	var s report.ErrorSet
	for _, nf := range m {
		if nf.Version != version {
			s.Add(nf.Encode())
		}
	}
	return s.List()
}
