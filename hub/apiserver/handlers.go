package apiserver

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"

	corev1 "k8s.io/api/core/v1"

	"github.com/outpost-mesh/outpost/hub/store"
)

// request is one API request on a resource.
type request struct {
	s    *Server
	w    http.ResponseWriter
	r    *http.Request
	ri   requestInfo
	res  *resourceInfo
	verb string
	// warnings are sent as Warning headers (fieldValidation=Warn).
	warnings []string
	// fields are the request's field-management options (managedfields.go).
	fields fieldOptions
}

func (q *request) ctx() context.Context { return q.r.Context() }

func (q *request) serve() {
	var err error
	switch {
	case q.ri.subresource == "status" && q.res.Status:
		err = q.serveStatus()
	case q.ri.subresource == "scale" && q.res.Scale != nil:
		err = q.serveScale()
	case q.ri.subresource == "binding" && q.res.gvr.Resource == "pods" && q.verb == "create":
		err = q.binding()
	case q.ri.subresource == "eviction" && q.res.gvr.Resource == "pods" && q.verb == "create":
		err = q.eviction()
	case q.ri.subresource == "token" && q.res.Token != nil && q.verb == "create":
		err = q.serveToken()
	case q.ri.subresource == "finalize" && q.finalizable():
		err = q.finalize()
	case q.res.subresource(q.ri.subresource) != nil:
		err = q.serveSubresource()
	case isPodStream(q.ri) && q.s.cfg.PodStreams != nil:
		err = q.podStream()
	case q.ri.subresource != "":
		// A subresource not served here, such as pods/log until the hub
		// can reach containers: upstream's answer to a path it lacks, not
		// a claim that an object "name/subresource" is missing.
		err = apierrors.NewGenericServerResponse(http.StatusNotFound, q.verb, schema.GroupResource{}, "", "", 0, false)
	default:
		switch q.verb {
		case "get":
			err = q.get()
		case "list":
			err = q.list()
		case "watch":
			err = q.watch()
		case "create":
			err = q.create()
		case "update":
			err = q.update()
		case "patch":
			err = q.patch()
		case "delete":
			err = q.delete()
		case "deletecollection":
			err = q.deleteCollection()
		default:
			err = apierrors.NewMethodNotSupported(q.res.gr, q.r.Method)
		}
	}
	if err != nil {
		q.s.writeError(q.w, q.r, err)
	}
}

// respond writes obj, as a Table when the client asked for one.
func (q *request) respond(code int, obj runtime.Object) error {
	out, err := negotiate(q.r, q.res.codec, q.verb == "get" || q.verb == "list")
	if err != nil {
		return err
	}
	for _, w := range q.warnings {
		q.w.Header().Add("Warning", fmt.Sprintf("299 - %q", w))
	}
	switch {
	case out.table:
		if obj, err = q.table(obj); err != nil {
			return err
		}
	case out.partial:
		if obj, err = partialOf(obj); err != nil {
			return err
		}
	}
	q.s.writeObject(q.w, q.r, code, obj, &out)
	return nil
}

func (q *request) get() error {
	kv, err := q.s.store.Get(q.ctx(), q.res.key(q.ri.namespace, q.ri.name), 0)
	if err != nil {
		return storeError(err, q.res.gr, q.ri.name)
	}
	obj, err := q.res.decode(kv)
	if err != nil {
		return apierrors.NewInternalError(err)
	}
	return q.respond(http.StatusOK, obj)
}

// decodeBody decodes the request body into a new object of the resource,
// checking its kind, name and namespace against the URL.
func (q *request) decodeBody() (runtime.Object, error) {
	body, err := readBody(q.r)
	if err != nil {
		return nil, err
	}
	return q.decodeBytes(body, q.r.Header.Get("Content-Type"))
}

