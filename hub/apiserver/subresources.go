package apiserver

import (
	"fmt"
	"net/http"

	autoscalingv1 "k8s.io/api/autoscaling/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// serveStatus serves GET, PUT and PATCH of the status subresource.
func (q *request) serveStatus() error { return q.serveStatusLike(updateStatus) }

// serveSubresource serves one of the resource's Subresources.
func (q *request) serveSubresource() error { return q.serveStatusLike(updateSubresource) }

// serveStatusLike serves a subresource that reads the whole object and
// updates part of it: status, or with kind updateSubresource one of
// Resource.Subresources.
func (q *request) serveStatusLike(kind updateKind) error {
	switch q.verb {
	case "get":
		return q.get()
	case "update":
		obj, err := q.decodeBody()
		if err != nil {
			return err
		}
		m, _ := meta.Accessor(obj)
		if m.GetName() != q.ri.name {
			return apierrors.NewBadRequest(fmt.Sprintf("the name of the object (%s) does not match the name on the URL (%s)", m.GetName(), q.ri.name))
		}
		updated, _, err := q.updateObject(func(old runtime.Object) (runtime.Object, error) {
			if old == nil {
				return nil, apierrors.NewNotFound(q.res.gr, q.ri.name)
			}
			return obj.DeepCopyObject(), nil
		}, m.GetResourceVersion(), kind)
		if err != nil {
			return err
		}
		return q.respond(http.StatusOK, updated)
	case "patch":
		return q.patchAs(kind)
	}
	return apierrors.NewMethodNotSupported(schema.GroupResource{Group: q.res.gr.Group, Resource: q.res.Plural + "/" + q.ri.subresource}, q.r.Method)
}

var scaleGVK = autoscalingv1.SchemeGroupVersion.WithKind("Scale")

// scaleOf returns the Scale view of obj.
func (q *request) scaleOf(obj runtime.Object) *autoscalingv1.Scale {
	m, _ := meta.Accessor(obj)
	spec, status, selector := q.res.Scale.Get(obj)
	return &autoscalingv1.Scale{
		TypeMeta: metav1.TypeMeta{APIVersion: "autoscaling/v1", Kind: "Scale"},
		ObjectMeta: metav1.ObjectMeta{
			Name: m.GetName(), Namespace: m.GetNamespace(), UID: m.GetUID(),
			ResourceVersion: m.GetResourceVersion(), CreationTimestamp: m.GetCreationTimestamp(),
		},
		Spec:   autoscalingv1.ScaleSpec{Replicas: spec},
		Status: autoscalingv1.ScaleStatus{Replicas: status, Selector: selector},
	}
}

// serveScale serves the scale subresource: GET, PUT and PATCH of an
// autoscaling/v1 Scale that changes only spec.replicas.
func (q *request) serveScale() error {
	gr := schema.GroupResource{Group: q.res.gr.Group, Resource: q.res.Plural + "/scale"}
	key := q.res.key(q.ri.namespace, q.ri.name)
	switch q.verb {
	case "get":
		kv, err := q.s.store.Get(q.ctx(), key, 0)
		if err != nil {
			return storeError(err, q.res.gr, q.ri.name)
		}
		obj, err := q.res.decode(kv)
		if err != nil {
			return apierrors.NewInternalError(err)
		}
		return q.respond(http.StatusOK, q.scaleOf(obj))
	case "update", "patch":
	default:
		return apierrors.NewMethodNotSupported(gr, q.r.Method)
	}
	body, err := readBody(q.r)
	if err != nil {
		return err
	}
	var pt string
	if q.verb == "patch" {
		p, err := patchType(q.r.Header.Get("Content-Type"), true)
		if err != nil {
			return err
		}
		pt = string(p)
	}
	updated, _, err := q.updateObject(func(old runtime.Object) (runtime.Object, error) {
		if old == nil {
			return nil, apierrors.NewNotFound(q.res.gr, q.ri.name)
		}
		cur := q.scaleOf(old)
		scale := &autoscalingv1.Scale{}
		if pt == "" {
			dec, _, err := requestDecoder(q.r, q.s.machineryCodec(), false)
			if err != nil {
				return nil, err
			}
			if _, _, err := dec.Decode(body, &scaleGVK, scale); err != nil {
				return nil, apierrors.NewBadRequest(fmt.Sprintf("the body of the request could not be decoded as a Scale: %v", err))
			}
		} else {
			scaleRes := &resourceInfo{Resource: Resource{GroupVersion: autoscalingv1.SchemeGroupVersion, New: func() runtime.Object { return &autoscalingv1.Scale{} }}}
			patched, err := q.s.applyPatch(scaleRes, typesPatch(pt), cur, body)
			if err != nil {
				return nil, err
			}
			if _, _, err := q.s.codecs.UniversalDeserializer().Decode(patched, &scaleGVK, scale); err != nil {
				return nil, apierrors.NewBadRequest(err.Error())
			}
		}
		if scale.Name != "" && scale.Name != q.ri.name {
			return nil, apierrors.NewBadRequest(fmt.Sprintf("the name of the object (%s) does not match the name on the URL (%s)", scale.Name, q.ri.name))
		}
		if err := checkResourceVersion(scale.ResourceVersion); err != nil {
			return nil, err
		}
		if rv := scale.ResourceVersion; rv != "" && rv != cur.ResourceVersion {
			return nil, apierrors.NewConflict(gr, q.ri.name, fmt.Errorf("%s", optimisticLockMsg))
		}
		if scale.Spec.Replicas < 0 {
			return nil, apierrors.NewInvalid(scaleGVK.GroupKind(), q.ri.name, field.ErrorList{
				field.Invalid(field.NewPath("spec", "replicas"), scale.Spec.Replicas, "must be greater than or equal to 0")})
		}
		q.res.Scale.Set(old, scale.Spec.Replicas)
		return old, nil
	}, "", updateMain)
	if err != nil {
		return err
	}
	return q.respond(http.StatusOK, q.scaleOf(updated))
}

// binding serves POST pods/NAME/binding: it sets spec.nodeName of an
// unbound pod, as the scheduler does.
func (q *request) binding() error {
	body, err := readBody(q.r)
	if err != nil {
		return err
	}
	b := &corev1.Binding{}
	if _, _, err := q.s.codecs.UniversalDeserializer().Decode(body, &schema.GroupVersionKind{Version: "v1", Kind: "Binding"}, b); err != nil {
		return apierrors.NewBadRequest(fmt.Sprintf("the body of the request could not be decoded as a Binding: %v", err))
	}
	if b.Name != "" && b.Name != q.ri.name {
		return apierrors.NewBadRequest(fmt.Sprintf("the name of the binding (%s) does not match the pod (%s)", b.Name, q.ri.name))
	}
	if b.Target.Kind != "" && b.Target.Kind != "Node" || b.Target.Name == "" {
		return apierrors.NewInvalid(schema.GroupKind{Kind: "Binding"}, q.ri.name, field.ErrorList{field.Required(field.NewPath("target", "name"), "a node to bind to")})
	}
	_, _, err = q.updateObject(func(old runtime.Object) (runtime.Object, error) {
		if old == nil {
			return nil, apierrors.NewNotFound(q.res.gr, q.ri.name)
		}
		pod := old.(*corev1.Pod)
		if err := q.s.checkNamespace(q.ctx(), q.res, q.ri.name, q.ri.namespace); err != nil {
			return nil, err
		}
		if pod.DeletionTimestamp != nil {
			return nil, apierrors.NewConflict(q.res.gr, q.ri.name, fmt.Errorf("pod %s is being deleted, cannot be assigned to a host", q.ri.name))
		}
		if pod.Spec.NodeName != "" {
			return nil, apierrors.NewConflict(q.res.gr, q.ri.name, fmt.Errorf("pod %s is already assigned to node %q", q.ri.name, pod.Spec.NodeName))
		}
		pod.Spec.NodeName = b.Target.Name
		// As upstream's binding: the pod is scheduled now, whatever an
		// earlier attempt reported.
		scheduled := false
		for i := range pod.Status.Conditions {
			c := &pod.Status.Conditions[i]
			if c.Type != corev1.PodScheduled {
				continue
			}
			scheduled = true
			if c.Status != corev1.ConditionTrue {
				*c = corev1.PodCondition{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: metav1.NewTime(q.s.now())}
			}
		}
		if !scheduled {
			pod.Status.Conditions = append(pod.Status.Conditions, corev1.PodCondition{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: metav1.NewTime(q.s.now())})
		}
		for k, v := range b.Annotations {
			if pod.Annotations == nil {
				pod.Annotations = map[string]string{}
			}
			pod.Annotations[k] = v
		}
		return pod, nil
	}, "", updateBinding)
	if err != nil {
		return err
	}
	return q.respond(http.StatusCreated, &metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}, Status: metav1.StatusSuccess, Code: http.StatusCreated})
}

