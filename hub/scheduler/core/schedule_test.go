package core

import (
	"errors"
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestFitErrorMessage pins the FailedScheduling text, word for word as
// upstream writes it: "COUNT REASON" entries sorted as strings.
func TestFitErrorMessage(t *testing.T) {
	unreachable := func(b *nodeB) *nodeB { return b.taint(corev1.TaintNodeUnreachable, "", corev1.TaintEffectNoSchedule) }
	tests := []struct {
		name     string
		nodes    []*corev1.Node
		existing []*corev1.Pod
		pod      *corev1.Pod
		want     string
	}{
		{
			name:  "cpu and an unreachable taint",
			nodes: nodes(node("n1"), node("n2"), node("n3"), unreachable(node("n4")), unreachable(node("n5"))),
			pod:   pod("p").req("cpu", "5").obj(),
			want:  "0/5 nodes are available: 2 node(s) had untolerated taint {node.kubernetes.io/unreachable: }, 3 Insufficient cpu.",
		},
		{
			name:  "both cpu and memory on one node",
			nodes: nodes(node("n1")),
			pod:   pod("p").req("cpu", "5", "memory", "9Gi").obj(),
			want:  "0/1 nodes are available: 1 Insufficient cpu, 1 Insufficient memory.",
		},
		{
			name:  "sorted as strings, not by count",
			nodes: nodes(node("n1").unschedulable(), node("n2"), node("n3"), node("n4"), node("n5"), node("n6"), node("n7"), node("n8"), node("n9"), node("n10"), node("n11")),
			pod:   pod("p").req("cpu", "5").obj(),
			want:  "0/11 nodes are available: 1 node(s) were unschedulable, 10 Insufficient cpu.",
		},
		{
			name:     "every filter once",
			nodes:    nodes(node("a").unschedulable(), node("b").taint("t", "v", corev1.TaintEffectNoExecute), node("c").label("disk", "hdd"), node("d").label("disk", "ssd").alloc("pods", "0"), node("e").label("disk", "ssd")),
			existing: pods(pod("old").on("e").hostPort(80, "", "")),
			pod:      pod("p").selector("disk", "ssd").hostPort(80, "", "").obj(),
			want: "0/5 nodes are available: 1 Too many pods, 1 node(s) didn't have free ports for the requested pod ports, " +
				"1 node(s) didn't match Pod's node affinity/selector, 1 node(s) had untolerated taint {t: v}, 1 node(s) were unschedulable.",
		},
		{
			name:  "inter-pod affinity reasons",
			nodes: nodes(node("n1").site("a"), node("n2").site("b"), node("n3").site("c"), node("n4").site("d")),
			existing: pods(pod("w").on("n1").label("app", "web"),
				pod("db3").on("n3").label("app", "db"), pod("w3").on("n3").label("app", "other"),
				pod("db4").on("n4").label("app", "db"), pod("lonely").on("n4").podAntiAffinity(term(siteKey, "role", "front"))),
			pod: pod("p").label("app", "web", "role", "front").podAntiAffinity(term(siteKey, "app", "other")).podAffinity(term(siteKey, "app", "db")).obj(),
			want: "0/4 nodes are available: 1 node(s) didn't match pod anti-affinity rules, " +
				"1 node(s) didn't satisfy existing pods anti-affinity rules, 2 node(s) didn't match pod affinity rules.",
		},
		{
			name:     "spread",
			nodes:    nodes(node("n1").site("a"), node("n2"), node("n3").site("b").taint("t", "", corev1.TaintEffectNoSchedule)),
			existing: pods(pod("w").on("n1").label("app", "web")),
			pod:      pod("p").label("app", "web").spread(1, siteKey, corev1.DoNotSchedule, "app", "web").obj(),
			want: "0/3 nodes are available: 1 node(s) didn't match pod topology spread constraints, " +
				"1 node(s) didn't match pod topology spread constraints (missing required label), 1 node(s) had untolerated taint {t: }.",
		},
		{
			name:  "a DaemonSet pod whose node is full",
			nodes: nodes(node("n1"), node("n2"), node("n3")),
			pod:   pod("p").req("cpu", "5").onlyNodes([]string{"n2"}).obj(),
			want:  "0/3 nodes are available: 1 Insufficient cpu, 2 node(s) didn't satisfy plugin(s) [NodeAffinity].",
		},
		{
			name:  "a DaemonSet pod whose node is gone",
			nodes: nodes(node("n1"), node("n2")),
			pod:   pod("p").onlyNodes([]string{"gone"}).obj(),
			want:  "0/2 nodes are available: 2 node(s) didn't satisfy plugin(s) [NodeAffinity].",
		},
		{
			name:  "node names that conflict",
			nodes: nodes(node("n1"), node("n2")),
			pod: func() *corev1.Pod {
				p := pod("p").onlyNodes([]string{"n1"}).obj()
				t := &p.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms[0]
				t.MatchFields = append(t.MatchFields, corev1.NodeSelectorRequirement{Key: metav1.ObjectNameField, Operator: corev1.NodeSelectorOpIn, Values: []string{"n2"}})
				return p
			}(),
			want: "0/2 nodes are available: pod affinity terms conflict.",
		},
		{
			name:  "extended resource",
			nodes: nodes(node("n1").alloc("example.com/gpu", "1"), node("n2")),
			pod:   pod("p").req("example.com/gpu", "2").obj(),
			want:  "0/2 nodes are available: 2 Insufficient example.com/gpu.",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := newTestScheduler().Schedule(tc.pod, NewSnapshot(tc.nodes, tc.existing, nil))
			var fe *FitError
			if !errors.As(err, &fe) {
				t.Fatalf("Schedule() error = %v, want a *FitError", err)
			}
			if got := fe.Error(); got != tc.want {
				t.Errorf("message\n got %q\nwant %q", got, tc.want)
			}
		})
	}
}