func (q *request) decodeBytes(body []byte, contentType string) (runtime.Object, error) {
	if len(body) == 0 {
		return nil, apierrors.NewBadRequest("the request body is empty")
	}
	validation := q.r.URL.Query().Get("fieldValidation")
	switch validation {
	case "", "Ignore", "Warn", "Strict":
	default:
		return nil, apierrors.NewBadRequest(fmt.Sprintf("fieldValidation %q is not one of Ignore, Warn, Strict", validation))
	}
	saved := q.r.Header.Get("Content-Type")
	q.r.Header.Set("Content-Type", contentType)
	dec, _, err := requestDecoder(q.r, q.res.codec, validation == "Strict")
	q.r.Header.Set("Content-Type", saved)
	if err != nil {
		return nil, err
	}
	into := q.res.New()
	obj, gvk, err := dec.Decode(body, &q.res.gvk, into)
	var strictErrs []error
	if se, ok := runtime.AsStrictDecodingError(err); ok && obj != nil {
		strictErrs, err = se.Errors(), nil
	}
	if err != nil {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("the body of the request could not be decoded: %v", err))
	}
	if validation == "Strict" || validation == "Warn" {
		strictErrs = append(strictErrs, q.res.unknownFields(obj)...)
	}
	if validation == "Strict" && len(strictErrs) > 0 {
		return nil, apierrors.NewBadRequest(runtime.NewStrictDecodingError(strictErrs).Error())
	}
	if gvk != nil && (gvk.Kind != q.res.Kind || gvk.GroupVersion() != q.res.GroupVersion) {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("the API version in the data (%s) does not match the expected API version (%s) or kind %q does not match %q",
			gvk.GroupVersion(), q.res.GroupVersion, gvk.Kind, q.res.Kind))
	}
	if validation == "Warn" {
		for _, e := range strictErrs {
			q.warnings = append(q.warnings, e.Error())
		}
		if info, ok := q.res.codec.lookup(contentType); ok && info.StrictSerializer != nil {
			if _, _, serr := info.StrictSerializer.Decode(body, &q.res.gvk, q.res.New()); serr != nil {
				if se, ok := serr.(interface{ Errors() []error }); ok {
					for _, e := range se.Errors() {
						q.warnings = append(q.warnings, e.Error())
					}
				}
			}
		}
	}
	obj.GetObjectKind().SetGroupVersionKind(q.res.gvk)
	m, err := meta.Accessor(obj)
	if err != nil {
		return nil, apierrors.NewBadRequest(err.Error())
	}
	if q.res.Namespaced {
		if ns := m.GetNamespace(); ns != "" && ns != q.ri.namespace {
			return nil, apierrors.NewBadRequest("the namespace of the provided object does not match the namespace sent on the request")
		}
		m.SetNamespace(q.ri.namespace)
	} else {
		m.SetNamespace("")
	}
	return obj, nil
}

func invalid(res *resourceInfo, name string, errs field.ErrorList) error {
	return apierrors.NewInvalid(res.gvk.GroupKind(), name, errs)
}

func dryRun(r *http.Request) (bool, error) {
	switch v := r.URL.Query()["dryRun"]; {
	case len(v) == 0:
		return false, nil
	case len(v) == 1 && v[0] == "All":
		return true, nil
	default:
		return false, apierrors.NewBadRequest(fmt.Sprintf("dryRun %q: only All is supported", v))
	}
}

func (q *request) create() error {
	if q.ri.name != "" {
		return apierrors.NewMethodNotSupported(q.res.gr, "POST on a named object")
	}
	if q.res.Namespaced && q.ri.namespace == "" {
		return apierrors.NewBadRequest("the namespace of the object must be set in the URL: /api/v1/namespaces/NAMESPACE/" + q.res.Plural)
	}
	obj, err := q.decodeBody()
	if err != nil {
		return err
	}
	dry, err := dryRun(q.r)
	if err != nil {
		return err
	}
	if obj, err = q.trackCreate(obj); err != nil {
		return err
	}
	created, err := q.s.createObject(q.ctx(), q.res, obj, dry)
	if err != nil {
		return err
	}
	return q.respond(http.StatusCreated, created)
}

