package webhook_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"io"
	"log"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/outpost-mesh/outpost/hub/admission/webhook"
	"github.com/outpost-mesh/outpost/hub/apiserver"
	"github.com/outpost-mesh/outpost/hub/auth"
	"github.com/outpost-mesh/outpost/hub/registry/core"
	"github.com/outpost-mesh/outpost/hub/store/badgerstore"
)

// testUser is who every request of the test clients is made as.
var testUser = auth.User{Name: "alice", Groups: []string{"developers", auth.AuthenticatedGroup}}

// env is a real API server over a real store, with a Dispatcher as its
// mutating and validating admission, and the configurations it reads.
type env struct {
	cs         kubernetes.Interface
	d          *webhook.Dispatcher
	ca         *testCA
	mutating   atomic.Pointer[[]*admissionregistrationv1.MutatingWebhookConfiguration]
	validating atomic.Pointer[[]*admissionregistrationv1.ValidatingWebhookConfiguration]
	// services maps "namespace/name" to the loopback address
	// DialService connects to for that Service.
	services sync.Map
}

func newEnv(t *testing.T, edit ...func(*webhook.Config)) *env {
	t.Helper()
	e := &env{ca: newTestCA(t)}
	e.mutating.Store(&[]*admissionregistrationv1.MutatingWebhookConfiguration{})
	e.validating.Store(&[]*admissionregistrationv1.ValidatingWebhookConfiguration{})
	st, err := badgerstore.Open(badgerstore.DefaultConfig(t.TempDir()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	var nsClient kubernetes.Interface
	cfg := webhook.Config{
		Mutating:   func() []*admissionregistrationv1.MutatingWebhookConfiguration { return *e.mutating.Load() },
		Validating: func() []*admissionregistrationv1.ValidatingWebhookConfiguration { return *e.validating.Load() },
		Namespace: func(name string) (*corev1.Namespace, error) {
			return nsClient.CoreV1().Namespaces().Get(context.Background(), name, metav1.GetOptions{})
		},
		DialService: func(ctx context.Context, namespace, name string, port int32) (net.Conn, error) {
			addr, ok := e.services.Load(namespace + "/" + name)
			if !ok || port != 443 {
				return nil, &net.OpError{Op: "dial", Net: "tcp", Err: io.ErrUnexpectedEOF}
			}
			var d net.Dialer
			return d.DialContext(ctx, "tcp", addr.(string))
		},
		Logger: slog.New(slog.DiscardHandler),
	}
	for _, f := range edit {
		f(&cfg)
	}
	e.d = webhook.New(cfg)
	t.Cleanup(e.d.Close)
	srv, err := apiserver.New(apiserver.Config{Store: st, Resources: core.Resources(), Admission: e.d, Mutation: e.d})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		srv.ServeHTTP(w, r.WithContext(auth.WithUser(r.Context(), testUser)))
	}))
	t.Cleanup(hs.Close)
	t.Cleanup(srv.Shutdown)
	ns := func(name string, labels map[string]string) runtime.Object {
		return &corev1.Namespace{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Namespace"}, ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
	}
	if err := srv.Ensure(context.Background(), ns("default", nil), ns("prod", map[string]string{"env": "prod"})); err != nil {
		t.Fatal(err)
	}
	e.cs, err = kubernetes.NewForConfig(&rest.Config{Host: hs.URL, QPS: -1})
	if err != nil {
		t.Fatal(err)
	}
	nsClient = e.cs
	return e
}

// setMutating and setValidating replace the configurations, each with a
// new resourceVersion as a store would give it.
func (e *env) setMutating(cs ...*admissionregistrationv1.MutatingWebhookConfiguration) {
	for _, c := range cs {
		c.UID, c.ResourceVersion = types.UID("uid-"+c.Name), nextRV()
	}
	e.mutating.Store(&cs)
}

func (e *env) setValidating(cs ...*admissionregistrationv1.ValidatingWebhookConfiguration) {
	for _, c := range cs {
		c.UID, c.ResourceVersion = types.UID("uid-"+c.Name), nextRV()
	}
	e.validating.Store(&cs)
}

var rv atomic.Int64

func nextRV() string { return strconv.FormatInt(rv.Add(1), 10) }

