package daemonset

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/outpost-mesh/outpost/hub/controllers/history"
)

var t0 = time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)

func daemonSet() *appsv1.DaemonSet {
	return &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: "agent", Namespace: "default", UID: "ds-uid",
			Annotations: map[string]string{appsv1.DeprecatedTemplateGeneration: "2"}},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "agent"}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "agent"}},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "agent", Image: "agent:2"}}},
			},
			UpdateStrategy: appsv1.DaemonSetUpdateStrategy{
				Type: appsv1.RollingUpdateDaemonSetStrategyType,
				RollingUpdate: &appsv1.RollingUpdateDaemonSet{
					MaxUnavailable: new(intstr.FromInt32(1)), MaxSurge: new(intstr.FromInt32(0)),
				},
			},
		},
	}
}

type nodeOpt func(*corev1.Node)

func node(name string, opts ...nodeOpt) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"kubernetes.io/hostname": name}},
		Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}}}
	for _, o := range opts {
		o(n)
	}
	return n
}

func taint(key string, effect corev1.TaintEffect) nodeOpt {
	return func(n *corev1.Node) { n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: key, Effect: effect}) }
}

func label(k, v string) nodeOpt { return func(n *corev1.Node) { n.Labels[k] = v } }

// offline is a node as the node lifecycle leaves one whose lease lapsed.
func offline(n *corev1.Node) {
	n.Status.Conditions[0].Status = corev1.ConditionUnknown
	taint(corev1.TaintNodeUnreachable, corev1.TaintEffectNoSchedule)(n)
}

const (
	oldHash = "old"
	newHash = "new"
)

type podOpt func(*corev1.Pod)

var podSeq int

func pod(nodeName, hash string, opts ...podOpt) *corev1.Pod {
	podSeq++
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%s-%d", nodeName, hash, podSeq), Namespace: "default",
			Labels:            map[string]string{"app": "agent", history.HashLabel: hash},
			CreationTimestamp: metav1.NewTime(t0.Add(time.Duration(podSeq) * time.Second))},
		Spec:   corev1.PodSpec{NodeName: nodeName},
		Status: corev1.PodStatus{Phase: corev1.PodRunning},
	}
	for _, o := range opts {
		o(p)
	}
	return p
}

func ready(p *corev1.Pod) {
	p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.NewTime(t0)})
}

func phase(ph corev1.PodPhase) podOpt { return func(p *corev1.Pod) { p.Status.Phase = ph } }

func terminating(p *corev1.Pod) { p.DeletionTimestamp = new(metav1.NewTime(t0)) }

