package agent

import (
	"context"
	"fmt"
	"maps"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/outpost-mesh/outpost/edge/checkpoint"
	"github.com/outpost-mesh/outpost/edge/events"
	"github.com/outpost-mesh/outpost/edge/objects"
	"github.com/outpost-mesh/outpost/edge/pods"
	edgeruntime "github.com/outpost-mesh/outpost/edge/runtime"
	"github.com/outpost-mesh/outpost/edge/runtime/fake"
	"github.com/outpost-mesh/outpost/sync/wire"
)

// roundAgent is an agent with n pods of the view running on the fake
// runtime, driven round by round by the caller rather than by Run.
func roundAgent(tb testing.TB, n int) *Agent {
	tb.Helper()
	cfg := DefaultConfig()
	cfg.NodeName = "edge-1"
	cfg.DataDir = tb.TempDir()
	cfg.HubAddr = "127.0.0.1:1"
	cfg.Runtime = fake.New(fake.Config{})
	cfg.Checkpoint.InMemory = true
	cfg.Capacity = Capacity{CPUMillis: 4000, MemoryBytes: 4 << 30, Pods: 110}
	a, err := New(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	cp, err := checkpoint.Open("", cfg.Checkpoint)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { cp.Close() })
	a.cp = cp
	a.events = events.NewRecorder(cfg.NodeName, cp, a.now, a.log)
	changes := make([]wire.Change, n)
	for i := range changes {
		p := &corev1.Pod{
			TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("p%03d", i), Namespace: "default", UID: types.UID(fmt.Sprintf("uid-%03d", i))},
			Spec:       corev1.PodSpec{NodeName: "edge-1", Containers: []corev1.Container{{Name: "main", Image: "busybox"}}},
		}
		raw, err := objects.Encode(p)
		if err != nil {
			tb.Fatal(err)
		}
		changes[i] = wire.Change{Op: wire.OpPut, Key: podKey(p), Revision: int64(i + 1), Object: raw}
	}
	if err := cp.ApplyBatch(changes, int64(n)); err != nil {
		tb.Fatal(err)
	}
	// Rounds until every pod runs and its status is reported.
	for range 10 {
		a.round(tb)
	}
	if got := len(a.reported); got != n {
		tb.Fatalf("%d pods reported, want %d", got, n)
	}
	return a
}

// round runs one reconcile round and waits for the actions it started.
func (a *Agent) round(tb testing.TB) {
	var workers sync.WaitGroup
	a.reconcile(context.Background(), &workers)
	workers.Wait()
}

// BenchmarkIdleRound: one reconcile round of a node whose 100 pods run
// and whose statuses are all reported, as most rounds on a gateway are.
func BenchmarkIdleRound(b *testing.B) {
	a := roundAgent(b, 100)
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
	a := roundAgent(t, 3)
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

	a.addrs = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "192.0.2.77"}}
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
