package hubd

import (
	"bytes"
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/outpost-mesh/outpost/hub/auth"
	"github.com/outpost-mesh/outpost/hub/pki"
)

// loadCA reads the hub's CA certificate and key from its data directory.
func loadCA(t *testing.T, dataDir string) (*x509.Certificate, crypto.Signer) {
	t.Helper()
	certPEM, err := os.ReadFile(filepath.Join(dataDir, PKIDir, pki.CACertFile))
	if err != nil {
		t.Fatal(err)
	}
	keyPEM, err := os.ReadFile(filepath.Join(dataDir, PKIDir, pki.CAKeyFile))
	if err != nil {
		t.Fatal(err)
	}
	cb, _ := pem.Decode(certPEM)
	kb, _ := pem.Decode(keyPEM)
	if cb == nil || kb == nil {
		t.Fatal("CA files hold no PEM")
	}
	ca, err := x509.ParseCertificate(cb.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	key, err := x509.ParsePKCS8PrivateKey(kb.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return ca, key.(crypto.Signer)
}

// nodeCredentials returns the PEM certificate and key of node name, issued
// as a joining node gets them: a CSR signed with SignNodeCSR.
func nodeCredentials(t *testing.T, ca *x509.Certificate, caKey crypto.Signer, name string) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	csr, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{
		Subject: pkix.Name{CommonName: "system:node:" + name, Organization: []string{"system:nodes"}},
	}, key)
	if err != nil {
		t.Fatal(err)
	}
	der, err := pki.SignNodeCSR(ca, caKey, csr, name, 0, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return pemOf("CERTIFICATE", der), pemKey(t, key)
}

// userCredentials returns a client certificate for any subject, signed by
// the CA directly: a user the hub knows but no rule grants anything.
func userCredentials(t *testing.T, ca *x509.Certificate, caKey crypto.Signer, subject pkix.Name) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.CreateCertificate(rand.Reader, &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      subject,
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	return pemOf("CERTIFICATE", der), pemKey(t, key)
}

func pemOf(typ string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
}

func pemKey(t *testing.T, key *ecdsa.PrivateKey) []byte {
	t.Helper()
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pemOf("PRIVATE KEY", der)
}

// clientset returns a client-go clientset for cfg over a transport of its
// own, closed when the test ends (client-go's shared transports would
// outlive it), and the raw HTTP client under it.
func clientset(t *testing.T, cfg *rest.Config) (kubernetes.Interface, *http.Client) {
	t.Helper()
	tlsCfg, err := rest.TLSConfigFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	tr := &http.Transport{TLSClientConfig: tlsCfg, ForceAttemptHTTP2: true}
	t.Cleanup(tr.CloseIdleConnections)
	hc := &http.Client{Transport: tr, Timeout: 30 * time.Second}
	cs, err := kubernetes.NewForConfigAndClient(cfg, hc)
	if err != nil {
		t.Fatal(err)
	}
	return cs, hc
}

// userConfig returns a rest.Config reaching admin's hub with other
// credentials.
func userConfig(admin *rest.Config, certPEM, keyPEM []byte) *rest.Config {
	return &rest.Config{
		Host:            admin.Host,
		TLSClientConfig: rest.TLSClientConfig{CAData: admin.CAData, CertData: certPEM, KeyData: keyPEM},
		QPS:             -1,
	}
}

func secretVolume(name string) corev1.Volume {
	return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: name}}}
}

