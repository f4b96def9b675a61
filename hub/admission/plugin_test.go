package admission

import (
	"context"
	"testing"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/outpost-mesh/outpost/hub/apiserver"
	"github.com/outpost-mesh/outpost/hub/auth"
)

func TestNodeRestrictionHandles(t *testing.T) {
	for _, tc := range []struct {
		gr   schema.GroupResource
		want bool
	}{
		{schema.GroupResource{Resource: "nodes"}, true},
		{schema.GroupResource{Resource: "pods"}, false},
		{schema.GroupResource{Group: "example.com", Resource: "nodes"}, false},
		{schema.GroupResource{Group: "coordination.k8s.io", Resource: "leases"}, false},
	} {
		if got := (NodeRestriction{}).Handles(tc.gr); got != tc.want {
			t.Errorf("Handles(%v) = %v, want %v", tc.gr, got, tc.want)
		}
	}
}

func TestNodeRestrictionAdmit(t *testing.T) {
	var (
		edgeA   = auth.User{Name: "system:node:edge-a", Groups: []string{auth.NodesGroup}}
		admin   = auth.User{Name: "admin", Groups: []string{auth.MastersGroup}}
		bob     = auth.User{Name: "bob", Groups: []string{"developers"}}
		half    = auth.User{Name: "system:node:edge-a"} // not in system:nodes: not a node
		nodes   = schema.GroupResource{Resource: "nodes"}
		old     = stored()
		tainted = with(old, func(n *corev1.Node) { n.Spec.Taints = nil })
	)
	update := func(sub string, obj, old runtime.Object) apiserver.AdmissionAttributes {
		return apiserver.AdmissionAttributes{Operation: apiserver.Update, Resource: nodes, Subresource: sub, Name: "edge-a", Object: obj, OldObject: old}
	}
	create := func(obj runtime.Object) apiserver.AdmissionAttributes {
		return apiserver.AdmissionAttributes{Operation: apiserver.Create, Resource: nodes, Name: "edge-a", Object: obj}
	}
	const noUser = "none"
	for _, tc := range []struct {
		name string
		user any // auth.User, or noUser
		a    apiserver.AdmissionAttributes
		want string // the Forbidden's message, "" for admitted
	}{
		{"node, allowed update", edgeA, update("", with(old, labels(corev1.LabelArchStable, "arm64")), old), ""},
		{"node, refused update", edgeA, update("", tainted, old), `nodes "edge-a" is forbidden: node "edge-a" is not allowed to modify taints`},
		{"node, refused labels", edgeA, update("", with(old, labels("node-role.kubernetes.io/control-plane", "")), old),
			`nodes "edge-a" is forbidden: node "edge-a" is not allowed to modify labels: node-role.kubernetes.io/control-plane`},
		{"node, status", edgeA, update("status", with(old, func(n *corev1.Node) { n.Status.Phase = corev1.NodeRunning }), old), ""},
		{"node, refused through status", edgeA, update("status", tainted, old), `nodes "edge-a" is forbidden: node "edge-a" is not allowed to modify taints`},
		{"node, allowed create", edgeA, create(with(old, unlabel(auth.SiteLabel, "node-role.kubernetes.io/pos"))), ""},
		{"node, refused create", edgeA, create(old),
			`nodes "edge-a" is forbidden: node "edge-a" is not allowed to set the following labels: node-role.kubernetes.io/pos, ` + auth.SiteLabel},
		{"node, another node", edgeA, update("", with(old, func(n *corev1.Node) { n.Name = "edge-b" }), old),
			`nodes "edge-a" is forbidden: node "edge-a" is not allowed to modify node "edge-b"`},
		{"node, not a Node", edgeA, update("", &coordinationv1.Lease{}, old), `nodes "edge-a" is forbidden: unexpected type *v1.Lease`},
		{"node, old not a Node", edgeA, update("", old, &coordinationv1.Lease{}), `nodes "edge-a" is forbidden: unexpected type *v1.Lease`},
		{"node, another resource", edgeA, apiserver.AdmissionAttributes{Operation: apiserver.Update, Resource: schema.GroupResource{Resource: "pods"}, Object: &corev1.Pod{}, OldObject: &corev1.Pod{}}, ""},
		{"admin", admin, update("", tainted, old), ""},
		{"other user", bob, update("", tainted, old), ""},
		{"name without the group", half, update("", tainted, old), ""},
		{"no user", noUser, update("", tainted, old), ""},
	} {
		ctx := context.Background()
		if u, ok := tc.user.(auth.User); ok {
			ctx = auth.WithUser(ctx, u)
		}
		err := NodeRestriction{}.Admit(ctx, tc.a)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("Admit(%s) = %v, want nil", tc.name, err)
		case tc.want != "" && (!apierrors.IsForbidden(err) || err.Error() != tc.want):
			t.Errorf("Admit(%s) = %v, want Forbidden %q", tc.name, err, tc.want)
		}
	}
}
