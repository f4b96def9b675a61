package core

import (
	"math/rand/v2"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
)

const siteKey = "topology.outpost.dev/site"

// nodeB builds a node for tests.
type nodeB struct{ n *corev1.Node }

func node(name string) *nodeB {
	return &nodeB{&corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{corev1.LabelHostname: name}},
		Status: corev1.NodeStatus{Allocatable: corev1.ResourceList{
			corev1.ResourceCPU:    resource.MustParse("4"),
			corev1.ResourceMemory: resource.MustParse("8Gi"),
			corev1.ResourcePods:   resource.MustParse("110"),
		}},
	}}
}

func (b *nodeB) alloc(kv ...string) *nodeB {
	for i := 0; i < len(kv); i += 2 {
		b.n.Status.Allocatable[corev1.ResourceName(kv[i])] = resource.MustParse(kv[i+1])
	}
	return b
}

func (b *nodeB) label(kv ...string) *nodeB {
	for i := 0; i < len(kv); i += 2 {
		b.n.Labels[kv[i]] = kv[i+1]
	}
	return b
}

func (b *nodeB) site(s string) *nodeB { return b.label(siteKey, s) }

func (b *nodeB) taint(key, value string, effect corev1.TaintEffect) *nodeB {
	b.n.Spec.Taints = append(b.n.Spec.Taints, corev1.Taint{Key: key, Value: value, Effect: effect})
	return b
}

func (b *nodeB) unschedulable() *nodeB { b.n.Spec.Unschedulable = true; return b }

func (b *nodeB) image(size int64, names ...string) *nodeB {
	b.n.Status.Images = append(b.n.Status.Images, corev1.ContainerImage{Names: names, SizeBytes: size})
	return b
}

func (b *nodeB) obj() *corev1.Node { return b.n }

// podB builds a pod for tests.
type podB struct{ p *corev1.Pod }

var podSeq int

func pod(name string) *podB {
	podSeq++
	return &podB{&corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, UID: types.UID(name + "-uid"), Labels: map[string]string{}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "app"}}},
	}}
}

func (b *podB) ns(ns string) *podB { b.p.Namespace = ns; return b }

func (b *podB) req(kv ...string) *podB {
	rl := corev1.ResourceList{}
	for i := 0; i < len(kv); i += 2 {
		rl[corev1.ResourceName(kv[i])] = resource.MustParse(kv[i+1])
	}
	b.p.Spec.Containers[0].Resources.Requests = rl
	return b
}

func (b *podB) label(kv ...string) *podB {
	for i := 0; i < len(kv); i += 2 {
		b.p.Labels[kv[i]] = kv[i+1]
	}
	return b
}

func (b *podB) on(node string) *podB { b.p.Spec.NodeName = node; return b }

func (b *podB) selector(kv ...string) *podB {
	b.p.Spec.NodeSelector = map[string]string{}
	for i := 0; i < len(kv); i += 2 {
		b.p.Spec.NodeSelector[kv[i]] = kv[i+1]
	}
	return b
}

func (b *podB) tolerate(key, value string, effect corev1.TaintEffect) *podB {
	op := corev1.TolerationOpEqual
	if value == "" {
		op = corev1.TolerationOpExists
	}
	b.p.Spec.Tolerations = append(b.p.Spec.Tolerations, corev1.Toleration{Key: key, Operator: op, Value: value, Effect: effect})
	return b
}

func (b *podB) hostPort(port int32, ip string, proto corev1.Protocol) *podB {
	c := &b.p.Spec.Containers[0]
	c.Ports = append(c.Ports, corev1.ContainerPort{ContainerPort: port, HostPort: port, HostIP: ip, Protocol: proto})
	return b
}

func (b *podB) image(img string) *podB { b.p.Spec.Containers[0].Image = img; return b }

func (b *podB) affinity() *corev1.Affinity {
	if b.p.Spec.Affinity == nil {
		b.p.Spec.Affinity = &corev1.Affinity{}
	}
	return b.p.Spec.Affinity
}

func (b *podB) nodeAffinityIn(key string, values ...string) *podB {
	a := b.affinity()
	a.NodeAffinity = &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
		NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{{
			Key: key, Operator: corev1.NodeSelectorOpIn, Values: values,
		}}}},
	}}
	return b
}

// onlyNodes pins the pod to nodes by metadata.name, as a DaemonSet does;
// each slice is one term.
func (b *podB) onlyNodes(terms ...[]string) *podB {
	a := b.affinity()
	ns := &corev1.NodeSelector{}
	for _, names := range terms {
		ns.NodeSelectorTerms = append(ns.NodeSelectorTerms, corev1.NodeSelectorTerm{MatchFields: []corev1.NodeSelectorRequirement{{
			Key: metav1.ObjectNameField, Operator: corev1.NodeSelectorOpIn, Values: names,
		}}})
	}
	a.NodeAffinity = &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: ns}
	return b
}

