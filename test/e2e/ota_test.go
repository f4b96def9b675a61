package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	fwv1 "github.com/outpost-mesh/outpost/firmware/apis/v1"
	"github.com/outpost-mesh/outpost/internal/netem"
)

// otaTimeout bounds a rollout of two waves over three nodes: each node
// fetches a race-built agent of some 60 MB, restarts into it and proves
// healthy, and each wave is held for its health window.
const otaTimeout = 4 * time.Minute

// edgeBuilds holds the outpost-edge binaries built in this run, by
// version, in binDir: the tests of one version share one.
var edgeBuilds struct {
	sync.Mutex
	bins map[string]string
}

// buildEdge builds cmd/outpost-edge as agent version, once per run, with
// -race when the tests run with it, as the hub's binary is.
func buildEdge(t *testing.T, version string) string {
	t.Helper()
	edgeBuilds.Lock()
	defer edgeBuilds.Unlock()
	if bin, ok := edgeBuilds.bins[version]; ok {
		return bin
	}
	bin := filepath.Join(binDir, "outpost-edge-"+version)
	args := []string{"build", "-tags=grpcnotrace", "-o", bin,
		"-ldflags", "-X github.com/outpost-mesh/outpost/internal/version.Version=" + version}
	if raceEnabled {
		args = append(args, "-race")
	}
	args = append(args, "github.com/outpost-mesh/outpost/cmd/outpost-edge")
	ctx, cancel := context.WithTimeout(context.Background(), buildTimeout)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "go", args...).CombinedOutput(); err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	if edgeBuilds.bins == nil {
		edgeBuilds.bins = map[string]string{}
	}
	edgeBuilds.bins[version] = bin
	return bin
}

