package aggregator

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	discoverylisters "k8s.io/client-go/listers/discovery/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	apiregistrationv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
	aggregatorclient "k8s.io/kube-aggregator/pkg/client/clientset_generated/clientset"
	apiregistrationclient "k8s.io/kube-aggregator/pkg/client/clientset_generated/clientset/typed/apiregistration/v1"
	aggregatorinformers "k8s.io/kube-aggregator/pkg/client/informers/externalversions"
	apiregistrationlisters "k8s.io/kube-aggregator/pkg/client/listers/apiregistration/v1"

	"github.com/outpost-mesh/outpost/hub/registry/apiregistration"
)

// ServiceDialer connects to a port of a Service: to one of its ready
// pods, wherever they run (the hub reaches pods on edge nodes through
// their sync sessions).
type ServiceDialer interface {
	DialService(ctx context.Context, namespace, name string, port int32) (net.Conn, error)
}

// Timing of the availability checks, as upstream's.
const (
	// discoveryTimeout bounds one discovery request to a service.
	discoveryTimeout = 5 * time.Second
	// recheckEvery is how often a service-backed APIService is checked
	// again without a change of its own, its Service or its endpoints
	// (upstream's informer resync).
	recheckEvery = 30 * time.Second
)

// The identity the discovery check runs as, as upstream's.
var checkUser = User{Name: "system:kube-aggregator", Groups: []string{"system:masters"}}

// Config configures a Remote.
type Config struct {
	// Dialer reaches the services; non-nil.
	Dialer ServiceDialer
	// ClientCert, when set, is the front-proxy client certificate the
	// hub presents to the services, by which they trust the user headers
	// it sends; nil presents none.
	ClientCert *tls.Certificate
	// Discovery, when set, lists the group versions of the Available
	// service-backed APIServices with the resources their services list;
	// nil lists them nowhere.
	Discovery DiscoverySink
	// Now is the clock of the condition times; nil is the wall clock.
	Now func() time.Time
	// Logger receives the logs; non-nil.
	Logger *slog.Logger
}

// Remote keeps the availability of the service-backed APIServices
// (upstream's remote AvailableConditionController) and proxies the
// requests for their group versions (Proxy). Its methods are safe for
// concurrent use.
type Remote struct {
	cfg      Config
	client   apiregistrationclient.APIServiceInterface
	apis     apiregistrationlisters.APIServiceLister
	services corelisters.ServiceLister
	slices   discoverylisters.EndpointSliceLister
	start    []func(<-chan struct{})
	stop     []func()
	synced   []cache.InformerSynced
	queue    workqueue.TypedRateLimitingInterface[string]

	mu         sync.Mutex
	transports map[string]*cachedTransport

	// dmu serializes the changes of discovered and their publication.
	dmu        sync.Mutex
	discovered map[string]DiscoveredGroupVersion // by APIService name
	published  []DiscoveredGroupVersion
	priorities map[string]int32 // published, by group
}

// cachedTransport is the transport to an APIService's service, built for
// the spec it was built from.
type cachedTransport struct {
	spec apiregistrationv1.APIServiceSpec
	rt   *http.Transport
}

// NewRemote returns a Remote over the clients given; it starts nothing.
func NewRemote(ac aggregatorclient.Interface, kc kubernetes.Interface, cfg Config) (*Remote, error) {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	af := aggregatorinformers.NewSharedInformerFactory(ac, 0)
	kf := informers.NewSharedInformerFactory(kc, 0)
	r := &Remote{
		cfg:      cfg,
		client:   ac.ApiregistrationV1().APIServices(),
		apis:     af.Apiregistration().V1().APIServices().Lister(),
		services: kf.Core().V1().Services().Lister(),
		slices:   kf.Discovery().V1().EndpointSlices().Lister(),
		start:    []func(<-chan struct{}){af.Start, kf.Start},
		stop:     []func(){af.Shutdown, kf.Shutdown},
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "apiservice-availability"}),
		transports: map[string]*cachedTransport{},
		discovered: map[string]DiscoveredGroupVersion{},
	}
	handlers := []struct {
		inf cache.SharedIndexInformer
		fn  func(any)
	}{
		{af.Apiregistration().V1().APIServices().Informer(), r.apiServiceChanged},
		{kf.Core().V1().Services().Informer(), r.serviceChanged},
		{kf.Discovery().V1().EndpointSlices().Informer(), r.sliceChanged},
	}
	for _, h := range handlers {
		reg, err := h.inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc: h.fn, UpdateFunc: func(_, obj any) { h.fn(obj) }, DeleteFunc: h.fn,
		})
		if err != nil {
			return nil, err
		}
		r.synced = append(r.synced, reg.HasSynced)
	}
	return r, nil
}

