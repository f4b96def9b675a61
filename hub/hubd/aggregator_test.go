package hubd

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclientv1 "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset/typed/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	apiregistrationv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
	aggregatorclient "k8s.io/kube-aggregator/pkg/client/clientset_generated/clientset"

	"github.com/outpost-mesh/outpost/hub/aggregator"
	"github.com/outpost-mesh/outpost/hub/apiserver"
	"github.com/outpost-mesh/outpost/hub/auth"
	"github.com/outpost-mesh/outpost/hub/pki"
	"github.com/outpost-mesh/outpost/hub/registry/apiregistration"
	"github.com/outpost-mesh/outpost/hub/registry/core"
	"github.com/outpost-mesh/outpost/hub/store/badgerstore"
	"github.com/outpost-mesh/outpost/internal/testlog"
)

// loopbackPods dials every pod's port at addr, a test server on
// 127.0.0.1, as a node's sync session would reach the pod.
type loopbackPods struct{ addr string }

func (d loopbackPods) DialPod(ctx context.Context, _ *corev1.Pod, _ int32) (net.Conn, error) {
	var nd net.Dialer
	return nd.DialContext(ctx, "tcp", d.addr)
}

// startAggregatorHub starts an in-process API with its custom resources
// and aggregation layer, whose services' pods are all reached at
// podAddr, a loopback address.
func startAggregatorHub(t *testing.T, podAddr string) (*apiHandler, *apiserver.Server, *slog.Logger) {
	t.Helper()
	st, err := badgerstore.Open(badgerstore.DefaultConfig(t.TempDir()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	log := testlog.New(t, slog.LevelInfo)
	api, spec, err := newAPI(st, core.DefaultServiceConfig(), nil, nil, nil, nil, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(api.Shutdown)
	ctx := context.Background()
	if err := ensureNamespaces(ctx, api); err != nil {
		t.Fatal(err)
	}
	h := newAPIHandler(st, x509.NewCertPool(), log, api, spec, http.NotFoundHandler())
	var ps parts
	t.Cleanup(ps.stop) // before api.Shutdown and the store's Close
	customizing, err := startCustomResources(ctx, &ps, h, api, spec, serviceDialer{st: st}, log)
	if err != nil {
		t.Fatal(err)
	}
	pkiCfg := pki.DefaultConfig(t.TempDir())
	certs, err := pki.Ensure(pkiCfg)
	if err != nil {
		t.Fatal(err)
	}
	front, err := pki.EnsureFrontProxy(pkiCfg)
	if err != nil {
		t.Fatal(err)
	}
	aggregating, err := startAggregator(ctx, &ps, h, api, serviceDialer{st: st, pods: loopbackPods{podAddr}},
		frontProxyTrust{clusterCA: certs.CACertPEM, front: front}, log)
	if err != nil {
		t.Fatal(err)
	}
	ps.order(aggregating, customizing)
	return h, api, log
}

// hubClients returns the clients of the hub's own identity.
func hubClients(t *testing.T, h *apiHandler, log *slog.Logger) (kubernetes.Interface, apiextensionsclientv1.ApiextensionsV1Interface, aggregatorclient.Interface) {
	t.Helper()
	c, err := inprocAllClientsAs(h, hubUser, "test", log)
	if err != nil {
		t.Fatal(err)
	}
	cfg, hc := inprocConfig(h, "test", func(*http.Request) auth.User { return hubUser }, log)
	ac, err := aggregatorclient.NewForConfigAndClient(cfg, hc)
	if err != nil {
		t.Fatal(err)
	}
	return c.Client, c.Extensions.ApiextensionsV1(), ac
}

// waitFor polls cond every 50ms until it holds or 30s have passed.
func waitFor(t *testing.T, what string, cond func(ctx context.Context) (bool, error)) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 30*time.Second, true, cond); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// TestAPIServiceLocal: every group version the hub serves has a local
// APIService, Available as Local, with upstream's priorities; a custom
// resource's served versions get one while they are served.
func TestAPIServiceLocal(t *testing.T) {
	h, api, log := startAggregatorHub(t, "127.0.0.1:1")
	_, ext, ac := hubClients(t, h, log)
	apis := ac.ApiregistrationV1().APIServices()
	ctx := context.Background()

	for _, k := range []struct {
		name           string
		group, version int32
	}{
		{"v1.", 18000, 1}, {"v1.apps", 17800, 15}, {"v2.autoscaling", 17500, 30}, {"v1.apiregistration.k8s.io", 1000, 100},
	} {
		waitFor(t, "apiservice "+k.name, func(ctx context.Context) (bool, error) {
			s, err := apis.Get(ctx, k.name, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				return false, nil
			}
			if err != nil {
				return false, err
			}
			c := apiregistration.Available(s)
			if s.Spec.Service != nil || s.Spec.GroupPriorityMinimum != k.group || s.Spec.VersionPriority != k.version ||
				s.Labels[aggregator.ManagedLabel] != aggregator.ManagedOnStart || c == nil || c.Status != apiregistrationv1.ConditionTrue || c.Reason != "Local" {
				return false, fmt.Errorf("apiservice %s = %+v, want local, Available (Local), priorities %d/%d, managed onstart", k.name, s, k.group, k.version)
			}
			return true, nil
		})
	}
	waitFor(t, "an Available apiservice for every built-in group version", func(ctx context.Context) (bool, error) {
		list, err := apis.List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		for _, gv := range builtinGroupVersions(api) {
			name := gv.Version + "." + gv.Group
			if !slices.ContainsFunc(list.Items, func(s apiregistrationv1.APIService) bool { return s.Name == name && apiregistration.IsAvailable(&s) }) {
				return false, nil
			}
		}
		return true, nil
	})

	crd := &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: "widgets.example.com"},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: "example.com", Scope: apiextensionsv1.NamespaceScoped,
			Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: "widgets", Singular: "widget", Kind: "Widget", ListKind: "WidgetList"},
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{
				{Name: "v1", Served: true, Storage: true, Schema: anySchema()},
				{Name: "v2", Served: true, Schema: anySchema()},
			},
		},
	}
	if _, err := ext.CustomResourceDefinitions().Create(ctx, crd, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	exists := func(name string, want bool) func(context.Context) (bool, error) {
		return func(ctx context.Context) (bool, error) {
			s, err := apis.Get(ctx, name, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				return !want, nil
			}
			if err != nil {
				return false, err
			}
			return want && s.Labels[aggregator.ManagedLabel] == aggregator.ManagedContinuously && s.Spec.GroupPriorityMinimum == 1000 && apiregistration.IsAvailable(s), nil
		}
	}
	waitFor(t, "apiservices of the CRD's versions", func(ctx context.Context) (bool, error) {
		a, err := exists("v1.example.com", true)(ctx)
		if !a || err != nil {
			return a, err
		}
		return exists("v2.example.com", true)(ctx)
	})
	if err := apis.Delete(ctx, "v1.example.com", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "apiservice of a CRD version recreated", exists("v1.example.com", true))

	cur, err := ext.CustomResourceDefinitions().Get(ctx, crd.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cur.Spec.Versions[1].Served = false
	if _, err := ext.CustomResourceDefinitions().Update(ctx, cur, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "apiservice of a version no longer served removed", exists("v2.example.com", false))

	if err := ext.CustomResourceDefinitions().Delete(ctx, crd.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	// No controller runs here to clean up after the definition: drop its
	// finalizer as that one would.
	cur, err = ext.CustomResourceDefinitions().Get(ctx, crd.Name, metav1.GetOptions{})
	if err == nil {
		cur.Finalizers = nil
		_, err = ext.CustomResourceDefinitions().Update(ctx, cur, metav1.UpdateOptions{})
	}
	if err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	waitFor(t, "apiservice of a deleted CRD removed", exists("v1.example.com", false))
}

// anySchema is a schema that keeps every field.
func anySchema() *apiextensionsv1.CustomResourceValidation {
	keep := true
	return &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{Type: "object", XPreserveUnknownFields: &keep}}
}

// backend is an aggregated API server on 127.0.0.1: it answers
// discovery of metrics.k8s.io/v1beta1 and records the identity headers of
// the other requests.
type backend struct {
	mu      sync.Mutex
	headers []http.Header
}

func (b *backend) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/apis/metrics.k8s.io/v1beta1" {
		b.mu.Lock()
		b.headers = append(b.headers, r.Header.Clone())
		b.mu.Unlock()
	}
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprintf(w, `{"kind":"APIResourceList","apiVersion":"v1","groupVersion":"metrics.k8s.io/v1beta1","resources":[],"path":%q}`, r.URL.Path)
}

