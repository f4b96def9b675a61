package apiserver

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/outpost-mesh/outpost/hub/store"
)

// The eviction subresource (POST pods/NAME/eviction) deletes a pod unless
// that would take more of its application down than the
// PodDisruptionBudget covering it allows, as upstream's EvictionREST: it
// spends one of the budget's disruptionsAllowed, recording the pod in
// status.disruptedPods for the disruption controller, then deletes the
// pod gracefully. Budgets are read from the store when policy/v1
// poddisruptionbudgets is served; without it every eviction is a delete.

// maxDisruptedPods is how many evictions a budget may hold in
// status.disruptedPods before further ones are refused, as upstream's
// MaxDisruptedPodSize: that many evictions not yet seen by the
// disruption controller means it is not keeping up.
const maxDisruptedPods = 2000

// evictionAttempts bounds the retries of an eviction whose pod or budget
// changed under it, as upstream's EvictionsRetry (20 steps).
const evictionAttempts = 20

var pdbGVR = policyv1.SchemeGroupVersion.WithResource("poddisruptionbudgets")

// violatesBudgetMsg is upstream's message for an eviction a budget does
// not allow.
const violatesBudgetMsg = "Cannot evict pod as it would violate the pod's disruption budget."

// evictionPlan is what an eviction does, as decideEviction decides.
type evictionPlan struct {
	// Err, when set, refuses the eviction with this API error.
	Err error
	// Budget, when set, is the budget covering the pod with one
	// disruption spent and the pod recorded in status.disruptedPods: its
	// status is to be written, guarded by its resourceVersion, before the
	// pod is deleted.
	Budget *policyv1.PodDisruptionBudget
	// BudgetName names the budget that covers the pod, "" if none.
	BudgetName string
	// Pin deletes the pod only at the resourceVersion read (unless the
	// client gave a precondition of its own), so that a pod that became
	// Running or Ready since is not deleted on a decision made without
	// its budget.
	Pin bool
}

// decideEviction decides the eviction of pod at now, given the budgets
// of its namespace, as upstream's EvictionREST.Create: a pod that is not
// running (Succeeded, Failed, Pending, or already being deleted) goes
// without consulting budgets; a pod that no budget selects goes; a pod
// that several select is refused (500); an unready pod goes without
// spending the budget if its unhealthyPodEvictionPolicy is AlwaysAllow,
// or if the budget is otherwise met (IfHealthyBudget, the default);
// otherwise one disruption is spent, or the eviction is refused with 429
// when none is allowed or the budget's status is behind its spec. With
// dry, the budget is checked but nothing is to be written. No I/O; the
// budgets are not modified.
func decideEviction(pod *corev1.Pod, budgets []*policyv1.PodDisruptionBudget, now time.Time, dry bool) evictionPlan {
	if ignoresBudgets(pod) {
		// Only a Pending pod can still become one a budget counts.
		return evictionPlan{Pin: pod.Status.Phase == corev1.PodPending && pod.DeletionTimestamp == nil}
	}
	var covering []*policyv1.PodDisruptionBudget
	for _, b := range budgets {
		if selects(b, pod) {
			covering = append(covering, b)
		}
	}
	switch len(covering) {
	case 0:
		return evictionPlan{}
	case 1:
	default:
		return evictionPlan{Err: &apierrors.StatusError{ErrStatus: metav1.Status{
			Status:  metav1.StatusFailure,
			Code:    http.StatusInternalServerError,
			Message: "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support.",
		}}}
	}
	b := covering[0]
	plan := evictionPlan{BudgetName: b.Name}
	if !podReady(pod) {
		// An unready pod is not counted healthy: deleting it disrupts
		// nothing the budget protects when the policy says so or the
		// budget is met without it.
		if p := b.Spec.UnhealthyPodEvictionPolicy; p != nil && *p == policyv1.AlwaysAllow ||
			b.Status.CurrentHealthy >= b.Status.DesiredHealthy && b.Status.DesiredHealthy > 0 {
			plan.Pin = true
			return plan
		}
	}
	st := b.Status
	switch {
	case st.ObservedGeneration < b.Generation:
		plan.Err = budgetPending(b.Name)
	case st.DisruptionsAllowed < 0:
		plan.Err = apierrors.NewForbidden(policyv1.Resource("poddisruptionbudget"), b.Name, errors.New("pdb disruptions allowed is negative"))
	case len(st.DisruptedPods) > maxDisruptedPods:
		plan.Err = apierrors.NewForbidden(policyv1.Resource("poddisruptionbudget"), b.Name, errors.New("DisruptedPods map too big - too many evictions not confirmed by PDB controller"))
	case st.DisruptionsAllowed == 0:
		err := apierrors.NewTooManyRequests(violatesBudgetMsg, 0)
		err.ErrStatus.Details.Causes = append(err.ErrStatus.Details.Causes, metav1.StatusCause{Type: policyv1.DisruptionBudgetCause,
			Message: fmt.Sprintf("The disruption budget %s needs %d healthy pods and has %d currently", b.Name, st.DesiredHealthy, st.CurrentHealthy)})
		plan.Err = err
	}
	if plan.Err != nil || dry {
		return plan
	}
	spent := b.DeepCopy()
	spent.Status.DisruptionsAllowed--
	if spent.Status.DisruptionsAllowed == 0 {
		setBudgetCondition(&spent.Status, now)
	}
	if spent.Status.DisruptedPods == nil {
		spent.Status.DisruptedPods = map[string]metav1.Time{}
	}
	spent.Status.DisruptedPods[pod.Name] = metav1.NewTime(now)
	plan.Budget = spent
	return plan
}

