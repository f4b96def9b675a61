package namespace

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/client-go/discovery"
)

// finalizerEstimateSeconds is how long content held by finalizers is
// given before the namespace is looked at again, as upstream assumes.
const finalizerEstimateSeconds = 15

// Content is what deleting one resource's objects in a namespace left.
type Content struct {
	Resource schema.GroupVersionResource
	// Remaining counts the objects still there.
	Remaining int
	// Finalizers counts, for each finalizer, the remaining objects that
	// hold it.
	Finalizers map[string]int
	// Estimate is how many more seconds the remaining objects are
	// expected to take (graceful termination, finalizers); 0 when none
	// are expected to remain.
	Estimate int64
	// Err is why deleting or listing them failed, or that objects remain
	// that nothing explains.
	Err error
}

// Settle returns the Content of resource gvr in namespace ns once its
// objects were deleted: finalizers holds the finalizers of each object a
// list still returned, and estimate the graceful termination still
// expected (PodEstimate for pods). As upstream, remaining objects are
// expected while the estimate runs or while finalizers hold them (then
// for finalizerEstimateSeconds); others are an error. No I/O.
func Settle(gvr schema.GroupVersionResource, ns string, estimate int64, finalizers [][]string) Content {
	c := Content{Resource: gvr, Remaining: len(finalizers), Estimate: estimate}
	if len(finalizers) == 0 {
		c.Estimate = 0
		return c
	}
	for _, fs := range finalizers {
		for _, f := range fs {
			if c.Finalizers == nil {
				c.Finalizers = map[string]int{}
			}
			c.Finalizers[f]++
		}
	}
	switch {
	case estimate > 0:
	case len(c.Finalizers) > 0:
		c.Estimate = finalizerEstimateSeconds
	default:
		c.Err = fmt.Errorf("unexpected items still remain in namespace: %s for gvr: %v", ns, gvr)
	}
	return c
}

// PodEstimate returns how many seconds the pods of a namespace deleted at
// deletedAt may still take to terminate: the longest grace period of a
// pod not yet finished, or 0 once that long has passed since deletedAt.
// No I/O.
func PodEstimate(pods []corev1.Pod, deletedAt, now time.Time) int64 {
	var estimate int64
	for i := range pods {
		p := &pods[i]
		if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		if g := p.Spec.TerminationGracePeriodSeconds; g != nil && *g > estimate {
			estimate = *g
		}
	}
	if now.Sub(deletedAt) >= time.Duration(estimate)*time.Second {
		return 0
	}
	return estimate
}

// Result is what one pass over a namespace's content came to.
type Result struct {
	// Failing are the conditions that report trouble (status True); the
	// other condition types are to read as fine.
	Failing []corev1.NamespaceCondition
	// Estimate is the longest Content estimate: look again in about
	// half of it.
	Estimate int64
	// Err joins every error of the pass; nil when all went well.
	Err error
}

// Evaluate sums up a pass: discoveryErr and parseErr are what discovery
// and the parsing of its group versions returned (the pass goes on with
// what they gave), contents what each resource left. The conditions and
// their texts are upstream's. No I/O.
func Evaluate(discoveryErr, parseErr error, contents []Content) Result {
	var r Result
	var errs []error
	add := func(c corev1.NamespaceCondition) {
		c.Status = corev1.ConditionTrue
		r.Failing = append(r.Failing, c)
	}
	if discoveryErr != nil {
		errs = append(errs, discoveryErr)
		msg := discoveryErr.Error()
		var gerr *discovery.ErrGroupDiscoveryFailed
		if errors.As(discoveryErr, &gerr) {
			msg = fmt.Sprintf("Discovery failed for some groups, %d failing: %v", len(gerr.Groups), discoveryErr)
		}
		add(corev1.NamespaceCondition{Type: corev1.NamespaceDeletionDiscoveryFailure, Reason: "DiscoveryFailed", Message: msg})
	}
	if parseErr != nil {
		errs = append(errs, parseErr)
		add(corev1.NamespaceCondition{Type: corev1.NamespaceDeletionGVParsingFailure, Reason: "GroupVersionParsingFailed", Message: parseErr.Error()})
	}
	var contentErrs, remaining []string
	byFinalizer := map[string]int{}
	for _, c := range contents {
		if c.Err != nil {
			errs = append(errs, c.Err)
			contentErrs = append(contentErrs, c.Err.Error())
		}
		r.Estimate = max(r.Estimate, c.Estimate)
		if c.Remaining > 0 {
			remaining = append(remaining, fmt.Sprintf("%s.%s has %d resource instances", c.Resource.Resource, c.Resource.Group, c.Remaining))
			for f, n := range c.Finalizers {
				byFinalizer[f] += n
			}
		}
	}
	if len(contentErrs) > 0 {
		sort.Strings(contentErrs)
		add(corev1.NamespaceCondition{Type: corev1.NamespaceDeletionContentFailure, Reason: "ContentDeletionFailed",
			Message: fmt.Sprintf("Failed to delete all resource types, %d remaining: %v", len(contentErrs), strings.Join(contentErrs, ", "))})
	}
	if len(remaining) > 0 {
		sort.Strings(remaining)
		add(corev1.NamespaceCondition{Type: corev1.NamespaceContentRemaining, Reason: "SomeResourcesRemain",
			Message: fmt.Sprintf("Some resources are remaining: %s", strings.Join(remaining, ", "))})
	}
	if len(byFinalizer) > 0 {
		var held []string
		for f, n := range byFinalizer {
			held = append(held, fmt.Sprintf("%s in %d resource instances", f, n))
		}
		sort.Strings(held)
		add(corev1.NamespaceCondition{Type: corev1.NamespaceFinalizersRemaining, Reason: "SomeFinalizersRemain",
			Message: fmt.Sprintf("Some content in the namespace has finalizers remaining: %s", strings.Join(held, ", "))})
	}
	r.Err = utilerrors.NewAggregate(errs)
	return r
}