// unwrap returns the object of a deletion whose final state is unknown.
func unwrap(obj any) any {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		return t.Obj
	}
	return obj
}

// apiServiceChanged queues an APIService: a service-backed one to check,
// any to order discovery by its priority, or to take its group version
// out of discovery once it is no longer service-backed.
func (r *Remote) apiServiceChanged(obj any) {
	if s, ok := unwrap(obj).(*apiregistrationv1.APIService); ok {
		r.queue.Add(s.Name)
	}
}

func (r *Remote) serviceChanged(obj any) {
	if s, ok := unwrap(obj).(*corev1.Service); ok {
		r.queueFor(s.Namespace, s.Name)
	}
}

func (r *Remote) sliceChanged(obj any) {
	if s, ok := unwrap(obj).(*discoveryv1.EndpointSlice); ok {
		r.queueFor(s.Namespace, s.Labels[discoveryv1.LabelServiceName])
	}
}

// queueFor queues the APIServices backed by Service namespace/name.
func (r *Remote) queueFor(namespace, name string) {
	all, err := r.apis.List(labels.Everything())
	if err != nil {
		return
	}
	for _, s := range all {
		if ref := s.Spec.Service; ref != nil && ref.Namespace == namespace && ref.Name == name {
			r.queue.Add(s.Name)
		}
	}
}

// Run checks the APIServices until ctx ends, and returns once its
// goroutines have exited.
func (r *Remote) Run(ctx context.Context) error {
	defer r.closeTransports()
	for _, start := range r.start {
		start(ctx.Done())
	}
	defer func() {
		for _, stop := range r.stop {
			stop()
		}
	}()
	var wg sync.WaitGroup
	defer wg.Wait()
	defer r.queue.ShutDown()
	if !cache.WaitForCacheSync(ctx.Done(), r.synced...) {
		return nil // ctx ended
	}
	// Two workers, so that one slow service does not hold up the rest.
	for range 2 {
		wg.Go(func() {
			for r.work(ctx) {
			}
		})
	}
	<-ctx.Done()
	return nil
}

// work checks one queued APIService; it reports false once the queue is
// shut.
func (r *Remote) work(ctx context.Context) bool {
	name, quit := r.queue.Get()
	if quit {
		return false
	}
	defer r.queue.Done(name)
	recheck, err := r.sync(ctx, name)
	switch {
	case err != nil:
		r.cfg.Logger.Debug("apiservice availability not updated; retrying", "apiservice", name, "err", err)
		r.queue.AddRateLimited(name)
	case recheck:
		r.queue.Forget(name)
		r.queue.AddAfter(name, recheckEvery)
	default:
		r.queue.Forget(name)
	}
	return true
}