// ignoresBudgets reports whether pod's eviction is a plain delete: a pod
// that has finished, has not started, or is already going has nothing
// left for a budget to protect.
func ignoresBudgets(pod *corev1.Pod) bool {
	switch pod.Status.Phase {
	case corev1.PodSucceeded, corev1.PodFailed, corev1.PodPending:
		return true
	}
	return pod.DeletionTimestamp != nil
}

// selects reports whether budget b covers pod: same namespace, and a
// selector that parses and matches (a missing selector matches nothing,
// an empty one everything, as in policy/v1).
func selects(b *policyv1.PodDisruptionBudget, pod *corev1.Pod) bool {
	if b.Namespace != pod.Namespace {
		return false
	}
	sel, err := metav1.LabelSelectorAsSelector(b.Spec.Selector)
	return err == nil && sel.Matches(labels.Set(pod.Labels))
}

func podReady(pod *corev1.Pod) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// budgetPending is the 429 for a budget whose status does not yet
// reflect its spec, or whose pod changed while it was being evicted.
func budgetPending(name string) error {
	err := apierrors.NewTooManyRequests(violatesBudgetMsg, 10)
	err.ErrStatus.Details.Causes = append(err.ErrStatus.Details.Causes, metav1.StatusCause{Type: policyv1.DisruptionBudgetCause,
		Message: fmt.Sprintf("The disruption budget %s is still being processed by the server.", name)})
	return err
}

// setBudgetCondition sets st's DisruptionAllowed condition to what its
// DisruptionsAllowed says, as upstream's UpdateDisruptionAllowedCondition,
// with the transition time now when its status changes.
func setBudgetCondition(st *policyv1.PodDisruptionBudgetStatus, now time.Time) {
	c := metav1.Condition{Type: policyv1.DisruptionAllowedCondition, Status: metav1.ConditionFalse,
		Reason: policyv1.InsufficientPodsReason, ObservedGeneration: st.ObservedGeneration, LastTransitionTime: metav1.NewTime(now)}
	if st.DisruptionsAllowed > 0 {
		c.Status, c.Reason = metav1.ConditionTrue, policyv1.SufficientPodsReason
	}
	i := slices.IndexFunc(st.Conditions, func(x metav1.Condition) bool { return x.Type == c.Type })
	if i < 0 {
		st.Conditions = append(st.Conditions, c)
		return
	}
	if st.Conditions[i].Status == c.Status {
		c.LastTransitionTime = st.Conditions[i].LastTransitionTime
	}
	st.Conditions[i] = c
}

// evictionOptions returns the DeleteOptions of an eviction: those it
// carries with the request's dryRun (dry) merged in, as upstream's
// propagateDryRun, checked as a delete's are.
func evictionOptions(given *metav1.DeleteOptions, dry bool) (*metav1.DeleteOptions, error) {
	opts := &metav1.DeleteOptions{}
	if given != nil {
		opts = given.DeepCopy()
	}
	for _, v := range opts.DryRun {
		if v != metav1.DryRunAll {
			return nil, apierrors.NewBadRequest(fmt.Sprintf("dryRun %q: only All is supported", opts.DryRun))
		}
	}
	if dry && len(opts.DryRun) == 0 {
		opts.DryRun = []string{metav1.DryRunAll}
	}
	if opts.GracePeriodSeconds != nil && *opts.GracePeriodSeconds < 0 {
		opts.GracePeriodSeconds = new(int64(0))
	}
	if errs := validateDeleteOptions(opts); len(errs) > 0 {
		return nil, apierrors.NewInvalid(schema.GroupKind{Group: metav1.GroupName, Kind: "DeleteOptions"}, "", errs)
	}
	return opts, nil
}