// TestNodeAuthorization talks to a real hub with client-go as node edge-a
// holding a certificate from SignNodeCSR: it may read its own Node and
// pods and what they refer to, write its own status and Lease, and nothing
// of edge-b's.
func TestNodeAuthorization(t *testing.T) {
	defer goleak.VerifyNone(t)
	dir := t.TempDir()
	h, stop := startHub(t, dir)
	defer stop()
	ctx := context.Background()

	adminCfg := adminConfig(t, h)
	admin, _ := clientset(t, adminCfg)
	for _, n := range []string{"edge-a", "edge-b"} {
		if _, err := admin.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, s := range []string{"a-secret", "b-secret", "unused"} {
		if _, err := admin.CoreV1().Secrets("default").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: s}, StringData: map[string]string{"k": s}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	podOn := func(name, node, secret string) *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: corev1.PodSpec{
				NodeName:   node,
				Containers: []corev1.Container{{Name: "app", Image: "busybox"}},
				Volumes:    []corev1.Volume{secretVolume(secret)},
			},
		}
	}
	for _, p := range []*corev1.Pod{podOn("pod-a", "edge-a", "a-secret"), podOn("pod-b", "edge-b", "b-secret")} {
		if _, err := admin.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	ca, caKey := loadCA(t, dir)
	certPEM, keyPEM := nodeCredentials(t, ca, caKey, "edge-a")
	nodeCfg := userConfig(adminCfg, certPEM, keyPEM)
	node, nodeHTTP := clientset(t, nodeCfg)
	protoCfg := rest.CopyConfig(nodeCfg)
	protoCfg.ContentType = "application/vnd.kubernetes.protobuf"
	nodeProto, _ := clientset(t, protoCfg)

	mustForbid := func(what string, err error) {
		t.Helper()
		if !apierrors.IsForbidden(err) {
			t.Errorf("%s: %v, want Forbidden", what, err)
		}
	}

	// Reads.
	if n, err := node.CoreV1().Nodes().Get(ctx, "edge-a", metav1.GetOptions{}); err != nil || n.Name != "edge-a" {
		t.Errorf("get own node: %v", err)
	}
	pods, err := node.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=edge-a"})
	if err != nil || len(pods.Items) != 1 || pods.Items[0].Name != "pod-a" {
		t.Errorf("list own pods: %v, %v", pods, err)
	}
	if _, err := node.CoreV1().Pods("default").Get(ctx, "pod-a", metav1.GetOptions{}); err != nil {
		t.Errorf("get own pod: %v", err)
	}
	if s, err := node.CoreV1().Secrets("default").Get(ctx, "a-secret", metav1.GetOptions{}); err != nil || string(s.Data["k"]) != "a-secret" {
		t.Errorf("get the secret of its pod: %v", err)
	}
	if _, err := node.CoreV1().Services("default").Get(ctx, "kubernetes", metav1.GetOptions{}); err != nil {
		t.Errorf("get a service: %v", err)
	}
	if _, err := node.Discovery().ServerVersion(); err != nil {
		t.Errorf("version: %v", err)
	}
	if _, err := node.Discovery().ServerGroups(); err != nil {
		t.Errorf("discovery: %v", err)
	}

	// What it may not read.
	_, err = node.CoreV1().Secrets("default").Get(ctx, "b-secret", metav1.GetOptions{})
	mustForbid("get edge-b's secret", err)
	const want = `secrets "b-secret" is forbidden: User "system:node:edge-a" cannot get resource "secrets" in API group "" in the namespace "default": no relationship found between node 'edge-a' and this object`
	if err == nil || err.Error() != want {
		t.Errorf("get edge-b's secret: %v, want %s", err, want)
	}
	var st apierrors.APIStatus
	if errors.As(err, &st) {
		if d := st.Status().Details; d == nil || d.Name != "b-secret" || d.Kind != "secrets" {
			t.Errorf("Forbidden details = %+v, want secrets b-secret", d)
		}
	}
	_, err = node.CoreV1().Secrets("default").Get(ctx, "unused", metav1.GetOptions{})
	mustForbid("get a secret no pod uses", err)
	_, err = node.CoreV1().Secrets("default").Get(ctx, "missing", metav1.GetOptions{})
	mustForbid("get a missing secret", err)
	_, err = node.CoreV1().Secrets("default").List(ctx, metav1.ListOptions{})
	mustForbid("list secrets", err)
	_, err = node.CoreV1().Secrets("").List(ctx, metav1.ListOptions{})
	mustForbid("list secrets in all namespaces", err)
	_, err = node.CoreV1().Secrets("default").Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=a-secret"})
	mustForbid("watch its pod's secret", err)
	_, err = node.CoreV1().ConfigMaps("default").List(ctx, metav1.ListOptions{})
	mustForbid("list configmaps", err)
	_, err = node.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
	mustForbid("list namespaces", err)
	_, err = node.AppsV1().Deployments("default").List(ctx, metav1.ListOptions{})
	mustForbid("list deployments", err)

	// Pod status: its own pod's, not edge-b's.
	podB, err := admin.CoreV1().Pods("default").Get(ctx, "pod-b", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	podB.Status.Phase = corev1.PodRunning
	_, err = node.CoreV1().Pods("default").UpdateStatus(ctx, podB, metav1.UpdateOptions{})
	mustForbid("update edge-b's pod status", err)
	_, err = node.CoreV1().Pods("default").Patch(ctx, "pod-b", types.MergePatchType, []byte(`{"status":{"phase":"Failed"}}`), metav1.PatchOptions{}, "status")
	mustForbid("patch edge-b's pod status", err)
	if p, _ := admin.CoreV1().Pods("default").Get(ctx, "pod-b", metav1.GetOptions{}); p == nil || p.Status.Phase == corev1.PodRunning || p.Status.Phase == corev1.PodFailed {
		t.Errorf("edge-b's pod status changed: %+v", p)
	}
	podA, err := node.CoreV1().Pods("default").Get(ctx, "pod-a", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	podA.Status.Phase = corev1.PodRunning
	if _, err := node.CoreV1().Pods("default").UpdateStatus(ctx, podA, metav1.UpdateOptions{}); err != nil {
		t.Errorf("update own pod status: %v", err)
	}
	if p, err := admin.CoreV1().Pods("default").Get(ctx, "pod-a", metav1.GetOptions{}); err != nil || p.Status.Phase != corev1.PodRunning {
		t.Errorf("own pod status not written: %v", err)
	}
	_, err = node.CoreV1().Pods("default").Update(ctx, podA, metav1.UpdateOptions{})
	mustForbid("update own pod's spec", err)
	// A pod that is gone (a deletion confirmed twice) is not found, as
	// upstream's NodeRestriction answers.
	gone := podA.DeepCopy()
	gone.Name = "gone"
	if _, err := node.CoreV1().Pods("default").UpdateStatus(ctx, gone, metav1.UpdateOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("update the status of a pod that does not exist: %v, want NotFound", err)
	}
	if err := node.CoreV1().Pods("default").Delete(ctx, "gone", metav1.DeleteOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("delete a pod that does not exist: %v, want NotFound", err)
	}
	_, err = node.CoreV1().Pods("default").Create(ctx, podOn("pod-c", "edge-a", "a-secret"), metav1.CreateOptions{})
	mustForbid("create a pod", err)

	// Its own Node and Lease, in JSON and in protobuf; not edge-b's.
	if _, err := node.CoreV1().Nodes().Patch(ctx, "edge-a", types.MergePatchType, []byte(`{"status":{"conditions":[{"type":"Ready","status":"True"}]}}`), metav1.PatchOptions{}, "status"); err != nil {
		t.Errorf("patch own node status: %v", err)
	}
	_, err = node.CoreV1().Nodes().Patch(ctx, "edge-b", types.MergePatchType, []byte(`{"metadata":{"labels":{"x":"y"}}}`), metav1.PatchOptions{})
	mustForbid("patch edge-b's node", err)
	_, err = node.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "edge-c"}}, metav1.CreateOptions{})
	mustForbid("create another node", err)
	_, err = nodeProto.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "edge-c"}}, metav1.CreateOptions{})
	mustForbid("create another node in protobuf", err)
	mustForbid("delete own node", node.CoreV1().Nodes().Delete(ctx, "edge-a", metav1.DeleteOptions{}))

	lease := func(name string) *coordinationv1.Lease {
		holder := name
		return &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: coordinationv1.LeaseSpec{HolderIdentity: &holder}}
	}
	leases := node.CoordinationV1().Leases(auth.NodeLeaseNamespace)
	if _, err := leases.Create(ctx, lease("edge-a"), metav1.CreateOptions{}); err != nil {
		t.Errorf("create own lease: %v", err)
	}
	_, err = leases.Create(ctx, lease("edge-b"), metav1.CreateOptions{})
	mustForbid("create edge-b's lease", err)
	_, err = nodeProto.CoordinationV1().Leases(auth.NodeLeaseNamespace).Create(ctx, lease("edge-b"), metav1.CreateOptions{})
	mustForbid("create edge-b's lease in protobuf", err)
	_, err = node.CoordinationV1().Leases("default").Create(ctx, lease("edge-a"), metav1.CreateOptions{})
	mustForbid("create a lease in default", err)
	if err := leases.Delete(ctx, "edge-a", metav1.DeleteOptions{}); err != nil {
		t.Errorf("delete own lease: %v", err)
	}
	if _, err := nodeProto.CoordinationV1().Leases(auth.NodeLeaseNamespace).Create(ctx, lease("edge-a"), metav1.CreateOptions{}); err != nil {
		t.Errorf("create own lease in protobuf: %v", err)
	}
	if l, err := leases.Get(ctx, "edge-a", metav1.GetOptions{}); err != nil || *l.Spec.HolderIdentity != "edge-a" {
		t.Errorf("get own lease: %v", err)
	}
	if _, err := admin.CoordinationV1().Leases(auth.NodeLeaseNamespace).Get(ctx, "edge-b", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("edge-b's lease: %v, want NotFound", err)
	}

	// Events.
	ev := &corev1.Event{ObjectMeta: metav1.ObjectMeta{GenerateName: "pod-a."}, InvolvedObject: corev1.ObjectReference{Kind: "Pod", Namespace: "default", Name: "pod-a"},
		Reason: "Started", Message: "started", Type: corev1.EventTypeNormal, Source: corev1.EventSource{Component: "outpost-edge", Host: "edge-a"}}
	if _, err := node.CoreV1().Events("default").Create(ctx, ev, metav1.CreateOptions{}); err != nil {
		t.Errorf("create an event: %v", err)
	}

	// Deleting pods bound to it, and only those.
	mustForbid("delete edge-b's pod", node.CoreV1().Pods("default").Delete(ctx, "pod-b", metav1.DeleteOptions{}))
	if err := node.CoreV1().Pods("default").Delete(ctx, "pod-a", metav1.DeleteOptions{}); err != nil {
		t.Errorf("delete own pod: %v", err)
	}

	// Non-resource paths: health and version yes, metrics and pprof no.
	for path, code := range map[string]int{"/healthz": 200, "/version": 200, "/openapi/v2": 200, "/metrics": 403, "/debug/pprof/": 403} {
		resp, err := nodeHTTP.Get(nodeCfg.Host + path)
		if err != nil {
			t.Fatal(err)
		}
		body := new(bytes.Buffer)
		body.ReadFrom(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != code {
			t.Errorf("GET %s as a node = %d, want %d", path, resp.StatusCode, code)
		}
		if code == 403 {
			wantStatus(t, body.Bytes(), 403, "Forbidden")
			want := `forbidden: User \"system:node:edge-a\" cannot get path \"` + path + `\"`
			if !strings.Contains(body.String(), want) {
				t.Errorf("GET %s: body %s, want message %s", path, body, want)
			}
		}
	}
}