// sync checks APIService name and writes its Available condition when it
// changed. It reports whether to check it again later: a service-backed
// one still there.
func (r *Remote) sync(ctx context.Context, name string) (bool, error) {
	orig, err := r.apis.Get(name)
	if apierrors.IsNotFound(err) {
		r.forgetTransport(name)
		r.discover(name, nil, nil)
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if orig.Spec.Service == nil {
		r.forgetTransport(name)
		r.discover(name, nil, nil)
		return false, nil // local: Available from its create
	}
	cond, resources := r.check(ctx, orig)
	if cond.Status == apiregistrationv1.ConditionTrue {
		r.discover(name, orig, resources)
	} else {
		r.discover(name, nil, nil)
	}
	s := orig.DeepCopy()
	if !apiregistration.SetAvailable(s, cond, r.cfg.Now()) {
		return true, nil
	}
	if _, err := r.client.UpdateStatus(ctx, s, metav1.UpdateOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return false, err
	}
	r.cfg.Logger.Info("apiservice availability changed", "apiservice", name, "status", cond.Status, "reason", cond.Reason, "message", cond.Message)
	return true, nil
}

// check returns the Available condition of service-backed s: what the
// stored Service and its EndpointSlices say, then whether the service
// answers discovery; and, when it does, the resources it lists.
func (r *Remote) check(ctx context.Context, s *apiregistrationv1.APIService) (apiregistrationv1.APIServiceCondition, []metav1.APIResource) {
	ref := s.Spec.Service
	svc, err := r.services.Services(ref.Namespace).Get(ref.Name)
	if err != nil && !apierrors.IsNotFound(err) {
		return unknown("ServiceAccessError", fmt.Sprintf("service/%s in %q cannot be checked due to: %v", ref.Name, ref.Namespace, err)), nil
	}
	if err != nil {
		svc = nil
	}
	slices, err := r.slices.EndpointSlices(ref.Namespace).List(labels.SelectorFromSet(labels.Set{discoveryv1.LabelServiceName: ref.Name}))
	if err != nil {
		return unknown("EndpointsAccessError", fmt.Sprintf("service/%s in %q cannot be checked due to: %v", ref.Name, ref.Namespace, err)), nil
	}
	if cond, ok := serviceCondition(s, svc, slices); !ok {
		return cond, nil
	}
	resources, err := r.probe(ctx, s)
	if err != nil {
		return apiregistrationv1.APIServiceCondition{Status: apiregistrationv1.ConditionFalse, Reason: "FailedDiscoveryCheck", Message: err.Error()}, nil
	}
	return apiregistrationv1.APIServiceCondition{Status: apiregistrationv1.ConditionTrue, Reason: "Passed", Message: "all checks passed"}, resources
}

// unknown is an Available condition of status Unknown.
func unknown(reason, msg string) apiregistrationv1.APIServiceCondition {
	return apiregistrationv1.APIServiceCondition{Status: apiregistrationv1.ConditionUnknown, Reason: reason, Message: msg}
}

// serviceCondition decides, without I/O, what service-backed s's Service
// (nil when there is none) and its EndpointSlices say of its
// availability, as upstream's checks in order: the Service exists, a
// ClusterIP Service has the port, has slices, and has a ready address for
// that port. It reports true when they pass and discovery decides.
func serviceCondition(s *apiregistrationv1.APIService, svc *corev1.Service, slices []*discoveryv1.EndpointSlice) (apiregistrationv1.APIServiceCondition, bool) {
	ref := s.Spec.Service
	down := func(reason, msg string) (apiregistrationv1.APIServiceCondition, bool) {
		return apiregistrationv1.APIServiceCondition{Status: apiregistrationv1.ConditionFalse, Reason: reason, Message: msg}, false
	}
	if svc == nil {
		return down("ServiceNotFound", fmt.Sprintf("service/%s in %q is not present", ref.Name, ref.Namespace))
	}
	if svc.Spec.Type != corev1.ServiceTypeClusterIP && svc.Spec.Type != "" {
		return apiregistrationv1.APIServiceCondition{}, true
	}
	port := servicePort(ref)
	portName, found := "", false
	for _, p := range svc.Spec.Ports {
		if p.Port == port {
			portName, found = p.Name, true
			break
		}
	}
	if !found {
		return down("ServicePortError", fmt.Sprintf("service/%s in %q is not listening on port %d", ref.Name, ref.Namespace, port))
	}
	if len(slices) == 0 {
		return down("EndpointsNotFound", fmt.Sprintf("cannot find endpointslices for service/%s in %q", ref.Name, ref.Namespace))
	}
	if !hasReadyEndpoint(portName, slices) {
		return down("MissingEndpoints", fmt.Sprintf("endpointslices for service/%s in %q have no addresses with port name %q", ref.Name, ref.Namespace, portName))
	}
	return apiregistrationv1.APIServiceCondition{}, true
}

// servicePort is ref's port, 443 by default.
func servicePort(ref *apiregistrationv1.ServiceReference) int32 {
	if ref.Port == nil {
		return 443
	}
	return *ref.Port
}

// hasReadyEndpoint reports whether a slice has a ready address serving
// the port named portName, as upstream's hasAvailableEndpoint.
func hasReadyEndpoint(portName string, slices []*discoveryv1.EndpointSlice) bool {
	for _, s := range slices {
		named := false
		for _, p := range s.Ports {
			if p.Name != nil && *p.Name == portName || p.Name == nil && portName == "" {
				named = true
			}
		}
		if !named {
			continue
		}
		for _, e := range s.Endpoints {
			if (e.Conditions.Ready == nil || *e.Conditions.Ready) && len(e.Addresses) > 0 {
				return true
			}
		}
	}
	return false
}

// probe GETs s's discovery document, /apis/GROUP/VERSION (/api/v1 for
// the legacy group), from its service, as system:kube-aggregator in
// system:masters, and returns the resources it lists; a status outside
// 2xx, or no answer within discoveryTimeout, fails it. A document that
// cannot be read lists no resources, but the service answered: upstream
// checks availability by the status alone.
func (r *Remote) probe(ctx context.Context, s *apiregistrationv1.APIService) ([]metav1.APIResource, error) {
	rt, err := r.transport(s)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, discoveryTimeout)
	defer cancel()
	u := serviceURL(s.Spec.Service)
	u.Path = "/apis/" + s.Spec.Group + "/" + s.Spec.Version
	if s.Spec.Group == "" {
		u.Path = "/api/" + s.Spec.Version
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/json")
	setUserHeaders(req.Header, checkUser)
	resp, err := rt.RoundTrip(req)
	if err != nil {
		rt.CloseIdleConnections()
		return nil, fmt.Errorf("failing or missing response from %v: %w", u, err)
	}
	defer resp.Body.Close()
	defer io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20)) // keep the connection for the next check
	if resp.StatusCode < http.StatusOK || resp.StatusCode >= http.StatusMultipleChoices {
		return nil, fmt.Errorf("bad status from %v: %d", u, resp.StatusCode)
	}
	list, err := DecodeResourceList(resp.Body, s.Spec.Group, s.Spec.Version)
	if err != nil {
		r.cfg.Logger.Warn("apiservice discovery document unreadable: its resources are not listed", "apiservice", s.Name, "err", err)
		return nil, nil
	}
	return list, nil
}

