package status

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/outpost-mesh/outpost/edge/checkpoint"
	"github.com/outpost-mesh/outpost/edge/events"
	"github.com/outpost-mesh/outpost/edge/pods"
	edgeruntime "github.com/outpost-mesh/outpost/edge/runtime"
	"github.com/outpost-mesh/outpost/edge/runtime/fake"
)

// roundNode is a Reporter with n pods of the view running on the fake
// runtime, driven round by round by the caller: each round plans with
// edge/pods and carries out the plan, as the pod workers would.
type roundNode struct {
	*Reporter
	rt      *fake.Runtime
	cp      *checkpoint.Store
	desired []*corev1.Pod
	records map[string]pods.Record
}

func newRoundNode(tb testing.TB, n int) *roundNode {
	tb.Helper()
	cp, err := checkpoint.Open("", checkpoint.MemoryConfig())
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { cp.Close() })
	cfg := DefaultConfig()
	cfg.NodeName = "edge-1"
	cfg.Capacity = Capacity{CPUMillis: 4000, MemoryBytes: 4 << 30, Pods: 110}
	cfg.Store = cp
	cfg.Events = events.NewRecorder(cfg.NodeName, cp, time.Now, slog.New(slog.DiscardHandler))
	cfg.MirrorOf = func(p *corev1.Pod) *corev1.Pod { return p.DeepCopy() }
	r, err := New(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	rn := &roundNode{Reporter: r, rt: fake.New(fake.Config{}), cp: cp, records: map[string]pods.Record{}}
	for i := range n {
		rn.desired = append(rn.desired, &corev1.Pod{
			TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("p%03d", i), Namespace: "default", UID: types.UID(fmt.Sprintf("uid-%03d", i))},
			Spec:       corev1.PodSpec{NodeName: "edge-1", Containers: []corev1.Container{{Name: "main", Image: "busybox"}}},
		})
	}
	// Rounds until every pod runs and its status is reported.
	for range 10 {
		rn.round(tb)
	}
	if got := len(r.reported); got != n {
		tb.Fatalf("%d pods reported, want %d", got, n)
	}
	return rn
}

// round plans, reports the pods' statuses from what the runtime held as
// the round began (as the pod workers hand a round over), then carries out
// the plan's actions.
func (rn *roundNode) round(tb testing.TB) {
	ctx := context.Background()
	actual, err := rn.rt.List(ctx)
	if err != nil {
		tb.Fatal(err)
	}
	now := time.Now()
	d := pods.Plan(rn.desired, actual, rn.records, nil, now)
	for _, pd := range d.Pods {
		rn.records[pd.Pod.UID] = pd.Record
	}
	rn.reportPods(Round{Desired: rn.desired, Actual: actual, Records: maps.Clone(rn.records), Now: now}, now)
	for _, pd := range d.Pods {
		rec := pd.Record
		for _, act := range pd.Actions {
			var err error
			switch act.Type {
			case pods.StartContainer:
				err = rn.rt.StartContainer(ctx, act.Pod, act.Spec, act.Attempt)
			case pods.StopContainer:
				err = rn.rt.StopContainer(ctx, act.Pod, act.Container, act.Grace)
			}
			rec = pods.Observe(rec, act, err, time.Now())
		}
		rn.records[pd.Pod.UID] = rec
	}
}

// BenchmarkIdleRound: one reconcile round of a node whose 100 pods run
// and whose statuses are all reported, as most rounds on a gateway are.
func BenchmarkIdleRound(b *testing.B) {
	a := newRoundNode(b, 100)
	outbox, err := a.cp.OutboxLen()
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		a.round(b)
	}
	if got, _ := a.cp.OutboxLen(); got != outbox {
		b.Fatalf("idle rounds queued %d status items", got-outbox)
	}
}

// TestStatusOnlyWhenInputsChange: a round skips the status of a pod whose
// inputs are unchanged, but not of one whose container stopped, nor of
// any when the node's address changed.
func TestStatusOnlyWhenInputsChange(t *testing.T) {
	a := newRoundNode(t, 3)
	wires := func() map[string]string {
		m := map[string]string{}
		for uid, s := range a.reported {
			m[uid] = string(s.wire)
		}
		return m
	}
	before := wires()
	a.round(t)
	if got := wires(); !maps.Equal(got, before) {
		t.Fatalf("an idle round changed the statuses reported")
	}

	ref := edgeruntime.PodRef{UID: "uid-001", Namespace: "default", Name: "p001"}
	if err := a.rt.StopContainer(context.Background(), ref, "main", 0); err != nil {
		t.Fatal(err)
	}
	a.round(t)
	after := wires()
	for uid := range before {
		if changed := after[uid] != before[uid]; changed != (uid == "uid-001") {
			t.Errorf("pod %s: status changed = %v after uid-001's container stopped", uid, changed)
		}
	}

	a.addrs.Store(&[]corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "192.0.2.77"}})
	a.round(t)
	for uid, s := range a.reported {
		if s.status.HostIP != "192.0.2.77" {
			t.Errorf("pod %s: hostIP %q after the node's address changed", uid, s.status.HostIP)
		}
	}
}