// createObject runs the create path for obj: defaults, metadata,
// validation, the namespace check, admission and the store write. obj's
// managedFields are written as they are: the caller's (trackCreate).
func (s *Server) createObject(ctx context.Context, res *resourceInfo, obj runtime.Object, dry bool) (runtime.Object, error) {
	res.setDefaults(obj)
	obj, err := s.mutate(ctx, res, Create, "", obj, nil, dry)
	if err != nil {
		return nil, err
	}
	m, _ := meta.Accessor(obj)
	if m.GetName() == "" && m.GetGenerateName() != "" {
		m.SetName(m.GetGenerateName() + randomSuffix(5))
	}
	m.SetUID(newUID())
	m.SetCreationTimestamp(metav1.NewTime(s.now().Truncate(time.Second)))
	res.prepareForCreate(obj)
	m.SetResourceVersion("")
	m.SetDeletionTimestamp(nil)
	m.SetDeletionGracePeriodSeconds(nil)
	m.SetSelfLink("")
	if res.Generation {
		m.SetGeneration(1)
	} else {
		m.SetGeneration(0)
	}
	if errs := res.Rules.Validate(obj); len(errs) > 0 {
		return nil, invalid(res, m.GetName(), errs)
	}
	if res.Namespaced {
		if err := s.checkNamespace(ctx, res, m.GetName(), m.GetNamespace()); err != nil {
			return nil, err
		}
	}
	if err := s.admit(ctx, res, Create, "", obj, nil, dry); err != nil {
		return nil, err
	}
	if dry {
		return obj, nil
	}
	key := res.key(m.GetNamespace(), m.GetName())
	release, err := s.assign(ctx, res, obj, key)
	if err != nil {
		return nil, err
	}
	data, err := res.encode(obj)
	if err != nil {
		release()
		return nil, encodeError(err)
	}
	kv, err := s.store.Create(ctx, key, data)
	if err != nil {
		release()
		return nil, storeError(err, res.gr, m.GetName())
	}
	m.SetResourceVersion(strconv.FormatInt(kv.ModRevision, 10))
	return res.asStored(obj, data, kv.ModRevision), nil
}

// checkNamespace refuses the create of name (of res) in a namespace that
// does not exist or is being deleted, as upstream's NamespaceLifecycle
// admission does: 404, or 403 with the NamespaceTerminating cause.
func (s *Server) checkNamespace(ctx context.Context, res *resourceInfo, name, ns string) error {
	nsRes := s.res().byGVR[schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}]
	if nsRes == nil {
		return nil
	}
	kv, err := s.store.Get(ctx, nsRes.key("", ns), 0)
	if errors.Is(err, store.ErrNotFound) {
		return apierrors.NewNotFound(nsRes.gr, ns)
	}
	if err != nil {
		return storeError(err, nsRes.gr, ns)
	}
	obj, err := nsRes.decode(kv)
	if err != nil {
		return apierrors.NewInternalError(err)
	}
	if nsObj, ok := obj.(*corev1.Namespace); ok && nsObj.Status.Phase == corev1.NamespaceTerminating || om(obj).GetDeletionTimestamp() != nil {
		err := apierrors.NewForbidden(res.gr, name, fmt.Errorf("unable to create new content in namespace %s because it is being terminated", ns))
		err.ErrStatus.Details.Causes = append(err.ErrStatus.Details.Causes, metav1.StatusCause{
			Type:    corev1.NamespaceTerminatingCause,
			Message: fmt.Sprintf("namespace %s is being terminated", ns),
			Field:   "metadata.namespace",
		})
		return err
	}
	return nil
}

func (q *request) update() error {
	obj, err := q.decodeBody()
	if err != nil {
		return err
	}
	m, _ := meta.Accessor(obj)
	if m.GetName() != q.ri.name {
		return apierrors.NewBadRequest(fmt.Sprintf("the name of the object (%s) does not match the name on the URL (%s)", m.GetName(), q.ri.name))
	}
	updated, code, err := q.updateObject(func(old runtime.Object) (runtime.Object, error) {
		return obj.DeepCopyObject(), nil
	}, m.GetResourceVersion(), updateMain)
	if err != nil {
		return err
	}
	return q.respond(code, updated)
}

// updateKind says which part of an object an update may change.
type updateKind int

const (
	updateMain updateKind = iota
	updateStatus
	// updateBinding sets spec.nodeName, which updates of the main resource
	// may not change.
	updateBinding
	// updateFinalize changes metadata and the spec's own finalizers of a
	// Finalizable resource (namespaces/NAME/finalize).
	updateFinalize
	// updateSubresource changes what one of Resource.Subresources may.
	updateSubresource
)