// reviewer answers one AdmissionReview request.
type reviewer func(req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse

// hookServer is a webhook server on 127.0.0.1 with a certificate of the
// test CA, for 127.0.0.1 and webhook.default.svc.
type hookServer struct {
	*httptest.Server
	mu       sync.Mutex
	requests []*admissionv1.AdmissionRequest
}

func (e *env) serve(t *testing.T, h http.Handler) *hookServer {
	t.Helper()
	s := &hookServer{}
	s.Server = httptest.NewUnstartedServer(h)
	s.TLS = &tls.Config{Certificates: []tls.Certificate{e.ca.leaf}}
	s.Config.ErrorLog = log.New(io.Discard, "", 0) // the handshakes refused on purpose
	s.StartTLS()
	t.Cleanup(s.Close)
	return s
}

// review serves AdmissionReview v1 requests with f, recording them.
func (e *env) review(t *testing.T, f reviewer) *hookServer {
	var s *hookServer
	s = e.serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var ar admissionv1.AdmissionReview
		if err := json.NewDecoder(r.Body).Decode(&ar); err != nil || ar.Request == nil {
			http.Error(w, "bad review", http.StatusBadRequest)
			return
		}
		s.mu.Lock()
		s.requests = append(s.requests, ar.Request)
		s.mu.Unlock()
		resp := f(ar.Request)
		resp.UID = ar.Request.UID
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(&admissionv1.AdmissionReview{TypeMeta: ar.TypeMeta, Response: resp})
	}))
	return s
}

func (s *hookServer) calls() []*admissionv1.AdmissionRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*admissionv1.AdmissionRequest(nil), s.requests...)
}

// testCA is a CA made for one test, and a serving certificate it signed.
type testCA struct {
	pem  []byte
	leaf tls.Certificate
}

func newTestCA(t *testing.T) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "webhook test CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	leafKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	leafTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "webhook"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, DNSNames: []string{"webhook.default.svc"},
	}
	leafDER, err := x509.CreateCertificate(rand.Reader, leafTmpl, ca, &leafKey.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return &testCA{
		pem:  pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}),
		leaf: tls.Certificate{Certificate: [][]byte{leafDER}, PrivateKey: leafKey},
	}
}

// configmapRules match creates and updates of configmaps.
var configmapRules = []admissionregistrationv1.RuleWithOperations{{
	Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
	Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"configmaps"}},
}}

// urlConfig is the client config of a url webhook at s's path, trusting
// the test CA.
func (e *env) urlConfig(s *httptest.Server, path string) admissionregistrationv1.WebhookClientConfig {
	u := s.URL + path
	return admissionregistrationv1.WebhookClientConfig{URL: &u, CABundle: e.ca.pem}
}

// validating returns a validating webhook on configmaps with v1's
// defaults and failure policy fp.
func validating(name string, cc admissionregistrationv1.WebhookClientConfig, fp admissionregistrationv1.FailurePolicyType) admissionregistrationv1.ValidatingWebhook {
	return admissionregistrationv1.ValidatingWebhook{
		Name: name, ClientConfig: cc, Rules: configmapRules, FailurePolicy: &fp,
		SideEffects: new(admissionregistrationv1.SideEffectClassNone), TimeoutSeconds: new(int32(10)),
		AdmissionReviewVersions: []string{"v1"},
	}
}

func mutating(name string, cc admissionregistrationv1.WebhookClientConfig) admissionregistrationv1.MutatingWebhook {
	return admissionregistrationv1.MutatingWebhook{
		Name: name, ClientConfig: cc, Rules: configmapRules, FailurePolicy: new(admissionregistrationv1.Fail),
		SideEffects: new(admissionregistrationv1.SideEffectClassNone), TimeoutSeconds: new(int32(10)),
		AdmissionReviewVersions: []string{"v1"}, ReinvocationPolicy: new(admissionregistrationv1.NeverReinvocationPolicy),
	}
}

func vconfig(name string, hooks ...admissionregistrationv1.ValidatingWebhook) *admissionregistrationv1.ValidatingWebhookConfiguration {
	return &admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: name}, Webhooks: hooks}
}

func mconfig(name string, hooks ...admissionregistrationv1.MutatingWebhook) *admissionregistrationv1.MutatingWebhookConfiguration {
	return &admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: name}, Webhooks: hooks}
}

// allow admits everything.
func allow(*admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
	return &admissionv1.AdmissionResponse{Allowed: true}
}

// addLabel returns a reviewer that adds label key=value with a JSONPatch.
func addLabel(key, value string) reviewer {
	return func(req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
		var m struct {
			Metadata metav1.ObjectMeta `json:"metadata"`
		}
		json.Unmarshal(req.Object.Raw, &m)
		var patch []map[string]any
		if m.Metadata.Labels == nil {
			patch = append(patch, map[string]any{"op": "add", "path": "/metadata/labels", "value": map[string]string{}})
		}
		patch = append(patch, map[string]any{"op": "add", "path": "/metadata/labels/" + key, "value": value})
		b, _ := json.Marshal(patch)
		return &admissionv1.AdmissionResponse{Allowed: true, Patch: b, PatchType: new(admissionv1.PatchTypeJSONPatch)}
	}
}

func configMap(name string, labels map[string]string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}, Data: map[string]string{"k": "v"}}
}

// corev1Secret is a secret no configmap webhook is asked about.
var corev1Secret = corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "s"}}

// jsonDecode decodes r's JSON body into v.
func jsonDecode(r *http.Request, v any) error { return json.NewDecoder(r.Body).Decode(v) }

// b64 is s in base64, as JSON carries bytes.
func b64(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }
