package firmwarerollout

import (
	"context"
	"fmt"
	"log/slog"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	fakediscovery "k8s.io/client-go/discovery/fake"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/kubernetes/scheme"
	metadatafake "k8s.io/client-go/metadata/fake"
	"k8s.io/client-go/tools/record"
	testingclock "k8s.io/utils/clock/testing"

	fwv1 "github.com/outpost-mesh/outpost/firmware/apis/v1"
	"github.com/outpost-mesh/outpost/hub/controllers"
	"github.com/outpost-mesh/outpost/internal/testlog"
	"github.com/outpost-mesh/outpost/internal/wait"
	"github.com/outpost-mesh/outpost/sync/wire"
)

var t0 = time.Date(2026, 3, 2, 10, 0, 0, 0, time.UTC)

const (
	oldVersion = "1.3.0"
	newVersion = "1.4.0"
)

// harness runs one Controller against fake clients; its sync steps are
// called directly, after the caches caught up with the clients.
type harness struct {
	t      *testing.T
	ctx    context.Context
	clk    *testingclock.FakeClock
	client *fake.Clientset
	dyn    *dynamicfake.FakeDynamicClient
	rc     *Controller
	rec    *record.FakeRecorder
}

func newHarness(t *testing.T, nodes []*corev1.Node, objs ...runtime.Object) *harness {
	t.Helper()
	return build(t, true, nodes, objs)
}

// build makes a harness; startOwn starts the controller's own informers,
// which Run starts otherwise.
func build(t *testing.T, startOwn bool, nodes []*corev1.Node, objs []runtime.Object) *harness {
	t.Helper()
	defer func() {
		t.Cleanup(func() { goleak.VerifyNone(t, goleak.IgnoreCurrent()) })
	}()
	h := &harness{t: t, ctx: t.Context(), clk: testingclock.NewFakeClock(t0), rec: record.NewFakeRecorder(1000)}
	typed := make([]runtime.Object, len(nodes))
	for i, n := range nodes {
		typed[i] = n
	}
	h.client = fake.NewClientset(typed...)
	h.dyn = dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{
		RolloutsResource: "RolloutList", ReleasesResource: "ReleaseList",
	}, objs...)
	inf := informers.NewSharedInformerFactory(h.client, 0)
	rc, err := New(controllers.Context{
		Client: h.client, Metadata: metadatafake.NewSimpleMetadataClient(scheme.Scheme), Dynamic: h.dyn,
		Informers: inf, Clock: h.clk, Logger: testlog.New(t, slog.LevelInfo),
		Events: func(string) record.EventRecorder { return h.rec },
	}, DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	h.rc = rc
	stop := make(chan struct{})
	inf.Start(stop)
	if startOwn {
		rc.factory.Start(stop)
	}
	t.Cleanup(func() {
		close(stop)
		inf.Shutdown()
		if startOwn {
			rc.factory.Shutdown()
			rc.queue.ShutDown()
		}
	})
	return h
}

// caught waits until the controller's caches hold what the clients hold.
func (h *harness) caught() {
	h.t.Helper()
	wait.For(h.t, 10*time.Second, "caches to catch up", func() (bool, string) {
		nl, err := h.client.CoreV1().Nodes().List(h.ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		for i := range nl.Items {
			c, err := h.rc.nodes.Get(nl.Items[i].Name)
			if err != nil || !reflect.DeepEqual(c, &nl.Items[i]) {
				return false, "node " + nl.Items[i].Name
			}
		}
		if cached, _ := h.rc.nodes.List(labels.Everything()); len(cached) != len(nl.Items) {
			return false, "node count"
		}
		for _, gvr := range []schema.GroupVersionResource{RolloutsResource, ReleasesResource} {
			ul, err := h.dyn.Resource(gvr).List(h.ctx, metav1.ListOptions{})
			if err != nil {
				return false, err.Error()
			}
			lister := h.rc.rollouts
			if gvr == ReleasesResource {
				lister = h.rc.releases
			}
			for i := range ul.Items {
				c, err := lister.Get(ul.Items[i].GetName())
				if err != nil || !reflect.DeepEqual(c, &ul.Items[i]) {
					return false, gvr.Resource + " " + ul.Items[i].GetName()
				}
			}
			if cached, _ := lister.List(labels.Everything()); len(cached) != len(ul.Items) {
				return false, gvr.Resource + " count"
			}
		}
		return true, ""
	})
}

// sync runs one sync of rollout name on caught-up caches.
func (h *harness) sync(name string) {
	h.t.Helper()
	h.caught()
	if err := h.rc.sync(h.ctx, name); err != nil {
		h.t.Fatalf("sync %s: %v", name, err)
	}
}

func (h *harness) node(name string) *corev1.Node {
	h.t.Helper()
	n, err := h.client.CoreV1().Nodes().Get(h.ctx, name, metav1.GetOptions{})
	if err != nil {
		h.t.Fatal(err)
	}
	return n
}

// offer returns the offer node name carries, nil for none.
func (h *harness) offer(name string) *fwv1.Offer {
	h.t.Helper()
	s, ok := h.node(name).Annotations[fwv1.AnnotationOffer]
	if !ok {
		return nil
	}
	o, err := fwv1.DecodeOffer(s)
	if err != nil {
		h.t.Fatalf("node %s offer: %v", name, err)
	}
	return o
}

// offered returns the nodes carrying an offer of action, sorted.
func (h *harness) offered(action fwv1.OfferAction) []string {
	h.t.Helper()
	nl, err := h.client.CoreV1().Nodes().List(h.ctx, metav1.ListOptions{})
	if err != nil {
		h.t.Fatal(err)
	}
	var out []string
	for _, n := range nl.Items {
		if o := h.offer(n.Name); o != nil && o.Action == action {
			out = append(out, n.Name)
		}
	}
	slices.Sort(out)
	return out
}

// report writes the node's firmware state as its agent would, now.
func (h *harness) report(name, committed string, state fwv1.FirmwareState, reason string) {
	h.t.Helper()
	nf := fwv1.NodeFirmware{Version: committed, Release: "rel", Target: newVersion, State: state, Reason: reason,
		Since: metav1.NewTime(h.clk.Now())}
	h.annotate(name, fwv1.AnnotationState, nf.Encode())
}

func (h *harness) annotate(name, key, value string) {
	h.t.Helper()
	n := h.node(name)
	if n.Annotations == nil {
		n.Annotations = map[string]string{}
	}
	n.Annotations[key] = value
	if _, err := h.client.CoreV1().Nodes().Update(h.ctx, n, metav1.UpdateOptions{}); err != nil {
		h.t.Fatal(err)
	}
}

func (h *harness) setReady(name string, ready bool) {
	h.t.Helper()
	n := h.node(name)
	n.Status.Conditions = readyCondition(ready, h.clk.Now())
	if _, err := h.client.CoreV1().Nodes().UpdateStatus(h.ctx, n, metav1.UpdateOptions{}); err != nil {
		h.t.Fatal(err)
	}
}

func (h *harness) rollout(name string) *fwv1.Rollout {
	h.t.Helper()
	u, err := h.dyn.Resource(RolloutsResource).Get(h.ctx, name, metav1.GetOptions{})
	if err != nil {
		h.t.Fatal(err)
	}
	ro, err := toRollout(u)
	if err != nil {
		h.t.Fatal(err)
	}
	return ro
}

func (h *harness) setPaused(name string, paused bool) {
	h.t.Helper()
	patch := fmt.Sprintf(`{"spec":{"paused":%t}}`, paused)
	if _, err := h.dyn.Resource(RolloutsResource).Patch(h.ctx, name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		h.t.Fatal(err)
	}
}

// events drains the recorded events.
func (h *harness) events() []string {
	var out []string
	for {
		select {
		case e := <-h.rec.Events:
			out = append(out, e)
		default:
			return out
		}
	}
}

// nodeStatus returns the rollout's status entry of node.
func nodeStatus(ro *fwv1.Rollout, node string) fwv1.NodeStatus {
	for _, ns := range ro.Status.Nodes {
		if ns.Name == node {
			return ns
		}
	}
	return fwv1.NodeStatus{}
}

func hasEvent(evs []string, prefix string) bool {
	return slices.ContainsFunc(evs, func(e string) bool { return strings.HasPrefix(e, prefix) })
}

func readyCondition(ready bool, at time.Time) []corev1.NodeCondition {
	s := corev1.ConditionTrue
	if !ready {
		s = corev1.ConditionFalse
	}
	return []corev1.NodeCondition{{Type: corev1.NodeReady, Status: s, LastTransitionTime: metav1.NewTime(at)}}
}

func newNode(name, site string, lbls map[string]string) *corev1.Node {
	l := map[string]string{wire.SiteLabel: site}
	for k, v := range lbls {
		l[k] = v
	}
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: l},
		Status:     corev1.NodeStatus{Conditions: readyCondition(true, t0.Add(-time.Hour))},
	}
}

func fleet(n int) []*corev1.Node {
	var out []*corev1.Node
	for i := range n {
		out = append(out, newNode(fmt.Sprintf("n%d", i), "s", map[string]string{"tier": "gw"}))
	}
	return out
}

func release(name, version string, verified metav1.ConditionStatus) *unstructured.Unstructured {
	rel := &fwv1.Release{
		TypeMeta:   metav1.TypeMeta{APIVersion: fwv1.SchemeGroupVersion.String(), Kind: "Release"},
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       fwv1.ReleaseSpec{Version: version},
		Status: fwv1.ReleaseStatus{Conditions: []metav1.Condition{{Type: fwv1.ReleaseVerified, Status: verified,
			Reason: "Checked", LastTransitionTime: metav1.NewTime(t0)}}},
	}
	return toUnstructured(rel)
}

func newRollout(name string, created time.Time, mod func(*fwv1.RolloutSpec)) *unstructured.Unstructured {
	ro := &fwv1.Rollout{
		TypeMeta:   metav1.TypeMeta{APIVersion: fwv1.SchemeGroupVersion.String(), Kind: "Rollout"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Generation: 1, CreationTimestamp: metav1.NewTime(created)},
		Spec: fwv1.RolloutSpec{Release: "rel", Waves: []string{"100%"},
			HealthWindow: &metav1.Duration{Duration: 5 * time.Minute}},
	}
	if mod != nil {
		mod(&ro.Spec)
	}
	return toUnstructured(ro)
}

func toUnstructured(obj any) *unstructured.Unstructured {
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		panic(err)
	}
	return &unstructured.Unstructured{Object: m}
}

func wantOffered(t *testing.T, h *harness, action fwv1.OfferAction, want ...string) {
	t.Helper()
	if got := h.offered(action); !slices.Equal(got, want) {
		t.Fatalf("nodes with a %s offer = %v, want %v", action, got, want)
	}
}

// TestWavesToComplete drives four nodes through two waves: the first node
// is offered alone, reports Downloading, Trial and Updated; after its
// health window the second wave offers the rest; after theirs the rollout
// is complete, with its Events.
func TestWavesToComplete(t *testing.T) {
	h := newHarness(t, fleet(4), release("rel", newVersion, metav1.ConditionTrue),
		newRollout("ro", t0, func(s *fwv1.RolloutSpec) { s.Waves = []string{"1", "100%"} }))
	h.sync("ro")
	wantOffered(t, h, fwv1.OfferInstall, "n0")
	if o := h.offer("n0"); o.Rollout != "ro" || o.Release != "rel" || o.Version != newVersion || o.HealthWindow.Duration != 5*time.Minute {
		t.Fatalf("offer = %+v", o)
	}
	if ro := h.rollout("ro"); ro.Status.Wave != 1 || ro.Status.Pending != 4 || nodeStatus(ro, "n0").State != "Offered" {
		t.Fatalf("status after the first sync: wave %d pending %d n0 %+v", ro.Status.Wave, ro.Status.Pending, nodeStatus(ro, "n0"))
	}
	for _, st := range []fwv1.FirmwareState{fwv1.StateDownloading, fwv1.StateTrial} {
		h.clk.Step(time.Minute)
		h.report("n0", oldVersion, st, "")
		h.sync("ro")
		wantOffered(t, h, fwv1.OfferInstall, "n0")
		if got := nodeStatus(h.rollout("ro"), "n0").State; got != string(st) {
			t.Fatalf("n0 state in the status = %s, want %s", got, st)
		}
	}
	h.clk.Step(time.Minute)
	h.report("n0", newVersion, fwv1.StateUpdated, "")
	h.sync("ro")
	wantOffered(t, h, fwv1.OfferInstall) // committed: the offer is withdrawn
	if ro := h.rollout("ro"); ro.Status.Wave != 1 || ro.Status.Updated != 1 {
		t.Fatalf("within the health window: wave %d updated %d, want 1 1", ro.Status.Wave, ro.Status.Updated)
	}
	h.clk.Step(5 * time.Minute)
	h.sync("ro")
	wantOffered(t, h, fwv1.OfferInstall, "n1", "n2", "n3")
	for _, n := range []string{"n1", "n2", "n3"} {
		h.report(n, newVersion, fwv1.StateUpdated, "")
	}
	h.sync("ro")
	if ro := h.rollout("ro"); meta.IsStatusConditionTrue(ro.Status.Conditions, "Complete") {
		t.Fatal("complete before the second wave's health window")
	}
	h.clk.Step(5 * time.Minute)
	h.sync("ro")
	ro := h.rollout("ro")
	if !meta.IsStatusConditionTrue(ro.Status.Conditions, "Complete") || ro.Status.Updated != 4 || ro.Status.Pending != 0 || ro.Status.Wave != 2 {
		t.Fatalf("final status: wave %d updated %d pending %d conditions %+v", ro.Status.Wave, ro.Status.Updated, ro.Status.Pending, ro.Status.Conditions)
	}
	if len(ro.Status.Waves) != 2 || ro.Status.Waves[0].Target != 1 || ro.Status.Waves[1].Healthy != 3 {
		t.Fatalf("waves = %+v", ro.Status.Waves)
	}
	evs := h.events()
	for _, want := range []string{"Normal WaveStarted wave 1 of 2", "Normal WaveStarted wave 2 of 2", "Normal RolloutComplete"} {
		if !hasEvent(evs, want) {
			t.Errorf("events %q lack %q", evs, want)
		}
	}
}

