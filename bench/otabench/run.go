package otabench

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
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
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/outpost-mesh/outpost/bench/internal/childhub"
	"github.com/outpost-mesh/outpost/bench/report"
	fwv1 "github.com/outpost-mesh/outpost/firmware/apis/v1"
	"github.com/outpost-mesh/outpost/firmware/rollout"
)

// The releases rolled out: the full one, then the small change of it;
// or, given two builds of the agent, the full one, then the base build
// and its rebuild.
const (
	fullRelease, fullVersion               = "ota-bench-2-0-0", "2.0.0"
	deltaRelease, deltaVersion             = "ota-bench-2-0-1", "2.0.1"
	rebuiltBaseRelease, rebuiltBaseVersion = "ota-bench-2-1-0", "2.1.0"
	rebuiltRelease, rebuiltVersion         = "ota-bench-2-1-1", "2.1.1"
)

// rebuiltLabel marks the nodes that take the builds of the agent.
const rebuiltLabel, rebuiltValue = "bench.outpost.dev/ota", "rebuilt"

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
	// The outpost commands run in dir.
	for _, p := range []*string{&cfg.BaseArtifact, &cfg.Artifact} {
		if *p != "" {
			if *p, err = filepath.Abs(*p); err != nil {
				return nil, fmt.Errorf("agent build: %w", err)
			}
		}
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
	// releases are what the run creates, in order: name, version, file.
	releases []benchRelease
}

// benchRelease is a release the run creates.
type benchRelease struct{ name, version, file string }

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
	if err := r.createReleases(ctx); err != nil {
		return err
	}
	if err := r.join(ctx); err != nil {
		return err
	}
	if s, err := childhub.ReadProc(r.hubPID()); err == nil {
		r.res.Hub.IdleRSS = s.RSS
	}
	if r.cfg.Rebuilt() {
		if err := r.labelRebuilt(ctx); err != nil {
			return err
		}
	}
	all := make([]int, r.cfg.Nodes)
	for i := range all {
		all[i] = i
	}
	var err error
	if r.res.Full, err = r.rollout(ctx, "ota-bench-full", fullRelease, fullVersion, all, "", r.cfg.CutNodes); err != nil {
		return err
	}
	if err := r.deleteRollout(ctx, "ota-bench-full"); err != nil {
		return err
	}
	if !r.cfg.Rebuilt() {
		r.res.DeltaOf = DeltaOfSynthetic
		if r.res.Delta, err = r.rollout(ctx, "ota-bench-delta", deltaRelease, deltaVersion, all, "", 0); err != nil {
			return err
		}
	} else {
		r.res.DeltaOf = DeltaOfRebuilt
		some, sel := all[:r.cfg.RebuiltNodes], rebuiltLabel+"="+rebuiltValue
		base, err := r.rollout(ctx, "ota-bench-rebuilt-base", rebuiltBaseRelease, rebuiltBaseVersion, some, sel, 0)
		r.res.RebuiltBase = &base
		if err != nil {
			return err
		}
		if err := r.deleteRollout(ctx, "ota-bench-rebuilt-base"); err != nil {
			return err
		}
		if r.res.Delta, err = r.rollout(ctx, "ota-bench-rebuilt", rebuiltRelease, rebuiltVersion, some, sel, 0); err != nil {
			return err
		}
	}
	if r.res.Delta.ArtifactSize > 0 {
		r.res.DeltaPercent = 100 * r.res.Delta.DeltaBytesPerNode / float64(r.res.Delta.ArtifactSize)
	}
	s, err := childhub.ReadProc(r.hubPID())
	if err != nil {
		r.res.Hub.ProcError = err.Error()
	}
	r.res.Hub.HWM, r.res.Hub.CPUSeconds = s.HWM, s.CPUSeconds
	return nil
}

