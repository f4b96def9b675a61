package policy

import (
	"errors"
	"fmt"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Params looks up the objects a binding's paramRef names, of a policy's
// paramKind: the hub adapts its store or an informer of each kind to it.
// Its methods must be safe for concurrent use; the caller does not
// modify the objects they return.
type Params interface {
	// Namespaced reports whether objects of kind are namespaced; an
	// error means the hub does not serve kind.
	Namespaced(kind schema.GroupVersionKind) (bool, error)
	// Get returns the object of kind named name in namespace ("" for a
	// cluster-scoped kind), or an error for which apierrors.IsNotFound
	// holds when there is none.
	Get(kind schema.GroupVersionKind, namespace, name string) (runtime.Object, error)
	// List returns the objects of kind in namespace ("" for a
	// cluster-scoped kind) whose labels sel selects.
	List(kind schema.GroupVersionKind, namespace string, sel labels.Selector) ([]runtime.Object, error)
}

// errParamsDenied is upstream's refusal when a binding's params are
// missing and its parameterNotFoundAction is Deny.
var errParamsDenied = errors.New("no params found for policy binding with `Deny` parameterNotFoundAction")

// paramKind returns the group, version and kind a policy's paramKind pk
// names, and whether those are namespaced; ok is false when pk is nil.
// An error is a configuration error of the policy, in upstream's words.
func paramKind(src Params, pk *admissionregistrationv1.ParamKind) (gvk schema.GroupVersionKind, namespaced, ok bool, err error) {
	if pk == nil {
		return gvk, false, false, nil
	}
	gv, err := schema.ParseGroupVersion(pk.APIVersion)
	if err != nil {
		return gvk, false, true, fmt.Errorf("failed to parse paramKind APIVersion: %w", err)
	}
	gvk = gv.WithKind(pk.Kind)
	if src == nil {
		return gvk, false, true, fmt.Errorf("failed to find resource referenced by paramKind: '%v'", gvk)
	}
	if namespaced, err = src.Namespaced(gvk); err != nil {
		return gvk, false, true, fmt.Errorf("failed to find resource referenced by paramKind: '%v'", gvk)
	}
	return gvk, namespaced, true, nil
}

// collectParams returns the params a binding of a policy with a
// paramKind evaluates with, for a write in namespace, as upstream's
// CollectParams does: one nil param when the binding has no paramRef,
// the named object or those selected otherwise (in the paramRef's
// namespace, or else the write's, for a namespaced kind), and none when
// none is there unless the parameterNotFoundAction is Deny. An error is
// a configuration error of the binding.
func collectParams(src Params, kind schema.GroupVersionKind, namespaced bool, ref *admissionregistrationv1.ParamRef, namespace string) ([]runtime.Object, error) {
	if ref == nil {
		return []runtime.Object{nil}, nil
	}
	ns := ""
	if namespaced {
		ns = namespace
		if ref.Namespace != "" {
			ns = ref.Namespace
		} else if ns == "" {
			return nil, errors.New("cannot use namespaced paramRef in policy binding that matches cluster-scoped resources")
		}
	} else if ref.Namespace != "" {
		return nil, errors.New("paramRef.namespace must not be provided for a cluster-scoped `paramKind`")
	}
	var params []runtime.Object
	switch {
	case ref.Name != "" && ref.Selector != nil:
		return nil, errors.New("paramRef.name and paramRef.selector are mutually exclusive")
	case ref.Name != "":
		p, err := src.Get(kind, ns, ref.Name)
		switch {
		case err == nil:
			params = []runtime.Object{p}
		case !apierrors.IsNotFound(err):
			return nil, err
		}
	case ref.Selector != nil:
		sel, err := metav1.LabelSelectorAsSelector(ref.Selector)
		if err != nil {
			return nil, err
		}
		if params, err = src.List(kind, ns, sel); err != nil {
			return nil, err
		}
	default:
		return nil, errors.New("one of name or selector must be provided")
	}
	if len(params) == 0 && ref.ParameterNotFoundAction != nil && *ref.ParameterNotFoundAction == admissionregistrationv1.DenyAction {
		return nil, errParamsDenied
	}
	for i, p := range params {
		params[i] = withParamKind(p, kind)
	}
	return params, nil
}

// withParamKind returns p carrying its kind, copied if it did not, so
// that params.apiVersion and params.kind read as upstream's do.
func withParamKind(p runtime.Object, kind schema.GroupVersionKind) runtime.Object {
	if p == nil || !p.GetObjectKind().GroupVersionKind().Empty() {
		return p
	}
	return withKind(p, kind)
}