func TestNodeFit(t *testing.T) {
	withSelector := func(ds *appsv1.DaemonSet) { ds.Spec.Template.Spec.NodeSelector = map[string]string{"role": "gateway"} }
	withAffinity := func(ds *appsv1.DaemonSet) {
		ds.Spec.Template.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
			RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
				MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "zone", Operator: corev1.NodeSelectorOpIn, Values: []string{"a"}}},
			}}}}}
	}
	tolerate := func(key string) func(*appsv1.DaemonSet) {
		return func(ds *appsv1.DaemonSet) {
			ds.Spec.Template.Spec.Tolerations = append(ds.Spec.Template.Spec.Tolerations, corev1.Toleration{Key: key, Operator: corev1.TolerationOpExists})
		}
	}
	hostNetwork := func(ds *appsv1.DaemonSet) { ds.Spec.Template.Spec.HostNetwork = true }
	nodeName := func(ds *appsv1.DaemonSet) { ds.Spec.Template.Spec.NodeName = "other" }

	all := Fit{Run: true, Place: true, Keep: true}
	keepOnly := Fit{Keep: true}
	for _, c := range []struct {
		name string
		ds   []func(*appsv1.DaemonSet)
		node *corev1.Node
		want Fit
	}{
		{"plain node", nil, node("n1"), all},
		{"selector mismatch", []func(*appsv1.DaemonSet){withSelector}, node("n1"), Fit{}},
		{"selector match", []func(*appsv1.DaemonSet){withSelector}, node("n1", label("role", "gateway")), all},
		{"affinity mismatch", []func(*appsv1.DaemonSet){withAffinity}, node("n1", label("zone", "b")), Fit{}},
		{"affinity match", []func(*appsv1.DaemonSet){withAffinity}, node("n1", label("zone", "a")), all},
		{"other node name", []func(*appsv1.DaemonSet){nodeName}, node("n1"), Fit{}},
		{"untolerated NoSchedule", nil, node("n1", taint("dedicated", corev1.TaintEffectNoSchedule)), keepOnly},
		{"untolerated NoExecute", nil, node("n1", taint("dedicated", corev1.TaintEffectNoExecute)), Fit{}},
		{"untolerated PreferNoSchedule", nil, node("n1", taint("dedicated", corev1.TaintEffectPreferNoSchedule)), all},
		{"tolerated taint", []func(*appsv1.DaemonSet){tolerate("dedicated")}, node("n1", taint("dedicated", corev1.TaintEffectNoSchedule)), all},
		{"default: unschedulable", nil, node("n1", taint(corev1.TaintNodeUnschedulable, corev1.TaintEffectNoSchedule)), all},
		{"default: disk pressure", nil, node("n1", taint(corev1.TaintNodeDiskPressure, corev1.TaintEffectNoSchedule)), all},
		{"default: memory pressure", nil, node("n1", taint(corev1.TaintNodeMemoryPressure, corev1.TaintEffectNoSchedule)), all},
		{"default: pid pressure", nil, node("n1", taint(corev1.TaintNodePIDPressure, corev1.TaintEffectNoSchedule)), all},
		{"default: not-ready NoExecute", nil, node("n1", taint(corev1.TaintNodeNotReady, corev1.TaintEffectNoExecute)), all},
		{"not-ready NoSchedule", nil, node("n1", taint(corev1.TaintNodeNotReady, corev1.TaintEffectNoSchedule)), keepOnly},
		{"network unavailable", nil, node("n1", taint(corev1.TaintNodeNetworkUnavailable, corev1.TaintEffectNoSchedule)), keepOnly},
		{"network unavailable, host network", []func(*appsv1.DaemonSet){hostNetwork}, node("n1", taint(corev1.TaintNodeNetworkUnavailable, corev1.TaintEffectNoSchedule)), all},
		{"offline", nil, node("n1", offline), Fit{Run: true, Keep: true, Offline: true}},
		{"offline, also unreachable NoExecute", nil, node("n1", offline, taint(corev1.TaintNodeUnreachable, corev1.TaintEffectNoExecute)), Fit{Run: true, Keep: true, Offline: true}},
		{"offline and tainted", nil, node("n1", offline, taint("dedicated", corev1.TaintEffectNoSchedule)), Fit{Keep: true, Offline: true}},
		{"offline, selector mismatch", []func(*appsv1.DaemonSet){withSelector}, node("n1", offline), Fit{Offline: true}},
		{"tainted unreachable, Ready not yet Unknown", nil, node("n1", taint(corev1.TaintNodeUnreachable, corev1.TaintEffectNoSchedule)), Fit{Run: true, Keep: true, Offline: true}},
	} {
		ds := daemonSet()
		for _, o := range c.ds {
			o(ds)
		}
		if got := NodeFit(ds, c.node); got != c.want {
			t.Errorf("%s: NodeFit = %+v, want %+v", c.name, got, c.want)
		}
	}
}