// deleteRollout deletes a completed Rollout, which still owns its nodes:
// an older Rollout wins a node two select. It goes, as an operator's
// would, before the next.
func (r *runner) deleteRollout(ctx context.Context, name string) error {
	if err := r.dyn.Resource(rolloutsGVR).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		return fmt.Errorf("delete rollout %s: %w", name, err)
	}
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
	token, err := childhub.BootstrapToken(ctx, r.cs, "outpost bench ota")
	if err != nil {
		return err
	}
	hash, err := childhub.CAHash(rc)
	if err != nil {
		return err
	}
	target, err := net.ResolveUDPAddr("udp", syncAddr)
	if err != nil {
		return fmt.Errorf("hub sync address: %w", err)
	}
	if err := r.artifacts(); err != nil {
		return err
	}
	// A node offers the artifact of its committed version as a delta's
	// base, if it has one here.
	bases := map[string]string{fullVersion: r.releases[0].file}
	if r.cfg.Rebuilt() {
		bases = map[string]string{rebuiltBaseVersion: r.cfg.BaseArtifact}
	}
	done := r.step(fmt.Sprintf("making %s agents and relays", report.Count(int64(r.cfg.Nodes))))
	r.fleet, err = newFleet(r.cfg, r.agentDir, target, token, hash, bases)
	done(err == nil)
	return err
}

// artifacts writes the full version's pseudo-random artifact and, unless
// the delta is of two builds of the agent, the delta version's: the same
// with ChangedRegions regions rewritten, spread over it. It sets the
// releases to create and the delta's artifacts of the result.
func (r *runner) artifacts() error {
	rng := rand.New(rand.NewChaCha8([32]byte{'o', 't', 'a'}))
	a := make([]byte, r.cfg.ArtifactSize)
	for i := 0; i+8 <= len(a); i += 8 {
		v := rng.Uint64()
		for k := range 8 {
			a[i+k] = byte(v >> (8 * k))
		}
	}
	full := filepath.Join(r.dir, "agent-"+fullVersion)
	if err := os.WriteFile(full, a, 0o600); err != nil {
		return fmt.Errorf("write artifact: %w", err)
	}
	r.releases = []benchRelease{{fullRelease, fullVersion, full}}
	var base, next []byte
	if r.cfg.Rebuilt() {
		var err error
		if base, err = readArtifact(r.cfg.BaseArtifact); err != nil {
			return err
		}
		if next, err = readArtifact(r.cfg.Artifact); err != nil {
			return err
		}
		r.releases = append(r.releases,
			benchRelease{rebuiltBaseRelease, rebuiltBaseVersion, r.cfg.BaseArtifact},
			benchRelease{rebuiltRelease, rebuiltVersion, r.cfg.Artifact})
		r.res.Artifacts = [2]ArtifactInfo{describe(r.cfg.BaseArtifact, base), describe(r.cfg.Artifact, next)}
	} else {
		base, next = a, changed(a, r.cfg.ChangedRegions, r.cfg.ChangedBytes, rng)
		delta := filepath.Join(r.dir, "agent-"+deltaVersion)
		if err := os.WriteFile(delta, next, 0o600); err != nil {
			return fmt.Errorf("write artifact: %w", err)
		}
		r.releases = append(r.releases, benchRelease{deltaRelease, deltaVersion, delta})
		r.res.Artifacts = [2]ArtifactInfo{describe(full, base), describe(delta, next)}
	}
	r.res.ChangedBytes = changedBytes(base, next)
	return nil
}

// readArtifact reads a build of the agent, of at most maxArtifact bytes.
func readArtifact(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("agent build: %w", err)
	}
	defer f.Close()
	if fi, err := f.Stat(); err == nil && fi.Size() > maxArtifact {
		return nil, fmt.Errorf("agent build %s: %d bytes, over %d", path, fi.Size(), maxArtifact)
	}
	b, err := io.ReadAll(io.LimitReader(f, maxArtifact+1))
	switch {
	case err != nil:
		return nil, fmt.Errorf("agent build %s: %w", path, err)
	case len(b) == 0 || len(b) > maxArtifact:
		return nil, fmt.Errorf("agent build %s: size outside 1..%d bytes", path, maxArtifact)
	}
	return b, nil
}

func describe(path string, b []byte) ArtifactInfo {
	sum := sha256.Sum256(b)
	return ArtifactInfo{File: filepath.Base(path), Size: int64(len(b)), SHA256: hex.EncodeToString(sum[:])}
}