// TestBudgetTripsAndPauses: a node fails, the budget of one trips, the
// controller sets spec.paused, records the failed version on the node and
// withdraws the offers not yet taken up; unpausing resumes the rollout,
// and the failed node is never offered the version again.
func TestBudgetTripsAndPauses(t *testing.T) {
	h := newHarness(t, fleet(4), release("rel", newVersion, metav1.ConditionTrue),
		newRollout("ro", t0, func(s *fwv1.RolloutSpec) {
			s.Waves = []string{"2", "100%"}
			s.FailureBudget = fwv1.FailureBudget{Count: 1}
		}))
	h.sync("ro")
	wantOffered(t, h, fwv1.OfferInstall, "n0", "n1")
	h.report("n0", oldVersion, fwv1.StateReverted, "HealthCheckFailed")
	h.report("n1", oldVersion, fwv1.StateDownloading, "")
	h.sync("ro")
	ro := h.rollout("ro")
	if !ro.Spec.Paused {
		t.Fatal("spec.paused not set when the budget tripped")
	}
	if !meta.IsStatusConditionTrue(ro.Status.Conditions, "BudgetExceeded") || ro.Status.Failed != 1 {
		t.Fatalf("status: failed %d conditions %+v", ro.Status.Failed, ro.Status.Conditions)
	}
	if ns := nodeStatus(ro, "n0"); ns.State != "Reverted" || ns.Reason != "HealthCheckFailed" {
		t.Fatalf("n0 entry = %+v", ns)
	}
	if got := h.node("n0").Annotations[fwv1.AnnotationFailedVersions]; got != newVersion {
		t.Fatalf("n0 failed versions = %q, want %q", got, newVersion)
	}
	wantOffered(t, h, fwv1.OfferInstall) // n1 was only downloading: withdrawn
	evs := h.events()
	for _, want := range []string{"Warning NodeFailed node n0: Reverted: HealthCheckFailed", "Warning BudgetTripped"} {
		if !hasEvent(evs, want) {
			t.Errorf("events %q lack %q", evs, want)
		}
	}
	// Paused: nothing moves.
	h.report("n1", oldVersion, fwv1.StateIdle, "")
	h.sync("ro")
	wantOffered(t, h, fwv1.OfferInstall)

	// The node forgets; the hub does not.
	nf := fwv1.NodeFirmware{Version: oldVersion}
	h.annotate("n0", fwv1.AnnotationState, nf.Encode())
	h.setPaused("ro", false)
	h.sync("ro")
	if hasEvent(h.events(), "Normal Resumed") == false {
		t.Error("no Resumed event on unpause")
	}
	if ro := h.rollout("ro"); ro.Spec.Paused || meta.IsStatusConditionTrue(ro.Status.Conditions, "BudgetExceeded") {
		t.Fatalf("after unpause: paused %v conditions %+v", ro.Spec.Paused, ro.Status.Conditions)
	}
	wantOffered(t, h, fwv1.OfferInstall, "n1")
	if ns := nodeStatus(h.rollout("ro"), "n0"); ns.State != "Failed" || ns.Reason != ReasonFailedBefore {
		t.Fatalf("n0 entry = %+v", ns)
	}
	h.report("n1", newVersion, fwv1.StateUpdated, "")
	h.clk.Step(5 * time.Minute)
	h.sync("ro")
	wantOffered(t, h, fwv1.OfferInstall, "n2", "n3") // never n0
}

// TestRevertAction: with onFailure Revert, a trip orders the updated and
// installing nodes to revert, leaves spec.paused alone, and does not count
// the reverts it ordered as failures of the version on those nodes.
func TestRevertAction(t *testing.T) {
	h := newHarness(t, fleet(3), release("rel", newVersion, metav1.ConditionTrue),
		newRollout("ro", t0, func(s *fwv1.RolloutSpec) {
			s.FailureBudget = fwv1.FailureBudget{Count: 1}
			s.OnFailure = fwv1.FailureRevert
		}))
	h.sync("ro")
	wantOffered(t, h, fwv1.OfferInstall, "n0", "n1", "n2")
	h.report("n0", newVersion, fwv1.StateUpdated, "")
	h.report("n1", oldVersion, fwv1.StateTrial, "")
	h.report("n2", oldVersion, fwv1.StateFailed, "DigestMismatch")
	h.sync("ro")
	if h.rollout("ro").Spec.Paused {
		t.Fatal("spec.paused set with the Revert action")
	}
	wantOffered(t, h, fwv1.OfferRevert, "n0", "n1")
	if got := h.node("n2").Annotations[fwv1.AnnotationFailedVersions]; got != newVersion {
		t.Fatalf("n2 failed versions = %q", got)
	}
	h.report("n0", oldVersion, fwv1.StateReverted, reasonRevertOrdered)
	h.report("n1", oldVersion, fwv1.StateReverted, reasonRevertOrdered)
	h.sync("ro")
	wantOffered(t, h, fwv1.OfferRevert)
	h.sync("ro") // the orders are gone now
	for _, n := range []string{"n0", "n1"} {
		if got := h.node(n).Annotations[fwv1.AnnotationFailedVersions]; got != "" {
			t.Errorf("%s failed versions = %q after an ordered revert", n, got)
		}
	}
}