func TestNoNodes(t *testing.T) {
	_, err := newTestScheduler().Schedule(pod("p").obj(), NewSnapshot(nil, nil, nil))
	if !errors.Is(err, ErrNoNodesAvailable) || err.Error() != "no nodes available to schedule pods" {
		t.Fatalf("Schedule() on no nodes = %v, want %v", err, ErrNoNodesAvailable)
	}
}

func TestFitErrorPluginsWake(t *testing.T) {
	snap := NewSnapshot(nodes(node("n1"), node("n2").taint("t", "", corev1.TaintEffectNoSchedule)), nil, nil)
	_, err := newTestScheduler().Schedule(pod("p").req("cpu", "5").obj(), snap)
	var fe *FitError
	if !errors.As(err, &fe) {
		t.Fatalf("Schedule() = %v, want a FitError", err)
	}
	if want := Plugins(NodeResourcesFit) | Plugins(TaintToleration); fe.Plugins != want {
		t.Fatalf("Plugins = %v, want %v", fe.Plugins, want)
	}
	ev := fe.Plugins.WakingEvents()
	for _, tc := range []struct {
		ev   ClusterEvent
		want bool
	}{{NodeAdd, true}, {AssignedPodDelete, true}, {NodeTaintChange, true}, {AssignedPodAdd, false}, {NamespaceChange, false}} {
		if got := ev&tc.ev != 0; got != tc.want {
			t.Errorf("waking on %b = %v, want %v", tc.ev, got, tc.want)
		}
	}
	if Plugins(0).WakingEvents() != AnyEvent {
		t.Errorf("no plugins must wake on any event")
	}
}

func TestScheduleRejectsBadInput(t *testing.T) {
	bad := pod("p").obj()
	bad.Spec.TopologySpreadConstraints = []corev1.TopologySpreadConstraint{{
		MaxSkew: 1, TopologyKey: siteKey, WhenUnsatisfiable: corev1.DoNotSchedule,
		LabelSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "app", Operator: "Bogus"}}},
	}}
	_, err := newTestScheduler().Schedule(bad, NewSnapshot(nodes(node("n1")), nil, nil))
	var fe *FitError
	if err == nil || errors.As(err, &fe) {
		t.Fatalf("Schedule(bad selector) = %v, want a plain error", err)
	}

	badAff := pod("p").podAffinity(corev1.PodAffinityTerm{TopologyKey: siteKey, LabelSelector: &metav1.LabelSelector{
		MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "app", Operator: "Bogus"}}}}).obj()
	_, err = newTestScheduler().Schedule(badAff, NewSnapshot(nodes(node("n1")), nil, nil))
	if !errors.As(err, &fe) || fe.PreFilterMsg == "" {
		t.Fatalf("Schedule(bad affinity) = %v, want a FitError from PreFilter", err)
	}
}

