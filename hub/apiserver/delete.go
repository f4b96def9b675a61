package apiserver

import (
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

	"github.com/outpost-mesh/outpost/hub/store"
)

// deleteOptions reads DeleteOptions from the body (or the query).
func (q *request) deleteOptions() (*metav1.DeleteOptions, error) {
	opts := &metav1.DeleteOptions{}
	body, err := readBody(q.r)
	if err != nil {
		return nil, err
	}
	if len(body) > 0 {
		if _, _, err := codecs.UniversalDeserializer().Decode(body, &schema.GroupVersionKind{Version: "v1", Kind: "DeleteOptions"}, opts); err != nil {
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
	if opts.GracePeriodSeconds != nil && *opts.GracePeriodSeconds < 0 {
		zero := int64(0)
		opts.GracePeriodSeconds = &zero
	}
	if p := opts.PropagationPolicy; p != nil {
		switch *p {
		case metav1.DeletePropagationOrphan, metav1.DeletePropagationBackground, metav1.DeletePropagationForeground:
		default:
			return nil, invalid(q.res, q.ri.name, nil)
		}
	}
	return opts, nil
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
	// Marked for deletion: finalizers or a grace period remain.
	return q.respond(http.StatusOK, obj)
}

// deleteObject deletes or marks the object. gone reports whether it left
// the store; otherwise it carries deletionTimestamp and waits for its
// finalizers or its node.
func (s *Server) deleteObject(ctx context.Context, res *resourceInfo, ns, name string, opts *metav1.DeleteOptions, dry bool) (runtime.Object, bool, error) {
	key := res.key(ns, name)
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
		grace := int64(0)
		if gd, ok := res.Rules.(GracefulDeleter); ok {
			grace = gd.GracePeriod(obj, opts.GracePeriodSeconds)
		}
		finalizers := m.GetFinalizers()
		if p := opts.PropagationPolicy; p != nil && *p == metav1.DeletePropagationForeground && !contains(finalizers, metav1.FinalizerDeleteDependents) && m.GetDeletionTimestamp() == nil {
			finalizers = append(finalizers, metav1.FinalizerDeleteDependents)
		}
		if grace == 0 && len(finalizers) == 0 {
			if res.gvr.Resource == "namespaces" && !dry {
				if err := s.deleteNamespaceContents(ctx, name); err != nil {
					return nil, false, err
				}
			}
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
		}
		// Mark: deletionTimestamp (now + grace), shortened but never
		// lengthened by a later delete.
		now := s.now().Truncate(time.Second)
		if dt := m.GetDeletionTimestamp(); dt != nil {
			if cur := m.GetDeletionGracePeriodSeconds(); cur == nil || grace >= *cur {
				return obj, false, nil
			}
		}
		m.SetFinalizers(finalizers)
		t := metav1.NewTime(now.Add(time.Duration(grace) * time.Second))
		m.SetDeletionTimestamp(&t)
		m.SetDeletionGracePeriodSeconds(&grace)
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

// deleteNamespaceContents deletes every object in namespace ns, as the
// namespace controller does upstream.
func (s *Server) deleteNamespaceContents(ctx context.Context, ns string) error {
	for _, res := range s.byGVR {
		if !res.Namespaced {
			continue
		}
		for {
			page, err := s.store.List(ctx, res.listPrefix(ns), store.ListOptions{Limit: 500})
			if err != nil {
				return storeError(err, res.gr, "")
			}
			for _, kv := range page.KVs {
				if _, _, err := s.store.Delete(ctx, kv.Key, 0); err != nil && !errors.Is(err, store.ErrNotFound) {
					return storeError(err, res.gr, kv.Key)
				}
				if obj, err := res.decode(kv); err == nil {
					s.releaseHeld(ctx, res, obj)
				}
			}
			if !page.More {
				break
			}
		}
	}
	return nil
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