// outpostCmd runs the outpost binary with args against h, and fails the
// test unless it succeeds; it returns what it printed.
func outpostCmd(t *testing.T, h *syncHub, args ...string) string {
	t.Helper()
	cmd := exec.Command(outpostBinary(t), args...)
	cmd.Env = append(cmd.Environ(), "KUBECONFIG="+filepath.Join(h.dataDir, "admin.kubeconfig"))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("outpost %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// startOTAFleet starts a hub of a fleet whose agents run edgeBin, with a
// release key made in keys (ops.key, ops.pub) that the hub trusts;
// hubFlags are more flags of the hub.
func startOTAFleet(t *testing.T, edgeBin string, hubFlags ...string) (f *fleet, h *syncHub, keys string) {
	t.Helper()
	f = newFleet(t)
	f.edgeBin = edgeBin
	h = f.startHub(hubFlags...)
	keys = t.TempDir()
	outpostCmd(t, h, "release", "keygen", "--out", filepath.Join(keys, "ops"))
	outpostCmd(t, h, "release", "trust", "add", filepath.Join(keys, "ops.pub"))
	return f, h, keys
}

var rolloutsResource = schema.GroupVersionResource{Group: fwv1.GroupName, Version: "v1", Resource: "rollouts"}

// TestOTARollout: three agents, one on containerd, run agent version
// 1.0.0; a release of agent 2.0.0, signed with a key the hub trusts, is
// rolled out in two waves. Every node fetches it over its sync
// connection, restarts into it, proves healthy and commits; the
// containerd node's pod keeps its container through the switch; the
// Nodes say the new version, and the rollout completes.
func TestOTARollout(t *testing.T) {
	if !enterContainerdTest(t) {
		return
	}
	v1 := buildEdge(t, "1.0.0")
	v2 := buildEdge(t, "2.0.0")

	f, h, keys := startOTAFleet(t, v1)
	out := outpostCmd(t, h, "release", "create", "agent-2-0-0", "--version", "2.0.0",
		"--component", "agent="+v2, "--key", filepath.Join(keys, "ops.key"), "-o", filepath.Join(keys, "release.json"))
	f.logf("release created:\n%s", out)

	// Three nodes on agent 1.0.0, each running a pod.
	const image = "outpost.test/ota:1"
	// Downloads uncapped: the test's hub and nodes share two cores.
	ctrd, _ := startContainerdEdge(f, h, "store-ota", "e2e-ota-c", image, nil, "--ota-bandwidth", "0")
	token, caHash := h.createToken("store-ota")
	f.startEdge(h, "e2e-ota-1", token, caHash, "--ota-bandwidth", "0")
	f.startEdge(h, "e2e-ota-2", token, caHash, "--ota-bandwidth", "0")
	names := []string{"e2e-ota-c", "e2e-ota-1", "e2e-ota-2"}
	for _, n := range names {
		image := "nginx:1.27"
		if n == ctrd.name {
			image = "outpost.test/ota:1"
		}
		p := newPod("pod-"+n, n, image)
		if n == ctrd.name {
			p.Spec.Containers[0].Command = []string{"sleep", "3600"}
		}
		h.createPod(p)
	}
	before := map[string]string{}
	f.eventually(joinTimeout, "every node Ready on 1.0.0 with its pod running", func() (bool, string) {
		for _, n := range names {
			node, err := h.node(n)
			if err != nil {
				return false, apiProblem(err)
			}
			if v := node.Status.NodeInfo.KubeletVersion; !strings.HasSuffix(v, "+1.0.0") {
				return false, n + " runs " + v
			}
			p, err := h.pod("pod-" + n)
			if err != nil {
				return false, apiProblem(err)
			}
			if prob := runningProblem(p); prob != "" {
				return false, n + ": " + prob
			}
			before[n] = mainStatus(p).ContainerID
		}
		return true, ""
	})

	out = outpostCmd(t, h, "rollout", "create", "to-2-0-0", "--release", "agent-2-0-0",
		"--selector", "topology.outpost.dev/site=store-ota", "--waves", "1,100%", "--health-window", "15s",
		"--failure-budget", "1")
	f.logf("rollout created:\n%s", out)

	f.eventually(otaTimeout, "the rollout complete", func() (bool, string) {
		ro, why := getRolloutOf(t, h, "to-2-0-0")
		return ro != nil && rolloutComplete(ro), why
	})
	for _, n := range names {
		node, err := h.node(n)
		if err != nil {
			t.Fatal(err)
		}
		if v := node.Status.NodeInfo.KubeletVersion; !strings.HasSuffix(v, "+2.0.0") {
			t.Errorf("node %s runs %s after the rollout, want 2.0.0", n, v)
		}
		state, err := fwv1.DecodeNodeFirmware(node.Annotations[fwv1.AnnotationState])
		if err != nil || state.Version != "2.0.0" || state.State != fwv1.StateUpdated {
			t.Errorf("node %s firmware state %+v (%v), want 2.0.0 Updated", n, state, err)
		}
		if state != nil && state.Transfer != nil && state.Transfer.Received > state.Transfer.Full*11/10 {
			t.Errorf("node %s received %d bytes of a %d-byte release", n, state.Transfer.Received, state.Transfer.Full)
		}
	}
	// The containerd node's container ran through the switch.
	f.eventually(30*time.Second, "the containerd node's pod running", func() (bool, string) {
		p, err := h.pod("pod-" + ctrd.name)
		if err != nil {
			return false, apiProblem(err)
		}
		if prob := runningProblem(p); prob != "" {
			return false, prob
		}
		if id := mainStatus(p).ContainerID; id != before[ctrd.name] {
			t.Fatalf("the pod's container changed from %s to %s across the update", before[ctrd.name], id)
		}
		return true, ""
	})
	k := newKubectl(t, "1.33")
	k.kubeconfig = filepath.Join(h.dataDir, "admin.kubeconfig")
	wide := k.run(t, "get", "nodes", "-o", "wide").stdout
	f.logf("kubectl get nodes -o wide:\n%s", wide)
	if strings.Count(wide, "+2.0.0") != len(names) {
		t.Errorf("kubectl get nodes -o wide does not show 2.0.0 on every node:\n%s", wide)
	}
	f.logf("kubectl get rollouts:\n%s", k.run(t, "get", "rollouts").stdout)
}

// getRolloutOf returns Rollout name of h, or nil and why not; with the
// rollout, a summary of its status.
func getRolloutOf(t *testing.T, h *syncHub, name string) (*unstructured.Unstructured, string) {
	t.Helper()
	dyn, err := dynamic.NewForConfig(h.rest)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := h.ctx()
	defer cancel()
	ro, err := dyn.Resource(rolloutsResource).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, apiProblem(err)
	}
	return ro, rolloutSummary(ro)
}

func rolloutComplete(ro *unstructured.Unstructured) bool { return rolloutCondition(ro, "Complete") }

func rolloutSummary(ro *unstructured.Unstructured) string {
	st, _, _ := unstructured.NestedMap(ro.Object, "status")
	nodes, _, _ := unstructured.NestedSlice(ro.Object, "status", "nodes")
	return fmt.Sprintf("wave %v updated %v failed %v pending %v nodes %v", st["wave"], st["updated"], st["failed"], st["pending"], nodes)
}

// TestOTAFailedRelease: a release whose agent exits at start. The first
// wave's node, under the agent's supervisor, takes it, crashes in its
// trial, and is back on its committed version at the next start, which
// reports why; the failure budget trips and pauses the rollout, the
// second wave is never offered the release, and the node that failed is
// never offered it again.
func TestOTAFailedRelease(t *testing.T) {
	testOTABadAgent(t, "crash", "#!/bin/sh\necho crashing agent >&2\nexit 3\n", 30*time.Second, "CrashedInTrial")
}

// TestOTANeverConnects: as TestOTAFailedRelease, with a release whose
// agent starts and runs but never connects to the hub, nor commits, nor
// reverts itself: the supervisor stops it once its health window is over
// (plus its hang grace) and the node is back on its committed version,
// which reports the window expired.
func TestOTANeverConnects(t *testing.T) {
	testOTABadAgent(t, "hang", "#!/bin/sh\necho agent that never connects >&2\nexec sleep 3600\n", 20*time.Second, "HealthWindowExpired")
}

// testOTABadAgent rolls out a release of script, a bad agent, over two
// nodes of version 1.0.0 under their supervisor, in waves 1 and 100% with
// the health window given and a failure budget of 1: the first wave's
// node reverts with reason, the budget pauses the rollout, and neither
// node is offered the release again.
func testOTABadAgent(t *testing.T, kind, script string, window time.Duration, reason string) {
	skipShort(t)
	t.Parallel()
	v1 := buildEdge(t, "1.0.0")
	bad := filepath.Join(t.TempDir(), kind+"-agent")
	if err := os.WriteFile(bad, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}

	f, h, keys := startOTAFleet(t, v1)
	outpostCmd(t, h, "release", "create", "agent-3-0-0", "--version", "3.0.0",
		"--component", "agent@"+runtime.GOOS+"/"+runtime.GOARCH+"="+bad, "--key", filepath.Join(keys, "ops.key"), "-o", filepath.Join(keys, "release.json"))

	site := "store-" + kind
	token, caHash := h.createToken(site)
	names := []string{"e2e-" + kind + "-1", "e2e-" + kind + "-2"}
	for _, n := range names {
		f.startEdge(h, n, token, caHash, "--supervise", "--ota-bandwidth", "0")
	}
	f.eventually(joinTimeout, "both nodes Ready on 1.0.0", func() (bool, string) {
		for _, n := range names {
			node, err := h.node(n)
			if err != nil {
				return false, apiProblem(err)
			}
			if v := node.Status.NodeInfo.KubeletVersion; !strings.HasSuffix(v, "+1.0.0") {
				return false, n + " runs " + v
			}
		}
		return true, ""
	})
	outpostCmd(t, h, "rollout", "create", "to-3-0-0", "--release", "agent-3-0-0",
		"--selector", "topology.outpost.dev/site="+site, "--waves", "1,100%", "--health-window", window.String(),
		"--failure-budget", "1")

	var failed string
	f.eventually(otaTimeout, "the rollout paused by its failure budget", func() (bool, string) {
		ro, why := getRolloutOf(t, h, "to-3-0-0")
		if ro == nil {
			return false, why
		}
		paused, _, _ := unstructured.NestedBool(ro.Object, "spec", "paused")
		if !paused || !rolloutCondition(ro, "BudgetExceeded") {
			return false, rolloutSummary(ro)
		}
		for _, n := range names {
			node, err := h.node(n)
			if err != nil {
				return false, apiProblem(err)
			}
			if node.Annotations[fwv1.AnnotationFailedVersions] == "3.0.0" {
				failed = n
			}
		}
		return failed != "", "no node records 3.0.0 failed"
	})
	other := names[0]
	if other == failed {
		other = names[1]
	}
	node, err := h.node(failed)
	if err != nil {
		t.Fatal(err)
	}
	state, err := fwv1.DecodeNodeFirmware(node.Annotations[fwv1.AnnotationState])
	if err != nil || state.State != fwv1.StateReverted || state.Reason != reason {
		t.Errorf("failed node %s says %+v (%v), want Reverted, %s", failed, state, err, reason)
	}
	if _, offered := node.Annotations[fwv1.AnnotationOffer]; offered {
		t.Errorf("node %s is still offered the release that failed on it", failed)
	}
	// The node came back on its committed version, as its Node says.
	f.eventually(30*time.Second, failed+" on 1.0.0 again", func() (bool, string) {
		node, err := h.node(failed)
		if err != nil {
			return false, apiProblem(err)
		}
		v := node.Status.NodeInfo.KubeletVersion
		return strings.HasSuffix(v, "+1.0.0"), v
	})
	if n, err := h.node(other); err != nil || n.Annotations[fwv1.AnnotationOffer] != "" {
		t.Errorf("the second wave's node %s was offered the release: %v %v", other, n.Annotations, err)
	}
	f.logf("kubectl get rollouts:\n%s", outpostCmd(t, h, "rollout", "status", "to-3-0-0"))
}

func rolloutCondition(ro *unstructured.Unstructured, typ string) bool {
	conds, _, _ := unstructured.NestedSlice(ro.Object, "status", "conditions")
	for _, c := range conds {
		m, _ := c.(map[string]any)
		if m["type"] == typ && m["status"] == string(corev1.ConditionTrue) {
			return true
		}
	}
	return false
}

// TestOTAResume: the uplink of a node that is downloading a release is
// cut for 20s (its relay black-holes); the download resumes from the last
// good chunk once the link is back, the node installs and commits the
// release, and it received less than 1.1 times the artifact.
func TestOTAResume(t *testing.T) {
	skipShort(t)
	t.Parallel()
	v1 := buildEdge(t, "1.0.0")
	v2 := buildEdge(t, "2.0.0")
	f, h, keys := startOTAFleet(t, v1)
	outpostCmd(t, h, "release", "create", "agent-2-0-0", "--version", "2.0.0",
		"--component", "agent="+v2, "--key", filepath.Join(keys, "ops.key"), "-o", filepath.Join(keys, "release.json"))

	token, caHash := h.createToken("store-cut")
	const name = "e2e-cut-1"
	// Capped, so that the download lasts long enough to be cut.
	e := f.startEdge(h, name, token, caHash, "--ota-bandwidth", "4MiB")
	f.eventually(joinTimeout, "the node Ready on 1.0.0", func() (bool, string) {
		node, err := h.node(name)
		if err != nil {
			return false, apiProblem(err)
		}
		v := node.Status.NodeInfo.KubeletVersion
		return strings.HasSuffix(v, "+1.0.0"), v
	})
	outpostCmd(t, h, "rollout", "create", "to-2-0-0", "--release", "agent-2-0-0",
		"--selector", "topology.outpost.dev/site=store-cut", "--waves", "100%", "--health-window", "10s")

	firmware := func() (*fwv1.NodeFirmware, string) {
		node, err := h.node(name)
		if err != nil {
			return nil, apiProblem(err)
		}
		s, err := fwv1.DecodeNodeFirmware(node.Annotations[fwv1.AnnotationState])
		if err != nil {
			return nil, err.Error()
		}
		return s, fmt.Sprintf("%+v %+v", s, s.Transfer)
	}
	f.eventually(otaTimeout, "the download under way", func() (bool, string) {
		s, why := firmware()
		return s != nil && s.State == fwv1.StateDownloading && s.Transfer != nil && s.Transfer.Received > 0 &&
			s.Transfer.Received < s.Transfer.Full/2, why
	})
	e.relay.Set(netem.Conditions{Blackhole: true})
	f.logf("uplink of %s black-holed", name)
	cutAt := time.Now()
	f.waitUntil(cutAt.Add(20*time.Second), "the uplink to come back")
	e.relay.Set(netem.Conditions{})
	f.logf("uplink of %s back", name)

	var got *fwv1.NodeFirmware
	f.eventually(otaTimeout, "the release installed and committed", func() (bool, string) {
		s, why := firmware()
		got = s
		return s != nil && s.State == fwv1.StateUpdated && s.Version == "2.0.0", why
	})
	tr := got.Transfer
	if tr == nil || tr.Resumes < 1 || tr.Received > tr.Full*11/10 {
		t.Fatalf("transfer %+v: want at least one resume and under 1.1x the artifact", tr)
	}
	f.logf("received %d bytes of a %d-byte artifact (%.3fx) over %d resumes", tr.Received, tr.Full, float64(tr.Received)/float64(tr.Full), tr.Resumes)
}

// TestOTAOfflineNode: of two nodes, one is down (its agent killed, its
// Node no longer Ready) when the rollout's only wave starts. The wave
// does not wait for it: the other node updates and the rollout completes.
// When the node comes back, the rollout, complete but still there,
// offers it the release and it updates too.
func TestOTAOfflineNode(t *testing.T) {
	skipShort(t)
	t.Parallel()
	v1 := buildEdge(t, "1.0.0")
	v2 := buildEdge(t, "2.0.0")
	f, h, keys := startOTAFleet(t, v1, "--node-monitor-grace-period", "20s")
	outpostCmd(t, h, "release", "create", "agent-2-0-0", "--version", "2.0.0",
		"--component", "agent="+v2, "--key", filepath.Join(keys, "ops.key"), "-o", filepath.Join(keys, "release.json"))

	token, caHash := h.createToken("store-off")
	names := []string{"e2e-off-1", "e2e-off-2"}
	edges := map[string]*edge{}
	for _, n := range names {
		edges[n] = f.startEdge(h, n, token, caHash, "--ota-bandwidth", "0")
	}
	version := func(name string) (string, string) {
		node, err := h.node(name)
		if err != nil {
			return "", apiProblem(err)
		}
		v := node.Status.NodeInfo.KubeletVersion
		return v, name + " runs " + v
	}
	f.eventually(joinTimeout, "both nodes Ready on 1.0.0", func() (bool, string) {
		for _, n := range names {
			if v, why := version(n); !strings.HasSuffix(v, "+1.0.0") {
				return false, why
			}
		}
		return true, ""
	})
	away := edges["e2e-off-2"]
	away.kill()
	f.eventually(time.Minute, "e2e-off-2 not Ready", func() (bool, string) {
		node, err := h.node("e2e-off-2")
		if err != nil {
			return false, apiProblem(err)
		}
		st := readyStatus(node)
		return st != "" && st != corev1.ConditionTrue, "Ready=" + string(st)
	})

	outpostCmd(t, h, "rollout", "create", "to-2-0-0", "--release", "agent-2-0-0",
		"--selector", "topology.outpost.dev/site=store-off", "--waves", "100%", "--health-window", "10s")
	rollout := func() (*unstructured.Unstructured, string) { return getRolloutOf(t, h, "to-2-0-0") }
	f.eventually(otaTimeout, "the rollout complete without the node that is down", func() (bool, string) {
		ro, why := rollout()
		return ro != nil && rolloutComplete(ro), why
	})
	if v, _ := version("e2e-off-1"); !strings.HasSuffix(v, "+2.0.0") {
		t.Errorf("e2e-off-1 runs %s after the rollout completed, want 2.0.0", v)
	}
	if v, _ := version("e2e-off-2"); !strings.HasSuffix(v, "+1.0.0") {
		t.Fatalf("e2e-off-2, down, says it runs %s", v)
	}

	away.start()
	f.logf("e2e-off-2 back")
	f.eventually(otaTimeout, "e2e-off-2 updated after it came back", func() (bool, string) {
		v, why := version("e2e-off-2")
		if !strings.HasSuffix(v, "+2.0.0") {
			return false, why
		}
		ro, why := rollout()
		updated, _, _ := unstructured.NestedInt64(ro.Object, "status", "updated")
		return updated == 2, why
	})
	f.logf("kubectl get rollouts:\n%s", outpostCmd(t, h, "rollout", "status", "to-2-0-0"))
}

// TestOTASiteShare: three nodes of one site, each an agent on its own
// containerd in its own network namespace on the site's LAN, with the
// site's mesh; a rollout in waves 1 and 100%. The first wave's node
// fetches the release from the hub; the two others take it from their
// site peer over the LAN, every chunk checked against the manifest, so
// the artifact crosses the site's uplinks once.
func TestOTASiteShare(t *testing.T) {
	if !enterContainerdTest(t) {
		return
	}
	if _, err := exec.LookPath("nsenter"); err != nil {
		t.Skip("needs nsenter(1), from Debian's util-linux, to start each agent in its node's network namespace")
	}
	v1 := buildEdge(t, "1.0.0")
	v2 := buildEdge(t, "2.0.0")
	const site = "store-73"
	lan := newSiteLAN(t, lanHub)
	f := newFleet(t)
	f.edgeBin = v1
	h := startLANHub(f, lanHub)
	keys := t.TempDir()
	outpostCmd(t, h, "release", "keygen", "--out", filepath.Join(keys, "ops"))
	outpostCmd(t, h, "release", "trust", "add", filepath.Join(keys, "ops.pub"))
	outpostCmd(t, h, "release", "create", "agent-2-0-0", "--version", "2.0.0",
		"--component", "agent="+v2, "--key", filepath.Join(keys, "ops.key"), "-o", filepath.Join(keys, "release.json"))

	var es []*edge
	for i, name := range []string{"e2e-fw-a", "e2e-fw-b", "e2e-fw-c"} {
		netns := lan.addNode(t, "node-"+strings.TrimPrefix(name, "e2e-fw-"), netip.AddrFrom4([4]byte{192, 168, 70, byte(2 + i)}))
		e, _ := startShareNode(f, h, netns, site, name, "--ota-bandwidth", "0")
		es = append(es, e)
	}
	waitSiteSharing(f, h, es)

	outpostCmd(t, h, "rollout", "create", "to-2-0-0", "--release", "agent-2-0-0",
		"--selector", "topology.outpost.dev/site="+site, "--waves", "1,100%", "--health-window", "10s")
	f.eventually(otaTimeout, "the rollout complete", func() (bool, string) {
		ro, why := getRolloutOf(t, h, "to-2-0-0")
		return ro != nil && rolloutComplete(ro), why
	})
	var uplink, full int64
	fromHub := 0
	for _, e := range es {
		node, err := h.node(e.name)
		if err != nil {
			t.Fatal(err)
		}
		st, err := fwv1.DecodeNodeFirmware(node.Annotations[fwv1.AnnotationState])
		if err != nil || st.Version != "2.0.0" || st.State != fwv1.StateUpdated || st.Transfer == nil {
			t.Fatalf("%s firmware state %+v (%v), want 2.0.0 Updated with its transfer", e.name, st, err)
		}
		tr := st.Transfer
		f.logf("%s received %d bytes of a %d-byte release, %d of them from its site peers", e.name, tr.Received, tr.Full, tr.FromPeers)
		uplink += tr.Received - tr.FromPeers
		full = tr.Full
		if tr.FromPeers < tr.Full {
			fromHub++
		}
	}
	if fromHub != 1 || uplink > full*11/10 {
		t.Errorf("%d nodes fetched from the hub, %d bytes over the site's uplinks for a %d-byte release: want one node, under 1.1x the release", fromHub, uplink, full)
	}
}

// TestOTAKillLoop: the agent is killed with SIGKILL at each step of an
// update, after the download, after the slot is written, and in the
// trial, and started again as systemd would start it (the binary it was
// installed with, which boots what the update state names). Every time
// the node comes back on a committed or trial slot and ends on one
// version, the one its Node says, with its pod running: updated when the
// kill came before the trial's first start, reverted when it came in the
// trial (a kill just after the slot is written may land on either side).
func TestOTAKillLoop(t *testing.T) {
	skipShort(t)
	t.Parallel()
	v1 := buildEdge(t, "1.0.0")
	v2 := buildEdge(t, "2.0.0")
	f, h, keys := startOTAFleet(t, v1)

	token, caHash := h.createToken("store-kill")
	const name = "e2e-kill-1"
	e := f.startEdge(h, name, token, caHash, "--ota-bandwidth", "0")
	h.createPod(newPod("pod-kill", name, "nginx:1.27"))
	// The agent binary of the committed version: the releases all carry
	// the agent built as 2.0.0.
	committedBinary := "1.0.0"

	dyn, err := dynamic.NewForConfig(h.rest)
	if err != nil {
		t.Fatal(err)
	}
	for i, step := range []struct {
		name, logLine string
		want          fwv1.FirmwareState // "" for either
	}{
		{"after the download", `msg="firmware: release fetched and verified"`, fwv1.StateUpdated},
		{"after the slot is written", `msg="installed agent"`, ""},
		{"in the trial", `version=2.0.3 trial=true`, fwv1.StateReverted},
	} {
		version := fmt.Sprintf("2.0.%d", i+1)
		release, rollout := "agent-2-0-"+fmt.Sprint(i+1), "to-2-0-"+fmt.Sprint(i+1)
		outpostCmd(t, h, "release", "create", release, "--version", version,
			"--component", "agent="+v2, "--key", filepath.Join(keys, "ops.key"), "-o", filepath.Join(keys, release+".json"))
		seen := len(e.logLines(step.logLine))
		outpostCmd(t, h, "rollout", "create", rollout, "--release", release,
			"--selector", "topology.outpost.dev/site=store-kill", "--waves", "100%", "--health-window", "15s",
			"--failure-budget", "5")
		f.eventually(otaTimeout, name+" reaching the step "+step.name, func() (bool, string) {
			return len(e.logLines(step.logLine)) > seen, "not yet"
		})
		e.kill()
		f.logf("killed %s %s (%s)", name, step.name, version)
		e.start()

		var got fwv1.FirmwareState
		f.eventually(otaTimeout, name+" settled on one version", func() (bool, string) {
			node, err := h.node(name)
			if err != nil {
				return false, apiProblem(err)
			}
			s, err := fwv1.DecodeNodeFirmware(node.Annotations[fwv1.AnnotationState])
			if err != nil {
				return false, err.Error()
			}
			runs := committedBinary
			switch {
			case s.Target != version:
				return false, fmt.Sprintf("%+v", s)
			case s.State == fwv1.StateUpdated && s.Version == version:
				runs = "2.0.0"
			case s.State == fwv1.StateReverted:
			default:
				return false, fmt.Sprintf("%+v", s)
			}
			if v := node.Status.NodeInfo.KubeletVersion; !strings.HasSuffix(v, "+"+runs) {
				return false, fmt.Sprintf("runs %s, want %s (%s)", v, runs, s.State)
			}
			p, err := h.pod("pod-kill")
			if err != nil {
				return false, apiProblem(err)
			}
			if prob := runningProblem(p); prob != "" {
				return false, prob
			}
			got = s.State
			return true, ""
		})
		f.logf("killed %s: %s", step.name, got)
		if step.want != "" && got != step.want {
			t.Errorf("killed %s: the node ended %s, want %s", step.name, got, step.want)
		}
		if got == fwv1.StateUpdated {
			committedBinary = "2.0.0"
		}
		ctx, cancel := h.ctx()
		err := dyn.Resource(rolloutsResource).Delete(ctx, rollout, metav1.DeleteOptions{})
		cancel()
		if err != nil {
			t.Fatal(err)
		}
	}
}