// TestAPIServiceRemote: an APIService backed by a Service becomes
// Available once its Service has a ready pod that answers discovery over
// TLS verified against its caBundle, and requests for its group version
// reach that pod with the user's identity; one without its Service is
// Available=False ServiceNotFound.
func TestAPIServiceRemote(t *testing.T) {
	certs, err := pki.Ensure(func() pki.Config {
		c := pki.DefaultConfig(t.TempDir())
		c.ServingNames = []string{"metrics-server.kube-system.svc"}
		return c
	}())
	if err != nil {
		t.Fatal(err)
	}
	b := &backend{}
	srv := httptest.NewUnstartedServer(b)
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{certs.Serving}}
	srv.StartTLS()
	t.Cleanup(srv.Close)

	h, _, log := startAggregatorHub(t, srv.Listener.Addr().String())
	kube, _, ac := hubClients(t, h, log)
	apis := ac.ApiregistrationV1().APIServices()
	ctx := context.Background()

	s := &apiregistrationv1.APIService{
		ObjectMeta: metav1.ObjectMeta{Name: "v1beta1.metrics.k8s.io"},
		Spec: apiregistrationv1.APIServiceSpec{
			Group: "metrics.k8s.io", Version: "v1beta1", GroupPriorityMinimum: 100, VersionPriority: 100,
			Service:  &apiregistrationv1.ServiceReference{Namespace: "kube-system", Name: "metrics-server"},
			CABundle: certs.CACertPEM,
		},
	}
	if _, err := apis.Create(ctx, s, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	reason := func(name, want string) func(context.Context) (bool, error) {
		return func(ctx context.Context) (bool, error) {
			s, err := apis.Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			c := apiregistration.Available(s)
			return c != nil && c.Reason == want, nil
		}
	}
	waitFor(t, "ServiceNotFound without the service", reason(s.Name, "ServiceNotFound"))

	if _, err := kube.CoreV1().Pods("kube-system").Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "metrics-server-0"},
		Spec: corev1.PodSpec{NodeName: "edge-1", Containers: []corev1.Container{{Name: "c", Image: "i"}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := kube.CoreV1().Services("kube-system").Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "metrics-server"},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "https", Port: 443, TargetPort: intstr.FromInt32(10250)}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "EndpointsNotFound without slices", reason(s.Name, "EndpointsNotFound"))
	ready, name, port := true, "https", int32(10250)
	if _, err := kube.DiscoveryV1().EndpointSlices("kube-system").Create(ctx, &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: "metrics-server-x", Labels: map[string]string{discoveryv1.LabelServiceName: "metrics-server"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints: []discoveryv1.Endpoint{{Addresses: []string{"10.42.0.9"}, Conditions: discoveryv1.EndpointConditions{Ready: &ready},
			TargetRef: &corev1.ObjectReference{Kind: "Pod", Namespace: "kube-system", Name: "metrics-server-0"}}},
		Ports: []discoveryv1.EndpointPort{{Name: &name, Port: &port}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "Available once the pod answers", reason(s.Name, "Passed"))

	alice := auth.User{Name: "alice", Groups: []string{auth.MastersGroup, auth.AuthenticatedGroup}, Extra: map[string][]string{"site/zone": {"a"}}}
	cfg, hc := inprocConfig(h, "test", func(*http.Request) auth.User { return alice }, log)
	cfg.AcceptContentTypes, cfg.ContentType = "application/json", "application/json"
	alices, err := kubernetes.NewForConfigAndClient(cfg, hc)
	if err != nil {
		t.Fatal(err)
	}
	body, err := alices.CoreV1().RESTClient().Get().AbsPath("/apis/metrics.k8s.io/v1beta1/nodes").SetHeader("Authorization", "Bearer secret").DoRaw(ctx)
	if err != nil || !strings.Contains(string(body), `"path":"/apis/metrics.k8s.io/v1beta1/nodes"`) {
		t.Fatalf("GET through the proxy = %s, %v; want the backend's answer", body, err)
	}
	b.mu.Lock()
	got := b.headers[len(b.headers)-1]
	b.mu.Unlock()
	if got.Get("X-Remote-User") != "alice" || !slices.Equal(got.Values("X-Remote-Group"), alice.Groups) ||
		got.Get("X-Remote-Extra-site%2Fzone") != "a" || got.Get("Authorization") != "" {
		t.Errorf("backend got identity headers %v, want alice's and no Authorization", got)
	}

	if err := kube.CoreV1().Services("kube-system").Delete(ctx, "metrics-server", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "ServiceNotFound once the service is gone", reason(s.Name, "ServiceNotFound"))
	_, err = alices.CoreV1().RESTClient().Get().AbsPath("/apis/metrics.k8s.io/v1beta1/nodes").DoRaw(ctx)
	if !apierrors.IsServiceUnavailable(err) {
		t.Errorf("GET of an unavailable APIService's group version: %v, want 503", err)
	}
}
