package hubd

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	apiregistrationv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"

	"github.com/outpost-mesh/outpost/hub/aggregator"
	"github.com/outpost-mesh/outpost/hub/auth"
	"github.com/outpost-mesh/outpost/hub/pki"
	"github.com/outpost-mesh/outpost/hub/registry/apiregistration"
)

// extensionServer is an extension API server on 127.0.0.1 that
// authenticates as upstream's requestheader authenticator does: a
// request's X-Remote-User is believed only when it came with a client
// certificate verified against requestheader-client-ca-file whose common
// name is in requestheader-allowed-names, both read from the hub's
// extension-apiserver-authentication ConfigMap (trust). Anyone else gets
// 401. It serves discovery of metrics.example.com/v1 (one resource,
// widgets) and answers other requests with the user it authenticated.
type extensionServer struct {
	mu      sync.Mutex
	trusted *x509.CertPool // nil until trust is called
	allowed []string
	users   []string // of the requests other than discovery
}

// trust reads the requestheader keys of the trust ConfigMap cm.
func (e *extensionServer) trust(t *testing.T, cm *corev1.ConfigMap) {
	t.Helper()
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM([]byte(cm.Data[aggregator.KeyRequestHeaderCA])) {
		t.Fatalf("%s holds no certificate: %v", aggregator.KeyRequestHeaderCA, cm.Data)
	}
	var allowed []string
	if err := json.Unmarshal([]byte(cm.Data[aggregator.KeyAllowedNames]), &allowed); err != nil {
		t.Fatalf("%s: %v", aggregator.KeyAllowedNames, err)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.trusted, e.allowed = pool, allowed
}

// authenticate returns the user r asserts, once its certificate proves it
// came from the front proxy.
func (e *extensionServer) authenticate(r *http.Request) (string, error) {
	e.mu.Lock()
	pool, allowed := e.trusted, e.allowed
	e.mu.Unlock()
	if pool == nil || r.TLS == nil || len(r.TLS.PeerCertificates) == 0 {
		return "", errors.New("no front-proxy client certificate")
	}
	opts := x509.VerifyOptions{Roots: pool, Intermediates: x509.NewCertPool(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	for _, c := range r.TLS.PeerCertificates[1:] {
		opts.Intermediates.AddCert(c)
	}
	leaf := r.TLS.PeerCertificates[0]
	if _, err := leaf.Verify(opts); err != nil {
		return "", err
	}
	if !slices.Contains(allowed, leaf.Subject.CommonName) {
		return "", fmt.Errorf("common name %q not allowed", leaf.Subject.CommonName)
	}
	return r.Header.Get("X-Remote-User"), nil
}

func (e *extensionServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	user, err := e.authenticate(r)
	if err != nil || user == "" {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusUnauthorized)
		fmt.Fprintf(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"Unauthorized","code":401,"message":%q}`, fmt.Sprint(err))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	switch r.URL.Path {
	case "/apis/metrics.example.com/v1":
		fmt.Fprint(w, `{"kind":"APIResourceList","apiVersion":"v1","groupVersion":"metrics.example.com/v1","resources":[`+
			`{"name":"widgets","singularName":"widget","namespaced":true,"kind":"Widget","verbs":["get","list"],"shortNames":["wd"]}]}`)
	case "/apis/metrics.example.com":
		fmt.Fprint(w, `{"kind":"APIGroup","apiVersion":"v1","name":"metrics.example.com","versions":[{"groupVersion":"metrics.example.com/v1","version":"v1"}],`+
			`"preferredVersion":{"groupVersion":"metrics.example.com/v1","version":"v1"}}`)
	default:
		e.mu.Lock()
		e.users = append(e.users, user)
		e.mu.Unlock()
		fmt.Fprintf(w, `{"kind":"WidgetList","apiVersion":"metrics.example.com/v1","metadata":{},"items":[],"user":%q}`, user)
	}
}

// startExtensionServer starts an extensionServer serving TLS as
// name.namespace.svc, and returns it with its server and the PEM of the
// CA of its serving certificate.
func startExtensionServer(t *testing.T, namespace, name string) (*extensionServer, *httptest.Server, []byte) {
	t.Helper()
	cfg := pki.DefaultConfig(t.TempDir())
	cfg.ServingNames = []string{name + "." + namespace + ".svc"}
	certs, err := pki.Ensure(cfg)
	if err != nil {
		t.Fatal(err)
	}
	e := &extensionServer{}
	srv := httptest.NewUnstartedServer(e)
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{certs.Serving}, ClientAuth: tls.RequestClientCert}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return e, srv, certs.CACertPEM
}

// exposeService creates Service namespace/name on port 443 with a ready
// pod behind it, for an APIService to be backed by.
func exposeService(t *testing.T, kube kubernetes.Interface, namespace, name string) {
	t.Helper()
	ctx := context.Background()
	pod := name + "-0"
	if _, err := kube.CoreV1().Pods(namespace).Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: pod},
		Spec: corev1.PodSpec{NodeName: "edge-1", Containers: []corev1.Container{{Name: "c", Image: "i"}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := kube.CoreV1().Services(namespace).Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "https", Port: 443, TargetPort: intstr.FromInt32(8443)}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	ready, portName, port := true, "https", int32(8443)
	if _, err := kube.DiscoveryV1().EndpointSlices(namespace).Create(ctx, &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: name + "-x", Labels: map[string]string{discoveryv1.LabelServiceName: name}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints: []discoveryv1.Endpoint{{Addresses: []string{"10.42.0.9"}, Conditions: discoveryv1.EndpointConditions{Ready: &ready},
			TargetRef: &corev1.ObjectReference{Kind: "Pod", Namespace: namespace, Name: pod}}},
		Ports: []discoveryv1.EndpointPort{{Name: &portName, Port: &port}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// widgetAPIService is the APIService of metrics.example.com/v1, served by
// Service namespace/name whose serving certificate caBundle signs.
func widgetAPIService(namespace, name string, caBundle []byte) *apiregistrationv1.APIService {
	return &apiregistrationv1.APIService{
		ObjectMeta: metav1.ObjectMeta{Name: "v1.metrics.example.com"},
		Spec: apiregistrationv1.APIServiceSpec{
			Group: "metrics.example.com", Version: "v1", GroupPriorityMinimum: 1000, VersionPriority: 15,
			Service:  &apiregistrationv1.ServiceReference{Namespace: namespace, Name: name},
			CABundle: caBundle,
		},
	}
}

// TestAPIServiceFrontProxy: the hub publishes kube-system/
// extension-apiserver-authentication as upstream, and an extension API
// server that trusts only what that ConfigMap says sees the hub's
// discovery check and the proxied requests as coming from the front
// proxy, for the user the hub authenticated; a client of the cluster CA
// asserting a user itself is refused.
func TestAPIServiceFrontProxy(t *testing.T) {
	ext, srv, caBundle := startExtensionServer(t, "kube-system", "widgets")
	h, _, log := startAggregatorHub(t, srv.Listener.Addr().String())
	kube, _, ac := hubClients(t, h, log)
	ctx := context.Background()

	var cm *corev1.ConfigMap
	waitFor(t, "extension-apiserver-authentication published", func(ctx context.Context) (bool, error) {
		var err error
		cm, err = kube.CoreV1().ConfigMaps(aggregator.TrustNamespace).Get(ctx, aggregator.TrustName, metav1.GetOptions{})
		return err == nil, nil
	})
	want := map[string]string{
		aggregator.KeyAllowedNames:      `["front-proxy-client"]`,
		aggregator.KeyUsernameHeaders:   `["X-Remote-User"]`,
		aggregator.KeyUIDHeaders:        `["X-Remote-Uid"]`,
		aggregator.KeyGroupHeaders:      `["X-Remote-Group"]`,
		aggregator.KeyExtraHeaderPrefix: `["X-Remote-Extra-"]`,
	}
	for k, v := range want {
		if cm.Data[k] != v {
			t.Errorf("%s = %q, want %q", k, cm.Data[k], v)
		}
	}
	if cm.Data[aggregator.KeyClientCA] == "" || cm.Data[aggregator.KeyClientCA] == cm.Data[aggregator.KeyRequestHeaderCA] {
		t.Errorf("client-ca-file %q: want the cluster CA, apart from the front-proxy CA", cm.Data[aggregator.KeyClientCA])
	}
	ext.trust(t, cm)

	// Kept current: a key removed comes back.
	edited := cm.DeepCopy()
	delete(edited.Data, aggregator.KeyAllowedNames)
	if _, err := kube.CoreV1().ConfigMaps(aggregator.TrustNamespace).Update(ctx, edited, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "allowed names restored", func(ctx context.Context) (bool, error) {
		cm, err := kube.CoreV1().ConfigMaps(aggregator.TrustNamespace).Get(ctx, aggregator.TrustName, metav1.GetOptions{})
		return err == nil && cm.Data[aggregator.KeyAllowedNames] == `["front-proxy-client"]`, nil
	})

	exposeService(t, kube, "kube-system", "widgets")
	apis := ac.ApiregistrationV1().APIServices()
	s := widgetAPIService("kube-system", "widgets", caBundle)
	if _, err := apis.Create(ctx, s, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "Available: the discovery check authenticated as the front proxy", func(ctx context.Context) (bool, error) {
		s, err := apis.Get(ctx, s.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		c := apiregistration.Available(s)
		return c != nil && c.Reason == "Passed", nil
	})

	alice := auth.User{Name: "alice", Groups: []string{auth.MastersGroup, auth.AuthenticatedGroup}}
	cfg, hc := inprocConfig(h, "test", func(*http.Request) auth.User { return alice }, log)
	cfg.AcceptContentTypes, cfg.ContentType = "application/json", "application/json"
	alices, err := kubernetes.NewForConfigAndClient(cfg, hc)
	if err != nil {
		t.Fatal(err)
	}
	body, err := alices.CoreV1().RESTClient().Get().AbsPath("/apis/metrics.example.com/v1/namespaces/default/widgets").DoRaw(ctx)
	if err != nil || !strings.Contains(string(body), `"user":"alice"`) {
		t.Fatalf("GET through the proxy = %s, %v; want the extension server to see alice", body, err)
	}

	// A client certificate of another CA is no front proxy.
	other, err := pki.Ensure(pki.DefaultConfig(t.TempDir()))
	if err != nil {
		t.Fatal(err)
	}
	admin, err := tls.X509KeyPair(other.AdminCertPEM, other.AdminKeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(caBundle)
	direct := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{
		RootCAs: roots, ServerName: "widgets.kube-system.svc", Certificates: []tls.Certificate{admin},
	}}}
	defer direct.CloseIdleConnections()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/apis/metrics.example.com/v1/namespaces/default/widgets", nil)
	req.Header.Set("X-Remote-User", "mallory")
	resp, err := direct.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("request with a cluster client certificate asserting mallory: status %d, want 401", resp.StatusCode)
	}
	ext.mu.Lock()
	defer ext.mu.Unlock()
	if slices.Contains(ext.users, "mallory") {
		t.Errorf("extension server served users %v; want mallory refused", ext.users)
	}
}
