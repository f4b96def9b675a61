package apiserver

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/outpost-mesh/outpost/hub/store"
)

// Finalizable is implemented by the rules of resources whose objects hold
// finalizers of their own in the spec besides metadata.finalizers, as a
// namespace holds spec.finalizers ("kubernetes"), which the namespace
// controller removes through the finalize subresource once the namespace's
// content is gone. The first delete of such an object marks it (MarkDeleting
// records that in its status, a namespace's phase Terminating); it leaves
// the store once both lists are empty.
type Finalizable interface {
	// SpecFinalizers returns obj's own finalizers.
	SpecFinalizers(obj runtime.Object) []string
	// PrepareForFinalize is given the object of a finalize request and the
	// stored one; it restores what that request may not change, which is
	// all but metadata and the spec's finalizers.
	PrepareForFinalize(obj, old runtime.Object)
	// MarkDeleting records in obj that its deletion has begun.
	MarkDeleting(obj runtime.Object)
}

// deleteOptions reads DeleteOptions from the body (or the query) and
// validates them as upstream does.
func (q *request) deleteOptions() (*metav1.DeleteOptions, error) {
	opts := &metav1.DeleteOptions{}
	body, err := readBody(q.r)
	if err != nil {
		return nil, err
	}
	if len(body) > 0 {
		if _, _, err := q.s.codecs.UniversalDeserializer().Decode(body, &schema.GroupVersionKind{Version: "v1", Kind: "DeleteOptions"}, opts); err != nil {
			return nil, apierrors.NewBadRequest(fmt.Sprintf("the body of the request could not be decoded as DeleteOptions: %v", err))
		}
	}
	v := q.r.URL.Query()
	if s := v.Get("gracePeriodSeconds"); s != "" {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return nil, apierrors.NewBadRequest(fmt.Sprintf("invalid gracePeriodSeconds %q", s))
		}
		opts.GracePeriodSeconds = &n
	}
	if s := v.Get("propagationPolicy"); s != "" {
		p := metav1.DeletionPropagation(s)
		opts.PropagationPolicy = &p
	}
	if s := v.Get("orphanDependents"); s != "" {
		b, err := strconv.ParseBool(s)
		if err != nil {
			return nil, apierrors.NewBadRequest(fmt.Sprintf("invalid orphanDependents %q", s))
		}
		opts.OrphanDependents = &b //nolint:staticcheck // still sent by old clients
	}
	if opts.GracePeriodSeconds != nil && *opts.GracePeriodSeconds < 0 {
		zero := int64(0)
		opts.GracePeriodSeconds = &zero
	}
	if errs := validateDeleteOptions(opts); len(errs) > 0 {
		return nil, apierrors.NewInvalid(schema.GroupKind{Group: metav1.GroupName, Kind: "DeleteOptions"}, "", errs)
	}
	return opts, nil
}

// validateDeleteOptions checks the propagation options as upstream's
// ValidateDeleteOptions does.
func validateDeleteOptions(opts *metav1.DeleteOptions) field.ErrorList {
	var errs field.ErrorList
	path := field.NewPath("propagationPolicy")
	//nolint:staticcheck // OrphanDependents is deprecated but still honoured
	if opts.OrphanDependents != nil && opts.PropagationPolicy != nil {
		errs = append(errs, field.Invalid(path, opts.PropagationPolicy, "orphanDependents and deletionPropagation cannot be both set"))
	}
	if p := opts.PropagationPolicy; p != nil {
		switch *p {
		case metav1.DeletePropagationOrphan, metav1.DeletePropagationBackground, metav1.DeletePropagationForeground:
		default:
			errs = append(errs, field.NotSupported(path, *p, []string{
				string(metav1.DeletePropagationForeground), string(metav1.DeletePropagationBackground), string(metav1.DeletePropagationOrphan), "nil"}))
		}
	}
	return errs
}

