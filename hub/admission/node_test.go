package admission

import (
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/outpost-mesh/outpost/hub/auth"
)

func TestNodeMaySetLabel(t *testing.T) {
	for _, tc := range []struct {
		key  string
		want bool
	}{
		// Not Kubernetes' or the hub's: the user's.
		{"app", true},
		{"example.com/x", true},
		{"kubernetes.io.example.com/x", true},
		{"notkubernetes.io/x", true},
		{"notk8s.io/x", true},
		{"notoutpost.dev/x", true},
		// What kubelet sets.
		{corev1.LabelHostname, true},
		{corev1.LabelOSStable, true},
		{corev1.LabelArchStable, true},
		{"beta.kubernetes.io/os", true},
		{"beta.kubernetes.io/arch", true},
		{corev1.LabelInstanceType, true},
		{corev1.LabelInstanceTypeStable, true},
		{corev1.LabelTopologyZone, true},
		{corev1.LabelTopologyRegion, true},
		{corev1.LabelFailureDomainBetaZone, true},
		{corev1.LabelFailureDomainBetaRegion, true},
		{"kubelet.kubernetes.io/x", true},
		{"a.kubelet.kubernetes.io/x", true},
		{"node.kubernetes.io/x", true},
		{corev1.LabelNodeExcludeBalancers, true},
		{"a.node.kubernetes.io/x", true},
		// Other Kubernetes labels.
		{"node-role.kubernetes.io/control-plane", false},
		{"node-role.kubernetes.io/worker", false},
		{"kubernetes.io/role", false},
		{"kubernetes.io/x", false},
		{"beta.kubernetes.io/x", false},
		{"topology.kubernetes.io/rack", false},
		{corev1.LabelMetadataName, false},
		{"k8s.io/x", false},
		{"a.k8s.io/x", false},
		{"kubelet.k8s.io/x", false},
		// Only administrators set these.
		{"node-restriction.kubernetes.io/x", false},
		{"a.node-restriction.kubernetes.io/x", false},
		// The hub's.
		{auth.SiteLabel, false},
		{"outpost.dev/x", false},
		{"a.b.outpost.dev/x", false},
	} {
		if got := NodeMaySetLabel(tc.key); got != tc.want {
			t.Errorf("NodeMaySetLabel(%q) = %v, want %v", tc.key, got, tc.want)
		}
	}
}

// stored is a Node as the hub keeps it for node edge-a: registered with
// its hostname and site, an administrator's taint and role label, and the
// status it reported.
func stored() *corev1.Node {
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name: "edge-a",
			UID:  "u-1",
			Labels: map[string]string{
				corev1.LabelHostname:          "edge-a",
				auth.SiteLabel:                "store-1",
				"node-role.kubernetes.io/pos": "",
			},
			Annotations: map[string]string{"a": "1"},
		},
		Spec: corev1.NodeSpec{
			Taints: []corev1.Taint{{Key: "dedicated", Value: "pos", Effect: corev1.TaintEffectNoSchedule}},
		},
		Status: corev1.NodeStatus{
			Capacity: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("4")},
		},
	}
}

// with returns a copy of n changed by f.
func with(n *corev1.Node, f func(*corev1.Node)) *corev1.Node {
	n = n.DeepCopy()
	f(n)
	return n
}

func labels(kv ...string) func(*corev1.Node) {
	return func(n *corev1.Node) {
		for i := 0; i < len(kv); i += 2 {
			n.Labels[kv[i]] = kv[i+1]
		}
	}
}

func unlabel(keys ...string) func(*corev1.Node) {
	return func(n *corev1.Node) {
		for _, k := range keys {
			delete(n.Labels, k)
		}
	}
}

func denied(field string, labels ...string) *DeniedError {
	return &DeniedError{Node: "edge-a", Field: field, Labels: labels}
}

func deniedCreate(field string, labels ...string) *DeniedError {
	return &DeniedError{Node: "edge-a", Create: true, Field: field, Labels: labels}
}

