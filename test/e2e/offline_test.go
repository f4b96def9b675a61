package e2e

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/outpost-mesh/outpost/internal/netem"
)

// offlineGrace is the hub's --node-monitor-grace-period in the offline
// tests: above the 10 s lease renewal, short enough for a test.
const offlineGrace = 15 * time.Second

// TestNodeOffline is the edge-aware node lifecycle end to end: a node
// black-holed past the grace period goes Ready=Unknown with the
// unreachable taint, and its pods stay bound, neither deleted nor
// replaced; a DaemonSet rollout meanwhile updates the other nodes, and the
// offline one once it is back. Then, with outpost.dev/offline-tolerance on
// the Node, the same cut evicts its pods and they are placed elsewhere.
func TestNodeOffline(t *testing.T) {
	skipShort(t)
	t.Parallel()
	f := newFleet(t)
	h := f.startHub("--node-monitor-grace-period", offlineGrace.String())
	const site = "store-2"
	token, caHash := h.createToken(site)
	nodes := []string{"edge-1", "edge-2", "edge-3"}
	edges := map[string]*edge{}
	for _, node := range nodes {
		edges[node] = f.startEdge(h, node, token, caHash)
	}
	f.eventually(joinTimeout, "nodes Ready", func() (bool, string) {
		for _, node := range nodes {
			n, err := h.node(node)
			if err != nil {
				return false, apiProblem(err)
			}
			if p := nodeProblem(n, site, runtime.GOOS, runtime.GOARCH); p != "" {
				return false, p
			}
		}
		return true, ""
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	ns := metav1.NamespaceDefault
	apps := h.cs.AppsV1()

	replicas := int32(6)
	labels := map[string]string{"app": "shop"}
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "shop", Namespace: ns},
		Spec: appsv1.DeploymentSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "shop", Image: "shop:1"}}},
			},
		},
	}
	if _, err := apps.Deployments(ns).Create(ctx, dep, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	dsLabels := map[string]string{"app": "probe"}
	ds := &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: "probe", Namespace: ns},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: dsLabels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: dsLabels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "probe", Image: "probe:1"}}},
			},
		},
	}
	if _, err := apps.DaemonSets(ns).Create(ctx, ds, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var onCut []string
	const cutNode = "edge-2"
	f.eventually(workloadTimeout, "the deployment's 6 pods and the daemon set's 3 Running, some on "+cutNode, func() (bool, string) {
		pods, err := h.pods()
		if err != nil {
			return false, apiProblem(err)
		}
		shop, probes := running(pods, "app=shop"), running(pods, "app=probe")
		onCut = nil
		for _, p := range shop {
			if p.Spec.NodeName == cutNode {
				onCut = append(onCut, p.Name)
			}
		}
		return len(shop) == 6 && len(probes) == 3 && len(onCut) > 0, fmt.Sprintf("%d shop, %d probes Running; on %s: %v", len(shop), len(probes), cutNode, onCut)
	})
	slices.Sort(onCut)
	f.logf("shop pods on %s: %v", cutNode, onCut)

	// Cut the node off past the grace period.
	cut := edges[cutNode]
	cut.relay.Set(netem.Conditions{Blackhole: true})
	cutAt := time.Now()
	f.logf("%s black-holed", cutNode)
	f.eventually(2*time.Minute, cutNode+" Ready=Unknown with the unreachable taint", func() (bool, string) {
		n, err := h.node(cutNode)
		if err != nil {
			return false, apiProblem(err)
		}
		return readyStatus(n) == corev1.ConditionUnknown && hasTaint(n, corev1.TaintNodeUnreachable, corev1.TaintEffectNoSchedule),
			fmt.Sprintf("Ready=%s, taints %v", readyStatus(n), n.Spec.Taints)
	})
	f.logf("%s Unknown and tainted %v after the cut", cutNode, time.Since(cutAt).Round(time.Second))
	// Its pods are taken out of service (Ready=False, as upstream marks
	// them), though they stay where they are.
	f.eventually(workloadTimeout, "the offline node's shop pods Ready=False", func() (bool, string) {
		pods, err := h.pods()
		if err != nil {
			return false, apiProblem(err)
		}
		for _, name := range onCut {
			if p := pods[name]; p == nil || podCondition(p, corev1.PodReady) != corev1.ConditionFalse {
				return false, name + " not marked not ready"
			}
		}
		return true, ""
	})

	// A DaemonSet rollout while it is away: the others update, it keeps
	// its old pod.
	patch := []byte(`{"spec":{"template":{"spec":{"containers":[{"name":"probe","image":"probe:2"}]}}}}`)
	if _, err := apps.DaemonSets(ns).Patch(ctx, "probe", types.StrategicMergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	f.eventually(workloadTimeout, "the daemon set updated on the connected nodes", func() (bool, string) {
		pods, err := h.pods()
		if err != nil {
			return false, apiProblem(err)
		}
		byNode := map[string]string{}
		for _, p := range running(pods, "app=probe") {
			byNode[p.Spec.NodeName] = p.Spec.Containers[0].Image
		}
		ok := byNode["edge-1"] == "probe:2" && byNode["edge-3"] == "probe:2"
		return ok, fmt.Sprintf("probe images by node: %v", byNode)
	})

	// Past the grace and then some, its pods are still bound to it and
	// not replaced elsewhere.
	f.waitUntil(cutAt.Add(offlineGrace+30*time.Second), "the offline node's pods to have had time to go")
	pods, err := h.pods()
	if err != nil {
		t.Fatal(err)
	}
	var still []string
	for _, p := range pods {
		if p.Labels["app"] == "shop" && p.Spec.NodeName == cutNode && p.DeletionTimestamp == nil {
			still = append(still, p.Name)
		}
	}
	slices.Sort(still)
	if !slices.Equal(still, onCut) {
		t.Errorf("shop pods bound to the offline %s = %v, want the same %v", cutNode, still, onCut)
	}
	if n := len(byLabel(pods, "app=shop")); n != 6 {
		t.Errorf("%d shop pods while %s is offline, want 6: none replaced", n, cutNode)
	}
	if probe := probeOn(pods, cutNode); probe == nil || probe.Spec.Containers[0].Image != "probe:1" {
		t.Errorf("the daemon set pod on the offline node = %v, want its old probe:1 kept", probe)
	}

	// Back: the taint goes, the daemon set updates it too.
	cut.relay.Set(netem.Conditions{})
	f.eventually(2*time.Minute, cutNode+" Ready again without the taint", func() (bool, string) {
		n, err := h.node(cutNode)
		if err != nil {
			return false, apiProblem(err)
		}
		return readyStatus(n) == corev1.ConditionTrue && len(n.Spec.Taints) == 0, fmt.Sprintf("Ready=%s, taints %v", readyStatus(n), n.Spec.Taints)
	})
	f.eventually(workloadTimeout, "the returned node's shop pods Ready again, unchanged", func() (bool, string) {
		pods, err := h.pods()
		if err != nil {
			return false, apiProblem(err)
		}
		for _, name := range onCut {
			p := pods[name]
			if p == nil || p.Spec.NodeName != cutNode || p.DeletionTimestamp != nil {
				return false, name + " gone or moved"
			}
			if podCondition(p, corev1.PodReady) != corev1.ConditionTrue {
				return false, name + " not Ready yet"
			}
		}
		return true, ""
	})
	f.eventually(workloadTimeout, "the daemon set updated on "+cutNode, func() (bool, string) {
		pods, err := h.pods()
		if err != nil {
			return false, apiProblem(err)
		}
		p := probeOn(pods, cutNode)
		return p != nil && p.Status.Phase == corev1.PodRunning && p.Spec.Containers[0].Image == "probe:2", fmt.Sprintf("%v", p)
	})

	// Opt in to eviction, and cut it off again: its pods go, and are
	// replaced on the others.
	tol := []byte(`{"metadata":{"annotations":{"outpost.dev/offline-tolerance":"5s"}}}`)
	if _, err := h.cs.CoreV1().Nodes().Patch(ctx, cutNode, types.MergePatchType, tol, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	f.eventually(workloadTimeout, "6 shop pods Running again", func() (bool, string) {
		pods, err := h.pods()
		if err != nil {
			return false, apiProblem(err)
		}
		return len(running(pods, "app=shop")) == 6, ""
	})
	cut.relay.Set(netem.Conditions{Blackhole: true})
	f.logf("%s black-holed again, with an offline tolerance of 5s", cutNode)
	f.eventually(3*time.Minute, "the offline node's shop pods evicted and replaced on the others", func() (bool, string) {
		pods, err := h.pods()
		if err != nil {
			return false, apiProblem(err)
		}
		var elsewhere, left []string
		for _, p := range running(pods, "app=shop") {
			if p.Spec.NodeName == cutNode {
				if p.DeletionTimestamp == nil {
					left = append(left, p.Name)
				}
			} else {
				elsewhere = append(elsewhere, p.Name)
			}
		}
		return len(left) == 0 && len(elsewhere) == 6, fmt.Sprintf("not evicted on %s: %v; Running elsewhere: %d", cutNode, left, len(elsewhere))
	})
	cut.relay.Set(netem.Conditions{})
}

func running(pods map[string]*corev1.Pod, selector string) []*corev1.Pod {
	var out []*corev1.Pod
	for _, p := range byLabel(pods, selector) {
		if p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil {
			out = append(out, p)
		}
	}
	return out
}

// byLabel returns the pods whose label k=v selector names.
func byLabel(pods map[string]*corev1.Pod, selector string) []*corev1.Pod {
	k, v, _ := strings.Cut(selector, "=")
	var out []*corev1.Pod
	for _, p := range pods {
		if p.Labels[k] == v {
			out = append(out, p)
		}
	}
	return out
}

func probeOn(pods map[string]*corev1.Pod, node string) *corev1.Pod {
	for _, p := range byLabel(pods, "app=probe") {
		if p.Spec.NodeName == node && p.DeletionTimestamp == nil {
			return p
		}
	}
	return nil
}

func readyStatus(n *corev1.Node) corev1.ConditionStatus {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status
		}
	}
	return ""
}

func hasTaint(n *corev1.Node, key string, effect corev1.TaintEffect) bool {
	for _, t := range n.Spec.Taints {
		if t.Key == key && t.Effect == effect {
			return true
		}
	}
	return false
}