// gcFinalizers returns the finalizers an object with finalizers current
// is to carry after a delete with opts, which ask the garbage collector
// to orphan its dependents (the orphan finalizer) or to delete them before
// it (foregroundDeletion), as upstream's deletionFinalizersForGarbageCollection
// decides. An explicit option wins; without one a finalizer already there
// stays; without either the policy is background (no finalizer), which is
// upstream's default for every version this server serves (orphan was the
// default only for extensions/v1beta1, apps/v1beta1 and apps/v1beta2). The
// caller owns the returned slice.
func gcFinalizers(current []string, opts *metav1.DeleteOptions) []string {
	hasOrphan := contains(current, metav1.FinalizerOrphanDependents)
	hasForeground := contains(current, metav1.FinalizerDeleteDependents)
	orphan, foreground := hasOrphan, hasForeground
	//nolint:staticcheck // OrphanDependents is deprecated but still honoured
	switch o := opts.OrphanDependents; {
	case o != nil:
		orphan, foreground = *o, false
	case opts.PropagationPolicy != nil:
		orphan = *opts.PropagationPolicy == metav1.DeletePropagationOrphan
		foreground = *opts.PropagationPolicy == metav1.DeletePropagationForeground
	case hasOrphan:
		foreground = false
	}
	if orphan == hasOrphan && foreground == hasForeground {
		return slices.Clone(current)
	}
	out := make([]string, 0, len(current)+1)
	for _, f := range current {
		if f != metav1.FinalizerOrphanDependents && f != metav1.FinalizerDeleteDependents {
			out = append(out, f)
		}
	}
	if orphan {
		out = append(out, metav1.FinalizerOrphanDependents)
	}
	if foreground {
		out = append(out, metav1.FinalizerDeleteDependents)
	}
	return out
}

func (q *request) delete() error {
	opts, err := q.deleteOptions()
	if err != nil {
		return err
	}
	dry, err := dryRun(q.r)
	if err != nil {
		return err
	}
	obj, gone, err := q.s.deleteObject(q.ctx(), q.res, q.ri.namespace, q.ri.name, opts, dry)
	if err != nil {
		return err
	}
	if gone {
		m, _ := meta.Accessor(obj)
		if q.res.gvr.Resource == "pods" || q.res.gvr.Resource == "namespaces" {
			return q.respond(http.StatusOK, obj) // upstream returns these objects
		}
		return q.respond(http.StatusOK, statusOK(q.res, q.ri.name, string(m.GetUID())))
	}
	// Marked for deletion: finalizers or a grace period remain. Upstream
	// answers 202 only to the old clients that asked to cascade with
	// orphanDependents=false, and 200 to every other.
	code := http.StatusOK
	//nolint:staticcheck // OrphanDependents is deprecated but still honoured
	if o := opts.OrphanDependents; o != nil && !*o {
		code = http.StatusAccepted
	}
	return q.respond(code, obj)
}

// deleteObject deletes or marks the object. gone reports whether it left
// the store; otherwise it carries deletionTimestamp and waits for its
// finalizers or its node.
func (s *Server) deleteObject(ctx context.Context, res *resourceInfo, ns, name string, opts *metav1.DeleteOptions, dry bool) (runtime.Object, bool, error) {
	key := res.key(ns, name)
	fin, _ := res.Rules.(Finalizable)
	for attempt := 0; attempt < 50; attempt++ {
		kv, err := s.store.Get(ctx, key, 0)
		if err != nil {
			return nil, false, storeError(err, res.gr, name)
		}
		obj, err := res.decode(kv)
		if err != nil {
			return nil, false, apierrors.NewInternalError(err)
		}
		m, _ := meta.Accessor(obj)
		if p := opts.Preconditions; p != nil {
			if p.UID != nil && *p.UID != m.GetUID() {
				return nil, false, apierrors.NewConflict(res.gr, name, fmt.Errorf("Precondition failed: UID in precondition: %v, UID in object meta: %v", *p.UID, m.GetUID()))
			}
			if p.ResourceVersion != nil && *p.ResourceVersion != m.GetResourceVersion() {
				return nil, false, apierrors.NewConflict(res.gr, name, fmt.Errorf("Precondition failed: ResourceVersion in precondition: %v, ResourceVersion in object meta: %v", *p.ResourceVersion, m.GetResourceVersion()))
			}
		}
		already := m.GetDeletionTimestamp() != nil
		finalizers := gcFinalizers(m.GetFinalizers(), opts)
		if df, ok := res.Rules.(DeleteFinalizer); ok && !already {
			for _, f := range df.FinalizersOnDelete(obj) {
				if !contains(finalizers, f) {
					finalizers = append(finalizers, f)
				}
			}
		}
		now := s.now().Truncate(time.Second)
		var mark func()
		switch grace, shorten, pending := deletionGrace(res, obj, opts); {
		case fin != nil && !already && (len(fin.SpecFinalizers(obj)) > 0 || len(finalizers) > 0):
			// The first delete of a namespace: Terminating, until its
			// finalizers are done (upstream's namespace storage).
			mark = func() {
				t := metav1.NewTime(now)
				m.SetDeletionTimestamp(&t)
				m.SetFinalizers(finalizers)
				fin.MarkDeleting(obj)
			}
		case fin != nil && len(fin.SpecFinalizers(obj)) > 0:
			// Deleting again changes nothing while the spec's finalizers
			// remain: their owners are at work.
			return obj, false, nil
		case pending:
			// A longer grace period runs: a delete may only shorten it.
			return obj, false, nil
		case grace == 0 && len(finalizers) == 0:
			if dry {
				return obj, true, nil
			}
			if _, _, err := s.store.Delete(ctx, key, kv.ModRevision); err != nil {
				if errors.Is(err, store.ErrConflict) {
					continue
				}
				return nil, false, storeError(err, res.gr, name)
			}
			s.releaseHeld(ctx, res, obj)
			return obj, true, nil
		case already && !shorten && slices.Equal(finalizers, m.GetFinalizers()):
			return obj, false, nil
		default:
			mark = func() {
				m.SetFinalizers(finalizers)
				if already && !shorten {
					return // marked before: only the finalizers change
				}
				// deletionTimestamp is now + grace, so that a shortened
				// grace period moves it closer.
				t := metav1.NewTime(now.Add(time.Duration(grace) * time.Second))
				m.SetDeletionTimestamp(&t)
				m.SetDeletionGracePeriodSeconds(&grace)
			}
		}
		if !already && m.GetGeneration() > 0 {
			m.SetGeneration(m.GetGeneration() + 1) // as upstream's markAsDeleting
		}
		mark()
		if dry {
			return obj, false, nil
		}
		data, err := res.encode(obj)
		if err != nil {
			return nil, false, apierrors.NewInternalError(err)
		}
		nkv, err := s.store.Update(ctx, key, data, kv.ModRevision)
		if errors.Is(err, store.ErrConflict) {
			continue
		}
		if err != nil {
			return nil, false, storeError(err, res.gr, name)
		}
		m.SetResourceVersion(strconv.FormatInt(nkv.ModRevision, 10))
		return obj, false, nil
	}
	return nil, false, apierrors.NewConflict(res.gr, name, errors.New("too many concurrent changes; try again"))
}

