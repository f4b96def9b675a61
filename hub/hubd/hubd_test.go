package hubd

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/outpost-mesh/outpost/hub/pki"
	"github.com/outpost-mesh/outpost/hub/store/etcdstore/etcdtest"
	"github.com/outpost-mesh/outpost/internal/testlog"

	"github.com/outpost-mesh/outpost/internal/wait"
)

// adminConfig returns the client configuration of h's admin kubeconfig,
// without client-side rate limits.
func adminConfig(t *testing.T, h *Hub) *rest.Config {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", h.KubeconfigPath())
	if err != nil {
		t.Fatal(err)
	}
	cfg.QPS = -1
	return cfg
}

// noControllers runs a hub without its controllers and scheduler, for
// tests that count or compare exactly what they made.
func noControllers(c *Config) { c.Controllers = false }

// startHub runs a hub on a free loopback port until the test ends and
// returns it once ready. stop cancels it and waits for Run to return.
func startHub(t *testing.T, dataDir string, opts ...func(*Config)) (h *Hub, stop func()) {
	t.Helper()
	cfg := DefaultConfig(dataDir)
	cfg.APIAddr = "127.0.0.1:0"
	for _, o := range opts {
		o(&cfg)
	}
	cfg.Logger = testlog.New(t, slog.LevelDebug)
	h, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	bg := wait.Start(t, 30*time.Second, "hub Run", h.Run)
	stop = func() {
		t.Helper()
		if err := bg.Stop(); err != nil {
			t.Errorf("Run returned %v after cancel, want nil", err)
		}
	}
	t.Cleanup(stop)
	select {
	case <-h.Ready():
	case <-bg.Done():
		t.Fatalf("Run returned before ready: %v", bg.Err())
	case <-time.After(60 * time.Second):
		t.Fatalf("hub not ready within 60s")
	}
	return h, stop
}

// adminClient returns an HTTP client that uses the credentials of the
// kubeconfig at path, as kubectl would, and the server URL from it.
func adminClient(t *testing.T, path string) (*http.Client, string) {
	t.Helper()
	k, err := pki.ReadKubeconfig(path)
	if err != nil {
		t.Fatal(err)
	}
	cluster, user, err := k.Context(k.CurrentContext)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := tls.X509KeyPair(user.ClientCertificateData, user.ClientKeyData)
	if err != nil {
		t.Fatal(err)
	}
	return newClient(t, cluster.CertificateAuthorityData, &cert), cluster.Server
}

func newClient(t *testing.T, caPEM []byte, cert *tls.Certificate) *http.Client {
	t.Helper()
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(caPEM) {
		t.Fatal("no CA certificate in PEM")
	}
	cfg := &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}
	if cert != nil {
		cfg.Certificates = []tls.Certificate{*cert}
	}
	tr := &http.Transport{TLSClientConfig: cfg, ForceAttemptHTTP2: true}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 30 * time.Second}
}

func get(t *testing.T, c *http.Client, url string) (int, string, []byte) {
	t.Helper()
	resp, err := c.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: read body: %v", url, err)
	}
	return resp.StatusCode, resp.Header.Get("Content-Type"), body
}

func wantStatus(t *testing.T, body []byte, code int, reason string) {
	t.Helper()
	var s map[string]any
	if err := json.Unmarshal(body, &s); err != nil {
		t.Fatalf("body %q is not JSON: %v", body, err)
	}
	want := map[string]any{"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": reason, "code": float64(code)}
	for k, v := range want {
		if s[k] != v {
			t.Errorf("Status %s = %v, want %v (body %s)", k, s[k], v, body)
		}
	}
	if _, ok := s["metadata"].(map[string]any); !ok {
		t.Errorf("Status has no metadata object: %s", body)
	}
}