func TestNewPod(t *testing.T) {
	ds := daemonSet()
	ds.Spec.Template.Spec.Tolerations = []corev1.Toleration{{Key: corev1.TaintNodeUnreachable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: new(int64(5))}}
	ds.Spec.Template.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
		RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
			MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "zone", Operator: corev1.NodeSelectorOpIn, Values: []string{"a"}}},
		}}}}}
	p := NewPod(ds, "n1", "abc")
	if p.GenerateName != "agent-" || p.Namespace != "default" || p.Spec.NodeName != "" {
		t.Errorf("NewPod meta = %q in %q on %q, want agent- in default, unbound", p.GenerateName, p.Namespace, p.Spec.NodeName)
	}
	if p.Labels[history.HashLabel] != "abc" || p.Labels[templateGenerationLabel] != "2" || p.Labels["app"] != "agent" {
		t.Errorf("NewPod labels = %v", p.Labels)
	}
	if ref := metav1.GetControllerOf(p); ref == nil || ref.UID != "ds-uid" || ref.Kind != "DaemonSet" || ref.BlockOwnerDeletion == nil || !*ref.BlockOwnerDeletion {
		t.Errorf("NewPod controller = %+v", ref)
	}
	if got := TargetNode(p); got != "n1" {
		t.Errorf("TargetNode(NewPod(n1)) = %q", got)
	}
	terms := p.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
	if len(terms) != 1 || len(terms[0].MatchExpressions) != 0 || terms[0].MatchFields[0].Key != "metadata.name" {
		t.Errorf("NewPod required terms = %+v, want only metadata.name in matchFields", terms)
	}
	var keys []string
	for _, tol := range p.Spec.Tolerations {
		keys = append(keys, tol.Key+":"+string(tol.Effect))
		if tol.Key == corev1.TaintNodeUnreachable && tol.TolerationSeconds != nil {
			t.Errorf("NewPod kept the template's bounded unreachable toleration, want the default (unbounded) one")
		}
	}
	want := []string{"node.kubernetes.io/unreachable:NoExecute", "node.kubernetes.io/not-ready:NoExecute", "node.kubernetes.io/disk-pressure:NoSchedule",
		"node.kubernetes.io/memory-pressure:NoSchedule", "node.kubernetes.io/pid-pressure:NoSchedule", "node.kubernetes.io/unschedulable:NoSchedule"}
	if !slices.Equal(keys, want) {
		t.Errorf("NewPod tolerations = %v, want %v", keys, want)
	}
	if len(ds.Spec.Template.Spec.Tolerations) != 1 || ds.Spec.Template.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms[0].MatchFields != nil {
		t.Errorf("NewPod modified the daemonset's template")
	}
	ds.Spec.Template.Spec.HostNetwork = true
	if p := NewPod(ds, "n1", "abc"); !slices.ContainsFunc(p.Spec.Tolerations, func(t corev1.Toleration) bool { return t.Key == corev1.TaintNodeNetworkUnavailable }) {
		t.Errorf("NewPod with hostNetwork lacks the network-unavailable toleration")
	}
}

// planString renders a plan as "create n1,n2; delete p1; failed p2".
func planString(p Plan) string {
	var parts []string
	if len(p.Create) > 0 {
		parts = append(parts, "create "+strings.Join(p.Create, ","))
	}
	podNames := func(pods []*corev1.Pod) string {
		var s []string
		for _, p := range pods {
			s = append(s, p.Name)
		}
		return strings.Join(s, ",")
	}
	if len(p.Delete) > 0 {
		parts = append(parts, "delete "+podNames(p.Delete))
	}
	if len(p.Failed) > 0 {
		parts = append(parts, "failed "+podNames(p.Failed))
	}
	return strings.Join(parts, "; ")
}

// named returns p named name, for plans that read well.
func named(name string, p *corev1.Pod) *corev1.Pod {
	p.Name = name
	return p
}

func pods(ps ...*corev1.Pod) map[string][]*corev1.Pod {
	m := map[string][]*corev1.Pod{}
	for _, p := range ps {
		m[TargetNode(p)] = append(m[TargetNode(p)], p)
	}
	return m
}