func TestSchedulePicksTheBest(t *testing.T) {
	tests := []struct {
		name     string
		nodes    []*corev1.Node
		existing []*corev1.Pod
		pod      *corev1.Pod
		want     string
	}{
		{name: "the only node that fits", nodes: nodes(node("n1").alloc("cpu", "1"), node("n2")), pod: pod("p").req("cpu", "2").obj(), want: "n2"},
		{name: "least allocated", nodes: nodes(node("n1"), node("n2"), node("n3")),
			existing: pods(pod("a").on("n1").req("cpu", "2"), pod("b").on("n3").req("cpu", "1")), pod: pod("p").req("cpu", "1").obj(), want: "n2"},
		{name: "preferred node affinity", nodes: nodes(node("n1").site("a"), node("n2").site("b"), node("n3").site("c")),
			pod: pod("p").preferNode(50, siteKey, "b").obj(), want: "n2"},
		{name: "PreferNoSchedule taint avoided", nodes: nodes(node("n1").taint("soft", "", corev1.TaintEffectPreferNoSchedule), node("n2").taint("soft", "", corev1.TaintEffectPreferNoSchedule)),
			pod: pod("p").obj(), want: ""}, // both equal: any
		{name: "preferred pod affinity", nodes: nodes(node("n1").site("a"), node("n2").site("b")),
			existing: pods(pod("db").on("n2").label("app", "db")), pod: pod("p").preferPod(100, term(siteKey, "app", "db")).obj(), want: "n2"},
		{name: "spread ScheduleAnyway over sites", nodes: nodes(node("n1").site("a"), node("n2").site("a"), node("n3").site("b")),
			existing: pods(pod("w1").on("n1").label("app", "web")), pod: pod("p").label("app", "web").spread(1, siteKey, corev1.ScheduleAnyway, "app", "web").obj(), want: "n3"},
		{name: "image locality", nodes: nodes(node("n1"), node("n2").image(800*mb, "registry.local/big:v1")),
			pod: pod("p").image("registry.local/big:v1").obj(), want: "n2"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			res, err := newTestScheduler().Schedule(tc.pod, NewSnapshot(tc.nodes, tc.existing, nil))
			if err != nil {
				t.Fatalf("Schedule() error = %v", err)
			}
			if tc.want != "" && res.Node != tc.want {
				t.Errorf("Schedule() = %s, want %s", res.Node, tc.want)
			}
		})
	}
}

func TestNumFeasibleNodesToFind(t *testing.T) {
	s := newTestScheduler()
	for _, tc := range []struct{ nodes, want int }{
		{10, 10}, {99, 99}, {100, 100}, {200, 100}, {500, 230}, {1000, 420}, {5000, 500}, {6000, 300}, {100000, 5000},
	} {
		if got := s.numFeasibleNodesToFind(tc.nodes); got != tc.want {
			t.Errorf("numFeasibleNodesToFind(%d) = %d, want %d", tc.nodes, got, tc.want)
		}
	}
	s.percentage = 100
	if got := s.numFeasibleNodesToFind(1000); got != 1000 {
		t.Errorf("numFeasibleNodesToFind(1000) at 100%% = %d, want 1000", got)
	}
}

// TestSamplingRotates: with 1,000 nodes a search stops after 420
// feasible ones, and the next starts where it stopped.
func TestSamplingRotates(t *testing.T) {
	var ns []*corev1.Node
	for i := range 1000 {
		ns = append(ns, node(fmt.Sprintf("n%04d", i)).obj())
	}
	snap := NewSnapshot(ns, nil, nil)
	s := newTestScheduler()
	seen := map[string]bool{}
	for i := range 3 {
		res, err := s.Schedule(pod(fmt.Sprint("p", i)).obj(), snap)
		if err != nil {
			t.Fatal(err)
		}
		if res.Evaluated != 420 || res.Feasible != 420 {
			t.Fatalf("evaluated %d, feasible %d; want 420 each", res.Evaluated, res.Feasible)
		}
		seen[res.Node] = true
	}
	if want := 3 * 420 % 1000; s.next != want {
		t.Fatalf("next start = %d, want %d", s.next, want)
	}
}