func TestHub(t *testing.T) {
	defer goleak.VerifyNone(t)

	dir := t.TempDir()
	h, stop := startHub(t, dir)
	if want := filepath.Join(dir, KubeconfigFile); h.KubeconfigPath() != want {
		t.Errorf("KubeconfigPath() = %q, want %q", h.KubeconfigPath(), want)
	}
	if _, port, err := net.SplitHostPort(h.Addr()); err != nil || port == "0" {
		t.Fatalf("Addr() = %q, want a bound port", h.Addr())
	}
	admin, server := adminClient(t, h.KubeconfigPath())
	if want := "https://" + h.Addr(); server != want {
		t.Errorf("kubeconfig server = %q, want %q", server, want)
	}

	t.Run("health", func(t *testing.T) {
		for _, path := range []string{"/healthz", "/livez", "/readyz"} {
			code, _, body := get(t, admin, server+path)
			if code != http.StatusOK || string(body) != "ok" {
				t.Errorf("GET %s = %d %q, want 200 ok", path, code, body)
			}
		}
		code, _, body := get(t, admin, server+"/readyz?verbose")
		if code != http.StatusOK || !bytes.Contains(body, []byte("[+]store ok")) {
			t.Errorf("GET /readyz?verbose = %d %q, want 200 with [+]store ok", code, body)
		}
	})

	t.Run("version", func(t *testing.T) {
		code, ctype, body := get(t, admin, server+"/version")
		if code != http.StatusOK || ctype != "application/json" {
			t.Fatalf("GET /version = %d %s %s", code, ctype, body)
		}
		var v map[string]string
		if err := json.Unmarshal(body, &v); err != nil {
			t.Fatal(err)
		}
		for _, field := range []string{"major", "minor", "gitVersion", "gitCommit", "goVersion", "compiler", "platform", "buildDate"} {
			if v[field] == "" {
				t.Errorf("/version has no %s: %s", field, body)
			}
		}
		if v["major"] != "1" || v["gitVersion"] != "v1.33.0-outpost+dev" {
			t.Errorf("/version major %q gitVersion %q, want 1 and v1.33.0-outpost+dev", v["major"], v["gitVersion"])
		}
	})

	t.Run("not found", func(t *testing.T) {
		for _, path := range []string{"/", "/apis/nogroup/v1", "/api/v1/nothings", "/healthz/extra"} {
			code, ctype, body := get(t, admin, server+path)
			if code != http.StatusNotFound || ctype != "application/json" {
				t.Errorf("GET %s = %d %s, want 404 application/json", path, code, ctype)
			}
			wantStatus(t, body, http.StatusNotFound, "NotFound")
		}
	})

	t.Run("no client certificate", func(t *testing.T) {
		k, err := pki.ReadKubeconfig(h.KubeconfigPath())
		if err != nil {
			t.Fatal(err)
		}
		anon := newClient(t, k.Clusters[0].Cluster.CertificateAuthorityData, nil)
		// Health and version are for anyone, as upstream's
		// system:public-info-viewer has them: load balancers and probes
		// have no certificate.
		for _, path := range []string{"/healthz", "/livez", "/readyz"} {
			if code, _, body := get(t, anon, server+path); code != http.StatusOK || string(body) != "ok" {
				t.Errorf("GET %s without a certificate = %d %q, want 200 ok", path, code, body)
			}
		}
		if code, _, body := get(t, anon, server+"/readyz?verbose"); code != http.StatusOK || !bytes.Contains(body, []byte("[+]store ok")) {
			t.Errorf("GET /readyz?verbose without a certificate = %d %q, want 200 with [+]store ok", code, body)
		}
		resp, err := anon.Head(server + "/healthz")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("HEAD /healthz without a certificate = %d, want 200", resp.StatusCode)
		}
		code, ctype, body := get(t, anon, server+"/version")
		var v map[string]string
		if code != http.StatusOK || ctype != "application/json" || json.Unmarshal(body, &v) != nil || v["gitVersion"] == "" {
			t.Errorf("GET /version without a certificate = %d %s %q, want 200 with the version", code, ctype, body)
		}
		// Everything else is 401, as before.
		for _, path := range []string{"/api", "/apis", "/api/v1/namespaces/default/pods", "/openapi/v2", "/metrics", "/debug/pprof/", "/healthz/extra", "/"} {
			code, _, body := get(t, anon, server+path)
			if code != http.StatusUnauthorized {
				t.Errorf("GET %s without a certificate = %d, want 401", path, code)
			}
			const want = `{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"Unauthorized","reason":"Unauthorized","code":401}`
			if got := strings.TrimSpace(string(body)); got != want {
				t.Errorf("GET %s without a certificate: body\n%s\nwant\n%s", path, got, want)
			}
		}
		resp, err = anon.Post(server+"/healthz", "text/plain", nil)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("POST /healthz without a certificate = %d, want 401", resp.StatusCode)
		}
	})

	t.Run("foreign client certificate", func(t *testing.T) {
		// An admin certificate from another hub's CA.
		otherCfg := pki.DefaultConfig(filepath.Join(t.TempDir(), "pki"))
		other, err := pki.Ensure(otherCfg)
		if err != nil {
			t.Fatal(err)
		}
		cert, err := tls.X509KeyPair(other.AdminCertPEM, other.AdminKeyPEM)
		if err != nil {
			t.Fatal(err)
		}
		k, err := pki.ReadKubeconfig(h.KubeconfigPath())
		if err != nil {
			t.Fatal(err)
		}
		c := newClient(t, k.Clusters[0].Cluster.CertificateAuthorityData, &cert)
		// A certificate that does not verify fails the request, even
		// where none is needed: upstream's x509 authenticator does not
		// fall back to anonymous either.
		for _, path := range []string{"/healthz", "/readyz", "/version", "/api"} {
			code, _, body := get(t, c, server+path)
			if code != http.StatusUnauthorized {
				t.Errorf("GET %s with a foreign certificate = %d, want 401", path, code)
			}
			wantStatus(t, body, http.StatusUnauthorized, "Unauthorized")
		}
	})

	first, err := pki.ReadKubeconfig(h.KubeconfigPath())
	if err != nil {
		t.Fatal(err)
	}
	admin.CloseIdleConnections()
	stop()

	// A second start reuses the PKI: the first kubeconfig's CA and
	// credentials still work.
	h2, stop2 := startHub(t, dir)
	_, server2 := adminClient(t, h2.KubeconfigPath())
	cert, err := tls.X509KeyPair(first.Users[0].User.ClientCertificateData, first.Users[0].User.ClientKeyData)
	if err != nil {
		t.Fatal(err)
	}
	c := newClient(t, first.Clusters[0].Cluster.CertificateAuthorityData, &cert)
	if code, _, body := get(t, c, server2+"/healthz"); code != http.StatusOK {
		t.Errorf("GET /healthz after restart with the first kubeconfig = %d %q, want 200", code, body)
	}
	c.CloseIdleConnections()
	stop2()
}