func TestManage(t *testing.T) {
	unscheduled := named("ghost", pod("", newHash))
	unscheduled.Spec.Affinity = onNode(nil, "gone")
	for _, c := range []struct {
		name  string
		nodes []*corev1.Node
		pods  map[string][]*corev1.Pod
		surge bool
		want  string
	}{
		{"empty cluster", nil, nil, false, ""},
		{"one pod per node", []*corev1.Node{node("n2"), node("n1"), node("n3")}, pods(pod("n2", newHash)), false, "create n1,n3"},
		{"not on a tainted node", []*corev1.Node{node("n1"), node("n2", taint("dedicated", corev1.TaintEffectNoSchedule))}, nil, false, "create n1"},
		{"kept on a node tainted since", []*corev1.Node{node("n1", taint("dedicated", corev1.TaintEffectNoSchedule))}, pods(pod("n1", newHash)), false, ""},
		{"evicted by NoExecute", []*corev1.Node{node("n1", taint("dedicated", corev1.TaintEffectNoExecute))}, pods(named("p1", pod("n1", newHash))), false, "delete p1"},
		{"failed pod replaced", []*corev1.Node{node("n1")}, pods(named("p1", pod("n1", newHash, phase(corev1.PodFailed)))), false, "failed p1"},
		{"succeeded pod replaced", []*corev1.Node{node("n1")}, pods(named("p1", pod("n1", newHash, phase(corev1.PodSucceeded)))), false, "delete p1"},
		{"wait for a terminating pod", []*corev1.Node{node("n1")}, pods(pod("n1", oldHash, terminating)), false, ""},
		{"extra pods pruned, oldest kept", []*corev1.Node{node("n1")}, pods(named("a", pod("n1", newHash)), named("b", pod("n1", newHash))), false, "delete b"},
		{"surge: old ready beside new unavailable", []*corev1.Node{node("n1")}, pods(named("old", pod("n1", oldHash, ready)), named("new", pod("n1", newHash))), true, ""},
		{"surge: new available, old goes", []*corev1.Node{node("n1")}, pods(named("old", pod("n1", oldHash, ready)), named("new", pod("n1", newHash, ready))), true, "delete old"},
		{"surge: old not ready goes", []*corev1.Node{node("n1")}, pods(named("old", pod("n1", oldHash)), named("new", pod("n1", newHash))), true, "delete old"},
		{"unscheduled pod for a node that is gone", []*corev1.Node{node("n1")}, pods(pod("n1", newHash), unscheduled), false, "delete ghost"},
		{"offline node: no new pod", []*corev1.Node{node("n1", offline), node("n2")}, nil, false, "create n2"},
		{"offline node keeps its pod", []*corev1.Node{node("n1", offline)}, pods(pod("n1", oldHash, ready)), false, ""},
	} {
		ds := daemonSet()
		if c.surge {
			ds.Spec.UpdateStrategy.RollingUpdate = &appsv1.RollingUpdateDaemonSet{MaxUnavailable: new(intstr.FromInt32(0)), MaxSurge: new(intstr.FromInt32(1))}
		}
		in := Input{DS: ds, Nodes: c.nodes, Pods: c.pods, Hash: newHash, Now: t0.Add(time.Hour)}
		if got := planString(Manage(in)); got != c.want {
			t.Errorf("%s: Manage = %q, want %q", c.name, got, c.want)
		}
	}
}