// deletionGrace returns the grace period a delete with opts gives obj, as
// upstream's BeforeDelete: shorten reports that obj already waits out a
// longer one, which this delete cuts short, and pending that it waits out
// one this delete does not shorten, which the delete then leaves alone
// (finalizers included). An object marked without a grace period (held by
// finalizers) gets 0.
func deletionGrace(res *resourceInfo, obj runtime.Object, opts *metav1.DeleteOptions) (grace int64, shorten, pending bool) {
	m := om(obj)
	gd, graceful := res.Rules.(GracefulDeleter)
	if m.GetDeletionTimestamp() != nil {
		cur := m.GetDeletionGracePeriodSeconds()
		if cur == nil || *cur == 0 {
			return 0, false, false
		}
		if opts.GracePeriodSeconds == nil {
			return 0, false, true
		}
		grace = *opts.GracePeriodSeconds
		if graceful {
			grace = gd.GracePeriod(obj, opts.GracePeriodSeconds)
		}
		if grace >= *cur {
			return 0, false, true
		}
		return grace, true, false
	}
	if graceful {
		grace = gd.GracePeriod(obj, opts.GracePeriodSeconds)
	}
	return grace, false, false
}

// specFinalizersRemain reports whether obj, of a Finalizable resource,
// still holds finalizers of its own.
func specFinalizersRemain(res *resourceInfo, obj runtime.Object) bool {
	fin, ok := res.Rules.(Finalizable)
	return ok && len(fin.SpecFinalizers(obj)) > 0
}

// deleteCollection deletes the objects a list with the request's options
// would return, a page at a time, and answers with the list of them as
// deleted. That list is held in memory in the stored form (about the size
// the objects take in the store), not decoded.
func (q *request) deleteCollection() error {
	opts, err := q.deleteOptions()
	if err != nil {
		return err
	}
	lo, err := q.parseListOptions()
	if err != nil {
		return err
	}
	dry, err := dryRun(q.r)
	if err != nil {
		return err
	}
	sc, f, err := q.openListResponse(lo)
	if err != nil {
		return err
	}
	deleted := &itemList{rev: sc.rev}
	err = sc.each(q.ctx(), func(it *listItem) error {
		obj, err := it.object(q.res)
		if err != nil {
			return apierrors.NewInternalError(err)
		}
		m, _ := meta.Accessor(obj)
		obj, _, err = q.s.deleteObject(q.ctx(), q.res, m.GetNamespace(), m.GetName(), opts, dry)
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return err
		}
		rv, _ := strconv.ParseInt(om(obj).GetResourceVersion(), 10, 64)
		data, err := q.res.encode(obj)
		if err != nil {
			return apierrors.NewInternalError(err)
		}
		deleted.items = append(deleted.items, listItem{kv: store.KeyValue{Key: it.kv.Key, Value: data, ModRevision: rv}})
		return nil
	})
	if err != nil {
		return err
	}
	return q.serveList(deleted, f)
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