// TestHubEtcd runs the hub on an etcd store (an etcd server embedded in the
// test) and checks that /readyz follows the store.
func TestHubEtcd(t *testing.T) {
	defer goleak.VerifyNone(t)
	etcd := etcdtest.Start(t, t.TempDir())
	defer etcd.Stop()

	h, stop := startHub(t, t.TempDir(), func(c *Config) {
		c.Store = StoreEtcd
		c.EtcdEndpoints = etcd.Endpoints()
	})
	admin, server := adminClient(t, h.KubeconfigPath())
	if code, _, body := get(t, admin, server+"/readyz?verbose"); code != http.StatusOK || !bytes.Contains(body, []byte("[+]store ok")) {
		t.Errorf("GET /readyz?verbose = %d %q, want 200 with [+]store ok", code, body)
	}

	etcd.Stop()
	if code, _, body := get(t, admin, server+"/readyz"); code != http.StatusServiceUnavailable || !bytes.Contains(body, []byte("[-]store failed")) {
		t.Errorf("GET /readyz with etcd stopped = %d %q, want 503 with [-]store failed", code, body)
	}
	if code, _, _ := get(t, admin, server+"/livez"); code != http.StatusOK {
		t.Errorf("GET /livez with etcd stopped = %d, want 200: liveness does not depend on the store", code)
	}
	admin.CloseIdleConnections()
	stop()
}

// TestGracefulPodDeletion: a pod deleted with a grace period stays,
// Terminating, through its node's status updates, until the node confirms
// with a deletion of grace 0, as upstream.
func TestGracefulPodDeletion(t *testing.T) {
	defer goleak.VerifyNone(t)
	h, stop := startHub(t, t.TempDir())
	defer stop()
	ctx := context.Background()
	admin, _ := clientset(t, adminConfig(t, h))
	pods := admin.CoreV1().Pods("default")
	if _, err := admin.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "edge-a"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod, err := pods.Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec:       corev1.PodSpec{NodeName: "edge-a", Containers: []corev1.Container{{Name: "app", Image: "busybox"}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pod.Status.Phase = corev1.PodRunning
	if _, err := pods.UpdateStatus(ctx, pod, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := pods.Delete(ctx, "web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	pod, err = pods.Get(ctx, "web", metav1.GetOptions{})
	if err != nil || pod.DeletionTimestamp == nil || pod.DeletionGracePeriodSeconds == nil || *pod.DeletionGracePeriodSeconds != 30 {
		t.Fatalf("after a graceful delete: %v, %v; want the pod Terminating with a grace of 30s", pod, err)
	}
	// The node reports its containers stopping: the pod stays.
	pod.Status.Phase = corev1.PodSucceeded
	if _, err := pods.UpdateStatus(ctx, pod, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("status update while Terminating: %v", err)
	}
	if p, err := pods.Get(ctx, "web", metav1.GetOptions{}); err != nil || p.Status.Phase != corev1.PodSucceeded {
		t.Fatalf("after a status update while Terminating: %v, %v; want the pod still there", p, err)
	}
	// The node confirms.
	zero := int64(0)
	if err := pods.Delete(ctx, "web", metav1.DeleteOptions{GracePeriodSeconds: &zero, Preconditions: &metav1.Preconditions{UID: &pod.UID}}); err != nil {
		t.Fatal(err)
	}
	if _, err := pods.Get(ctx, "web", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("after the node's confirmation: %v, want NotFound", err)
	}
}
