package core

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// TestScores checks each score plugin's normalized scores over the
// nodes of a snapshot, all taken as feasible.
func TestScores(t *testing.T) {
	tests := []struct {
		name     string
		plugin   string
		nodes    []*corev1.Node
		existing []*corev1.Pod
		pod      *corev1.Pod
		want     []int64 // nil: the plugin skips the pod
	}{
		{name: "least allocated", plugin: "NodeResourcesFit",
			nodes:    nodes(node("n1"), node("n2"), node("n3")),
			existing: pods(pod("a").on("n2").req("cpu", "1", "memory", "2Gi"), pod("b").on("n3").req("cpu", "4")),
			pod:      pod("p").req("cpu", "1", "memory", "2Gi").obj(),
			want:     []int64{75, 50, 36}},
		{name: "least allocated counts unset requests at the defaults", plugin: "NodeResourcesFit",
			nodes: nodes(node("n1")), pod: pod("p").obj(), want: []int64{97}},
		{name: "balanced", plugin: "NodeResourcesBalancedAllocation",
			nodes:    nodes(node("n1"), node("n2")),
			existing: pods(pod("a").on("n2").req("cpu", "2")),
			pod:      pod("p").req("cpu", "1", "memory", "2Gi").obj(),
			want:     []int64{100, 75}},
		{name: "balanced skips best-effort pods", plugin: "NodeResourcesBalancedAllocation",
			nodes: nodes(node("n1")), pod: pod("p").obj(), want: nil},
		{name: "taints PreferNoSchedule", plugin: "TaintToleration",
			nodes: nodes(node("n1"), node("n2").taint("a", "", corev1.TaintEffectPreferNoSchedule),
				node("n3").taint("a", "", corev1.TaintEffectPreferNoSchedule).taint("b", "", corev1.TaintEffectPreferNoSchedule)),
			pod:  pod("p").obj(),
			want: []int64{100, 50, 0}},
		{name: "taints PreferNoSchedule tolerated", plugin: "TaintToleration",
			nodes: nodes(node("n1"), node("n2").taint("a", "", corev1.TaintEffectPreferNoSchedule),
				node("n3").taint("a", "", corev1.TaintEffectPreferNoSchedule).taint("b", "", corev1.TaintEffectPreferNoSchedule)),
			pod:  pod("p").tolerate("a", "", corev1.TaintEffectPreferNoSchedule).obj(),
			want: []int64{100, 100, 0}},
		{name: "taints none anywhere", plugin: "TaintToleration",
			nodes: nodes(node("n1"), node("n2").taint("hard", "", corev1.TaintEffectNoSchedule)), pod: pod("p").obj(),
			want: []int64{100, 100}},
		{name: "node affinity preferred", plugin: "NodeAffinity",
			nodes: nodes(node("n1").site("a"), node("n2").site("a").label("disk", "ssd"), node("n3")),
			pod:   pod("p").preferNode(10, siteKey, "a").preferNode(30, "disk", "ssd").obj(),
			want:  []int64{25, 100, 0}},
		{name: "node affinity without preferences skips", plugin: "NodeAffinity",
			nodes: nodes(node("n1")), pod: pod("p").selector(corev1.LabelHostname, "n1").obj(), want: nil},
		{name: "image locality", plugin: "ImageLocality",
			nodes: nodes(node("n1").image(500*mb, "registry.local/app:v1"), node("n2").image(500*mb, "registry.local/app:v1"), node("n3")),
			pod:   pod("p").image("registry.local/app:v1").obj(),
			want:  []int64{31, 31, 0}},
		{name: "image locality of an untagged image", plugin: "ImageLocality",
			nodes: nodes(node("n1").image(1000*mb, "app:latest"), node("n2")),
			pod:   pod("p").image("app").obj(),
			want:  []int64{48, 0}},
		{name: "image locality below the threshold", plugin: "ImageLocality",
			nodes: nodes(node("n1").image(10*mb, "app:latest")), pod: pod("p").image("app").obj(), want: []int64{0}},
		{name: "inter-pod preferred affinity and anti-affinity", plugin: "InterPodAffinity",
			nodes:    nodes(node("n1").site("a"), node("n2").site("a"), node("n3").site("b")),
			existing: pods(pod("db").on("n1").label("app", "db"), pod("w").on("n2").label("app", "web")),
			pod:      pod("p").preferPod(100, term(siteKey, "app", "db")).avoidPod(50, term(corev1.LabelHostname, "app", "web")).obj(),
			want:     []int64{100, 50, 0}},
		{name: "inter-pod: existing pods' preferences count too", plugin: "InterPodAffinity",
			nodes:    nodes(node("n1"), node("n2"), node("n3")),
			existing: pods(pod("friend").on("n1").preferPod(10, term(corev1.LabelHostname, "app", "web")), pod("foe").on("n3").avoidPod(10, term(corev1.LabelHostname, "app", "web"))),
			pod:      pod("p").label("app", "web").obj(),
			want:     []int64{100, 50, 0}},
		{name: "inter-pod: existing pods' required affinity at weight 1", plugin: "InterPodAffinity",
			nodes:    nodes(node("n1").site("a"), node("n2").site("b")),
			existing: pods(pod("needy").on("n2").podAffinity(term(siteKey, "app", "web"))),
			pod:      pod("p").label("app", "web").obj(),
			want:     []int64{0, 100}},
		{name: "inter-pod without any affinity skips", plugin: "InterPodAffinity",
			nodes: nodes(node("n1")), existing: pods(pod("a").on("n1")), pod: pod("p").obj(), want: nil},
		{name: "spread ScheduleAnyway over sites", plugin: "PodTopologySpread",
			nodes: nodes(node("n1").site("a"), node("n2").site("a"), node("n3").site("b")),
			existing: pods(pod("w1").on("n1").label("app", "web"), pod("w2").on("n1").label("app", "web"),
				pod("w3").on("n3").label("app", "web"), pod("x").on("n2").label("app", "other")),
			pod:  pod("p").label("app", "web").spread(1, siteKey, corev1.ScheduleAnyway, "app", "web").obj(),
			want: []int64{33, 33, 100}},
		{name: "spread ScheduleAnyway by hostname", plugin: "PodTopologySpread",
			nodes:    nodes(node("n1"), node("n2"), node("n3")),
			existing: pods(pod("w1").on("n1").label("app", "web"), pod("w2").on("n1").label("app", "web"), pod("w3").on("n3").label("app", "web")),
			pod:      pod("p").label("app", "web").spread(1, corev1.LabelHostname, corev1.ScheduleAnyway, "app", "web").obj(),
			want:     []int64{0, 100, 33}},
		{name: "spread ScheduleAnyway, a node without the key", plugin: "PodTopologySpread",
			nodes:    nodes(node("n1").site("a"), node("n2").site("b"), node("n3")),
			existing: pods(pod("w1").on("n1").label("app", "web")),
			pod:      pod("p").label("app", "web").spread(1, siteKey, corev1.ScheduleAnyway, "app", "web").obj(),
			want:     []int64{0, 100, 0}},
		{name: "spread DoNotSchedule only skips scoring", plugin: "PodTopologySpread",
			nodes: nodes(node("n1").site("a")), pod: pod("p").spread(1, siteKey, corev1.DoNotSchedule).obj(), want: nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := normalizedScores(t, tc.pod, NewSnapshot(tc.nodes, tc.existing, nil), tc.plugin)
			if tc.want == nil {
				if ok {
					t.Fatalf("%s scores %v, want it to skip the pod", tc.plugin, got)
				}
				return
			}
			if !ok {
				t.Fatalf("%s skipped the pod, want %v", tc.plugin, tc.want)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("%s scores = %v, want %v", tc.plugin, got, tc.want)
			}
		})
	}
}