func (q *request) finalizable() bool {
	_, ok := q.res.Rules.(Finalizable)
	return ok
}

// finalize serves PUT namespaces/NAME/finalize: an update of metadata and
// spec.finalizers only, which the namespace controller makes to say that
// the namespace's content is gone. Once the namespace is being deleted and
// no finalizer remains, it leaves the store.
func (q *request) finalize() error {
	if q.verb != "update" {
		return apierrors.NewMethodNotSupported(schema.GroupResource{Group: q.res.gr.Group, Resource: q.res.Plural + "/finalize"}, q.r.Method)
	}
	obj, err := q.decodeBody()
	if err != nil {
		return err
	}
	m, _ := meta.Accessor(obj)
	if m.GetName() != q.ri.name {
		return apierrors.NewBadRequest(fmt.Sprintf("the name of the object (%s) does not match the name on the URL (%s)", m.GetName(), q.ri.name))
	}
	updated, _, err := q.updateObject(func(old runtime.Object) (runtime.Object, error) {
		if old == nil {
			return nil, apierrors.NewNotFound(q.res.gr, q.ri.name)
		}
		return obj.DeepCopyObject(), nil
	}, m.GetResourceVersion(), updateFinalize)
	if err != nil {
		return err
	}
	return q.respond(http.StatusOK, updated)
}

func typesPatch(s string) types.PatchType { return types.PatchType(s) }