func TestRollout(t *testing.T) {
	nodes := func(opts map[string][]nodeOpt, names ...string) []*corev1.Node {
		var out []*corev1.Node
		for _, n := range names {
			out = append(out, node(n, opts[n]...))
		}
		return out
	}
	three := nodes(nil, "n1", "n2", "n3")
	n1Offline := nodes(map[string][]nodeOpt{"n1": {offline}}, "n1", "n2", "n3")
	unavailable := func(v intstr.IntOrString) func(*appsv1.DaemonSet) {
		return func(ds *appsv1.DaemonSet) { ds.Spec.UpdateStrategy.RollingUpdate.MaxUnavailable = &v }
	}
	surge := func(v intstr.IntOrString) func(*appsv1.DaemonSet) {
		return func(ds *appsv1.DaemonSet) {
			ds.Spec.UpdateStrategy.RollingUpdate = &appsv1.RollingUpdateDaemonSet{MaxUnavailable: new(intstr.FromInt32(0)), MaxSurge: &v}
		}
	}
	onDelete := func(ds *appsv1.DaemonSet) {
		ds.Spec.UpdateStrategy = appsv1.DaemonSetUpdateStrategy{Type: appsv1.OnDeleteDaemonSetStrategyType}
	}
	old := func(n string, opts ...podOpt) *corev1.Pod { return named("old-"+n, pod(n, oldHash, opts...)) }
	cur := func(n string, opts ...podOpt) *corev1.Pod { return named("new-"+n, pod(n, newHash, opts...)) }
	for _, c := range []struct {
		name  string
		ds    func(*appsv1.DaemonSet)
		nodes []*corev1.Node
		pods  map[string][]*corev1.Pod
		want  string
	}{
		{"one at a time", nil, three, pods(old("n1", ready), old("n2", ready), old("n3", ready)), "delete old-n1"},
		{"waits for the new pod", nil, three, pods(cur("n1"), old("n2", ready), old("n3", ready)), ""},
		{"waits for a missing pod", nil, three, pods(old("n2", ready), old("n3", ready)), ""},
		{"next once available", nil, three, pods(cur("n1", ready), old("n2", ready), old("n3", ready)), "delete old-n2"},
		{"unavailable old pods replaced at once", nil, three, pods(old("n1"), old("n2"), old("n3", ready)), "delete old-n1,old-n2"},
		{"done", nil, three, pods(cur("n1", ready), cur("n2", ready), cur("n3", ready)), ""},
		{"maxUnavailable 2", unavailable(intstr.FromInt32(2)), three, pods(old("n1", ready), old("n2", ready), old("n3", ready)), "delete old-n1,old-n2"},
		{"maxUnavailable 50% of 3 rounds up", unavailable(intstr.FromString("50%")), three, pods(old("n1", ready), old("n2", ready), old("n3", ready)), "delete old-n1,old-n2"},
		{"OnDelete", onDelete, three, pods(old("n1", ready), old("n2", ready), old("n3", ready)), ""},
		{"terminating old pod counts as unavailable", nil, three, pods(old("n1", ready, terminating), old("n2", ready), old("n3", ready)), ""},

		// The edge rule.
		{"offline node skipped", nil, n1Offline, pods(old("n1", ready), old("n2", ready), old("n3", ready)), "delete old-n2"},
		{"offline node not waited on", nil, n1Offline, pods(old("n1", ready), cur("n2", ready), old("n3", ready)), "delete old-n3"},
		{"offline node keeps its old pod", nil, n1Offline, pods(old("n1", ready), cur("n2", ready), cur("n3", ready)), ""},
		{"offline with an unavailable pod does not stall maxUnavailable 1", nil, n1Offline, pods(old("n1"), old("n2", ready), old("n3", ready)), "delete old-n2"},
		{"offline with an unavailable pod counts once", unavailable(intstr.FromInt32(2)), n1Offline, pods(old("n1"), old("n2", ready), old("n3", ready)), "delete old-n2"},
		{"offline nodes never take the last unit", unavailable(intstr.FromInt32(2)),
			nodes(map[string][]nodeOpt{"n1": {offline}, "n2": {offline}}, "n1", "n2", "n3", "n4"),
			pods(old("n1"), old("n2"), old("n3", ready), old("n4", ready)), "delete old-n3"},
		{"offline node back", nil, three, pods(old("n1", ready), cur("n2", ready), cur("n3", ready)), "delete old-n1"},

		{"surge: one new pod beside the old", surge(intstr.FromInt32(1)), three, pods(old("n1", ready), old("n2", ready), old("n3", ready)), "create n1"},
		{"surge: waits for it", surge(intstr.FromInt32(1)), three, pods(old("n1", ready), cur("n1"), old("n2", ready), old("n3", ready)), ""},
		{"surge: old goes once new is available", surge(intstr.FromInt32(1)), three, pods(old("n1", ready), cur("n1", ready), old("n2", ready), old("n3", ready)), "create n2; delete old-n1"},
		{"surge: unavailable old replaced at once", surge(intstr.FromInt32(1)), three, pods(old("n1"), old("n2", ready), old("n3", ready)), "create n1,n2"},
		{"surge: offline node skipped", surge(intstr.FromInt32(1)), n1Offline, pods(old("n1", ready), old("n2", ready), old("n3", ready)), "create n2"},
		{"surge: misplaced old pod stays until others are available", surge(intstr.FromInt32(1)),
			nodes(map[string][]nodeOpt{"n3": {taint("dedicated", corev1.TaintEffectNoSchedule)}}, "n1", "n2", "n3"),
			pods(cur("n1", ready), old("n3", ready)), ""},
		{"surge: misplaced old pod goes once others are", surge(intstr.FromInt32(1)),
			nodes(map[string][]nodeOpt{"n3": {taint("dedicated", corev1.TaintEffectNoSchedule)}}, "n1", "n2", "n3"),
			pods(cur("n1", ready), cur("n2", ready), old("n3", ready)), "delete old-n3"},
	} {
		ds := daemonSet()
		if c.ds != nil {
			c.ds(ds)
		}
		in := Input{DS: ds, Nodes: c.nodes, Pods: c.pods, Hash: newHash, Now: t0.Add(time.Hour)}
		if got := planString(Rollout(in)); got != c.want {
			t.Errorf("%s: Rollout = %q, want %q", c.name, got, c.want)
		}
	}
}