func TestNormalizeDefault(t *testing.T) {
	for _, tc := range []struct {
		in      []int64
		reverse bool
		want    []int64
	}{
		{[]int64{0, 5, 10}, false, []int64{0, 50, 100}},
		{[]int64{0, 5, 10}, true, []int64{100, 50, 0}},
		{[]int64{0, 0}, false, []int64{0, 0}},
		{[]int64{0, 0}, true, []int64{100, 100}},
		{[]int64{3, 7}, false, []int64{42, 100}},
	} {
		got := slices.Clone(tc.in)
		normalizeDefault(got, tc.reverse)
		if !slices.Equal(got, tc.want) {
			t.Errorf("normalizeDefault(%v, %v) = %v, want %v", tc.in, tc.reverse, got, tc.want)
		}
	}
}

// TestWeights: the total is the plugins' normalized scores times
// upstream's default weights.
func TestWeights(t *testing.T) {
	snap := NewSnapshot(nodes(node("n1").site("a"), node("n2").site("b")), nil, nil)
	p := pod("p").req("cpu", "1", "memory", "2Gi").preferNode(1, siteKey, "a").obj()
	c, _, _, err := preFilter(p, snap)
	if err != nil {
		t.Fatal(err)
	}
	s := newTestScheduler()
	if err := s.score(c, snap.Nodes()); err != nil {
		t.Fatal(err)
	}
	// n1: taints 100*3 + affinity 100*2 + fit 75 + balanced 100 + image 0.
	// n2: the same without the affinity.
	if want := []int64{300 + 200 + 75 + 100, 300 + 75 + 100}; !slices.Equal(s.total, want) {
		t.Fatalf("totals = %v, want %v", s.total, want)
	}
}