// eviction serves POST pods/NAME/eviction.
func (q *request) eviction() error {
	body, err := readBody(q.r)
	if err != nil {
		return err
	}
	ev := &policyv1.Eviction{}
	if len(body) > 0 {
		if _, _, err := q.s.codecs.UniversalDeserializer().Decode(body, &schema.GroupVersionKind{Group: "policy", Version: "v1", Kind: "Eviction"}, ev); err != nil {
			return apierrors.NewBadRequest(fmt.Sprintf("the body of the request could not be decoded as an Eviction: %v", err))
		}
	}
	if ev.Name != "" && ev.Name != q.ri.name {
		return apierrors.NewBadRequest("name in URL does not match name in Eviction object")
	}
	dry, err := dryRun(q.r)
	if err != nil {
		return err
	}
	opts, err := evictionOptions(ev.DeleteOptions, dry)
	if err != nil {
		return err
	}
	err = q.s.evict(q.ctx(), q.res, q.ri.namespace, q.ri.name, opts)
	var se *apierrors.StatusError
	if errors.As(err, &se) && se.ErrStatus.Details != nil && se.ErrStatus.Details.RetryAfterSeconds > 0 {
		q.w.Header().Set("Retry-After", strconv.Itoa(int(se.ErrStatus.Details.RetryAfterSeconds)))
	}
	if err != nil {
		return err
	}
	return q.respond(http.StatusCreated, &metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}, Status: metav1.StatusSuccess, Code: http.StatusCreated})
}

// evict evicts pod ns/name of res with opts (dry-run when opts.DryRun is
// set): it reads the pod and the budgets of ns, decides, spends the
// budget, and deletes, starting again from the reads when the pod or the
// budget changed in between.
func (s *Server) evict(ctx context.Context, res *resourceInfo, ns, name string, opts *metav1.DeleteOptions) error {
	dry := len(opts.DryRun) > 0
	budgetsRes := s.res().byGVR[pdbGVR]
	clientPinned := opts.Preconditions != nil && opts.Preconditions.ResourceVersion != nil
	for range evictionAttempts {
		obj, err := s.getStored(ctx, res.gvr, ns, name)
		if err != nil {
			return err
		}
		pod, ok := obj.(*corev1.Pod)
		if !ok {
			return apierrors.NewInternalError(fmt.Errorf("evict: stored pod is a %T", obj))
		}
		var budgets []*policyv1.PodDisruptionBudget
		if budgetsRes != nil && !ignoresBudgets(pod) {
			if budgets, err = s.listBudgets(ctx, budgetsRes, ns); err != nil {
				return err
			}
		}
		plan := decideEviction(pod, budgets, s.now(), dry)
		if plan.Err != nil {
			return plan.Err
		}
		if plan.Budget != nil {
			err := s.writeBudgetStatus(ctx, budgetsRes, plan.Budget)
			if errors.Is(err, store.ErrConflict) || errors.Is(err, store.ErrNotFound) {
				continue // the budget changed: decide again
			}
			if err != nil {
				return storeError(err, budgetsRes.gr, plan.Budget.Name)
			}
		}
		del := opts
		pinned := plan.Pin && !clientPinned
		if pinned {
			del = opts.DeepCopy()
			if del.Preconditions == nil {
				del.Preconditions = &metav1.Preconditions{}
			}
			rv := pod.ResourceVersion
			del.Preconditions.ResourceVersion = &rv
		}
		err = s.markAndDelete(ctx, res, ns, name, del, dry)
		switch {
		case err == nil:
			return nil
		case apierrors.IsConflict(err) && pinned && plan.BudgetName != "":
			return budgetPending(plan.BudgetName)
		case apierrors.IsConflict(err) && pinned:
			continue // the pod changed: decide again
		}
		return err
	}
	return apierrors.NewTimeoutError("couldn't evict the pod: its PodDisruptionBudget or the pod kept changing", 10)
}

// listBudgets returns the budgets stored in ns.
func (s *Server) listBudgets(ctx context.Context, res *resourceInfo, ns string) ([]*policyv1.PodDisruptionBudget, error) {
	sc, err := s.openList(ctx, res, ns, listOptions{label: labels.Everything(), field: fields.Everything()})
	if err != nil {
		return nil, err
	}
	var out []*policyv1.PodDisruptionBudget
	err = sc.each(ctx, func(it *listItem) error {
		obj, err := it.object(res)
		if err != nil {
			return apierrors.NewInternalError(err)
		}
		b, ok := obj.(*policyv1.PodDisruptionBudget)
		if !ok {
			return apierrors.NewInternalError(fmt.Errorf("stored budget is a %T", obj))
		}
		out = append(out, b.DeepCopy())
		return nil
	})
	return out, err
}