func TestStatus(t *testing.T) {
	ds := daemonSet()
	ds.Spec.MinReadySeconds = 60
	now := t0.Add(30 * time.Second)
	readyLong := func(p *corev1.Pod) {
		p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.NewTime(t0.Add(-time.Hour))})
	}
	in := Input{
		DS: ds,
		Nodes: []*corev1.Node{
			node("n1"),          // new, ready long: available
			node("n2"),          // new, ready just now: not yet available
			node("n3"),          // old, not ready
			node("n4"),          // no pod yet
			node("n5", offline), // offline with its old pod: counts
			node("n6", offline), // offline without a pod: does not
			node("n7", taint("x", corev1.TaintEffectNoSchedule)), // a pod where none should be
		},
		Pods: pods(pod("n1", newHash, readyLong), pod("n2", newHash, ready), pod("n3", oldHash), pod("n5", oldHash, readyLong), pod("n7", newHash)),
		Hash: newHash, Now: now,
	}
	got := Status(in)
	want := appsv1.DaemonSetStatus{DesiredNumberScheduled: 5, CurrentNumberScheduled: 4, NumberMisscheduled: 1, NumberReady: 3,
		UpdatedNumberScheduled: 2, NumberAvailable: 2, NumberUnavailable: 3}
	if got.String() != want.String() {
		t.Errorf("Status = %+v,\nwant %+v", got, want)
	}
}

func TestUpdatedByTemplateGeneration(t *testing.T) {
	ds := daemonSet()
	p := pod("n1", "other")
	p.Labels[templateGenerationLabel] = "2"
	if !Updated(ds, p, newHash) {
		t.Errorf("Updated(pod of the current template generation) = false, want true")
	}
	p.Labels[templateGenerationLabel] = "1"
	if Updated(ds, p, newHash) {
		t.Errorf("Updated(pod of an old generation and hash) = true, want false")
	}
}