// TestOtherUsersForbidden: a certificate from the hub CA that is neither
// system:masters nor a node, and bound to no role, reads discovery and
// health, and gets upstream's 403 for anything else.
func TestOtherUsersForbidden(t *testing.T) {
	defer goleak.VerifyNone(t)
	dir := t.TempDir()
	h, stop := startHub(t, dir)
	defer stop()
	ctx := context.Background()
	adminCfg := adminConfig(t, h)
	ca, caKey := loadCA(t, dir)
	for _, subject := range []pkix.Name{
		{CommonName: "bob", Organization: []string{"developers"}},
		{CommonName: "system:node:edge-a"},                             // the name without the group
		{CommonName: "edge-a", Organization: []string{"system:nodes"}}, // the group without the name
	} {
		certPEM, keyPEM := userCredentials(t, ca, caKey, subject)
		cfg := userConfig(adminCfg, certPEM, keyPEM)
		cs, hc := clientset(t, cfg)
		if _, err := cs.Discovery().ServerGroups(); err != nil {
			t.Errorf("%s: discovery: %v", subject, err)
		}
		_, err := cs.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
		want := fmt.Sprintf(`pods is forbidden: User %q cannot list resource "pods" in API group "" at the cluster scope`, subject.CommonName)
		if !apierrors.IsForbidden(err) || err.Error() != want {
			t.Errorf("%s: list pods: %v, want Forbidden: %s", subject, err, want)
		}
		_, err = cs.CoreV1().Nodes().Get(ctx, "edge-a", metav1.GetOptions{})
		if !apierrors.IsForbidden(err) {
			t.Errorf("%s: get node: %v, want Forbidden", subject, err)
		}
		resp, err := hc.Get(cfg.Host + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("%s: GET /readyz = %d, want 200", subject, resp.StatusCode)
		}
	}
}

