package admission

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/outpost-mesh/outpost/hub/apiserver"
	"github.com/outpost-mesh/outpost/hub/quota"
)

// quotaRetries is how many times ResourceQuota charges a write again
// after a conflict on a quota's status, as upstream's three.
const quotaRetries = 3

// QuotaStore is where ResourceQuota reads the quotas of a namespace and
// charges them. Its methods must be safe for concurrent use.
type QuotaStore interface {
	// ListQuotas returns the quotas of namespace, perhaps a little
	// behind the store (an informer's cache). The caller must not
	// modify them.
	ListQuotas(namespace string) ([]*corev1.ResourceQuota, error)
	// GetQuota reads a quota from the store, not a cache.
	GetQuota(ctx context.Context, namespace, name string) (*corev1.ResourceQuota, error)
	// UpdateQuotaStatus writes q's status, provided q.ResourceVersion is
	// still the stored one (else a Conflict), and returns the quota as
	// stored.
	UpdateQuotaStatus(ctx context.Context, q *corev1.ResourceQuota) (*corev1.ResourceQuota, error)
}

// ResourceQuota is upstream's ResourceQuota admission plugin. Before an
// object is created (and before a service or claim update, or a pod
// update that makes it terminating or not), it measures what the write
// adds to each quota of the namespace that counts the object (see
// quota.Usage), refuses with 403 Forbidden a write that would take one
// over its status.hard, or that meets a quota whose status has not been
// counted yet, and otherwise adds the write's use to those quotas'
// status.used, with the quota's resourceVersion as precondition, before
// the object is stored: so concurrent creates cannot together overshoot
// a limit. The resourcequota controller gives use back on deletion. Set
// Quotas; the zero value of the other fields is ready. It is safe for
// concurrent use.
type ResourceQuota struct {
	// Quotas are read and charged through; non-nil.
	Quotas QuotaStore
	// Now is the time (which decides whether a pod being deleted still
	// counts); nil is time.Now.
	Now func() time.Time

	// mu serializes charges, so that two writes never read the same
	// used; it also guards newer.
	mu sync.Mutex
	// newer holds, by namespace/name, the last version of each quota
	// this plugin wrote or read from the store, as long as Quotas'
	// listing is behind it.
	newer map[string]*corev1.ResourceQuota
}

var _ apiserver.Admission = (*ResourceQuota)(nil)

// Handles reports whether objects of resource are counted in quotas.
func (p *ResourceQuota) Handles(resource schema.GroupResource) bool {
	return quota.Counted(resource)
}