// TestOfflineNodeUpdatedOnReturn: a node offline when its wave starts does
// not hold the wave; the rollout completes without it, and it is offered
// the release when it comes back.
func TestOfflineNodeUpdatedOnReturn(t *testing.T) {
	nodes := fleet(2)
	nodes[1].Status.Conditions = readyCondition(false, t0.Add(-time.Hour))
	h := newHarness(t, nodes, release("rel", newVersion, metav1.ConditionTrue), newRollout("ro", t0, nil))
	h.sync("ro")
	wantOffered(t, h, fwv1.OfferInstall, "n0")
	if ns := nodeStatus(h.rollout("ro"), "n1"); ns.Reason != ReasonOffline {
		t.Fatalf("n1 entry = %+v", ns)
	}
	h.report("n0", newVersion, fwv1.StateUpdated, "")
	h.clk.Step(5 * time.Minute)
	h.sync("ro")
	if ro := h.rollout("ro"); !meta.IsStatusConditionTrue(ro.Status.Conditions, "Complete") {
		t.Fatalf("not complete with the offline node: %+v", ro.Status.Conditions)
	}
	h.clk.Step(time.Hour)
	h.setReady("n1", true)
	h.sync("ro")
	wantOffered(t, h, fwv1.OfferInstall, "n1")
}

// TestStuckNodeTimesOut: a node that never takes up its offer is given up
// after StuckFactor health windows: Failed with reason Timeout, its offer
// withdrawn, not charged to the budget, and not offered again; a node that
// keeps downloading is not.
func TestStuckNodeTimesOut(t *testing.T) {
	h := newHarness(t, fleet(2), release("rel", newVersion, metav1.ConditionTrue),
		newRollout("ro", t0, func(s *fwv1.RolloutSpec) { s.FailureBudget = fwv1.FailureBudget{Count: 1} }))
	h.sync("ro")
	wantOffered(t, h, fwv1.OfferInstall, "n0", "n1")
	for i := range 3 {
		h.clk.Step(5 * time.Minute)
		st := fwv1.NodeFirmware{Version: oldVersion, Target: newVersion, State: fwv1.StateDownloading,
			Since: metav1.NewTime(t0), Transfer: &fwv1.TransferStats{Received: int64(i+1) << 20, Full: 10 << 20}}
		h.annotate("n1", fwv1.AnnotationState, st.Encode())
		h.sync("ro")
	}
	ro := h.rollout("ro")
	if ns := nodeStatus(ro, "n0"); ns.State != "Failed" || ns.Reason != ReasonTimeout {
		t.Fatalf("n0 entry = %+v", ns)
	}
	if ns := nodeStatus(ro, "n1"); ns.State != "Downloading" {
		t.Fatalf("n1, still downloading, entry = %+v", ns)
	}
	if meta.IsStatusConditionTrue(ro.Status.Conditions, "BudgetExceeded") || ro.Spec.Paused {
		t.Fatal("a timeout was charged to the budget")
	}
	wantOffered(t, h, fwv1.OfferInstall, "n1")
	if !hasEvent(h.events(), "Warning NodeFailed node n0: Failed: Timeout") {
		t.Error("no NodeFailed event for the timeout")
	}
	h.clk.Step(time.Hour)
	h.sync("ro")
	if ns := nodeStatus(h.rollout("ro"), "n0"); ns.Reason != ReasonTimeout {
		t.Fatalf("n0 entry later = %+v", ns)
	}
	if o := h.offer("n0"); o != nil {
		t.Fatalf("n0 offered again after its timeout: %+v", o)
	}
}

