package hubd

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/managedfields"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	admissionlisters "k8s.io/client-go/listers/admissionregistration/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	schedulinglisters "k8s.io/client-go/listers/scheduling/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/outpost-mesh/outpost/hub/admission"
	"github.com/outpost-mesh/outpost/hub/admission/policy"
	"github.com/outpost-mesh/outpost/hub/admission/webhook"
	"github.com/outpost-mesh/outpost/hub/apiserver"
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
	// webhooks calls the admission webhooks; policies evaluates the
	// ValidatingAdmissionPolicies and mutations applies the
	// MutatingAdmissionPolicies, both reading params through objects.
	webhooks  *webhook.Dispatcher
	policies  *policy.Evaluator
	mutations *policy.Mutator
	objects   *lateObjects
	// quota charges creates to the namespace's ResourceQuotas.
	quota *admission.ResourceQuota
}

// newPolicyHooks returns hooks not ready yet: reviews answers with the
// authorizer once set, dial reaches the pods behind a Service for its
// webhooks.
func newPolicyHooks(reviews *lateAuth, dial serviceDialer, log *slog.Logger) *policyHooks {
	h := &policyHooks{escalation: &admission.RBACEscalation{}, reviews: reviews, caches: &admissionCaches{}, objects: &lateObjects{}}
	h.quota = &admission.ResourceQuota{Quotas: h.caches}
	h.webhooks = webhook.New(webhook.Config{
		Mutating:    h.caches.mutatingWebhooks,
		Validating:  h.caches.validatingWebhooks,
		Namespace:   h.caches.namespace,
		DialService: dial.DialService,
		Logger:      log.With("component", "webhooks"),
	})
	h.policies = policy.New(policy.Config{
		Policies:   h.caches.admissionPolicies,
		Bindings:   h.caches.admissionPolicyBindings,
		Namespace:  h.caches.namespace,
		Params:     h.objects,
		Authorizer: reviews,
		Logger:     log.With("component", "admission-policies"),
	})
	h.mutations = policy.NewMutator(policy.MutatingConfig{
		Policies:   h.caches.mutatingPolicies,
		Bindings:   h.caches.mutatingPolicyBindings,
		Namespace:  h.caches.namespace,
		Params:     h.objects,
		Authorizer: reviews,
		// The API server's schemas: CRDs' for custom resources.
		TypeConverter: h.objects.typeConverter,
	})
	return h
}