// changedBytes counts the bytes of b that differ from a at the same offset
// or lie past a's end.
func changedBytes(a, b []byte) int64 {
	n := int64(max(len(b)-len(a), 0))
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			n++
		}
	}
	return n
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

// createReleases makes a signing key, trusts it on the hub, and creates the
// releases, uploading their artifacts.
func (r *runner) createReleases(ctx context.Context) error {
	done := r.step("making the key and the releases")
	key := filepath.Join(r.dir, "bench")
	steps := [][]string{
		{"release", "keygen", "--out", key},
		{"release", "trust", "add", key + ".pub", "--kubeconfig", r.kubeconfig},
	}
	for _, rl := range r.releases {
		steps = append(steps, []string{"release", "create", rl.name, "--version", rl.version, "--component", "agent@" + simOS + "/" + simArch + "=" + rl.file,
			"--key", key + ".key", "--kubeconfig", r.kubeconfig, "-o", filepath.Join(r.dir, rl.name+".json")})
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

// labelRebuilt labels the first RebuiltNodes nodes, which the rollouts
// of the agent's builds select, as an operator would.
func (r *runner) labelRebuilt(ctx context.Context) error {
	patch := []byte(`{"metadata":{"labels":{"` + rebuiltLabel + `":"` + rebuiltValue + `"}}}`)
	for i := range r.cfg.RebuiltNodes {
		if _, err := r.cs.CoreV1().Nodes().Patch(ctx, nodeName(i), types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			return fmt.Errorf("label node %s: %w", nodeName(i), err)
		}
	}
	return nil
}

var rolloutsGVR = fwv1.SchemeGroupVersion.WithResource("rollouts")

// rollout creates a Rollout of release over the nodes selector picks
// ("": every node), which are the fleet's nodes at idx, and waits for
// them to commit version, cutting the links of cuts nodes mid-transfer in
// its last wave.
func (r *runner) rollout(ctx context.Context, name, release, version string, idx []int, selector string, cuts int) (RolloutResult, error) {
	n := len(idx)
	res := RolloutResult{Release: release, Version: version, Nodes: n}
	steps, err := rollout.ParseWaves(r.cfg.Waves)
	if err != nil {
		return res, err
	}
	downBefore := make([]int64, len(r.fleet.nodes))
	for i, nd := range r.fleet.nodes {
		downBefore[i] = nd.relay.Counts().Down
	}
	// Nodes are cut once the last wave has begun: the earlier waves'
	// targets are committed.
	cutAfter := 0
	if len(steps) > 1 {
		cutAfter = stepNodes(steps[len(steps)-2], n)
	}
	wireBefore := r.fleet.wire(idx)
	cpu0, _ := childhub.ReadProc(r.hubPID())
	self0, _ := childhub.ReadProc("self")

	done := r.step(fmt.Sprintf("rolling out %s to %s nodes in waves %s", version, report.Count(int64(n)), r.cfg.Waves))
	created := time.Now()
	args := []string{"rollout", "create", name, "--release", release, "--waves", r.cfg.Waves,
		"--health-window", r.cfg.HealthWindow.String(), "--kubeconfig", r.kubeconfig}
	if selector != "" {
		args = append(args, "--selector", selector)
	}
	if err := r.outpost(ctx, args...); err != nil {
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
	res.WirePerNode = float64(r.fleet.wire(idx)-wireBefore) / float64(n)
	if err := ctx.Err(); err != nil {
		return res, err
	}

	// Each node's commit, and its time from fetch to commit.
	var commits []time.Time
	var lat []time.Duration
	for _, i := range idx {
		if t, ok := r.fleet.nodes[i].slots.Times(version); ok && !t.Commit.IsZero() {
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
		rl.Disarm() // a cut that never came does not come later
		if d := rl.CutDown(); d > 0 {
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
		down := nd.relay.Counts().Down
		if down-downBefore[i] > int64(r.cfg.ArtifactSize)/4 {
			continue // under way already
		}
		nd.relay.ArmCut(int64(r.cfg.ArtifactSize)/2, r.cfg.CutFor)
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
