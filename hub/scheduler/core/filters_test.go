package core

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/utils/ptr"
)

// TestFilters checks each filter plugin: the reasons it gives a node, or
// none when the node passes.
func TestFilters(t *testing.T) {
	unreachable := corev1.TaintNodeUnreachable
	tests := []struct {
		name     string
		nodes    []*corev1.Node
		existing []*corev1.Pod
		ns       Namespaces
		pod      *corev1.Pod
		node     string // the node to filter; the first if empty
		plugin   Plugin
		reasons  []string
	}{
		// NodeUnschedulable
		{name: "cordoned node", nodes: nodes(node("n1").unschedulable()), pod: pod("p").obj(),
			plugin: NodeUnschedulable, reasons: []string{"node(s) were unschedulable"}},
		{name: "cordoned node, tolerated", nodes: nodes(node("n1").unschedulable()),
			pod: pod("p").tolerate(corev1.TaintNodeUnschedulable, "", corev1.TaintEffectNoSchedule).obj()},
		// NodeName
		{name: "pod names another node", nodes: nodes(node("n1")), pod: pod("p").on("n2").obj(),
			plugin: NodeName, reasons: []string{"node(s) didn't match the requested node name"}},
		{name: "pod names this node", nodes: nodes(node("n1")), pod: pod("p").on("n1").obj()},
		// TaintToleration
		{name: "untolerated NoSchedule", nodes: nodes(node("n1").taint(unreachable, "", corev1.TaintEffectNoSchedule)), pod: pod("p").obj(),
			plugin: TaintToleration, reasons: []string{"node(s) had untolerated taint {node.kubernetes.io/unreachable: }"}},
		{name: "untolerated NoExecute with value", nodes: nodes(node("n1").taint("dedicated", "gpu", corev1.TaintEffectNoExecute)), pod: pod("p").obj(),
			plugin: TaintToleration, reasons: []string{"node(s) had untolerated taint {dedicated: gpu}"}},
		{name: "PreferNoSchedule does not filter", nodes: nodes(node("n1").taint("soft", "x", corev1.TaintEffectPreferNoSchedule)), pod: pod("p").obj()},
		{name: "tolerated by key", nodes: nodes(node("n1").taint(unreachable, "", corev1.TaintEffectNoSchedule)),
			pod: pod("p").tolerate(unreachable, "", corev1.TaintEffectNoSchedule).obj()},
		{name: "toleration with another value", nodes: nodes(node("n1").taint("dedicated", "gpu", corev1.TaintEffectNoSchedule)),
			pod:    pod("p").tolerate("dedicated", "cpu", corev1.TaintEffectNoSchedule).obj(),
			plugin: TaintToleration, reasons: []string{"node(s) had untolerated taint {dedicated: gpu}"}},
		{name: "toleration of every effect", nodes: nodes(node("n1").taint("dedicated", "gpu", corev1.TaintEffectNoExecute)),
			pod: pod("p").tolerate("dedicated", "gpu", "").obj()},
		// NodeAffinity
		{name: "nodeSelector matches", nodes: nodes(node("n1").label("disk", "ssd")), pod: pod("p").selector("disk", "ssd").obj()},
		{name: "nodeSelector does not match", nodes: nodes(node("n1").label("disk", "hdd")), pod: pod("p").selector("disk", "ssd").obj(),
			plugin: NodeAffinity, reasons: []string{"node(s) didn't match Pod's node affinity/selector"}},
		{name: "required affinity on the site", nodes: nodes(node("n1").site("berlin")), pod: pod("p").nodeAffinityIn(siteKey, "paris", "rome").obj(),
			plugin: NodeAffinity, reasons: []string{"node(s) didn't match Pod's node affinity/selector"}},
		{name: "required affinity matches", nodes: nodes(node("n1").site("rome")), pod: pod("p").nodeAffinityIn(siteKey, "paris", "rome").obj()},
		{name: "nodeSelector and affinity both needed", nodes: nodes(node("n1").site("rome")),
			pod:    pod("p").selector("disk", "ssd").nodeAffinityIn(siteKey, "rome").obj(),
			plugin: NodeAffinity, reasons: []string{"node(s) didn't match Pod's node affinity/selector"}},
		// NodePorts
		{name: "host port taken", nodes: nodes(node("n1")), existing: pods(pod("old").on("n1").hostPort(8080, "", "")),
			pod:    pod("p").hostPort(8080, "", "").obj(),
			plugin: NodePorts, reasons: []string{"node(s) didn't have free ports for the requested pod ports"}},
		{name: "host port on another protocol", nodes: nodes(node("n1")), existing: pods(pod("old").on("n1").hostPort(53, "", corev1.ProtocolUDP)),
			pod: pod("p").hostPort(53, "", corev1.ProtocolTCP).obj()},
		{name: "host port on other addresses", nodes: nodes(node("n1")), existing: pods(pod("old").on("n1").hostPort(80, "10.0.0.1", "")),
			pod: pod("p").hostPort(80, "10.0.0.2", "").obj()},
		{name: "wildcard wants a port a specific address holds", nodes: nodes(node("n1")), existing: pods(pod("old").on("n1").hostPort(80, "10.0.0.1", "")),
			pod:    pod("p").hostPort(80, "", "").obj(),
			plugin: NodePorts, reasons: []string{"node(s) didn't have free ports for the requested pod ports"}},
		{name: "specific address wants a port the wildcard holds", nodes: nodes(node("n1")), existing: pods(pod("old").on("n1").hostPort(80, "0.0.0.0", "")),
			pod:    pod("p").hostPort(80, "10.0.0.2", "").obj(),
			plugin: NodePorts, reasons: []string{"node(s) didn't have free ports for the requested pod ports"}},
		// NodeResourcesFit
		{name: "fits", nodes: nodes(node("n1")), existing: pods(pod("old").on("n1").req("cpu", "3")), pod: pod("p").req("cpu", "1").obj()},
		{name: "cpu short", nodes: nodes(node("n1")), existing: pods(pod("old").on("n1").req("cpu", "3")), pod: pod("p").req("cpu", "1001m").obj(),
			plugin: NodeResourcesFit, reasons: []string{"Insufficient cpu"}},
		{name: "cpu and memory short", nodes: nodes(node("n1")), pod: pod("p").req("cpu", "5", "memory", "9Gi").obj(),
			plugin: NodeResourcesFit, reasons: []string{"Insufficient cpu", "Insufficient memory"}},
		{name: "ephemeral storage short", nodes: nodes(node("n1").alloc("ephemeral-storage", "1Gi")), pod: pod("p").req("ephemeral-storage", "2Gi").obj(),
			plugin: NodeResourcesFit, reasons: []string{"Insufficient ephemeral-storage"}},
		{name: "extended resource absent", nodes: nodes(node("n1")), pod: pod("p").req("example.com/gpu", "1").obj(),
			plugin: NodeResourcesFit, reasons: []string{"Insufficient example.com/gpu"}},
		{name: "extended resource there", nodes: nodes(node("n1").alloc("example.com/gpu", "2")), pod: pod("p").req("example.com/gpu", "2").obj()},
		{name: "too many pods", nodes: nodes(node("n1").alloc("pods", "1")), existing: pods(pod("old").on("n1")), pod: pod("p").obj(),
			plugin: NodeResourcesFit, reasons: []string{"Too many pods"}},
		{name: "too many pods and cpu short", nodes: nodes(node("n1").alloc("pods", "1")), existing: pods(pod("old").on("n1").req("cpu", "4")),
			pod:    pod("p").req("cpu", "1").obj(),
			plugin: NodeResourcesFit, reasons: []string{"Too many pods", "Insufficient cpu"}},
		{name: "best-effort pod ignores full cpu", nodes: nodes(node("n1")), existing: pods(pod("old").on("n1").req("cpu", "4")), pod: pod("p").obj()},
		{name: "init container counts at its largest", nodes: nodes(node("n1")), pod: func() *corev1.Pod {
			p := pod("p").req("cpu", "1").obj()
			p.Spec.InitContainers = []corev1.Container{{Name: "init", Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("5")}}}}
			return p
		}(), plugin: NodeResourcesFit, reasons: []string{"Insufficient cpu"}},
		{name: "overhead counts", nodes: nodes(node("n1")), pod: func() *corev1.Pod {
			p := pod("p").req("cpu", "3500m").obj()
			p.Spec.Overhead = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("600m")}
			return p
		}(), plugin: NodeResourcesFit, reasons: []string{"Insufficient cpu"}},
		// PodTopologySpread
		{name: "spread within skew", nodes: nodes(node("n1").site("a"), node("n2").site("b")),
			existing: pods(pod("w1").on("n1").label("app", "web")),
			pod:      pod("p").label("app", "web").spread(1, siteKey, corev1.DoNotSchedule, "app", "web").obj(), node: "n2"},
		{name: "spread over skew", nodes: nodes(node("n1").site("a"), node("n2").site("b")),
			existing: pods(pod("w1").on("n1").label("app", "web")),
			pod:      pod("p").label("app", "web").spread(1, siteKey, corev1.DoNotSchedule, "app", "web").obj(), node: "n1",
			plugin: PodTopologySpread, reasons: []string{"node(s) didn't match pod topology spread constraints"}},
		{name: "spread node without the key", nodes: nodes(node("n1").site("a"), node("n2")),
			pod: pod("p").label("app", "web").spread(1, siteKey, corev1.DoNotSchedule, "app", "web").obj(), node: "n2",
			plugin: PodTopologySpread, reasons: []string{"node(s) didn't match pod topology spread constraints (missing required label)"}},
		{name: "spread ScheduleAnyway never filters", nodes: nodes(node("n1").site("a"), node("n2").site("b")),
			existing: pods(pod("w1").on("n1").label("app", "web"), pod("w2").on("n1").label("app", "web")),
			pod:      pod("p").label("app", "web").spread(1, siteKey, corev1.ScheduleAnyway, "app", "web").obj(), node: "n1"},
		{name: "spread counts only nodes the pod may use", nodes: nodes(node("n1").site("a").label("pool", "x"), node("n2").site("b").label("pool", "y")),
			existing: pods(pod("w1").on("n1").label("app", "web")),
			pod:      pod("p").label("app", "web").selector("pool", "x").spread(1, siteKey, corev1.DoNotSchedule, "app", "web").obj(), node: "n1"},
		{name: "spread with minDomains over the domains there are", nodes: nodes(node("n1").site("a"), node("n2").site("b")),
			existing: pods(pod("w1").on("n1").label("app", "web"), pod("w2").on("n2").label("app", "web")),
			pod: func() *corev1.Pod {
				p := pod("p").label("app", "web").spread(1, siteKey, corev1.DoNotSchedule, "app", "web").obj()
				p.Spec.TopologySpreadConstraints[0].MinDomains = ptr.To[int32](3)
				return p
			}(), node: "n1",
			plugin: PodTopologySpread, reasons: []string{"node(s) didn't match pod topology spread constraints"}},
		{name: "spread honours taints when asked", nodes: nodes(node("n1").site("a"), node("n2").site("b").taint("t", "", corev1.TaintEffectNoSchedule)),
			existing: pods(pod("w1").on("n1").label("app", "web")),
			pod: func() *corev1.Pod {
				p := pod("p").label("app", "web").spread(1, siteKey, corev1.DoNotSchedule, "app", "web").obj()
				p.Spec.TopologySpreadConstraints[0].NodeTaintsPolicy = ptr.To(corev1.NodeInclusionPolicyHonor)
				return p
			}(), node: "n1"},
		{name: "spread by hostname", nodes: nodes(node("n1"), node("n2")),
			existing: pods(pod("w1").on("n1").label("app", "web")),
			pod:      pod("p").label("app", "web").spread(1, corev1.LabelHostname, corev1.DoNotSchedule, "app", "web").obj(), node: "n1",
			plugin: PodTopologySpread, reasons: []string{"node(s) didn't match pod topology spread constraints"}},
		{name: "spread counts other namespaces out", nodes: nodes(node("n1"), node("n2")),
			existing: pods(pod("w1").ns("other").on("n1").label("app", "web")),
			pod:      pod("p").label("app", "web").spread(1, corev1.LabelHostname, corev1.DoNotSchedule, "app", "web").obj(), node: "n1"},
		// InterPodAffinity
		{name: "affinity to a pod at the site", nodes: nodes(node("n1").site("a"), node("n2").site("a"), node("n3").site("b")),
			existing: pods(pod("db").on("n1").label("app", "db")),
			pod:      pod("p").podAffinity(term(siteKey, "app", "db")).obj(), node: "n2"},
		{name: "affinity, no such pod at the site", nodes: nodes(node("n1").site("a"), node("n3").site("b")),
			existing: pods(pod("db").on("n1").label("app", "db")),
			pod:      pod("p").podAffinity(term(siteKey, "app", "db")).obj(), node: "n3",
			plugin: InterPodAffinity, reasons: []string{"node(s) didn't match pod affinity rules"}},
		{name: "affinity, node without the topology key", nodes: nodes(node("n1").site("a"), node("n3")),
			existing: pods(pod("db").on("n1").label("app", "db")),
			pod:      pod("p").podAffinity(term(siteKey, "app", "db")).obj(), node: "n3",
			plugin: InterPodAffinity, reasons: []string{"node(s) didn't match pod affinity rules"}},
		{name: "affinity to itself, first of its kind", nodes: nodes(node("n1").site("a")),
			pod: pod("p").label("app", "web").podAffinity(term(siteKey, "app", "web")).obj()},
		{name: "affinity, first of its kind but not matching itself", nodes: nodes(node("n1").site("a")),
			pod:    pod("p").label("app", "web").podAffinity(term(siteKey, "app", "db")).obj(),
			plugin: InterPodAffinity, reasons: []string{"node(s) didn't match pod affinity rules"}},
		{name: "affinity in another namespace by name", nodes: nodes(node("n1").site("a")),
			existing: pods(pod("db").ns("data").on("n1").label("app", "db")),
			pod: func() *corev1.Pod {
				tm := term(siteKey, "app", "db")
				tm.Namespaces = []string{"data"}
				return pod("p").podAffinity(tm).obj()
			}()},
		{name: "affinity in another namespace by selector", nodes: nodes(node("n1").site("a")),
			existing: pods(pod("db").ns("data").on("n1").label("app", "db")),
			ns:       fixedNamespaces{"data": labels.Set{"team": "x"}, "default": labels.Set{}},
			pod: func() *corev1.Pod {
				tm := term(siteKey, "app", "db")
				tm.NamespaceSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"team": "x"}}
				return pod("p").podAffinity(tm).obj()
			}()},
		{name: "affinity ignores other namespaces by default", nodes: nodes(node("n1").site("a"), node("n2").site("b")),
			existing: pods(pod("db").ns("data").on("n1").label("app", "db"), pod("db2").on("n2").label("app", "db")),
			pod:      pod("p").podAffinity(term(siteKey, "app", "db")).obj(), node: "n1",
			plugin: InterPodAffinity, reasons: []string{"node(s) didn't match pod affinity rules"}},
		{name: "anti-affinity by hostname", nodes: nodes(node("n1"), node("n2")),
			existing: pods(pod("w1").on("n1").label("app", "web")),
			pod:      pod("p").label("app", "web").podAntiAffinity(term(corev1.LabelHostname, "app", "web")).obj(), node: "n1",
			plugin: InterPodAffinity, reasons: []string{"node(s) didn't match pod anti-affinity rules"}},
		{name: "anti-affinity by hostname, other node", nodes: nodes(node("n1"), node("n2")),
			existing: pods(pod("w1").on("n1").label("app", "web")),
			pod:      pod("p").label("app", "web").podAntiAffinity(term(corev1.LabelHostname, "app", "web")).obj(), node: "n2"},
		{name: "anti-affinity by site", nodes: nodes(node("n1").site("a"), node("n2").site("a"), node("n3").site("b")),
			existing: pods(pod("w1").on("n1").label("app", "web")),
			pod:      pod("p").label("app", "web").podAntiAffinity(term(siteKey, "app", "web")).obj(), node: "n2",
			plugin: InterPodAffinity, reasons: []string{"node(s) didn't match pod anti-affinity rules"}},
		{name: "existing pod's anti-affinity", nodes: nodes(node("n1").site("a"), node("n2").site("a")),
			existing: pods(pod("lonely").on("n1").podAntiAffinity(term(siteKey, "app", "web"))),
			pod:      pod("p").label("app", "web").obj(), node: "n2",
			plugin: InterPodAffinity, reasons: []string{"node(s) didn't satisfy existing pods anti-affinity rules"}},
		{name: "existing pod's anti-affinity elsewhere", nodes: nodes(node("n1").site("a"), node("n2").site("b")),
			existing: pods(pod("lonely").on("n1").podAntiAffinity(term(siteKey, "app", "web"))),
			pod:      pod("p").label("app", "web").obj(), node: "n2"},
		{name: "existing pod's anti-affinity by any label", nodes: nodes(node("n1").label("rack", "r1"), node("n2").label("rack", "r1")),
			existing: pods(pod("lonely").on("n1").podAntiAffinity(term("rack", "app", "web"))),
			pod:      pod("p").label("app", "web").obj(), node: "n2",
			plugin: InterPodAffinity, reasons: []string{"node(s) didn't satisfy existing pods anti-affinity rules"}},
		// Order: the first failing filter gives the reason.
		{name: "taint before resources", nodes: nodes(node("n1").taint("t", "v", corev1.TaintEffectNoSchedule)), pod: pod("p").req("cpu", "9").obj(),
			plugin: TaintToleration, reasons: []string{"node(s) had untolerated taint {t: v}"}},
		{name: "unschedulable before taint", nodes: nodes(node("n1").unschedulable().taint("t", "v", corev1.TaintEffectNoSchedule)), pod: pod("p").obj(),
			plugin: NodeUnschedulable, reasons: []string{"node(s) were unschedulable"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			snap := NewSnapshot(tc.nodes, tc.existing, tc.ns)
			c, _, _, err := preFilter(tc.pod, snap)
			if err != nil {
				t.Fatalf("preFilter: %v", err)
			}
			n := snap.Nodes()[0]
			if tc.node != "" {
				n = snap.Get(tc.node)
			}
			s := newTestScheduler()
			plugin, reasons := s.runFilters(c, n)
			if plugin != tc.plugin || !slices.Equal(reasons, tc.reasons) {
				t.Errorf("filters(%s) = %v %q, want %v %q", n.Node().Name, Plugins(plugin), reasons, Plugins(tc.plugin), tc.reasons)
			}
		})
	}
}