// TestStatusInputsSame: every input of a status counts.
func TestStatusInputsSame(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", UID: "u"}}
	act := &edgeruntime.PodStatus{Pod: edgeruntime.PodRef{UID: "u"}, IP: "10.88.0.1", Containers: []edgeruntime.ContainerStatus{{Name: "main", State: edgeruntime.StateRunning, Attempt: 1}}}
	rec := pods.Record{FirstSeen: time.Unix(100, 0), Containers: map[string]pods.ContainerRecord{"main": {Attempt: 1}}}
	in := statusInputs{pod: pod, act: act, rec: rec, hostIP: "192.0.2.2"}
	last := []byte("status")
	kept := in.keep(last)

	same := in
	sameAct := act.Clone()
	same.act, same.rec = &sameAct, rec.Clone()
	if !kept.same(same, last) {
		t.Errorf("equal inputs are not the same")
	}
	for name, change := range map[string]func(*statusInputs){
		"another pod":     func(in *statusInputs) { in.pod = pod.DeepCopy() },
		"no runtime pod":  func(in *statusInputs) { in.act = nil },
		"container state": func(in *statusInputs) { c := act.Clone(); c.Containers[0].State = edgeruntime.StateExited; in.act = &c },
		"pod IP":          func(in *statusInputs) { c := act.Clone(); c.IP = "10.88.0.2"; in.act = &c },
		"record":          func(in *statusInputs) { r := rec.Clone(); r.Terminal = true; in.rec = r },
		"host IP":         func(in *statusInputs) { in.hostIP = "192.0.2.3" },
	} {
		changed := in
		change(&changed)
		if kept.same(changed, last) {
			t.Errorf("%s: inputs still the same", name)
		}
	}
	if kept.same(in, []byte("another report")) {
		t.Errorf("a status reported since is still the same")
	}
	if (statusInputs{}).same(in, last) {
		t.Errorf("nothing computed yet is the same")
	}
}

// TestFillIPs: every pod has the node's IP as its host IP; a pod of the
// host's network has it as its pod IP too, and a pod of its own network
// keeps its own.
func TestFillIPs(t *testing.T) {
	var own corev1.PodStatus
	own.PodIP, own.PodIPs = "10.42.0.5", []corev1.PodIP{{IP: "10.42.0.5"}}
	fillIPs(&own, "192.0.2.2", false)
	if own.HostIP != "192.0.2.2" || len(own.HostIPs) != 1 || own.PodIP != "10.42.0.5" || len(own.PodIPs) != 1 || own.PodIPs[0].IP != "10.42.0.5" {
		t.Errorf("a pod of its own network: %+v", own)
	}
	var host corev1.PodStatus
	fillIPs(&host, "192.0.2.2", true)
	if host.HostIP != "192.0.2.2" || host.PodIP != "192.0.2.2" || len(host.PodIPs) != 1 || host.PodIPs[0].IP != "192.0.2.2" {
		t.Errorf("a pod of the host's network: %+v", host)
	}
	var none corev1.PodStatus
	fillIPs(&none, "", true)
	if none.HostIP != "" || none.PodIP != "" {
		t.Errorf("no node IP: %+v", none)
	}
}

// TestPodAddrs: the node's pod IPs and their readiness (and the pods'
// readiness by UID, PodsReady), as last reported,
// once a round was observed; a pod whose container exited is not ready.
func TestPodAddrs(t *testing.T) {
	rn := newRoundNode(t, 2)
	if _, ok := rn.PodAddrs(); ok {
		t.Error("the pods are known before a round was observed")
	}
	if _, ok := rn.PodsReady(); ok {
		t.Error("the pods' readiness is known before a round was observed")
	}
	observe := func() {
		actual, err := rn.rt.List(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		rn.Observe(Round{Desired: rn.desired, Actual: actual, Records: maps.Clone(rn.records), Now: time.Now()})
	}
	observe()
	ready, ok := rn.PodAddrs()
	if !ok || len(ready) != 2 {
		t.Fatalf("PodAddrs = %v, %v; want both pods", ready, ok)
	}
	for a, r := range ready {
		if !r {
			t.Errorf("pod %s not ready, want ready", a)
		}
	}
	rn.desired[0].Spec.RestartPolicy = corev1.RestartPolicyNever
	if err := rn.rt.Exit("uid-000", "main", 1); err != nil {
		t.Fatal(err)
	}
	rn.round(t)
	observe()
	ready, _ = rn.PodAddrs()
	n := 0
	for _, r := range ready {
		if r {
			n++
		}
	}
	if len(ready) != 2 || n != 1 {
		t.Errorf("PodAddrs after an exit = %v, want one of two ready", ready)
	}
	byUID, ok := rn.PodsReady()
	if want := map[string]bool{"uid-000": false, "uid-001": true}; !ok || !maps.Equal(byUID, want) {
		t.Errorf("PodsReady after an exit = %v, %v; want %v", byUID, ok, want)
	}
}