// conditionTypes are the conditions the controller keeps, in order.
var conditionTypes = []corev1.NamespaceConditionType{
	corev1.NamespaceDeletionDiscoveryFailure,
	corev1.NamespaceDeletionGVParsingFailure,
	corev1.NamespaceDeletionContentFailure,
	corev1.NamespaceContentRemaining,
	corev1.NamespaceFinalizersRemaining,
}

// okConditions are the conditions of each type when nothing is wrong.
var okConditions = map[corev1.NamespaceConditionType]corev1.NamespaceCondition{
	corev1.NamespaceDeletionDiscoveryFailure: {Reason: "ResourcesDiscovered", Message: "All resources successfully discovered"},
	corev1.NamespaceDeletionGVParsingFailure: {Reason: "ParsedGroupVersions", Message: "All legacy kube types successfully parsed"},
	corev1.NamespaceDeletionContentFailure:   {Reason: "ContentDeleted", Message: "All content successfully deleted, may be waiting on finalization"},
	corev1.NamespaceContentRemaining:         {Reason: "ContentRemoved", Message: "All content successfully removed"},
	corev1.NamespaceFinalizersRemaining:      {Reason: "ContentRemoved", Message: "All content successfully removed"},
}

// UpdateConditions sets each of the controller's condition types in
// status: the one of failing, or the fine one. lastTransitionTime moves to
// now only when a condition's status changes. It reports whether status
// changed. No I/O.
func UpdateConditions(status *corev1.NamespaceStatus, failing []corev1.NamespaceCondition, now metav1.Time) bool {
	changed := false
	for _, t := range conditionTypes {
		want := okConditions[t]
		want.Type, want.Status = t, corev1.ConditionFalse
		if i := slices.IndexFunc(failing, func(c corev1.NamespaceCondition) bool { return c.Type == t }); i >= 0 {
			want = failing[i]
		}
		i := slices.IndexFunc(status.Conditions, func(c corev1.NamespaceCondition) bool { return c.Type == t })
		if i < 0 {
			want.LastTransitionTime = now
			status.Conditions = append(status.Conditions, want)
			changed = true
			continue
		}
		cur := &status.Conditions[i]
		if cur.Status == want.Status && cur.Reason == want.Reason && cur.Message == want.Message {
			continue
		}
		if cur.Status != want.Status {
			cur.LastTransitionTime = now
		}
		cur.Status, cur.Reason, cur.Message = want.Status, want.Reason, want.Message
		changed = true
	}
	return changed
}

// withoutFinalizer returns the spec finalizers less f, sorted as upstream
// leaves them, and whether f was there.
func withoutFinalizer(fs []corev1.FinalizerName, f corev1.FinalizerName) ([]corev1.FinalizerName, bool) {
	out := []corev1.FinalizerName{}
	found := false
	for _, x := range fs {
		if x == f {
			found = true
			continue
		}
		if !slices.Contains(out, x) {
			out = append(out, x)
		}
	}
	slices.Sort(out)
	return out, found
}
