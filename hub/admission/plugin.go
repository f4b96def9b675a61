package admission

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/outpost-mesh/outpost/hub/apiserver"
	"github.com/outpost-mesh/outpost/hub/auth"
)

var nodesResource = schema.GroupResource{Resource: "nodes"}

// NodeRestriction is the admission plugin that holds nodes to CheckNode
// when they write a Node, the resource or its status: a request of a node
// (the auth.User on its context, see auth.WithUser) that CheckNode refuses
// gets 403 Forbidden, with upstream's message. Writes of other users, and
// of requests without a user, it admits. The zero value is ready and safe
// for concurrent use.
type NodeRestriction struct{}

var _ apiserver.Admission = NodeRestriction{}

// Handles reports whether resource is nodes.
func (NodeRestriction) Handles(resource schema.GroupResource) bool {
	return resource == nodesResource
}

// Admit applies CheckNode to a node's write of a Node.
func (NodeRestriction) Admit(ctx context.Context, a apiserver.AdmissionAttributes) error {
	if a.Resource != nodesResource {
		return nil
	}
	u, ok := auth.UserFrom(ctx)
	if !ok {
		return nil
	}
	node, ok := u.NodeName()
	if !ok {
		return nil
	}
	n, ok := a.Object.(*corev1.Node)
	if !ok {
		return apierrors.NewForbidden(a.Resource, a.Name, fmt.Errorf("unexpected type %T", a.Object))
	}
	var old *corev1.Node
	if a.Operation != apiserver.Create {
		if old, ok = a.OldObject.(*corev1.Node); !ok {
			return apierrors.NewForbidden(a.Resource, a.Name, fmt.Errorf("unexpected type %T", a.OldObject))
		}
	}
	if err := CheckNode(old, n, node); err != nil {
		return apierrors.NewForbidden(a.Resource, a.Name, err)
	}
	return nil
}
