package hubd

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"go.uber.org/goleak"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/outpost-mesh/outpost/hub/auth"
)

// restrictedChange is a change of its own Node that a node may not make.
type restrictedChange struct {
	name string
	// patch is a merge patch making the change, also sent as a strategic
	// merge patch.
	patch string
	// put makes the change on the node's copy, for an update.
	put func(n *corev1.Node)
	// want ends the 403's message.
	want string
}

// TestNodeRestriction talks to a real hub over HTTPS as node edge-a with
// its own certificate: it may not change on its own Node what upstream's
// NodeRestriction keeps from nodes, nor the hub's site label, by PATCH or
// PUT; a write of its status changes nothing else; what kubelet may set
// it may; and the admin may do all of it.
func TestNodeRestriction(t *testing.T) {
	defer goleak.VerifyNone(t)
	dir := t.TempDir()
	h, stop := startHub(t, dir, noControllers) // the node lifecycle would taint what the admin leaves
	defer stop()
	ctx := context.Background()

	adminCfg := adminConfig(t, h)
	admin, _ := clientset(t, adminCfg)
	// As the hub registers a node at join, with an administrator's taint
	// and role since.
	registered := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "edge-a", Labels: map[string]string{
			corev1.LabelHostname:          "edge-a",
			auth.SiteLabel:                "store-1",
			"node-role.kubernetes.io/pos": "",
		}},
		Spec: corev1.NodeSpec{Taints: []corev1.Taint{{Key: "dedicated", Value: "pos", Effect: corev1.TaintEffectNoSchedule}}},
	}
	if _, err := admin.CoreV1().Nodes().Create(ctx, registered, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	edgeB, err := admin.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "edge-b"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}

	ca, caKey := loadCA(t, dir)
	certPEM, keyPEM := nodeCredentials(t, ca, caKey, "edge-a")
	node, _ := clientset(t, userConfig(adminCfg, certPEM, keyPEM))

	stored := func() *corev1.Node {
		t.Helper()
		n, err := admin.CoreV1().Nodes().Get(ctx, "edge-a", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	mustForbid := func(what string, err error, want string) {
		t.Helper()
		full := `nodes "edge-a" is forbidden: node "edge-a" is not allowed to ` + want
		if !apierrors.IsForbidden(err) || err.Error() != full {
			t.Errorf("%s: %v, want Forbidden %q", what, err, full)
		}
	}
	owner, _ := json.Marshal([]metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: "edge-b", UID: edgeB.UID}})
	configSource := &corev1.NodeConfigSource{ConfigMap: &corev1.ConfigMapNodeConfigSource{Namespace: "kube-system", Name: "edge-a", KubeletConfigKey: "kubelet"}}

	changes := []restrictedChange{
		{"control-plane label", `{"metadata":{"labels":{"node-role.kubernetes.io/control-plane":""}}}`,
			func(n *corev1.Node) { n.Labels["node-role.kubernetes.io/control-plane"] = "" }, "modify labels: node-role.kubernetes.io/control-plane"},
		{"role label removed", `{"metadata":{"labels":{"node-role.kubernetes.io/pos":null}}}`,
			func(n *corev1.Node) { delete(n.Labels, "node-role.kubernetes.io/pos") }, "modify labels: node-role.kubernetes.io/pos"},
		{"node-restriction label", `{"metadata":{"labels":{"node-restriction.kubernetes.io/pci":"true"}}}`,
			func(n *corev1.Node) { n.Labels["node-restriction.kubernetes.io/pci"] = "true" }, "modify labels: node-restriction.kubernetes.io/pci"},
		{"other kubernetes.io label", `{"metadata":{"labels":{"kubernetes.io/role":"master"}}}`,
			func(n *corev1.Node) { n.Labels["kubernetes.io/role"] = "master" }, "modify labels: kubernetes.io/role"},
		{"site moved", `{"metadata":{"labels":{"` + auth.SiteLabel + `":"store-2"}}}`,
			func(n *corev1.Node) { n.Labels[auth.SiteLabel] = "store-2" }, "modify labels: " + auth.SiteLabel},
		{"site removed", `{"metadata":{"labels":{"` + auth.SiteLabel + `":null}}}`,
			func(n *corev1.Node) { delete(n.Labels, auth.SiteLabel) }, "modify labels: " + auth.SiteLabel},
		{"podCIDR", `{"spec":{"podCIDR":"10.244.9.0/24"}}`,
			func(n *corev1.Node) { n.Spec.PodCIDR = "10.244.9.0/24" }, "modify podCIDR"},
		{"podCIDRs", `{"spec":{"podCIDRs":["10.244.9.0/24"]}}`,
			func(n *corev1.Node) { n.Spec.PodCIDRs = []string{"10.244.9.0/24"} }, "modify podCIDR"},
		{"providerID", `{"spec":{"providerID":"outpost://edge-b"}}`,
			func(n *corev1.Node) { n.Spec.ProviderID = "outpost://edge-b" }, "modify providerID"},
		{"taint added", `{"spec":{"taints":[{"key":"dedicated","value":"pos","effect":"NoSchedule"},{"key":"k","effect":"NoExecute"}]}}`,
			func(n *corev1.Node) {
				n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: "k", Effect: corev1.TaintEffectNoExecute})
			}, "modify taints"},
		{"taints removed", `{"spec":{"taints":null}}`,
			func(n *corev1.Node) { n.Spec.Taints = nil }, "modify taints"},
		{"ownerReferences", `{"metadata":{"ownerReferences":` + string(owner) + `}}`,
			func(n *corev1.Node) {
				n.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: "edge-b", UID: edgeB.UID}}
			}, "modify ownerReferences"},
		{"configSource", `{"spec":{"configSource":{"configMap":{"namespace":"kube-system","name":"edge-a","kubeletConfigKey":"kubelet"}}}}`,
			func(n *corev1.Node) { n.Spec.ConfigSource = configSource }, "update configSource to a new non-nil configSource"},
	}
	for _, c := range changes {
		before := stored()
		for _, pt := range []types.PatchType{types.MergePatchType, types.StrategicMergePatchType} {
			_, err := node.CoreV1().Nodes().Patch(ctx, "edge-a", pt, []byte(c.patch), metav1.PatchOptions{})
			mustForbid("PATCH ("+string(pt)+") "+c.name, err, c.want)
		}
		own, err := node.CoreV1().Nodes().Get(ctx, "edge-a", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		c.put(own)
		_, err = node.CoreV1().Nodes().Update(ctx, own, metav1.UpdateOptions{})
		mustForbid("PUT "+c.name, err, c.want)
		if after := stored(); after.ResourceVersion != before.ResourceVersion {
			t.Errorf("%s: the Node changed (resourceVersion %s, was %s): labels %v, owners %v, spec %+v",
				c.name, after.ResourceVersion, before.ResourceVersion, after.Labels, after.OwnerReferences, after.Spec)
		}
	}

	// Its status, by PATCH and PUT: the status is written and the spec
	// that came with it is not; metadata changes through status, as
	// upstream's node status strategy lets it, so NodeRestriction refuses
	// what it refuses on the Node.
	_, err = node.CoreV1().Nodes().Patch(ctx, "edge-a", types.MergePatchType, []byte(`{"metadata":{"labels":{"node-role.kubernetes.io/control-plane":""}},`+
		`"status":{"conditions":[{"type":"Ready","status":"True","reason":"KubeletReady"}]}}`), metav1.PatchOptions{}, "status")
	mustForbid("PATCH status with a control-plane label", err, "modify labels: node-role.kubernetes.io/control-plane")
	_, err = node.CoreV1().Nodes().Patch(ctx, "edge-a", types.MergePatchType, []byte(`{"spec":{"taints":null,"podCIDR":"10.244.9.0/24"},`+
		`"status":{"conditions":[{"type":"Ready","status":"True","reason":"KubeletReady"}]}}`), metav1.PatchOptions{}, "status")
	if err != nil {
		t.Errorf("PATCH status with spec: %v", err)
	}
	own := stored()
	if len(own.Status.Conditions) != 1 || own.Status.Conditions[0].Reason != "KubeletReady" {
		t.Errorf("status after PATCH of status = %+v, want the Ready condition", own.Status)
	}
	put := own.DeepCopy()
	put.Labels[auth.SiteLabel] = "store-2"
	_, err = node.CoreV1().Nodes().UpdateStatus(ctx, put, metav1.UpdateOptions{})
	mustForbid("PUT status moving the site", err, "modify labels: "+auth.SiteLabel)
	put = own.DeepCopy()
	put.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: "edge-b", UID: edgeB.UID}}
	_, err = node.CoreV1().Nodes().UpdateStatus(ctx, put, metav1.UpdateOptions{})
	mustForbid("PUT status with an owner", err, "modify ownerReferences")
	own.Spec.Taints, own.Spec.ProviderID = nil, "outpost://edge-b"
	own.Status.Conditions[0].Message = "put"
	if _, err := node.CoreV1().Nodes().UpdateStatus(ctx, own, metav1.UpdateOptions{}); err != nil {
		t.Errorf("PUT status with spec: %v", err)
	}
	after := stored()
	if len(after.Status.Conditions) != 1 || after.Status.Conditions[0].Message != "put" {
		t.Errorf("status after PUT of status = %+v, want the message put", after.Status)
	}
	_, controlPlane := after.Labels["node-role.kubernetes.io/control-plane"]
	if after.Labels[auth.SiteLabel] != "store-1" || controlPlane || len(after.Spec.Taints) != 1 ||
		after.Spec.PodCIDR != "" || after.Spec.ProviderID != "" || len(after.OwnerReferences) != 0 {
		t.Errorf("Node after status writes carrying spec = %+v %+v, want only the status changed", after.ObjectMeta, after.Spec)
	}

	// What kubelet may set, and labels outside Kubernetes' namespaces.
	if _, err := node.CoreV1().Nodes().Patch(ctx, "edge-a", types.StrategicMergePatchType,
		[]byte(`{"metadata":{"labels":{"kubernetes.io/arch":"arm64","node.kubernetes.io/instance-type":"pi5","example.com/x":"y"}}}`), metav1.PatchOptions{}); err != nil {
		t.Errorf("PATCH kubelet's and user labels: %v", err)
	}
	own, err = node.CoreV1().Nodes().Get(ctx, "edge-a", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	own.Labels[corev1.LabelTopologyZone] = "aisle-3"
	delete(own.Labels, "example.com/x")
	own.Annotations = map[string]string{"outpost.dev/note": "kept"}
	own.Spec.Unschedulable = true
	if _, err := node.CoreV1().Nodes().Update(ctx, own, metav1.UpdateOptions{}); err != nil {
		t.Errorf("PUT kubelet's labels, an annotation, unschedulable: %v", err)
	}
	after = stored()
	if after.Labels[corev1.LabelArchStable] != "arm64" || after.Labels[corev1.LabelInstanceTypeStable] != "pi5" || after.Labels[corev1.LabelTopologyZone] != "aisle-3" ||
		after.Labels["example.com/x"] != "" || after.Annotations["outpost.dev/note"] != "kept" || !after.Spec.Unschedulable {
		t.Errorf("Node after allowed changes = %+v %+v", after.ObjectMeta, after.Spec)
	}

	// Creating its own Node (edge-c, newly), not with what is the hub's
	// or an administrator's.
	certC, keyC := nodeCredentials(t, ca, caKey, "edge-c")
	nodeC, _ := clientset(t, userConfig(adminCfg, certC, keyC))
	for _, c := range []struct {
		name   string
		change func(n *corev1.Node)
		want   string
	}{
		{"control-plane label", func(n *corev1.Node) { n.Labels["node-role.kubernetes.io/control-plane"] = "" },
			"set the following labels: node-role.kubernetes.io/control-plane"},
		{"site", func(n *corev1.Node) { n.Labels[auth.SiteLabel] = "store-1" }, "set the following labels: " + auth.SiteLabel},
		{"node-restriction label", func(n *corev1.Node) { n.Labels["node-restriction.kubernetes.io/pci"] = "" },
			"set the following labels: node-restriction.kubernetes.io/pci"},
		{"configSource", func(n *corev1.Node) { n.Spec.ConfigSource = configSource }, "create a Node with a non-nil configSource"},
	} {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "edge-c", Labels: map[string]string{corev1.LabelHostname: "edge-c"}}}
		c.change(n)
		_, err := nodeC.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{})
		full := `nodes "edge-c" is forbidden: node "edge-c" is not allowed to ` + c.want
		if !apierrors.IsForbidden(err) || err.Error() != full {
			t.Errorf("create with %s: %v, want Forbidden %q", c.name, err, full)
		}
	}
	if _, err := admin.CoreV1().Nodes().Get(ctx, "edge-c", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("edge-c after refused creates: %v, want NotFound", err)
	}
	// As kubelet registers: its own labels and taints.
	fresh := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "edge-c", Labels: map[string]string{corev1.LabelHostname: "edge-c", corev1.LabelArchStable: "arm64"}},
		Spec:       corev1.NodeSpec{Taints: []corev1.Taint{{Key: "edge", Effect: corev1.TaintEffectNoSchedule}}},
	}
	if _, err := nodeC.CoreV1().Nodes().Create(ctx, fresh, metav1.CreateOptions{}); err != nil {
		t.Errorf("create with kubelet's labels and taints: %v", err)
	}

	// The admin may do all of it.
	before := stored()
	var patch strings.Builder
	patch.WriteString(`{"metadata":{"labels":{"node-role.kubernetes.io/control-plane":"","node-restriction.kubernetes.io/pci":"true","` + auth.SiteLabel + `":"store-2"},`)
	patch.WriteString(`"ownerReferences":` + string(owner) + `},`)
	patch.WriteString(`"spec":{"podCIDR":"10.244.9.0/24","providerID":"outpost://edge-a","taints":null,`)
	patch.WriteString(`"configSource":{"configMap":{"namespace":"kube-system","name":"edge-a","kubeletConfigKey":"kubelet"}}}}`)
	if _, err := admin.CoreV1().Nodes().Patch(ctx, "edge-a", types.MergePatchType, []byte(patch.String()), metav1.PatchOptions{}); err != nil {
		t.Fatalf("admin PATCH of all the restricted changes: %v", err)
	}
	after = stored()
	if after.ResourceVersion == before.ResourceVersion || after.Labels[auth.SiteLabel] != "store-2" || after.Labels["node-restriction.kubernetes.io/pci"] != "true" ||
		len(after.OwnerReferences) != 1 || after.Spec.PodCIDR != "10.244.9.0/24" || len(after.Spec.PodCIDRs) != 1 ||
		after.Spec.ProviderID != "outpost://edge-a" || len(after.Spec.Taints) != 0 || after.Spec.ConfigSource == nil {
		t.Errorf("Node after the admin's PATCH = %+v %+v", after.ObjectMeta, after.Spec)
	}
	after.Spec.Taints = []corev1.Taint{{Key: "k", Effect: corev1.TaintEffectNoExecute}}
	delete(after.Labels, "node-role.kubernetes.io/control-plane")
	if _, err := admin.CoreV1().Nodes().Update(ctx, after, metav1.UpdateOptions{}); err != nil {
		t.Errorf("admin PUT of taints and a role label: %v", err)
	}
}
