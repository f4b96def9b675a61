package policy

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/client-go/kubernetes/scheme"

	"github.com/outpost-mesh/outpost/hub/apiserver"
	"github.com/outpost-mesh/outpost/hub/auth"
)

// namespacesResource is the resource whose objects are namespaces, which
// upstream's admission sees with their own name as the namespace.
var namespacesResource = schema.GroupResource{Resource: "namespaces"}

// newAttributes returns the upstream admission.Attributes of a write the
// hub's apiserver asks about, for CEL and for matching: with the kind and
// version of its object, the user on ctx, and the options of the write.
// Objects without their kind set are copied to carry it, so that
// object.apiVersion and object.kind read as upstream's do.
func newAttributes(ctx context.Context, a apiserver.AdmissionAttributes) (admission.Attributes, error) {
	gvk, err := kindOf(a.Object)
	if err != nil {
		return nil, err
	}
	obj := withKind(a.Object, gvk)
	var old runtime.Object
	if a.OldObject != nil {
		old = withKind(a.OldObject, gvk)
	}
	ns := a.Namespace
	if a.Resource == namespacesResource && a.Subresource == "" {
		// Upstream's request for a namespace names it as its namespace too.
		ns = a.Name
	}
	op, opts := operation(a)
	return admission.NewAttributesRecord(obj, old, gvk, ns, a.Name,
		a.Resource.WithVersion(gvk.Version), a.Subresource, op, opts, a.DryRun, userInfo(ctx)), nil
}

// kindOf returns the group, version and kind of obj: its own when set
// (unstructured objects, and typed ones the server set it on), else the
// one client-go's scheme knows its Go type by.
func kindOf(obj runtime.Object) (schema.GroupVersionKind, error) {
	if obj == nil {
		return schema.GroupVersionKind{}, fmt.Errorf("no object to admit")
	}
	if gvk := obj.GetObjectKind().GroupVersionKind(); !gvk.Empty() {
		return gvk, nil
	}
	kinds, _, err := scheme.Scheme.ObjectKinds(obj)
	if err != nil {
		return schema.GroupVersionKind{}, fmt.Errorf("kind of %T: %w", obj, err)
	}
	return kinds[0], nil
}

// withKind returns obj if it carries gvk, else a copy that does. The
// caller must not modify obj, which is the server's.
func withKind(obj runtime.Object, gvk schema.GroupVersionKind) runtime.Object {
	if obj.GetObjectKind().GroupVersionKind() == gvk {
		return obj
	}
	c := obj.DeepCopyObject()
	c.GetObjectKind().SetGroupVersionKind(gvk)
	return c
}

// operation returns the upstream operation of a write and its options,
// as request.options shows them.
func operation(a apiserver.AdmissionAttributes) (admission.Operation, runtime.Object) {
	var dryRun []string
	if a.DryRun {
		dryRun = []string{metav1.DryRunAll}
	}
	meta := metav1.TypeMeta{APIVersion: "meta.k8s.io/v1"}
	if a.Operation == apiserver.Create {
		meta.Kind = "CreateOptions"
		return admission.Create, &metav1.CreateOptions{TypeMeta: meta, DryRun: dryRun}
	}
	meta.Kind = "UpdateOptions"
	return admission.Update, &metav1.UpdateOptions{TypeMeta: meta, DryRun: dryRun}
}

// userInfo returns the user on ctx as upstream's user.Info. A write
// without one is the hub's own, and is judged as a user with no name.
func userInfo(ctx context.Context) user.Info {
	u, ok := auth.UserFrom(ctx)
	if !ok {
		return &user.DefaultInfo{}
	}
	return &user.DefaultInfo{Name: u.Name, UID: u.UID, Groups: u.Groups, Extra: u.Extra}
}
