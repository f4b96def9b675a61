package certificates_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net/http/httptest"
	"reflect"
	"slices"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/outpost-mesh/outpost/hub/apiserver"
	"github.com/outpost-mesh/outpost/hub/registry/certificates"
	"github.com/outpost-mesh/outpost/hub/registry/typed/typedtest"
	"github.com/outpost-mesh/outpost/hub/store/badgerstore"
)

// startAPI serves the certificates.k8s.io resources over a fresh store.
func startAPI(t *testing.T) kubernetes.Interface {
	t.Helper()
	st, err := badgerstore.Open(badgerstore.DefaultConfig(t.TempDir()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	srv, err := apiserver.New(apiserver.Config{Store: st, Resources: certificates.Resources()})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv)
	t.Cleanup(hs.Close)
	t.Cleanup(srv.Shutdown)
	cs, err := kubernetes.NewForConfig(&rest.Config{Host: hs.URL, QPS: -1})
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// pemOf returns a PEM certificate request and a PEM certificate, both
// freshly made.
func pemOf(t *testing.T) (request, cert []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{Subject: pkix.Name{CommonName: "alice"}}, key)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "alice"}, NotBefore: time.Now(), NotAfter: time.Now().Add(time.Hour)}
	cder, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cder})
}

// TestCSRAPI: a CSR is created without status, refused where upstream
// refuses it, changes only metadata through the main resource, takes its
// certificate once through status but no approval there, and is printed
// with upstream's columns.
func TestCSRAPI(t *testing.T) {
	cs := startAPI(t)
	ctx := context.Background()
	csrs := cs.CertificatesV1().CertificateSigningRequests()
	req, cert := pemOf(t)
	approved := certificatesv1.CertificateSigningRequestCondition{Type: certificatesv1.CertificateApproved, Status: corev1.ConditionTrue, Reason: "Mine"}

	c, err := csrs.Create(ctx, &certificatesv1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{Name: "alice"},
		Spec: certificatesv1.CertificateSigningRequestSpec{
			Request: req, SignerName: certificatesv1.KubeAPIServerClientSignerName,
			Usages: []certificatesv1.KeyUsage{certificatesv1.UsageClientAuth}, ExpirationSeconds: new(int32(3600)),
		},
		Status: certificatesv1.CertificateSigningRequestStatus{Conditions: []certificatesv1.CertificateSigningRequestCondition{approved}, Certificate: cert},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	if len(c.Status.Conditions) != 0 || len(c.Status.Certificate) != 0 {
		t.Errorf("created with status %+v, want none", c.Status)
	}

	for _, tt := range []struct {
		name  string
		mut   func(*certificatesv1.CertificateSigningRequestSpec)
		field string
	}{
		{"legacy signer", func(s *certificatesv1.CertificateSigningRequestSpec) {
			s.SignerName = certificates.LegacyUnknownSignerName
		}, "spec.signerName"},
		{"short", func(s *certificatesv1.CertificateSigningRequestSpec) { s.ExpirationSeconds = new(int32(60)) }, "spec.expirationSeconds"},
		{"not a request", func(s *certificatesv1.CertificateSigningRequestSpec) { s.Request = cert }, "spec.request"},
	} {
		bad := &certificatesv1.CertificateSigningRequest{ObjectMeta: metav1.ObjectMeta{Name: "bad"}, Spec: *c.Spec.DeepCopy()}
		tt.mut(&bad.Spec)
		_, err := csrs.Create(ctx, bad, metav1.CreateOptions{})
		if got := typedtest.Causes(t, "create "+tt.name, err); !slices.Contains(got, tt.field) {
			t.Errorf("create %s: causes %v, want %s", tt.name, got, tt.field)
		}
	}

	// The main resource changes metadata only.
	c.Labels = map[string]string{"team": "edge"}
	c.Spec.Usages = []certificatesv1.KeyUsage{certificatesv1.UsageServerAuth}
	if c, err = csrs.Update(ctx, c, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("update: %v", err)
	}
	if c.Labels["team"] != "edge" || !reflect.DeepEqual(c.Spec.Usages, []certificatesv1.KeyUsage{certificatesv1.UsageClientAuth}) {
		t.Errorf("update: labels %v, usages %v; want the new labels, the stored usages", c.Labels, c.Spec.Usages)
	}

	// Status may not approve.
	sneaky := c.DeepCopy()
	sneaky.Status.Conditions = []certificatesv1.CertificateSigningRequestCondition{approved}
	_, err = csrs.UpdateStatus(ctx, sneaky, metav1.UpdateOptions{})
	if got := typedtest.Causes(t, "approve through status", err); !slices.Contains(got, "status.conditions") {
		t.Errorf("approve through status: causes %v, want status.conditions", got)
	}
	// It sets the certificate, once.
	c.Status.Certificate = cert
	if c, err = csrs.UpdateStatus(ctx, c, metav1.UpdateOptions{}); err != nil || len(c.Status.Certificate) == 0 {
		t.Fatalf("issue: %v, certificate %q", err, c.Status.Certificate)
	}
	_, other := pemOf(t)
	c.Status.Certificate = other
	_, err = csrs.UpdateStatus(ctx, c, metav1.UpdateOptions{})
	if got := typedtest.Causes(t, "reissue", err); !slices.Contains(got, "status.certificate") {
		t.Errorf("reissue: causes %v, want status.certificate", got)
	}

	tbl := typedtest.Table(t, cs.CertificatesV1().RESTClient(), "/apis/certificates.k8s.io/v1/certificatesigningrequests")
	if want := []string{"Name", "Age", "SignerName", "Requestor", "RequestedDuration", "Condition"}; !reflect.DeepEqual(typedtest.ColumnNames(tbl), want) || len(tbl.Rows) != 1 {
		t.Fatalf("table: columns %q, %d rows; want %q, 1", typedtest.ColumnNames(tbl), len(tbl.Rows), want)
	}
	if cells := tbl.Rows[0].Cells; cells[2] != certificatesv1.KubeAPIServerClientSignerName || cells[4] != "60m" || cells[5] != "Pending,Issued" {
		t.Errorf("row %v", cells)
	}
}

// TestApprovalAPI: PUT of certificatesigningrequests/approval, as kubectl
// certificate approve and deny send it, changes the conditions alone,
// stamps them, and cannot take an approval back or deny what is approved;
// discovery lists the subresource.
func TestApprovalAPI(t *testing.T) {
	cs := startAPI(t)
	ctx := context.Background()
	csrs := cs.CertificatesV1().CertificateSigningRequests()
	req, cert := pemOf(t)
	c, err := csrs.Create(ctx, &certificatesv1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{Name: "alice"},
		Spec: certificatesv1.CertificateSigningRequestSpec{
			Request: req, SignerName: certificatesv1.KubeAPIServerClientSignerName,
			Usages: []certificatesv1.KeyUsage{certificatesv1.UsageClientAuth},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	before := time.Now().Add(-time.Second)
	c.Spec.Usages = []certificatesv1.KeyUsage{certificatesv1.UsageServerAuth}
	c.Status.Certificate = cert
	c.Status.Conditions = []certificatesv1.CertificateSigningRequestCondition{{
		Type: certificatesv1.CertificateApproved, Status: corev1.ConditionTrue, Reason: "KubectlApprove", Message: "This CSR was approved by kubectl certificate approve.",
	}}
	approved, err := csrs.UpdateApproval(ctx, "alice", c, metav1.UpdateOptions{})
	if err != nil {
		t.Fatalf("approve: %v", err)
	}
	if len(approved.Status.Conditions) != 1 || approved.Status.Conditions[0].Reason != "KubectlApprove" {
		t.Fatalf("approved conditions %+v", approved.Status.Conditions)
	}
	if a := approved.Status.Conditions[0]; a.LastUpdateTime.Time.Before(before) || a.LastTransitionTime.Time.Before(before) {
		t.Errorf("approval stamped %v, %v; want now", a.LastUpdateTime, a.LastTransitionTime)
	}
	if len(approved.Status.Certificate) != 0 || !reflect.DeepEqual(approved.Spec.Usages, []certificatesv1.KeyUsage{certificatesv1.UsageClientAuth}) {
		t.Errorf("approval changed certificate %q or usages %v", approved.Status.Certificate, approved.Spec.Usages)
	}

	deny := approved.DeepCopy()
	deny.Status.Conditions = append(deny.Status.Conditions, certificatesv1.CertificateSigningRequestCondition{Type: certificatesv1.CertificateDenied, Status: corev1.ConditionTrue})
	_, err = csrs.UpdateApproval(ctx, "alice", deny, metav1.UpdateOptions{})
	if got := typedtest.Causes(t, "deny an approved CSR", err); !slices.Contains(got, "status.conditions[1].type") {
		t.Errorf("deny an approved CSR: causes %v, want status.conditions[1].type", got)
	}
	undo := approved.DeepCopy()
	undo.Status.Conditions = nil
	_, err = csrs.UpdateApproval(ctx, "alice", undo, metav1.UpdateOptions{})
	if got := typedtest.Causes(t, "take an approval back", err); !slices.Contains(got, "status.conditions") {
		t.Errorf("take an approval back: causes %v, want status.conditions", got)
	}

	list, err := cs.Discovery().ServerResourcesForGroupVersion("certificates.k8s.io/v1")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, r := range list.APIResources {
		names = append(names, r.Name)
	}
	for _, want := range []string{"certificatesigningrequests", "certificatesigningrequests/status", "certificatesigningrequests/approval"} {
		if !slices.Contains(names, want) {
			t.Errorf("discovery lists %q, want %s among them", names, want)
		}
	}
}