// transport returns the transport to s's service, built anew when its
// spec changed: TLS to the service's DNS name, verified against its
// caBundle (or not, with insecureSkipTLSVerify), presenting the
// front-proxy client certificate, over the service dialer.
func (r *Remote) transport(s *apiregistrationv1.APIService) (*http.Transport, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if c := r.transports[s.Name]; c != nil && equalSpec(c.spec, s.Spec) {
		return c.rt, nil
	}
	tlsCfg, err := r.tlsConfig(&s.Spec)
	if err != nil {
		return nil, err
	}
	ref := *s.Spec.Service
	port := servicePort(&ref)
	rt := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return r.cfg.Dialer.DialService(ctx, ref.Namespace, ref.Name, port)
		},
		TLSClientConfig:     tlsCfg,
		TLSHandshakeTimeout: discoveryTimeout,
		ForceAttemptHTTP2:   true,
		MaxIdleConnsPerHost: 8,
		IdleConnTimeout:     90 * time.Second,
	}
	if old := r.transports[s.Name]; old != nil {
		old.rt.CloseIdleConnections()
	}
	r.transports[s.Name] = &cachedTransport{spec: *s.Spec.DeepCopy(), rt: rt}
	return rt, nil
}

// equalSpec reports whether two specs build the same transport.
func equalSpec(a, b apiregistrationv1.APIServiceSpec) bool {
	return a.Service != nil && b.Service != nil && *a.Service.Port == *b.Service.Port &&
		a.Service.Namespace == b.Service.Namespace && a.Service.Name == b.Service.Name &&
		a.InsecureSkipTLSVerify == b.InsecureSkipTLSVerify && string(a.CABundle) == string(b.CABundle)
}

// tlsConfig is the TLS configuration of a connection to spec's service.
func (r *Remote) tlsConfig(spec *apiregistrationv1.APIServiceSpec) (*tls.Config, error) {
	cfg := &tls.Config{
		MinVersion:         tls.VersionTLS12,
		ServerName:         spec.Service.Name + "." + spec.Service.Namespace + ".svc",
		InsecureSkipVerify: spec.InsecureSkipTLSVerify, // the APIService asks for it
	}
	if len(spec.CABundle) > 0 {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(spec.CABundle) {
			return nil, errors.New("caBundle holds no PEM certificate")
		}
		cfg.RootCAs = pool
	}
	if r.cfg.ClientCert != nil {
		cert := r.cfg.ClientCert
		cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return cert, nil }
	}
	return cfg, nil
}

// forgetTransport closes and drops the transport of APIService name.
func (r *Remote) forgetTransport(name string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if c := r.transports[name]; c != nil {
		c.rt.CloseIdleConnections()
		delete(r.transports, name)
	}
}

// closeTransports closes every transport's idle connections.
func (r *Remote) closeTransports() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for name, c := range r.transports {
		c.rt.CloseIdleConnections()
		delete(r.transports, name)
	}
}

// serviceURL is the base URL of ref: https to the service's DNS name and
// port, which the transport's dialer resolves itself.
func serviceURL(ref *apiregistrationv1.ServiceReference) *url.URL {
	return &url.URL{Scheme: "https", Host: net.JoinHostPort(ref.Name+"."+ref.Namespace+".svc", strconv.Itoa(int(servicePort(ref))))}
}