var configSource = &corev1.NodeConfigSource{ConfigMap: &corev1.ConfigMapNodeConfigSource{Namespace: "kube-system", Name: "edge-a", KubeletConfigKey: "kubelet"}}

func TestCheckNodeCreate(t *testing.T) {
	fresh := func(f func(*corev1.Node)) *corev1.Node {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "edge-a", Labels: map[string]string{corev1.LabelHostname: "edge-a"}}}
		f(n)
		return n
	}
	for _, tc := range []struct {
		name string
		n    *corev1.Node
		want *DeniedError
	}{
		{"own", fresh(func(*corev1.Node) {}), nil},
		{"another node's", fresh(func(n *corev1.Node) { n.Name = "edge-b" }), &DeniedError{Node: "edge-a", Field: "node", Other: "edge-b"}},
		{"kubelet's labels", fresh(labels(corev1.LabelArchStable, "arm64", corev1.LabelOSStable, "linux", "node.kubernetes.io/x", "y")), nil},
		{"user labels", fresh(labels("example.com/x", "y", "app", "pos")), nil},
		{"control-plane role", fresh(labels("node-role.kubernetes.io/control-plane", "")), deniedCreate("labels", "node-role.kubernetes.io/control-plane")},
		{"node-restriction label", fresh(labels("node-restriction.kubernetes.io/pci", "true")), deniedCreate("labels", "node-restriction.kubernetes.io/pci")},
		{"site", fresh(labels(auth.SiteLabel, "store-2")), deniedCreate("labels", auth.SiteLabel)},
		{"several, sorted", fresh(labels("node-role.kubernetes.io/control-plane", "", auth.SiteLabel, "store-2", "k8s.io/x", "", "app", "ok")),
			deniedCreate("labels", "k8s.io/x", "node-role.kubernetes.io/control-plane", auth.SiteLabel)},
		{"configSource", fresh(func(n *corev1.Node) { n.Spec.ConfigSource = configSource }), deniedCreate("configSource")},
		// As kubelet registers: upstream leaves these to the creator.
		{"taints", fresh(func(n *corev1.Node) {
			n.Spec.Taints = []corev1.Taint{{Key: "k", Effect: corev1.TaintEffectNoSchedule}}
		}), nil},
		{"podCIDR and providerID", fresh(func(n *corev1.Node) {
			n.Spec.PodCIDR, n.Spec.PodCIDRs, n.Spec.ProviderID = "10.244.1.0/24", []string{"10.244.1.0/24"}, "outpost://edge-a"
		}), nil},
		{"owner", fresh(func(n *corev1.Node) {
			n.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: "edge-b", UID: "u-2"}}
		}), nil},
	} {
		in := tc.n.DeepCopy()
		got := CheckNode(nil, tc.n, "edge-a")
		if !sameError(got, tc.want) {
			t.Errorf("CheckNode(create %s) = %v, want %v", tc.name, got, tc.want)
		}
		if !reflect.DeepEqual(in, tc.n) {
			t.Errorf("CheckNode(create %s) modified the node", tc.name)
		}
	}
}