// updateObject reads the request's object, asks mutate for its new version
// (mutate gets a copy and may return it changed), and writes it back
// guarded by the read revision once admitted, retrying on conflicts unless
// the client gave a resourceVersion (then a conflict is the client's 409).
// A missing object is created when mutate is given nil and the rules
// allow it, or the request is an apply.
func (q *request) updateObject(mutate func(old runtime.Object) (runtime.Object, error), clientRV string, kind updateKind) (runtime.Object, int, error) {
	s, ctx, res, name := q.s, q.ctx(), q.res, q.ri.name
	dry, err := dryRun(q.r)
	if err != nil {
		return nil, 0, err
	}
	if err := checkResourceVersion(clientRV); err != nil {
		return nil, 0, err
	}
	key := res.key(q.ri.namespace, name)
	for attempt := 0; ; attempt++ {
		kv, err := s.store.Get(ctx, key, 0)
		if errors.Is(err, store.ErrNotFound) {
			if kind != updateMain || !(res.allowCreateOnUpdate() || q.fields.apply) {
				return nil, 0, apierrors.NewNotFound(res.gr, name)
			}
			obj, err := mutate(nil)
			if err != nil {
				return nil, 0, err
			}
			if obj, err = q.trackCreate(obj); err != nil {
				return nil, 0, err
			}
			created, err := s.createObject(ctx, res, obj, dry)
			if apierrors.IsAlreadyExists(err) && attempt < 10 {
				continue
			}
			return created, http.StatusCreated, err
		}
		if err != nil {
			return nil, 0, storeError(err, res.gr, name)
		}
		old, err := res.decode(kv)
		if err != nil {
			return nil, 0, apierrors.NewInternalError(err)
		}
		if clientRV != "" && clientRV != strconv.FormatInt(kv.ModRevision, 10) {
			return nil, 0, apierrors.NewConflict(res.gr, name, errors.New(optimisticLockMsg))
		}
		obj, err := mutate(old.DeepCopyObject())
		if err != nil {
			return nil, 0, err
		}
		obj.GetObjectKind().SetGroupVersionKind(res.gvk)
		// A UID in the body is a precondition, as upstream: the update is
		// for that object, not a newer one of the same name.
		if uid, oldUID := om(obj).GetUID(), om(old).GetUID(); uid != "" && uid != oldUID {
			return nil, 0, apierrors.NewConflict(res.gr, name, fmt.Errorf("Precondition failed: UID in precondition: %v, UID in object meta: %v", uid, oldUID))
		}
		if obj, err = s.mutate(ctx, res, Update, q.ri.subresource, obj, old, dry); err != nil {
			return nil, 0, err
		}
		sent := om(obj).GetManagedFields()
		if err := s.prepareUpdate(res, obj, old, kind, q.ri.subresource); err != nil {
			return nil, 0, err
		}
		if obj, err = q.trackUpdate(obj, old, sent, kind); err != nil {
			return nil, 0, err
		}
		if err := s.admit(ctx, res, Update, q.ri.subresource, obj, old, dry); err != nil {
			return nil, 0, err
		}
		m, _ := meta.Accessor(obj)
		// An object being deleted goes once its last finalizer is removed,
		// unless its deletion is graceful: a pod with a grace period stays
		// until its node confirms with a deletion of grace 0, as upstream.
		// A namespace also waits for its spec's finalizers.
		if m.GetDeletionTimestamp() != nil && len(m.GetFinalizers()) == 0 && !graceful(old) && !specFinalizersRemain(res, obj) && !dry {
			_, _, err := s.store.Delete(ctx, key, kv.ModRevision)
			if errors.Is(err, store.ErrConflict) && clientRV == "" && attempt < 50 {
				continue
			}
			if err != nil {
				return nil, 0, storeError(err, res.gr, name)
			}
			s.releaseHeld(ctx, res, old)
			return obj, http.StatusOK, nil
		}
		if dry {
			return obj, http.StatusOK, nil
		}
		allocated, err := s.reassign(ctx, res, obj, old, key)
		if err != nil {
			return nil, 0, err
		}
		data, err := res.encode(obj)
		if err != nil {
			allocated(false)
			return nil, 0, encodeError(err)
		}
		// An update that changes nothing writes nothing, as upstream: no
		// new resourceVersion, no event for watchers. Like upstream's
		// storage, it compares what would be stored with what is.
		if bytes.Equal(data, kv.Value) {
			allocated(false)
			return old, http.StatusOK, nil
		}
		nkv, err := s.store.Update(ctx, key, data, kv.ModRevision)
		allocated(err == nil)
		if (errors.Is(err, store.ErrConflict) || errors.Is(err, store.ErrNotFound)) && clientRV == "" && attempt < 50 {
			continue
		}
		if err != nil {
			return nil, 0, storeError(err, res.gr, name)
		}
		m.SetResourceVersion(strconv.FormatInt(nkv.ModRevision, 10))
		return res.asStored(obj, data, nkv.ModRevision), http.StatusOK, nil
	}
}