// writeBudgetStatus stores b, a budget as read with only its status
// changed, if the stored one is still at b's resourceVersion: a store
// error otherwise (store.ErrConflict when it changed).
func (s *Server) writeBudgetStatus(ctx context.Context, res *resourceInfo, b *policyv1.PodDisruptionBudget) error {
	rev, err := strconv.ParseInt(b.ResourceVersion, 10, 64)
	if err != nil {
		return fmt.Errorf("budget %s/%s: resourceVersion %q: %w", b.Namespace, b.Name, b.ResourceVersion, err)
	}
	if sv, ok := res.Rules.(StatusValidator); ok {
		if errs := sv.ValidateStatusUpdate(b, b); len(errs) > 0 {
			return invalid(res, b.Name, errs)
		}
	}
	data, err := res.encode(b)
	if err != nil {
		return err
	}
	_, err = s.store.Update(ctx, res.key(b.Namespace, b.Name), data, rev)
	return err
}

// markAndDelete sets the DisruptionTarget condition of pod ns/name, as
// upstream does before an eviction's delete, then deletes it with opts.
// A dry run only checks the delete.
func (s *Server) markAndDelete(ctx context.Context, res *resourceInfo, ns, name string, opts *metav1.DeleteOptions, dry bool) error {
	if !dry {
		rv, err := s.markDisruptionTarget(ctx, res, ns, name, opts.Preconditions)
		if err != nil {
			return err
		}
		if opts.Preconditions != nil && opts.Preconditions.ResourceVersion != nil {
			// The mark is this eviction's own change.
			opts = opts.DeepCopy()
			opts.Preconditions.ResourceVersion = &rv
		}
	}
	_, _, err := s.deleteObject(ctx, res, ns, name, opts, dry)
	return err
}

// markDisruptionTarget sets the pod's DisruptionTarget condition True for
// EvictionByEvictionAPI, if the pod meets pre, and returns its
// resourceVersion after.
func (s *Server) markDisruptionTarget(ctx context.Context, res *resourceInfo, ns, name string, pre *metav1.Preconditions) (string, error) {
	key := res.key(ns, name)
	for range 50 {
		kv, err := s.store.Get(ctx, key, 0)
		if err != nil {
			return "", storeError(err, res.gr, name)
		}
		obj, err := res.decode(kv)
		if err != nil {
			return "", apierrors.NewInternalError(err)
		}
		pod, ok := obj.(*corev1.Pod)
		if !ok {
			return "", apierrors.NewInternalError(fmt.Errorf("evict: stored pod is a %T", obj))
		}
		if pre != nil {
			if pre.UID != nil && *pre.UID != "" && *pre.UID != pod.UID {
				return "", apierrors.NewConflict(res.gr, name, fmt.Errorf("the UID in the precondition (%s) does not match the UID in record (%s). The object might have been deleted and then recreated", *pre.UID, pod.UID))
			}
			if pre.ResourceVersion != nil && *pre.ResourceVersion != "" && *pre.ResourceVersion != pod.ResourceVersion {
				return "", apierrors.NewConflict(res.gr, name, fmt.Errorf("the ResourceVersion in the precondition (%s) does not match the ResourceVersion in record (%s). The object might have been modified", *pre.ResourceVersion, pod.ResourceVersion))
			}
		}
		if !setDisruptionTarget(&pod.Status, s.now()) {
			return pod.ResourceVersion, nil
		}
		data, err := res.encode(pod)
		if err != nil {
			return "", apierrors.NewInternalError(err)
		}
		nkv, err := s.store.Update(ctx, key, data, kv.ModRevision)
		if errors.Is(err, store.ErrConflict) {
			continue
		}
		if err != nil {
			return "", storeError(err, res.gr, name)
		}
		return strconv.FormatInt(nkv.ModRevision, 10), nil
	}
	return "", apierrors.NewConflict(res.gr, name, errors.New("too many concurrent changes; try again"))
}

// setDisruptionTarget sets st's DisruptionTarget condition to the
// eviction's, as upstream's UpdatePodCondition: the transition time moves
// only with the status. It reports whether st changed.
func setDisruptionTarget(st *corev1.PodStatus, now time.Time) bool {
	c := corev1.PodCondition{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue,
		Reason: "EvictionByEvictionAPI", Message: "Eviction API: evicting", LastTransitionTime: metav1.NewTime(now.Truncate(time.Second))}
	i := slices.IndexFunc(st.Conditions, func(x corev1.PodCondition) bool { return x.Type == c.Type })
	if i < 0 {
		st.Conditions = append(st.Conditions, c)
		return true
	}
	old := st.Conditions[i]
	if old.Status == c.Status {
		c.LastTransitionTime = old.LastTransitionTime
	}
	c.LastProbeTime = old.LastProbeTime
	if old.Status == c.Status && old.Reason == c.Reason && old.Message == c.Message {
		return false
	}
	st.Conditions[i] = c
	return true
}