func TestCheckNodeUpdate(t *testing.T) {
	old := stored()
	legacy := with(old, func(n *corev1.Node) { n.Spec.PodCIDR = "10.244.1.0/24" }) // stored before podCIDRs followed podCIDR
	for _, tc := range []struct {
		name string
		old  *corev1.Node
		n    *corev1.Node
		want *DeniedError
	}{
		{"nothing", old, old, nil},
		{"status", old, with(old, func(n *corev1.Node) {
			n.Status.Capacity = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("8")}
			n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}
		}), nil},
		{"resourceVersion and annotations", old, with(old, func(n *corev1.Node) {
			n.ResourceVersion, n.Annotations = "7", map[string]string{"b": "2"}
		}), nil},
		{"cordon", old, with(old, func(n *corev1.Node) { n.Spec.Unschedulable = true }), nil},
		{"another node's", old, with(old, func(n *corev1.Node) { n.Name = "edge-b" }), &DeniedError{Node: "edge-a", Field: "node", Other: "edge-b"}},

		// Labels.
		{"arch added", old, with(old, labels(corev1.LabelArchStable, "arm64")), nil},
		{"hostname changed", old, with(old, labels(corev1.LabelHostname, "edge-a.local")), nil},
		{"user label added", old, with(old, labels("example.com/x", "y")), nil},
		{"user label removed", with(old, labels("example.com/x", "y")), old, nil},
		{"zone and instance type", old, with(old, labels(corev1.LabelTopologyZone, "z", corev1.LabelInstanceTypeStable, "pi5")), nil},
		{"control-plane role added", old, with(old, labels("node-role.kubernetes.io/control-plane", "")), denied("labels", "node-role.kubernetes.io/control-plane")},
		{"role changed", old, with(old, labels("node-role.kubernetes.io/pos", "x")), denied("labels", "node-role.kubernetes.io/pos")},
		{"role removed", old, with(old, unlabel("node-role.kubernetes.io/pos")), denied("labels", "node-role.kubernetes.io/pos")},
		{"node-restriction label added", old, with(old, labels("node-restriction.kubernetes.io/pci", "true")), denied("labels", "node-restriction.kubernetes.io/pci")},
		{"node-restriction label removed", with(old, labels("node-restriction.kubernetes.io/pci", "true")), old, denied("labels", "node-restriction.kubernetes.io/pci")},
		{"site changed", old, with(old, labels(auth.SiteLabel, "store-2")), denied("labels", auth.SiteLabel)},
		{"site removed", old, with(old, unlabel(auth.SiteLabel)), denied("labels", auth.SiteLabel)},
		{"hub label added", old, with(old, labels("fleet.outpost.dev/wave", "1")), denied("labels", "fleet.outpost.dev/wave")},
		{"all labels dropped", old, with(old, func(n *corev1.Node) { n.Labels = nil }), denied("labels", "node-role.kubernetes.io/pos", auth.SiteLabel)},
		{"refused and allowed together", old, with(old, labels(corev1.LabelArchStable, "arm64", "kubernetes.io/x", "1", auth.SiteLabel, "store-2")),
			denied("labels", "kubernetes.io/x", auth.SiteLabel)},
		{"refused labels kept", old, with(old, labels("example.com/x", "y")), nil},

		// Spec.
		{"taint added", old, with(old, func(n *corev1.Node) {
			n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: "k", Effect: corev1.TaintEffectNoExecute})
		}), denied("taints")},
		{"taint removed", old, with(old, func(n *corev1.Node) { n.Spec.Taints = nil }), denied("taints")},
		{"taint changed", old, with(old, func(n *corev1.Node) { n.Spec.Taints[0].Effect = corev1.TaintEffectPreferNoSchedule }), denied("taints")},
		{"no taints, empty list", with(old, func(n *corev1.Node) { n.Spec.Taints = nil }), with(old, func(n *corev1.Node) { n.Spec.Taints = []corev1.Taint{} }), nil},
		{"owner added", old, with(old, func(n *corev1.Node) {
			n.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: "edge-b", UID: "u-2"}}
		}), denied("ownerReferences")},
		{"owner removed", with(old, func(n *corev1.Node) {
			n.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: "x", UID: "u-3"}}
		}), old, denied("ownerReferences")},
		{"podCIDR set", old, with(old, func(n *corev1.Node) { n.Spec.PodCIDR = "10.244.9.0/24" }), denied("podCIDR")},
		{"podCIDRs set", old, with(old, func(n *corev1.Node) { n.Spec.PodCIDRs = []string{"10.244.9.0/24"} }), denied("podCIDR")},
		{"second family added", legacy, with(legacy, func(n *corev1.Node) { n.Spec.PodCIDRs = []string{"10.244.1.0/24", "fd00:9::/64"} }), denied("podCIDR")},
		{"podCIDR as stored before podCIDRs followed", legacy, with(legacy, func(n *corev1.Node) {
			n.Spec.PodCIDRs = []string{"10.244.1.0/24"}
		}), nil},
		{"providerID set", old, with(old, func(n *corev1.Node) { n.Spec.ProviderID = "outpost://edge-b" }), denied("providerID")},
		{"providerID changed", with(old, func(n *corev1.Node) { n.Spec.ProviderID = "outpost://edge-a" }),
			with(old, func(n *corev1.Node) { n.Spec.ProviderID = "outpost://edge-b" }), denied("providerID")},
		{"configSource set", old, with(old, func(n *corev1.Node) { n.Spec.ConfigSource = configSource }), denied("configSource")},
		{"configSource changed", with(old, func(n *corev1.Node) { n.Spec.ConfigSource = configSource }), with(old, func(n *corev1.Node) {
			n.Spec.ConfigSource = configSource.DeepCopy()
			n.Spec.ConfigSource.ConfigMap.Name = "other"
		}), denied("configSource")},
		{"configSource kept", with(old, func(n *corev1.Node) { n.Spec.ConfigSource = configSource }),
			with(old, func(n *corev1.Node) { n.Spec.ConfigSource = configSource.DeepCopy() }), nil},
		{"configSource cleared", with(old, func(n *corev1.Node) { n.Spec.ConfigSource = configSource }), old, nil},
		{"taints and labels: taints first", old, with(old, func(n *corev1.Node) {
			n.Spec.Taints = nil
			n.Labels[auth.SiteLabel] = "store-2"
		}), denied("taints")},
	} {
		oldIn, in := tc.old.DeepCopy(), tc.n.DeepCopy()
		got := CheckNode(tc.old, tc.n, "edge-a")
		if !sameError(got, tc.want) {
			t.Errorf("CheckNode(update %s) = %v, want %v", tc.name, got, tc.want)
		}
		if !reflect.DeepEqual(oldIn, tc.old) || !reflect.DeepEqual(in, tc.n) {
			t.Errorf("CheckNode(update %s) modified a node", tc.name)
		}
	}
}