// Admit charges a write to the quotas of its namespace, or refuses it.
func (p *ResourceQuota) Admit(ctx context.Context, a apiserver.AdmissionAttributes) error {
	if a.Subresource != "" || a.Namespace == "" || !quota.Counted(a.Resource) || !Charged(a) {
		return nil
	}
	// Most namespaces have no quota: their writes need not wait for
	// the charges of others.
	if qs, err := p.Quotas.ListQuotas(a.Namespace); err == nil && len(qs) == 0 {
		return nil
	}
	now := time.Now()
	if p.Now != nil {
		now = p.Now()
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	var only map[string]bool // after a conflict, the quotas left to charge
	for attempt := 0; ; attempt++ {
		quotas, err := p.list(ctx, a.Namespace, only)
		if err != nil {
			return apierrors.NewInternalError(fmt.Errorf("list resource quotas: %w", err))
		}
		charged, err := Charge(a.Resource, a.Object, a.OldObject, quotas, now)
		var refusal *QuotaRefusal
		if errors.As(err, &refusal) {
			return apierrors.NewForbidden(a.Resource, objectName(a), refusal)
		}
		if err != nil {
			return apierrors.NewInternalError(err)
		}
		if a.DryRun {
			return nil
		}
		failed, err := p.write(ctx, charged)
		if err == nil || len(failed) == 0 || attempt+1 == quotaRetries {
			return err
		}
		only = failed
	}
}

// Charged reports whether a write, of a resource quotas count, is
// charged to them, as upstream's evaluators decide: every create; an
// update of a service or claim (a type or a request may grow); an update
// of a pod that moves it in or out of the Terminating scope.
func Charged(a apiserver.AdmissionAttributes) bool {
	switch {
	case a.Operation == apiserver.Create:
		return true
	case a.Operation != apiserver.Update:
		return false
	case a.Resource == quota.Services || a.Resource == quota.Claims:
		return true
	case a.Resource == quota.Pods:
		pod, ok1 := a.Object.(*corev1.Pod)
		old, ok2 := a.OldObject.(*corev1.Pod)
		return ok1 && ok2 && quota.IsTerminating(pod) != quota.IsTerminating(old)
	}
	return false
}

// list returns the quotas of namespace, each in the newest version the
// plugin knows, only those named in only when it is not nil. A quota
// whose status has not been counted in the listing is read from the
// store: the controller may have counted it since, and a create must
// not slip past a quota only because the listing lags. p.mu is held.
func (p *ResourceQuota) list(ctx context.Context, namespace string, only map[string]bool) ([]*corev1.ResourceQuota, error) {
	cached, err := p.Quotas.ListQuotas(namespace)
	if err != nil {
		return nil, err
	}
	listed := map[string]bool{}
	out := make([]*corev1.ResourceQuota, 0, len(cached))
	for _, q := range cached {
		key := q.Namespace + "/" + q.Name
		listed[key] = true
		if n, ok := p.newer[key]; ok {
			if newerVersion(n.ResourceVersion, q.ResourceVersion) {
				q = n
			} else {
				delete(p.newer, key) // the cache has caught up
			}
		}
		if uncounted(q) {
			fresh, err := p.Quotas.GetQuota(ctx, q.Namespace, q.Name)
			if apierrors.IsNotFound(err) {
				continue // deleted since
			}
			if err != nil {
				return nil, err
			}
			p.remember(key, fresh)
			q = fresh
		}
		if only == nil || only[key] {
			out = append(out, q)
		}
	}
	for key, q := range p.newer {
		if q.Namespace == namespace && !listed[key] {
			delete(p.newer, key) // deleted since
		}
	}
	return out, nil
}

// uncounted reports whether q's status does not cover its spec yet.
func uncounted(q *corev1.ResourceQuota) bool {
	for name := range q.Spec.Hard {
		if _, ok := q.Status.Used[name]; !ok {
			return true
		}
	}
	return false
}

// newerVersion reports whether resourceVersion a is later than b; the
// hub's are revisions, decimal integers. Unparsable versions are not
// newer, so the cache's is used.
func newerVersion(a, b string) bool {
	x, err1 := strconv.ParseUint(a, 10, 64)
	y, err2 := strconv.ParseUint(b, 10, 64)
	return err1 == nil && err2 == nil && x > y
}

// write stores the status of each charged quota. It returns the keys of
// those whose write conflicted, having read them again, and the last
// error, nil when every write succeeded. p.mu is held.
func (p *ResourceQuota) write(ctx context.Context, charged []*corev1.ResourceQuota) (map[string]bool, error) {
	var failed map[string]bool
	var last error
	for _, q := range charged {
		key := q.Namespace + "/" + q.Name
		stored, err := p.Quotas.UpdateQuotaStatus(ctx, q)
		if err == nil {
			p.remember(key, stored)
			continue
		}
		if apierrors.IsTooManyRequests(err) {
			return nil, err // the client retries, as it would its own write
		}
		if !apierrors.IsConflict(err) {
			return nil, apierrors.NewInternalError(fmt.Errorf("charge resource quota %s: %w", q.Name, err))
		}
		last = err
		if failed == nil {
			failed = map[string]bool{}
		}
		failed[key] = true
		if fresh, err := p.Quotas.GetQuota(ctx, q.Namespace, q.Name); err == nil {
			p.remember(key, fresh)
		}
	}
	return failed, last
}

// remember keeps q as the newest version of key. p.mu is held.
func (p *ResourceQuota) remember(key string, q *corev1.ResourceQuota) {
	if p.newer == nil {
		p.newer = map[string]*corev1.ResourceQuota{}
	}
	p.newer[key] = q
}

// objectName is the name a Forbidden about a's object is given, as
// upstream's admission names it: the object's, its generateName, or
// "Unknown".
func objectName(a apiserver.AdmissionAttributes) string {
	if m, err := meta.Accessor(a.Object); err == nil {
		for _, n := range []string{m.GetName(), m.GetGenerateName()} {
			if n != "" {
				return n
			}
		}
	}
	return "Unknown"
}

// QuotaRefusal is why Charge refuses a write, worded as upstream's
// ResourceQuota plugin words it.
type QuotaRefusal struct{ Reason string }

// Error returns the reason, as the message of the 403 after the name.
func (r *QuotaRefusal) Error() string { return r.Reason }

// refuse returns a QuotaRefusal of the formatted reason.
func refuse(format string, args ...any) error {
	return &QuotaRefusal{Reason: fmt.Sprintf(format, args...)}
}

// Charge decides a write of obj (replacing old, nil for a create), of
// resource gr, under quotas, the quotas of its namespace, at now, as
// upstream's ResourceQuota plugin: the quotas that count obj (their
// status.hard names a resource it is counted in, and their scopes select
// it) must have counted those resources (status.used has them), must
// find a pod stating the cpu and memory they limit, and must have room
// for what the write adds (its use, less old's on an update). It returns
// copies of the quotas whose status.used grows, with their new used, or
// a *QuotaRefusal, or another error for an object it cannot measure. It
// does not modify or keep quotas or the objects.
func Charge(gr schema.GroupResource, obj, old runtime.Object, quotas []*corev1.ResourceQuota, now time.Time) ([]*corev1.ResourceQuota, error) {
	counting, err := countingQuotas(gr, obj, quotas)
	if err != nil || len(counting) == 0 {
		return nil, err
	}
	delta, err := quota.Usage(gr, obj, now)
	if err != nil {
		return nil, err
	}
	if neg := quota.Negative(delta); len(neg) > 0 {
		return nil, refuse("quota usage is negative for resource(s): %s", quota.FormatNames(neg))
	}
	if old != nil {
		if prev, err := quota.Usage(gr, old, now); err == nil {
			delta = quota.SubtractNonNegative(delta, prev)
		}
	}
	delta = quota.RemoveZeros(delta)
	if len(delta) == 0 {
		return nil, nil
	}
	var out []*corev1.ResourceQuota
	for _, q := range counting {
		requested := quota.Mask(delta, quota.Names(q.Status.Hard))
		used := quota.Add(q.Status.Used, requested)
		if exceeded := quota.Exceeded(quota.Mask(used, quota.Names(requested)), q.Status.Hard); len(exceeded) > 0 {
			return nil, refuse("exceeded quota: %s, requested: %s, used: %s, limited: %s", q.Name,
				quota.Format(quota.Mask(requested, exceeded)), quota.Format(quota.Mask(q.Status.Used, exceeded)),
				quota.Format(quota.Mask(q.Status.Hard, exceeded)))
		}
		if !quota.Equal(used, q.Status.Used) {
			q = q.DeepCopy()
			q.Status.Used = used
			out = append(out, q)
		}
	}
	return out, nil
}

// countingQuotas returns the quotas of quotas that count obj, of gr, or
// the refusal of the first that cannot: it has not counted what it
// limits yet, or obj is a pod that does not state what it limits.
func countingQuotas(gr schema.GroupResource, obj runtime.Object, quotas []*corev1.ResourceQuota) ([]*corev1.ResourceQuota, error) {
	var out []*corev1.ResourceQuota
	for _, q := range quotas {
		names := quota.Matching(gr, quota.Names(q.Status.Hard))
		if len(names) == 0 {
			continue
		}
		in, err := quota.InScopes(gr, obj, quota.Scopes(q))
		if err != nil {
			return nil, err
		}
		if !in {
			continue
		}
		if pod, ok := obj.(*corev1.Pod); ok {
			if err := quota.PodConstraints(pod, names); err != nil {
				return nil, refuse("failed quota: %s: %v", q.Name, err)
			}
		}
		for _, n := range names {
			if _, ok := q.Status.Used[n]; !ok {
				return nil, refuse("status unknown for quota: %s, resources: %s", q.Name, quota.FormatNames(names))
			}
		}
		out = append(out, q)
	}
	return out, nil
}