// checkResourceVersion refuses a resourceVersion in an object written that
// this server cannot have issued, with 400 as upstream: a client is to
// send back one it was given, not compare or make them up.
func checkResourceVersion(rv string) error {
	if rv == "" {
		return nil
	}
	if n, err := strconv.ParseInt(rv, 10, 64); err != nil || n <= 0 {
		return apierrors.NewBadRequest(fmt.Sprintf("metadata.resourceVersion %q is not one this server issued: send the resourceVersion of the object as read, or none", truncate([]byte(rv), 64)))
	}
	return nil
}

// graceful reports whether obj's deletion waits out a grace period.
func graceful(obj runtime.Object) bool {
	g := om(obj).GetDeletionGracePeriodSeconds()
	return g != nil && *g > 0
}

// prepareUpdate applies the generic and the resource's update rules to obj
// replacing old.
func (s *Server) prepareUpdate(res *resourceInfo, obj, old runtime.Object, kind updateKind, subresource string) error {
	m, _ := meta.Accessor(obj)
	om, _ := meta.Accessor(old)
	sub := res.subresource(subresource)
	if kind == updateSubresource {
		// What the subresource may change, on the stored object.
		fresh := old.DeepCopyObject()
		sub.Update(obj, fresh)
		fm, _ := meta.Accessor(fresh)
		fm.SetResourceVersion(m.GetResourceVersion())
		replaceObject(obj, fresh)
	} else if kind == updateStatus {
		// Status changes, and metadata unless the resource keeps it:
		// everything else is the stored object's.
		fresh := old.DeepCopyObject()
		copyStatus(fresh, obj)
		fm, _ := meta.Accessor(fresh)
		fm.SetResourceVersion(m.GetResourceVersion())
		if !res.StatusKeepsMetadata {
			fm.SetLabels(m.GetLabels())
			fm.SetAnnotations(m.GetAnnotations())
			fm.SetOwnerReferences(m.GetOwnerReferences())
			fm.SetFinalizers(m.GetFinalizers())
		}
		replaceObject(obj, fresh)
		if sp, ok := res.Rules.(StatusPreparer); ok {
			sp.PrepareForStatusUpdate(obj, old)
		}
	} else if kind == updateMain || kind == updateFinalize {
		res.setDefaults(obj)
		if res.Status {
			copyStatus(obj, old)
		}
		if fin, ok := res.Rules.(Finalizable); ok && kind == updateFinalize {
			fin.PrepareForFinalize(obj, old)
		} else {
			res.prepareForUpdate(obj, old)
		}
	}
	// System metadata is the server's.
	m.SetUID(om.GetUID())
	m.SetCreationTimestamp(om.GetCreationTimestamp())
	m.SetNamespace(om.GetNamespace())
	m.SetName(om.GetName())
	m.SetSelfLink("")
	// The stored managedFields until trackUpdate, after validation, sets
	// the new ones.
	m.SetManagedFields(om.GetManagedFields())
	if om.GetDeletionTimestamp() != nil {
		m.SetDeletionTimestamp(om.GetDeletionTimestamp())
		m.SetDeletionGracePeriodSeconds(om.GetDeletionGracePeriodSeconds())
	} else if kind == updateMain || kind == updateFinalize {
		m.SetDeletionTimestamp(nil)
		m.SetDeletionGracePeriodSeconds(nil)
	}
	m.SetGeneration(om.GetGeneration())
	if kind == updateMain && res.Generation && specChanged(obj, old) {
		m.SetGeneration(om.GetGeneration() + 1)
	}
	if m.GetResourceVersion() == "" {
		m.SetResourceVersion(om.GetResourceVersion()) // unconditional update
	}
	// A subresource's update validates what it may change, not the whole
	// object, which is the stored one apart from that.
	var errs field.ErrorList
	switch kind {
	case updateMain, updateFinalize:
		errs = res.Rules.ValidateUpdate(obj, old)
	case updateStatus:
		if sv, ok := res.Rules.(StatusValidator); ok {
			errs = sv.ValidateStatusUpdate(obj, old)
		}
	case updateSubresource:
		if sub.Validate != nil {
			errs = sub.Validate(obj, old)
		}
	}
	if len(errs) > 0 {
		return invalid(res, m.GetName(), errs)
	}
	return nil
}

func om(obj runtime.Object) metav1.Object {
	m, _ := meta.Accessor(obj)
	return m
}