// sameError reports whether got is want, nil for nil.
func sameError(got error, want *DeniedError) bool {
	if want == nil {
		return got == nil
	}
	d, ok := got.(*DeniedError)
	return ok && reflect.DeepEqual(d, want)
}

func TestDeniedErrorMessages(t *testing.T) {
	for _, tc := range []struct {
		err  *DeniedError
		want string
	}{
		{&DeniedError{Node: "edge-a", Field: "node", Other: "edge-b"}, `node "edge-a" is not allowed to modify node "edge-b"`},
		{denied("taints"), `node "edge-a" is not allowed to modify taints`},
		{denied("ownerReferences"), `node "edge-a" is not allowed to modify ownerReferences`},
		{denied("podCIDR"), `node "edge-a" is not allowed to modify podCIDR`},
		{denied("providerID"), `node "edge-a" is not allowed to modify providerID`},
		{denied("configSource"), `node "edge-a" is not allowed to update configSource to a new non-nil configSource`},
		{deniedCreate("configSource"), `node "edge-a" is not allowed to create a Node with a non-nil configSource`},
		{denied("labels", "a.k8s.io/x", "node-role.kubernetes.io/control-plane"),
			`node "edge-a" is not allowed to modify labels: a.k8s.io/x, node-role.kubernetes.io/control-plane`},
		{deniedCreate("labels", auth.SiteLabel), `node "edge-a" is not allowed to set the following labels: ` + auth.SiteLabel},
	} {
		if got := tc.err.Error(); got != tc.want {
			t.Errorf("%+v.Error() = %q, want %q", *tc.err, got, tc.want)
		}
	}
}
