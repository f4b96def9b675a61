// Package webhook calls the admission webhooks that
// admissionregistration.k8s.io/v1 MutatingWebhookConfigurations and
// ValidatingWebhookConfigurations name, as kube-apiserver's generic
// webhook dispatcher calls them: matched by rules, namespace and object
// selectors and CEL matchConditions, sent an AdmissionReview over TLS to a
// url or to a Service (reached through Config.DialService, which for pods
// on edge nodes goes through the node's sync session), within the
// webhook's timeout, with its failurePolicy, sideEffects and
// reinvocationPolicy. Only the hub's composition root wires a Dispatcher
// in, as both the server's MutatingAdmission and one of its Admissions.
package webhook

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	plugincel "k8s.io/apiserver/pkg/admission/plugin/cel"
	"k8s.io/apiserver/pkg/cel/environment"

	"github.com/outpost-mesh/outpost/hub/apiserver"
)

// DefaultMaxResponseBytes bounds a webhook's answer: an AdmissionReview
// whose patch may rewrite an object of the store's largest size, 3 MiB,
// twice over.
const DefaultMaxResponseBytes = 6 << 20

// Config configures a Dispatcher.
type Config struct {
	// Mutating and Validating return the current configurations, as an
	// informer's lister does; the dispatcher does not modify or keep
	// them beyond a call (it caches what it compiles from them by uid and
	// resourceVersion). Nil means none of that kind.
	Mutating   func() []*admissionregistrationv1.MutatingWebhookConfiguration
	Validating func() []*admissionregistrationv1.ValidatingWebhookConfiguration
	// Namespace returns a namespace, for namespaceSelectors; an
	// apierrors NotFound is answered to the client as is. Nil matches
	// only webhooks whose namespaceSelector is empty.
	Namespace func(name string) (*corev1.Namespace, error)
	// DialService connects to port of Service namespace/name, for
	// webhooks with a service clientConfig: over the connection the
	// dispatcher speaks TLS with server name NAME.NAMESPACE.svc. It must
	// honour ctx, which carries the webhook's timeout. Nil fails such
	// webhooks ("service webhooks are not served").
	DialService func(ctx context.Context, namespace, name string, port int32) (net.Conn, error)
	// MaxResponseBytes bounds a webhook's response body; default
	// DefaultMaxResponseBytes.
	MaxResponseBytes int64
	// Logger receives the webhooks that failed open; nil discards.
	Logger *slog.Logger
}

// Dispatcher calls admission webhooks: mutating ones in order from
// Mutate (apiserver.MutatingAdmission), validating ones in parallel from
// Admit (apiserver.Admission). Its methods are safe for concurrent use;
// it starts no goroutine that outlives a call. Close drops its idle
// connections.
type Dispatcher struct {
	cfg      Config
	log      *slog.Logger
	compiler plugincel.ConditionCompiler

	mu sync.Mutex
	// cache holds the hooks compiled from each configuration, by
	// cacheKey; entries of configurations no longer listed are dropped.
	cache map[cacheKey]*configHooks
}

var (
	_ apiserver.MutatingAdmission = (*Dispatcher)(nil)
	_ apiserver.Admission         = (*Dispatcher)(nil)
)

