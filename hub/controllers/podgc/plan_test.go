package podgc

import (
	"reflect"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

var t0 = time.Unix(1_700_000_000, 0)

type podOpt func(*corev1.Pod)

func pod(name string, opts ...podOpt) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", CreationTimestamp: metav1.NewTime(t0)}}
	p.Status.Phase = corev1.PodRunning
	for _, o := range opts {
		o(p)
	}
	return p
}

func phase(ph corev1.PodPhase) podOpt { return func(p *corev1.Pod) { p.Status.Phase = ph } }
func on(node string) podOpt           { return func(p *corev1.Pod) { p.Spec.NodeName = node } }
func age(d time.Duration) podOpt {
	return func(p *corev1.Pod) { p.CreationTimestamp = metav1.NewTime(t0.Add(-d)) }
}
func reason(r string) podOpt { return func(p *corev1.Pod) { p.Status.Reason = r } }
func deleting() podOpt {
	return func(p *corev1.Pod) { now := metav1.NewTime(t0); p.DeletionTimestamp = &now }
}
func names(pods []*corev1.Pod) []string {
	return namesOf(pods, func(p *corev1.Pod) string { return p.Name })
}
func namesOf[T any](xs []T, f func(T) string) []string {
	var out []string
	for _, x := range xs {
		out = append(out, f(x))
	}
	return out
}

func TestTerminatedOverThreshold(t *testing.T) {
	pods := []*corev1.Pod{
		pod("running-old", age(10*time.Hour)),
		pod("done-new", phase(corev1.PodSucceeded), age(time.Minute)),
		pod("done-old", phase(corev1.PodSucceeded), age(time.Hour)),
		pod("failed-mid", phase(corev1.PodFailed), age(30*time.Minute)),
		pod("evicted-new", phase(corev1.PodFailed), reason("Evicted"), age(time.Second)),
		pod("b-same", phase(corev1.PodSucceeded), age(2*time.Hour)),
		pod("a-same", phase(corev1.PodSucceeded), age(2*time.Hour)),
		pod("pending", phase(corev1.PodPending), age(20*time.Hour)),
		pod("unknown", phase(corev1.PodUnknown), age(20*time.Hour)),
	}
	for _, tc := range []struct {
		threshold int
		want      []string
	}{
		{0, nil},
		{-1, nil},
		{6, nil},
		{5, []string{"evicted-new"}},
		{4, []string{"evicted-new", "a-same"}},
		{2, []string{"evicted-new", "a-same", "b-same", "done-old"}},
		{1, []string{"evicted-new", "a-same", "b-same", "done-old", "failed-mid"}},
	} {
		if got := names(TerminatedOverThreshold(pods, tc.threshold)); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("TerminatedOverThreshold(threshold %d) = %v, want %v", tc.threshold, got, tc.want)
		}
	}
}

func TestMissingNodes(t *testing.T) {
	nodes := map[string]*corev1.Node{"n1": {}}
	pods := []*corev1.Pod{pod("a", on("n1")), pod("b", on("ghost")), pod("c", on("ghost")), pod("d"), pod("e", on("attic"))}
	if got, want := MissingNodes(pods, nodes), []string{"attic", "ghost"}; !reflect.DeepEqual(got, want) {
		t.Errorf("MissingNodes = %v, want %v", got, want)
	}
}

func TestPlan(t *testing.T) {
	outOfService := &corev1.Node{Spec: corev1.NodeSpec{Taints: []corev1.Taint{{Key: corev1.TaintNodeOutOfService, Effect: corev1.TaintEffectNoExecute}}},
		Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionFalse}}}}
	readyTainted := outOfService.DeepCopy()
	readyTainted.Status.Conditions[0].Status = corev1.ConditionTrue
	nodes := map[string]*corev1.Node{"n1": {}, "oos": outOfService, "ready": readyTainted}
	cfg := DefaultConfig()
	cfg.TerminatedPodThreshold = 1
	pods := []*corev1.Pod{
		pod("on-n1", on("n1")),
		pod("on-ghost", on("ghost")),
		pod("on-missing-not-gone", on("attic")),
		pod("unbound-deleting", deleting()),
		pod("unbound"),
		pod("bound-deleting", on("n1"), deleting()),
		pod("oos-deleting", on("oos"), deleting()),
		pod("oos-running", on("oos")),
		pod("ready-tainted-deleting", on("ready"), deleting()),
		pod("done-1", on("ghost"), phase(corev1.PodSucceeded), age(time.Hour)),
		pod("done-2", on("n1"), phase(corev1.PodSucceeded)),
	}
	got := namesOf(Plan(pods, nodes, map[string]bool{"ghost": true}, cfg), func(d Deletion) string { return d.Pod.Name + ":" + d.Reason.String() })
	want := []string{"done-1:terminated", "on-ghost:orphaned", "unbound-deleting:unscheduled-terminating", "oos-deleting:out-of-service"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Plan = %v, want %v", got, want)
	}
	// A node that came back (in the lister) is not gone, whatever the
	// quarantine said.
	if got := Plan([]*corev1.Pod{pod("x", on("n1"))}, nodes, map[string]bool{"n1": true}, cfg); len(got) != 0 {
		t.Errorf("Plan with a returned node = %v, want nothing", got)
	}
}

func TestConfig(t *testing.T) {
	c := DefaultConfig()
	if c.TerminatedPodThreshold != 12500 || c.Period != 20*time.Second || c.Quarantine != 40*time.Second || c.Validate() != nil {
		t.Errorf("DefaultConfig = %+v (%v), want upstream's", c, c.Validate())
	}
	c.Period = 0
	if c.Validate() == nil {
		t.Error("Validate accepted a zero Period")
	}
}