// TestOlderRolloutWins: two rollouts select the same node; the older one
// offers to it, the younger says so in its status and leaves it alone.
func TestOlderRolloutWins(t *testing.T) {
	h := newHarness(t, fleet(1), release("rel", newVersion, metav1.ConditionTrue),
		newRollout("young", t0, nil), newRollout("old", t0.Add(-time.Hour), nil))
	h.sync("young")
	wantOffered(t, h, fwv1.OfferInstall)
	if ns := nodeStatus(h.rollout("young"), "n0"); ns.Reason != ReasonOtherRollout || !strings.Contains(ns.Message, "old") {
		t.Fatalf("young's n0 entry = %+v", ns)
	}
	h.sync("old")
	if o := h.offer("n0"); o == nil || o.Rollout != "old" {
		t.Fatalf("n0 offer = %+v, want old's", o)
	}
	h.sync("young")
	if o := h.offer("n0"); o == nil || o.Rollout != "old" {
		t.Fatalf("young touched old's offer: %+v", o)
	}
}

// TestCompleteRolloutYields: a rollout that completed gives its nodes up
// to a newer one that is not complete, which an older rollout under way
// does not.
func TestCompleteRolloutYields(t *testing.T) {
	h := newHarness(t, fleet(1), release("rel", newVersion, metav1.ConditionTrue), release("rel2", "1.5.0", metav1.ConditionTrue),
		newRollout("old", t0.Add(-time.Hour), nil),
		newRollout("young", t0, func(s *fwv1.RolloutSpec) { s.Release = "rel2" }))
	h.sync("young")
	wantOffered(t, h, fwv1.OfferInstall)
	if ns := nodeStatus(h.rollout("young"), "n0"); ns.Reason != ReasonOtherRollout || !strings.Contains(ns.Message, "old") {
		t.Fatalf("young's n0 entry while old is under way = %+v", ns)
	}
	h.sync("old")
	h.report("n0", newVersion, fwv1.StateUpdated, "")
	h.sync("old")
	h.clk.Step(5 * time.Minute)
	h.sync("old")
	if !meta.IsStatusConditionTrue(h.rollout("old").Status.Conditions, "Complete") {
		t.Fatalf("old not complete: %+v", h.rollout("old").Status.Conditions)
	}
	h.sync("young")
	if o := h.offer("n0"); o == nil || o.Rollout != "young" || o.Version != "1.5.0" {
		t.Fatalf("n0 offer after old completed = %+v, want young's of 1.5.0", o)
	}
	h.sync("old")
	if o := h.offer("n0"); o == nil || o.Rollout != "young" {
		t.Fatalf("the complete rollout touched young's offer: %+v", o)
	}
	if ns := nodeStatus(h.rollout("old"), "n0"); ns.Reason != ReasonOtherRollout || !strings.Contains(ns.Message, "young") {
		t.Fatalf("old's n0 entry = %+v", ns)
	}
	// Without nodes of its own, old stays complete: ownership does not
	// swing back.
	if !meta.IsStatusConditionTrue(h.rollout("old").Status.Conditions, "Complete") {
		t.Fatalf("old no longer complete once young took its node: %+v", h.rollout("old").Status.Conditions)
	}
	h.sync("young")
	if o := h.offer("n0"); o == nil || o.Rollout != "young" {
		t.Fatalf("n0 offer = %+v, want young's still", o)
	}
}

// TestSelectorAndSites: only nodes matching the selector and in the
// rollout's sites are offered; a node that leaves the selection loses an
// offer it had not taken up.
func TestSelectorAndSites(t *testing.T) {
	nodes := []*corev1.Node{
		newNode("a", "berlin", map[string]string{"tier": "gw"}),
		newNode("b", "paris", map[string]string{"tier": "gw"}),
		newNode("c", "berlin", map[string]string{"tier": "sensor"}),
	}
	h := newHarness(t, nodes, release("rel", newVersion, metav1.ConditionTrue), newRollout("ro", t0, func(s *fwv1.RolloutSpec) {
		s.NodeSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"tier": "gw"}}
		s.Sites = []string{"berlin"}
	}))
	h.sync("ro")
	wantOffered(t, h, fwv1.OfferInstall, "a")
	n := h.node("a")
	n.Labels["tier"] = "retired"
	if _, err := h.client.CoreV1().Nodes().Update(h.ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	h.sync("ro")
	wantOffered(t, h, fwv1.OfferInstall)
}

