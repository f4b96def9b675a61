package hubd

import (
	"errors"
	"sync/atomic"

	schedulingv1 "k8s.io/api/scheduling/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	schedulinglisters "k8s.io/client-go/listers/scheduling/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/outpost-mesh/outpost/hub/admission"
)

// policyHooks are the parts of the hub's policy that exist before the
// API server they act in but can act only once it serves: the escalation
// check and the review resources need the authorizer, the admission
// plugins the informer caches of what they read. startRBAC readies them
// all before the hub serves anyone but system:masters.
type policyHooks struct {
	escalation *admission.RBACEscalation
	reviews    *lateAuth
	caches     *admissionCaches
}

// newPolicyHooks returns hooks not ready yet, whose reviews answer
// tokens with reviewTokens.
func newPolicyHooks(reviews *lateAuth) *policyHooks {
	return &policyHooks{escalation: &admission.RBACEscalation{}, reviews: reviews, caches: &admissionCaches{}}
}

// chains returns the admission chains of the hub: the mutating one, run
// before a write is prepared and validated, and the validating one, run
// after, each in upstream's order of its plugins. Without hooks (tests of
// the machinery alone) only NodeRestriction applies.
func (h *policyHooks) chains() (admission.MutatingChain, admission.Chain) {
	if h == nil {
		return nil, admission.Chain{admission.NodeRestriction{}}
	}
	priority := &admission.Priority{Classes: h.caches.priorityClassList}
	mutating := admission.MutatingChain{priority, admission.CSRRequestor{}}
	validating := admission.Chain{
		admission.NodeRestriction{},
		priority,
		admission.NewCSRSigners(h.reviews),
		h.escalation,
	}
	return mutating, validating
}

// errAdmissionStarting is returned by the admission caches before they
// have synced: a write then fails (500) rather than skip a check.
var errAdmissionStarting = errors.New("the admission caches have not synced yet")

// admissionCaches are the informer caches the admission plugins read.
// register sets them up before the informers start; ready is set once
// they have synced, and reads fail until then.
type admissionCaches struct {
	ready           atomic.Bool
	priorityClasses schedulinglisters.PriorityClassLister
}

// register adds the caches' informers to f and returns what tells they
// have synced; the caller starts f and sets ready once they have.
func (c *admissionCaches) register(f informers.SharedInformerFactory) []cache.InformerSynced {
	pcs := f.Scheduling().V1().PriorityClasses()
	c.priorityClasses = pcs.Lister()
	return []cache.InformerSynced{pcs.Informer().HasSynced}
}

func (c *admissionCaches) priorityClassList() ([]*schedulingv1.PriorityClass, error) {
	if !c.ready.Load() {
		return nil, errAdmissionStarting
	}
	return c.priorityClasses.List(labels.Everything())
}
