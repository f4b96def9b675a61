package webhook

import (
	"context"
	"encoding/json"
	"fmt"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/admission/plugin/webhook/predicates/rules"
	"k8s.io/apiserver/pkg/authentication/user"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"

	"github.com/outpost-mesh/outpost/hub/apiserver"
	"github.com/outpost-mesh/outpost/hub/auth"
)

// request is one write being admitted: its attributes in upstream's
// terms, and the object as the webhooks called so far left it.
type request struct {
	op          admission.Operation
	gvk         schema.GroupVersionKind
	gvr         schema.GroupVersionResource
	subresource string
	namespace   string
	name        string
	user        user.Info
	dryRun      bool
	// obj is the object; a mutating webhook's patch replaces it. old is
	// the stored one on update, else nil.
	obj, old runtime.Object
}

// newRequest describes a: its kind is the object's own, or the one
// client-go's scheme knows its Go type by; its user the one on ctx.
func (d *Dispatcher) newRequest(ctx context.Context, a *apiserver.AdmissionAttributes) (*request, error) {
	gvk, err := kindOf(a.Object)
	if err != nil {
		return nil, apierrors.NewInternalError(err)
	}
	r := &request{
		op:          admission.Operation(a.Operation),
		gvk:         gvk,
		gvr:         a.Resource.WithVersion(gvk.Version),
		subresource: a.Subresource,
		namespace:   a.Namespace,
		name:        a.Name,
		dryRun:      a.DryRun,
		obj:         a.Object,
		old:         a.OldObject,
		user:        &user.DefaultInfo{},
	}
	if u, ok := auth.UserFrom(ctx); ok {
		r.user = &user.DefaultInfo{Name: u.Name, UID: u.UID, Groups: u.Groups, Extra: u.Extra}
	}
	return r, nil
}

// kindOf returns the group, version and kind of obj.
func kindOf(obj runtime.Object) (schema.GroupVersionKind, error) {
	if gvk := obj.GetObjectKind().GroupVersionKind(); !gvk.Empty() {
		return gvk, nil
	}
	kinds, _, err := clientgoscheme.Scheme.ObjectKinds(obj)
	if err != nil {
		return schema.GroupVersionKind{}, err
	}
	return kinds[0], nil
}

// attributes returns r in the terms of upstream's admission libraries.
func (r *request) attributes() admission.Attributes {
	return admission.NewAttributesRecord(r.obj, r.old, r.gvk, r.namespace, r.name, r.gvr, r.subresource, r.op, r.options(), r.dryRun, r.user)
}

// options returns the options of r's operation, as sent in an
// AdmissionReview.
func (r *request) options() runtime.Object {
	var dry []string
	if r.dryRun {
		dry = []string{metav1.DryRunAll}
	}
	tm := metav1.TypeMeta{APIVersion: metav1.SchemeGroupVersion.String()}
	if r.op == admission.Create {
		tm.Kind = "CreateOptions"
		return &metav1.CreateOptions{TypeMeta: tm, DryRun: dry}
	}
	tm.Kind = "UpdateOptions"
	return &metav1.UpdateOptions{TypeMeta: tm, DryRun: dry}
}

// shouldCall reports whether h is to be called for r, as upstream's
// ShouldCallHook decides: namespace and object selectors, then rules,
// then matchConditions. An error of a selector that mattered, or of a
// matchCondition that failed closed, is the client's answer.
func (d *Dispatcher) shouldCall(ctx context.Context, r *request, h *hook) (bool, error) {
	if h.selectorErr != nil {
		return false, apierrors.NewInternalError(h.selectorErr)
	}
	nsMatch, nsErr := d.matchNamespace(r, h)
	if !nsMatch && nsErr == nil {
		return false, nil
	}
	if !h.objSelector.Empty() && !matchLabels(r.obj, h.objSelector) && !matchLabels(r.old, h.objSelector) {
		return false, nil
	}
	attrs := r.attributes()
	matched := false
	for _, rule := range h.rules {
		if (&rules.Matcher{Rule: rule, Attr: attrs}).Matches() {
			matched = true
			break
		}
	}
	if !matched {
		return false, nil
	}
	if nsErr != nil {
		return false, nsErr
	}
	if h.matcher == nil {
		return true, nil
	}
	va := &admission.VersionedAttributes{Attributes: attrs, VersionedKind: r.gvk}
	va.VersionedObject.Set(r.obj)
	if r.old != nil {
		va.VersionedOldObject.Set(r.old)
	}
	res := h.matcher.Match(ctx, va, nil, nil)
	if res.Error != nil {
		d.log.Warn("failed evaluating match conditions, failing closed", "webhook", h.name, "err", res.Error)
		return false, apierrors.NewForbidden(r.gvr.GroupResource(), r.name, res.Error)
	}
	return res.Matches, nil
}

// matchNamespace matches h's namespaceSelector against the labels of the
// namespace of r: those of the object itself for a write of a Namespace,
// and any cluster-scoped object else.
func (d *Dispatcher) matchNamespace(r *request, h *hook) (bool, error) {
	if r.namespace == "" && r.gvr.Resource != "namespaces" {
		return true, nil
	}
	if h.nsSelector.Empty() {
		return true, nil
	}
	var set map[string]string
	switch {
	case r.gvr.Resource == "namespaces" && r.subresource == "":
		m, err := meta.Accessor(r.obj)
		if err != nil {
			return false, apierrors.NewInternalError(err)
		}
		set = m.GetLabels()
	case d.cfg.Namespace == nil:
		return false, nil
	default:
		ns, err := d.cfg.Namespace(r.namespace)
		if apierrors.IsNotFound(err) {
			return false, err
		}
		if err != nil {
			return false, apierrors.NewInternalError(err)
		}
		set = ns.Labels
	}
	return h.nsSelector.Matches(labels.Set(set)), nil
}

// matchLabels reports whether obj, if any, has labels sel selects.
func matchLabels(obj runtime.Object, sel labels.Selector) bool {
	if obj == nil {
		return false
	}
	m, err := meta.Accessor(obj)
	return err == nil && sel.Matches(labels.Set(m.GetLabels()))
}

// encodeObject returns obj as JSON with its apiVersion and kind, as a
// webhook gets it and as a patch applies to it; nil is null.
func encodeObject(obj runtime.Object, gvk schema.GroupVersionKind) ([]byte, error) {
	if obj == nil {
		return []byte("null"), nil
	}
	if u, ok := obj.(*unstructured.Unstructured); ok {
		return u.MarshalJSON()
	}
	if obj.GetObjectKind().GroupVersionKind() != gvk {
		obj = obj.DeepCopyObject()
		obj.GetObjectKind().SetGroupVersionKind(gvk)
	}
	return json.Marshal(obj)
}

// sideEffectsAllowDryRun reports whether a webhook may be called for a
// dry run: one that declares no side effects, or none on dry runs.
func sideEffectsAllowDryRun(se admissionregistrationv1.SideEffectClass) bool {
	return se == admissionregistrationv1.SideEffectClassNone || se == admissionregistrationv1.SideEffectClassNoneOnDryRun
}

// dryRunUnsupported is upstream's refusal of a dry run a webhook cannot
// take part in.
func dryRunUnsupported(name string) error {
	return apierrors.NewBadRequest(fmt.Sprintf("admission webhook %q does not support dry run", name))
}