// New returns a dispatcher for cfg; it starts nothing.
func New(cfg Config) *Dispatcher {
	if cfg.MaxResponseBytes <= 0 {
		cfg.MaxResponseBytes = DefaultMaxResponseBytes
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Dispatcher{
		cfg:      cfg,
		log:      cfg.Logger,
		compiler: plugincel.NewConditionCompiler(environment.MustBaseEnvSet(environment.DefaultCompatibilityVersion())),
		cache:    map[cacheKey]*configHooks{},
	}
}

// Close closes the idle connections of every webhook's client. Calls in
// flight go on; the dispatcher stays usable. Safe to call more than once.
func (d *Dispatcher) Close() {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, c := range d.cache {
		c.close()
	}
}

// exempt are the resources no webhook is called for, as upstream exempts
// them, so that a broken webhook cannot keep itself from being fixed.
var exempt = map[schema.GroupResource]bool{
	{Group: admissionregistrationv1.GroupName, Resource: "mutatingwebhookconfigurations"}:     true,
	{Group: admissionregistrationv1.GroupName, Resource: "validatingwebhookconfigurations"}:   true,
	{Group: admissionregistrationv1.GroupName, Resource: "validatingadmissionpolicies"}:       true,
	{Group: admissionregistrationv1.GroupName, Resource: "validatingadmissionpolicybindings"}: true,
	{Group: admissionregistrationv1.GroupName, Resource: "mutatingadmissionpolicies"}:         true,
	{Group: admissionregistrationv1.GroupName, Resource: "mutatingadmissionpolicybindings"}:   true,
}

// Handles reports whether webhooks may be called for writes of resource:
// every resource but the admission configurations themselves, since
// webhooks may be configured for any at any time.
func (d *Dispatcher) Handles(resource schema.GroupResource) bool { return !exempt[resource] }

// Mutate calls the mutating webhooks that match the write, in the order
// of their configurations' names and then their order within one, and
// applies their patches to a.Object. A webhook with reinvocationPolicy
// IfNeeded is called once more if a webhook after it changed the object.
func (d *Dispatcher) Mutate(ctx context.Context, a *apiserver.AdmissionAttributes) error {
	if d.cfg.Mutating == nil || exempt[a.Resource] {
		return nil
	}
	hooks := d.mutatingHooks(d.cfg.Mutating())
	if len(hooks) == 0 {
		return nil
	}
	r, err := d.newRequest(ctx, a)
	if err != nil {
		return err
	}
	// previous are the IfNeeded webhooks called since the object last
	// changed; again those to call in the second round.
	var previous, again []*hook
	for _, h := range hooks {
		changed, err := d.mutateOnce(ctx, r, h)
		if err != nil {
			return err
		}
		if changed {
			again, previous = append(again, previous...), nil
		}
		if h.reinvoke {
			previous = append(previous, h)
		}
	}
	for _, h := range again {
		if _, err := d.mutateOnce(ctx, r, h); err != nil {
			return err
		}
	}
	a.Object = r.obj
	return nil
}

// mutateOnce calls h if it matches r, and reports whether it changed the
// object. Failures to call h are ignored with failurePolicy Ignore.
func (d *Dispatcher) mutateOnce(ctx context.Context, r *request, h *hook) (bool, error) {
	ok, err := d.shouldCall(ctx, r, h)
	if err != nil || !ok {
		return false, err
	}
	changed, err := d.call(ctx, r, h)
	return changed, d.failure(ctx, h, err)
}

// Admit calls the validating webhooks that match the write, all at once,
// and returns the first refusal in their order.
func (d *Dispatcher) Admit(ctx context.Context, a apiserver.AdmissionAttributes) error {
	if d.cfg.Validating == nil || exempt[a.Resource] {
		return nil
	}
	hooks := d.validatingHooks(d.cfg.Validating())
	if len(hooks) == 0 {
		return nil
	}
	r, err := d.newRequest(ctx, &a)
	if err != nil {
		return err
	}
	var call []*hook
	for _, h := range hooks {
		ok, err := d.shouldCall(ctx, r, h)
		if err != nil {
			return err
		}
		if ok {
			call = append(call, h)
		}
	}
	errs := make([]error, len(call))
	var wg sync.WaitGroup
	for i, h := range call {
		wg.Go(func() {
			_, err := d.call(ctx, r, h)
			errs[i] = d.failure(ctx, h, err)
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// failure maps the error of calling h to what the client gets: nil for a
// call that failed with failurePolicy Ignore (logged), upstream's 500 for
// one that failed with Fail, and a refusal or other API error as is.
func (d *Dispatcher) failure(ctx context.Context, h *hook, err error) error {
	var ce *callError
	if !errors.As(err, &ce) {
		return err
	}
	if !h.ignore {
		return apierrors.NewInternalError(ce)
	}
	if ctx.Err() != nil {
		return apierrors.NewTimeoutError("request did not complete within requested timeout", 0)
	}
	d.log.Warn("admission webhook failed; failing open", "webhook", h.name, "err", ce.reason)
	return nil
}

// callError is a failure to call a webhook or to make sense of its
// answer, which its failurePolicy decides on; its text is upstream's.
type callError struct {
	webhook string
	reason  error
}

func (e *callError) Error() string {
	return fmt.Sprintf("failed calling webhook %q: %v", e.webhook, e.reason)
}

func (e *callError) Unwrap() error { return e.reason }
