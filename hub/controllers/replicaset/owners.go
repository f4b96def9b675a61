package replicaset

import (
	"context"
	"errors"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/cache"

	"github.com/outpost-mesh/outpost/hub/controllers"
)

// Owners is the kind of object whose pods a Controller keeps, seen as
// ReplicaSets: ReplicaSets themselves, or ReplicationControllers, which
// upstream treats as an older version of ReplicaSet and syncs with the
// very same code (package replication adapts them). Every decision of
// the Controller is made on the ReplicaSet view; only reading and writing
// the owners goes through these fields.
type Owners struct {
	// Kind is the group, version and kind of the owners, which their
	// pods' controller references and the controller's events name.
	Kind schema.GroupVersionKind
	// Component is the controller's name in its events and work queue,
	// as upstream's ("replicaset-controller").
	Component string
	// Informer is the shared informer of the owners; non-nil. It must
	// keep the namespace index (cache.NamespaceIndex), as client-go's
	// informer factory makes it.
	Informer cache.SharedIndexInformer
	// Convert returns one of Informer's objects as a ReplicaSet, false if
	// it is not an owner. The result may share memory with obj, so that
	// neither may be changed.
	Convert func(obj any) (*appsv1.ReplicaSet, bool)
	// Get reads an owner from the API, not from a cache.
	Get func(ctx context.Context, namespace, name string) (*appsv1.ReplicaSet, error)
	// UpdateStatus writes rs's status to the owner rs is the view of,
	// with rs's resourceVersion as precondition.
	UpdateStatus func(ctx context.Context, rs *appsv1.ReplicaSet) error
	// TerminatingReplicas is whether the owners' status has the field
	// terminatingReplicas (ReplicaSets have, ReplicationControllers not).
	TerminatingReplicas bool
}

// validate reports the first field of o that is missing.
func (o Owners) validate() error {
	switch {
	case o.Kind.Kind == "":
		return errors.New("replicaset: owners without a kind")
	case o.Component == "":
		return errors.New("replicaset: owners without a component")
	case o.Informer == nil || o.Convert == nil || o.Get == nil || o.UpdateStatus == nil:
		return errors.New("replicaset: owners without an informer, conversion or client")
	}
	return nil
}

// ReplicaSets returns the Owners of the ReplicaSet controller: the
// ReplicaSets of c's informers and client, seen as they are.
func ReplicaSets(c controllers.Context) Owners {
	return Owners{
		Kind:      Kind,
		Component: "replicaset-controller",
		Informer:  c.Informers.Apps().V1().ReplicaSets().Informer(),
		Convert: func(obj any) (*appsv1.ReplicaSet, bool) {
			rs, ok := obj.(*appsv1.ReplicaSet)
			return rs, ok
		},
		Get: func(ctx context.Context, ns, name string) (*appsv1.ReplicaSet, error) {
			return c.Client.AppsV1().ReplicaSets(ns).Get(ctx, name, metav1.GetOptions{})
		},
		UpdateStatus: func(ctx context.Context, rs *appsv1.ReplicaSet) error {
			_, err := c.Client.AppsV1().ReplicaSets(rs.Namespace).UpdateStatus(ctx, rs, metav1.UpdateOptions{})
			return err
		},
		TerminatingReplicas: true,
	}
}

// get returns the owner ns/name from the informer's cache, as a
// ReplicaSet; a NotFound error if there is none.
func (o Owners) get(ns, name string) (*appsv1.ReplicaSet, error) {
	key := name
	if ns != "" {
		key = ns + "/" + name
	}
	obj, ok, err := o.Informer.GetIndexer().GetByKey(key)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, notFound(o.Kind, name)
	}
	rs, isRS := o.Convert(obj)
	if !isRS {
		return nil, notFound(o.Kind, name)
	}
	return rs, nil
}

// list returns the owners of namespace ns in the informer's cache.
func (o Owners) list(ns string) ([]*appsv1.ReplicaSet, error) {
	objs, err := o.Informer.GetIndexer().ByIndex(cache.NamespaceIndex, ns)
	if err != nil {
		return nil, err
	}
	out := make([]*appsv1.ReplicaSet, 0, len(objs))
	for _, obj := range objs {
		if rs, ok := o.Convert(obj); ok {
			out = append(out, rs)
		}
	}
	return out, nil
}

// ref returns the reference that events about rs name: the owner of
// kind o.Kind that rs is the view of.
func (o Owners) ref(rs *appsv1.ReplicaSet) *corev1.ObjectReference {
	return &corev1.ObjectReference{
		APIVersion:      o.Kind.GroupVersion().String(),
		Kind:            o.Kind.Kind,
		Namespace:       rs.Namespace,
		Name:            rs.Name,
		UID:             rs.UID,
		ResourceVersion: rs.ResourceVersion,
	}
}

// notFound is the error of an owner missing from the cache, which
// callers tell apart with apierrors.IsNotFound.
func notFound(kind schema.GroupVersionKind, name string) error {
	return apierrors.NewNotFound(schema.GroupResource{Group: kind.Group, Resource: kind.Kind}, name)
}