// TestCreateName decodes create bodies as the API server does.
func TestCreateName(t *testing.T) {
	nodeJSON := `{"apiVersion":"v1","kind":"Node","metadata":{"name":"edge-a"}}`
	attrs := auth.Attributes{ResourceRequest: true, Verb: "create", APIVersion: "v1", Resource: "nodes"}
	leaseAttrs := auth.Attributes{ResourceRequest: true, Verb: "create", APIGroup: "coordination.k8s.io", APIVersion: "v1", Resource: "leases", Namespace: "kube-node-lease"}
	for _, tc := range []struct {
		name, contentType, body string
		attrs                   auth.Attributes
		want                    string
	}{
		{"json", "application/json", nodeJSON, attrs, "edge-a"},
		{"json by default", "", nodeJSON, attrs, "edge-a"},
		{"json with charset", "application/json; charset=utf-8", nodeJSON, attrs, "edge-a"},
		{"no kind", "application/json", `{"metadata":{"name":"edge-a"}}`, attrs, "edge-a"},
		{"yaml", "application/yaml", "apiVersion: v1\nkind: Node\nmetadata:\n  name: edge-a\n", attrs, "edge-a"},
		{"lease", "application/json", `{"apiVersion":"coordination.k8s.io/v1","kind":"Lease","metadata":{"name":"edge-a"}}`, leaseAttrs, "edge-a"},
		// case-sensitive as the API server's decoder: "Name" is not "name"
		{"other case", "application/json", `{"metadata":{"name":"edge-b","Name":"edge-a"}}`, attrs, "edge-b"},
		{"generateName", "application/json", `{"metadata":{"generateName":"edge-"}}`, attrs, ""},
		{"yaml sent as json", "application/json", "metadata:\n  name: edge-a\n", attrs, ""},
		{"unknown type", "text/plain", nodeJSON, attrs, ""},
		{"bad type", "application/json; =", nodeJSON, attrs, ""},
		{"too large", "application/json", `{"metadata":{"name":"edge-a"},"x":"` + strings.Repeat("x", 4<<20) + `"}`, attrs, ""},
		{"other resource", "application/json", nodeJSON, auth.Attributes{Resource: "pods"}, ""},
	} {
		r := httptest.NewRequest("POST", "/api/v1/nodes", strings.NewReader(tc.body))
		if tc.contentType != "" {
			r.Header.Set("Content-Type", tc.contentType)
		}
		got, err := createName(r, tc.attrs)
		if err != nil || got != tc.want {
			t.Errorf("%s: createName = %q, %v; want %q", tc.name, got, err, tc.want)
		}
		rest := new(bytes.Buffer)
		rest.ReadFrom(r.Body)
		if rest.String() != tc.body {
			t.Errorf("%s: the body left for the API server is %d bytes, want the %d sent", tc.name, rest.Len(), len(tc.body))
		}
	}
}