// TestReleaseNotReady: a Release whose signatures failed, or that is
// missing, blocks the rollout with a condition and offers nothing.
func TestReleaseNotReady(t *testing.T) {
	h := newHarness(t, fleet(2), release("rel", newVersion, metav1.ConditionFalse),
		newRollout("ro", t0, nil), newRollout("gone", t0, func(s *fwv1.RolloutSpec) { s.Release = "nope" }))
	h.sync("ro")
	h.sync("gone")
	wantOffered(t, h, fwv1.OfferInstall)
	for name, reason := range map[string]string{"ro": "ReleaseNotVerified", "gone": "ReleaseNotFound"} {
		c := meta.FindStatusCondition(h.rollout(name).Status.Conditions, ConditionReleaseReady)
		if c == nil || c.Status != metav1.ConditionFalse || c.Reason != reason {
			t.Errorf("%s ReleaseReady = %+v, want False %s", name, c, reason)
		}
	}
	if !hasEvent(h.events(), "Warning ReleaseNotReady") {
		t.Error("no ReleaseNotReady event")
	}
}

// TestRunFollowsNodes runs the controller: it offers on its own, and a
// node's report reaches the Rollout's status through the node watch.
func TestRunFollowsNodes(t *testing.T) {
	h := build(t, false, fleet(1), []runtime.Object{release("rel", newVersion, metav1.ConditionTrue), newRollout("ro", t0, nil)})
	bg := wait.Start(t, 10*time.Second, "rollout controller Run", h.rc.Run)
	// Not served yet: Run waits, polling on the clock.
	wait.For(t, 10*time.Second, "Run to wait on the clock", func() (bool, string) {
		return h.clk.HasWaiters(), "no timer"
	})
	if h.offer("n0") != nil {
		t.Fatal("offered before the API was served")
	}
	h.client.Discovery().(*fakediscovery.FakeDiscovery).Resources = []*metav1.APIResourceList{{
		GroupVersion: fwv1.SchemeGroupVersion.String(),
		APIResources: []metav1.APIResource{{Name: "rollouts", Kind: "Rollout"}, {Name: "releases", Kind: "Release"}},
	}}
	h.clk.Step(APIPollInterval)
	t.Cleanup(func() { _ = bg.Stop() })
	wait.For(t, 10*time.Second, "the offer", func() (bool, string) {
		return h.offer("n0") != nil, "no offer yet"
	})
	h.report("n0", oldVersion, fwv1.StateTrial, "")
	wait.For(t, 10*time.Second, "the status to show Trial", func() (bool, string) {
		ns := nodeStatus(h.rollout("ro"), "n0")
		return ns.State == "Trial", ns.State
	})
}

// TestInvalidSpecAndDeletion: waves the schema let through but the planner
// refuses block the rollout with InvalidSpec; deleting a rollout withdraws
// the offers it made but for an install under way.
func TestInvalidSpecAndDeletion(t *testing.T) {
	h := newHarness(t, fleet(2), release("rel", newVersion, metav1.ConditionTrue),
		newRollout("bad", t0, func(s *fwv1.RolloutSpec) { s.Waves = []string{"50%", "10%"} }),
		newRollout("ro", t0.Add(time.Minute), nil))
	h.sync("bad")
	if c := meta.FindStatusCondition(h.rollout("bad").Status.Conditions, "Progressing"); c == nil || c.Reason != "InvalidSpec" {
		t.Fatalf("Progressing = %+v, want reason InvalidSpec", c)
	}
	wantOffered(t, h, fwv1.OfferInstall)
	if err := h.dyn.Resource(RolloutsResource).Delete(h.ctx, "bad", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	h.sync("ro")
	wantOffered(t, h, fwv1.OfferInstall, "n0", "n1")
	h.report("n0", oldVersion, fwv1.StateInstalling, "")
	if err := h.dyn.Resource(RolloutsResource).Delete(h.ctx, "ro", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	h.sync("ro")
	wantOffered(t, h, fwv1.OfferInstall, "n0")
}