// chains returns the admission chains of the hub: the mutating one, run
// before a write is prepared and validated, and the validating one, run
// after, each in upstream's order of its plugins (mutating admission
// policies run after the built-in mutating plugins and before the
// webhooks). Without hooks (tests of
// the machinery alone) only NodeRestriction applies.
func (h *policyHooks) chains() (admission.MutatingChain, admission.Chain) {
	if h == nil {
		return nil, admission.Chain{admission.NodeRestriction{}}
	}
	priority := &admission.Priority{Classes: h.caches.priorityClassList}
	mutating := admission.MutatingChain{priority, admission.CSRRequestor{}, h.mutations, h.webhooks}
	validating := admission.Chain{
		admission.NodeRestriction{},
		priority,
		admission.NewCSRSigners(h.reviews),
		h.escalation,
		h.policies,
		h.webhooks,
		h.quota, // last, as upstream: it charges only what all else admits
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
	namespaces      corelisters.NamespaceLister
	mutating        admissionlisters.MutatingWebhookConfigurationLister
	validating      admissionlisters.ValidatingWebhookConfigurationLister
	policies        admissionlisters.ValidatingAdmissionPolicyLister
	bindings        admissionlisters.ValidatingAdmissionPolicyBindingLister
	mutatingPols    admissionlisters.MutatingAdmissionPolicyLister
	mutatingBinds   admissionlisters.MutatingAdmissionPolicyBindingLister
	// quotas and quotaClient read and charge ResourceQuotas.
	quotas      corelisters.ResourceQuotaLister
	quotaClient kubernetes.Interface
}

// register adds the caches' informers to f and returns what tells they
// have synced; the caller starts f and sets ready once they have. client
// writes what the plugins write (the quotas' charges), as the hub.
func (c *admissionCaches) register(f informers.SharedInformerFactory, client kubernetes.Interface) []cache.InformerSynced {
	pcs := f.Scheduling().V1().PriorityClasses()
	nss := f.Core().V1().Namespaces()
	ar := f.Admissionregistration().V1()
	mwc, vwc := ar.MutatingWebhookConfigurations(), ar.ValidatingWebhookConfigurations()
	vap, vapb := ar.ValidatingAdmissionPolicies(), ar.ValidatingAdmissionPolicyBindings()
	c.priorityClasses, c.namespaces = pcs.Lister(), nss.Lister()
	c.mutating, c.validating = mwc.Lister(), vwc.Lister()
	c.policies, c.bindings = vap.Lister(), vapb.Lister()
	mp, mpb := ar.MutatingAdmissionPolicies(), ar.MutatingAdmissionPolicyBindings()
	c.mutatingPols, c.mutatingBinds = mp.Lister(), mpb.Lister()
	rqs := f.Core().V1().ResourceQuotas()
	c.quotas, c.quotaClient = rqs.Lister(), client
	return []cache.InformerSynced{
		pcs.Informer().HasSynced, nss.Informer().HasSynced,
		mwc.Informer().HasSynced, vwc.Informer().HasSynced,
		vap.Informer().HasSynced, vapb.Informer().HasSynced,
		mp.Informer().HasSynced, mpb.Informer().HasSynced,
		rqs.Informer().HasSynced,
	}
}

// The webhooks' and policies' configurations: none until the caches
// have synced, which is before the hub serves anyone but system:masters.

func (c *admissionCaches) mutatingWebhooks() []*admissionregistrationv1.MutatingWebhookConfiguration {
	if !c.ready.Load() {
		return nil
	}
	l, _ := c.mutating.List(labels.Everything())
	return l
}

func (c *admissionCaches) validatingWebhooks() []*admissionregistrationv1.ValidatingWebhookConfiguration {
	if !c.ready.Load() {
		return nil
	}
	l, _ := c.validating.List(labels.Everything())
	return l
}

func (c *admissionCaches) admissionPolicies() []*admissionregistrationv1.ValidatingAdmissionPolicy {
	if !c.ready.Load() {
		return nil
	}
	l, _ := c.policies.List(labels.Everything())
	return l
}

func (c *admissionCaches) admissionPolicyBindings() []*admissionregistrationv1.ValidatingAdmissionPolicyBinding {
	if !c.ready.Load() {
		return nil
	}
	l, _ := c.bindings.List(labels.Everything())
	return l
}

func (c *admissionCaches) mutatingPolicies() []*admissionregistrationv1.MutatingAdmissionPolicy {
	if !c.ready.Load() {
		return nil
	}
	l, _ := c.mutatingPols.List(labels.Everything())
	return l
}

func (c *admissionCaches) mutatingPolicyBindings() []*admissionregistrationv1.MutatingAdmissionPolicyBinding {
	if !c.ready.Load() {
		return nil
	}
	l, _ := c.mutatingBinds.List(labels.Everything())
	return l
}

func (c *admissionCaches) namespace(name string) (*corev1.Namespace, error) {
	if !c.ready.Load() {
		return nil, errAdmissionStarting
	}
	return c.namespaces.Get(name)
}

// lateObjects reads the params of admission policies from the API
// server, once it exists (set before it serves).
type lateObjects struct {
	api atomic.Pointer[apiserver.Server]
}

var _ policy.Params = (*lateObjects)(nil)

func (o *lateObjects) server() (*apiserver.Server, error) {
	if s := o.api.Load(); s != nil {
		return s, nil
	}
	return nil, errAdmissionStarting
}

// typeConverter returns the schema objects of kind merge by, or nil
// (the Mutator's default) before the server exists or for a kind it does
// not serve.
func (o *lateObjects) typeConverter(kind schema.GroupVersionKind) managedfields.TypeConverter {
	s, err := o.server()
	if err != nil {
		return nil
	}
	tc, err := s.TypeConverter(kind)
	if err != nil {
		return nil
	}
	return tc
}

func (o *lateObjects) Namespaced(kind schema.GroupVersionKind) (bool, error) {
	s, err := o.server()
	if err != nil {
		return false, err
	}
	return s.KindNamespaced(kind)
}

func (o *lateObjects) Get(kind schema.GroupVersionKind, namespace, name string) (runtime.Object, error) {
	s, err := o.server()
	if err != nil {
		return nil, err
	}
	return s.GetObject(context.Background(), kind, namespace, name)
}

func (o *lateObjects) List(kind schema.GroupVersionKind, namespace string, sel labels.Selector) ([]runtime.Object, error) {
	s, err := o.server()
	if err != nil {
		return nil, err
	}
	return s.ListObjects(context.Background(), kind, namespace, sel)
}

func (c *admissionCaches) priorityClassList() ([]*schedulingv1.PriorityClass, error) {
	if !c.ready.Load() {
		return nil, errAdmissionStarting
	}
	return c.priorityClasses.List(labels.Everything())
}

var _ admission.QuotaStore = (*admissionCaches)(nil)

// ListQuotas lists the quotas of namespace from the cache. Before it has
// synced there are none: the hub's own bootstrap objects are written
// then, and the resourcequota controller counts whatever was written
// before it when it starts.
func (c *admissionCaches) ListQuotas(namespace string) ([]*corev1.ResourceQuota, error) {
	if !c.ready.Load() {
		return nil, nil
	}
	return c.quotas.ResourceQuotas(namespace).List(labels.Everything())
}

// GetQuota reads a quota through the API.
func (c *admissionCaches) GetQuota(ctx context.Context, namespace, name string) (*corev1.ResourceQuota, error) {
	if !c.ready.Load() {
		return nil, errAdmissionStarting
	}
	return c.quotaClient.CoreV1().ResourceQuotas(namespace).Get(ctx, name, metav1.GetOptions{})
}

// UpdateQuotaStatus writes a quota's status through the API.
func (c *admissionCaches) UpdateQuotaStatus(ctx context.Context, q *corev1.ResourceQuota) (*corev1.ResourceQuota, error) {
	if !c.ready.Load() {
		return nil, errAdmissionStarting
	}
	return c.quotaClient.CoreV1().ResourceQuotas(q.Namespace).UpdateStatus(ctx, q, metav1.UpdateOptions{})
}