func (b *podB) preferNode(weight int32, key string, values ...string) *podB {
	a := b.affinity()
	if a.NodeAffinity == nil {
		a.NodeAffinity = &corev1.NodeAffinity{}
	}
	a.NodeAffinity.PreferredDuringSchedulingIgnoredDuringExecution = append(a.NodeAffinity.PreferredDuringSchedulingIgnoredDuringExecution,
		corev1.PreferredSchedulingTerm{Weight: weight, Preference: corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{{
			Key: key, Operator: corev1.NodeSelectorOpIn, Values: values,
		}}}})
	return b
}

func term(topologyKey string, kv ...string) corev1.PodAffinityTerm {
	m := map[string]string{}
	for i := 0; i < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return corev1.PodAffinityTerm{LabelSelector: &metav1.LabelSelector{MatchLabels: m}, TopologyKey: topologyKey}
}

func (b *podB) podAffinity(t corev1.PodAffinityTerm) *podB {
	a := b.affinity()
	if a.PodAffinity == nil {
		a.PodAffinity = &corev1.PodAffinity{}
	}
	a.PodAffinity.RequiredDuringSchedulingIgnoredDuringExecution = append(a.PodAffinity.RequiredDuringSchedulingIgnoredDuringExecution, t)
	return b
}

func (b *podB) podAntiAffinity(t corev1.PodAffinityTerm) *podB {
	a := b.affinity()
	if a.PodAntiAffinity == nil {
		a.PodAntiAffinity = &corev1.PodAntiAffinity{}
	}
	a.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution = append(a.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution, t)
	return b
}

func (b *podB) preferPod(weight int32, t corev1.PodAffinityTerm) *podB {
	a := b.affinity()
	if a.PodAffinity == nil {
		a.PodAffinity = &corev1.PodAffinity{}
	}
	a.PodAffinity.PreferredDuringSchedulingIgnoredDuringExecution = append(a.PodAffinity.PreferredDuringSchedulingIgnoredDuringExecution,
		corev1.WeightedPodAffinityTerm{Weight: weight, PodAffinityTerm: t})
	return b
}

func (b *podB) avoidPod(weight int32, t corev1.PodAffinityTerm) *podB {
	a := b.affinity()
	if a.PodAntiAffinity == nil {
		a.PodAntiAffinity = &corev1.PodAntiAffinity{}
	}
	a.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution = append(a.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution,
		corev1.WeightedPodAffinityTerm{Weight: weight, PodAffinityTerm: t})
	return b
}

func (b *podB) spread(maxSkew int32, key string, when corev1.UnsatisfiableConstraintAction, kv ...string) *podB {
	m := map[string]string{}
	for i := 0; i < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	b.p.Spec.TopologySpreadConstraints = append(b.p.Spec.TopologySpreadConstraints, corev1.TopologySpreadConstraint{
		MaxSkew: maxSkew, TopologyKey: key, WhenUnsatisfiable: when, LabelSelector: &metav1.LabelSelector{MatchLabels: m},
	})
	return b
}

func (b *podB) obj() *corev1.Pod { return b.p }

func nodes(bs ...*nodeB) []*corev1.Node {
	out := make([]*corev1.Node, len(bs))
	for i, b := range bs {
		out[i] = b.obj()
	}
	return out
}

func pods(bs ...*podB) []*corev1.Pod {
	out := make([]*corev1.Pod, len(bs))
	for i, b := range bs {
		out[i] = b.obj()
	}
	return out
}

// fixedNamespaces serves namespace labels from a map.
type fixedNamespaces map[string]labels.Set

func (f fixedNamespaces) Labels(name string) labels.Set { return f[name] }
func (f fixedNamespaces) Select(sel labels.Selector) []string {
	var out []string
	for n, l := range f {
		if sel.Matches(l) {
			out = append(out, n)
		}
	}
	return out
}

func newTestScheduler() *Scheduler { return New(Options{Rand: rand.New(rand.NewPCG(1, 2))}) }

// rawAndNormalized returns, for every node of snap taken as feasible,
// the named score plugin's normalized scores; ok is false when the
// plugin skips the pod.
func normalizedScores(t *testing.T, p *corev1.Pod, snap *Snapshot, plugin string) ([]int64, bool) {
	t.Helper()
	c, _, _, err := preFilter(p, snap)
	if err != nil {
		t.Fatalf("preFilter: %v", err)
	}
	feasible := snap.Nodes()
	if err := preScore(c, feasible); err != nil {
		t.Fatalf("preScore: %v", err)
	}
	for _, sc := range scorersFor(c) {
		if sc.name != plugin {
			continue
		}
		out := make([]int64, len(feasible))
		for i, n := range feasible {
			out[i] = sc.score(c, n)
		}
		if sc.normalize != nil {
			sc.normalize(c, feasible, out)
		}
		return out, true
	}
	return nil, false
}

func resourceMust(s string) resource.Quantity { return resource.MustParse(s) }
