package csrsigning

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"log/slog"
	"reflect"
	"slices"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/kubernetes/scheme"
	metadatafake "k8s.io/client-go/metadata/fake"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"

	"github.com/outpost-mesh/outpost/hub/controllers"
	"github.com/outpost-mesh/outpost/internal/testca"
	"github.com/outpost-mesh/outpost/internal/testlog"
	"github.com/outpost-mesh/outpost/internal/wait"
)

// request returns a PEM certificate request for subject, with dnsNames.
func request(t testing.TB, subject pkix.Name, dnsNames ...string) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{Subject: subject, DNSNames: dnsNames}, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der})
}

var alice = pkix.Name{CommonName: "alice", Organization: []string{"dev", "ops"}}

func condition(t certificatesv1.RequestConditionType) certificatesv1.CertificateSigningRequestCondition {
	return certificatesv1.CertificateSigningRequestCondition{Type: t, Status: corev1.ConditionTrue}
}

// newCSR returns a CSR named name of alice for the client signer, with
// conds.
func newCSR(t testing.TB, name string, conds ...certificatesv1.RequestConditionType) *certificatesv1.CertificateSigningRequest {
	c := &certificatesv1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: certificatesv1.CertificateSigningRequestSpec{
			Request:    request(t, alice),
			SignerName: SignerName,
			Usages:     []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageKeyEncipherment, certificatesv1.UsageClientAuth},
			Username:   "alice",
		},
	}
	for _, ct := range conds {
		c.Status.Conditions = append(c.Status.Conditions, condition(ct))
	}
	return c
}

func TestPlan(t *testing.T) {
	const year = 365 * 24 * time.Hour
	approved := certificatesv1.CertificateApproved
	tests := []struct {
		name string
		csr  func() *certificatesv1.CertificateSigningRequest
		want step // req is not compared
	}{
		{"pending", func() *certificatesv1.CertificateSigningRequest { return newCSR(t, "a") }, step{}},
		{"approved", func() *certificatesv1.CertificateSigningRequest { return newCSR(t, "a", approved) }, step{sign: true, lifetime: year}},
		{"denied", func() *certificatesv1.CertificateSigningRequest {
			return newCSR(t, "a", certificatesv1.CertificateDenied)
		}, step{}},
		{"approved and denied", func() *certificatesv1.CertificateSigningRequest {
			return newCSR(t, "a", approved, certificatesv1.CertificateDenied)
		}, step{}},
		{"failed", func() *certificatesv1.CertificateSigningRequest {
			return newCSR(t, "a", approved, certificatesv1.CertificateFailed)
		}, step{}},
		{"issued", func() *certificatesv1.CertificateSigningRequest {
			c := newCSR(t, "a", approved)
			c.Status.Certificate = []byte("x")
			return c
		}, step{}},
		{"other signer", func() *certificatesv1.CertificateSigningRequest {
			c := newCSR(t, "a", approved)
			c.Spec.SignerName = certificatesv1.KubeletServingSignerName
			return c
		}, step{}},
		{"server auth", func() *certificatesv1.CertificateSigningRequest {
			c := newCSR(t, "a", approved)
			c.Spec.Usages = append(c.Spec.Usages, certificatesv1.UsageServerAuth)
			return c
		}, step{fail: true, message: "invalid usage for client certificate: server auth"}},
		{"no client auth", func() *certificatesv1.CertificateSigningRequest {
			c := newCSR(t, "a", approved)
			c.Spec.Usages = []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature}
			return c
		}, step{fail: true, message: "missing required usage for client certificate: client auth"}},
		{"an hour", func() *certificatesv1.CertificateSigningRequest {
			c := newCSR(t, "a", approved)
			c.Spec.ExpirationSeconds = new(int32(3600))
			return c
		}, step{sign: true, lifetime: time.Hour}},
	}
	for _, tt := range tests {
		got, err := plan(tt.csr(), year)
		if err != nil {
			t.Fatalf("plan(%s): %v", tt.name, err)
		}
		if got.sign != (got.req != nil) {
			t.Errorf("plan(%s): sign %v with request %v", tt.name, got.sign, got.req)
		}
		got.req = nil
		if got != tt.want {
			t.Errorf("plan(%s) = %+v, want %+v", tt.name, got, tt.want)
		}
	}
	bad := newCSR(t, "a", approved)
	bad.Spec.Request = []byte("garbage")
	if _, err := plan(bad, year); err == nil {
		t.Error("plan of an unparsable request: no error")
	}
}

func TestLifetime(t *testing.T) {
	const max = 24 * time.Hour
	for _, tt := range []struct {
		seconds *int32
		want    time.Duration
	}{
		{nil, max},
		{new(int32(60)), minLifetime},
		{new(int32(600)), 10 * time.Minute},
		{new(int32(7200)), 2 * time.Hour},
		{new(int32(86400)), max},
		{new(int32(1 << 30)), max},
	} {
		if got := lifetime(tt.seconds, max); got != tt.want {
			t.Errorf("lifetime(%v, %v) = %v, want %v", tt.seconds, max, got, tt.want)
		}
	}
}

// verify parses certPEM and checks that ca issued it to alice for
// client authentication.
func verify(t *testing.T, ca *testca.CA, certPEM []byte) *x509.Certificate {
	t.Helper()
	block, _ := pem.Decode(certPEM)
	if block == nil || block.Type != "CERTIFICATE" {
		t.Fatalf("certificate %q is not PEM", certPEM)
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cert.Verify(x509.VerifyOptions{Roots: ca.Pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Fatalf("verify issued certificate: %v", err)
	}
	if cert.Subject.CommonName != alice.CommonName || !reflect.DeepEqual(cert.Subject.Organization, alice.Organization) {
		t.Errorf("subject %v, want %v", cert.Subject, alice)
	}
	if cert.IsCA {
		t.Error("issued a CA certificate")
	}
	return cert
}

func TestCASigner(t *testing.T) {
	ca := testca.New(t)
	now := time.Now()
	s, err := NewCASigner(ca.Cert, ca.Key, func() time.Time { return now })
	if err != nil {
		t.Fatal(err)
	}
	req, err := parseRequest(request(t, alice, "alice.example.com"))
	if err != nil {
		t.Fatal(err)
	}
	usages := []certificatesv1.KeyUsage{certificatesv1.UsageClientAuth, certificatesv1.UsageDigitalSignature, certificatesv1.UsageClientAuth}
	certPEM, err := s.Sign(req, usages, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	cert := verify(t, ca, certPEM)
	if !cert.NotBefore.Equal(now.Add(-backdate).Truncate(time.Second)) || !cert.NotAfter.Equal(now.Add(time.Hour).Truncate(time.Second)) {
		t.Errorf("valid %v to %v, want %v to %v", cert.NotBefore, cert.NotAfter, now.Add(-backdate), now.Add(time.Hour))
	}
	if !slices.Equal(cert.ExtKeyUsage, []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}) || cert.KeyUsage != x509.KeyUsageDigitalSignature {
		t.Errorf("usages %v, %v; want client auth, digital signature", cert.ExtKeyUsage, cert.KeyUsage)
	}
	if !slices.Equal(cert.DNSNames, []string{"alice.example.com"}) {
		t.Errorf("DNS names %v, want the request's", cert.DNSNames)
	}

	// A year from a CA that lasts a day ends with the CA.
	certPEM, err = s.Sign(req, usages, 365*24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if cert := verify(t, ca, certPEM); !cert.NotAfter.Equal(ca.Cert.NotAfter) {
		t.Errorf("NotAfter %v, want the CA's %v", cert.NotAfter, ca.Cert.NotAfter)
	}
	if _, err := s.Sign(req, []certificatesv1.KeyUsage{"flying"}, time.Hour); err == nil {
		t.Error("signed an unknown usage")
	}
	late, _ := NewCASigner(ca.Cert, ca.Key, func() time.Time { return ca.Cert.NotAfter })
	if _, err := late.Sign(req, usages, time.Hour); err == nil {
		t.Error("signed with an expired CA")
	}
	if _, err := NewCASigner(ca.Cert, testca.New(t).Key, nil); err == nil {
		t.Error("NewCASigner with another CA's key: no error")
	}
}

// TestController runs the controller over client-go's fake clientset: it
// issues the approved request a certificate the CA verifies, fails the one
// with a server usage, and leaves pending, denied and other signers'
// requests alone.
func TestController(t *testing.T) {
	ca := testca.New(t)
	signer, err := NewCASigner(ca.Cert, ca.Key, nil)
	if err != nil {
		t.Fatal(err)
	}
	server := newCSR(t, "server", certificatesv1.CertificateApproved)
	server.Spec.Usages = append(server.Spec.Usages, certificatesv1.UsageServerAuth)
	kubelet := newCSR(t, "kubelet", certificatesv1.CertificateApproved)
	kubelet.Spec.SignerName = certificatesv1.KubeletServingSignerName
	client := fake.NewClientset(newCSR(t, "pending"), newCSR(t, "denied", certificatesv1.CertificateDenied), server, kubelet)
	inf := informers.NewSharedInformerFactory(client, 0)
	events := record.NewFakeRecorder(10)
	sc, err := New(controllers.Context{
		Client: client, Metadata: metadatafake.NewSimpleMetadataClient(scheme.Scheme), Informers: inf, Clock: clock.RealClock{},
		Events: func(string) record.EventRecorder { return events },
		Logger: testlog.New(t, slog.LevelInfo),
	}, DefaultConfig(signer))
	if err != nil {
		t.Fatal(err)
	}
	bg := wait.Start(t, 10*time.Second, "csrsigning Run", sc.Run)
	stop := make(chan struct{})
	inf.Start(stop)
	t.Cleanup(func() { bg.Stop(); close(stop); inf.Shutdown() })

	ctx := context.Background()
	csrs := client.CertificatesV1().CertificateSigningRequests()
	get := func(name string) *certificatesv1.CertificateSigningRequest {
		c, err := csrs.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	// Approve pending, as kubectl certificate approve does.
	pending := get("pending")
	pending.Status.Conditions = append(pending.Status.Conditions, certificatesv1.CertificateSigningRequestCondition{
		Type: certificatesv1.CertificateApproved, Status: corev1.ConditionTrue, Reason: "KubectlApprove",
	})
	if _, err := csrs.UpdateApproval(ctx, "pending", pending, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	wait.For(t, 10*time.Second, "certificate issued", func() (bool, string) {
		return len(get("pending").Status.Certificate) > 0, "no certificate yet"
	})
	verify(t, ca, get("pending").Status.Certificate)

	wait.For(t, 10*time.Second, "server request failed", func() (bool, string) {
		s := get("server")
		for _, c := range s.Status.Conditions {
			if c.Type == certificatesv1.CertificateFailed {
				return true, ""
			}
		}
		return false, "no Failed condition"
	})
	s := get("server")
	if f := s.Status.Conditions[1]; f.Reason != FailureReason || f.Message != "invalid usage for client certificate: server auth" || f.Status != corev1.ConditionTrue || len(s.Status.Certificate) > 0 {
		t.Errorf("server request: condition %+v, certificate %q", f, s.Status.Certificate)
	}
	// The informer has delivered everything by now; nothing else moved.
	wait.For(t, 10*time.Second, "queue drained", func() (bool, string) { return sc.queue.Len() == 0, "queued" })
	for _, name := range []string{"denied", "kubelet"} {
		if c := get(name); len(c.Status.Certificate) > 0 || len(c.Status.Conditions) != 1 {
			t.Errorf("%s: status changed to %+v", name, c.Status)
		}
	}
}

// FuzzPlan: whatever spec.request holds, plan answers without a crash.
func FuzzPlan(f *testing.F) {
	f.Add(request(f, alice))
	f.Add([]byte("-----BEGIN CERTIFICATE REQUEST-----\nAAAA\n-----END CERTIFICATE REQUEST-----\n"))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		c := newCSR(t, "a", certificatesv1.CertificateApproved)
		c.Spec.Request = b
		if s, err := plan(c, time.Hour); err == nil && s.sign && s.req == nil {
			t.Errorf("plan(%q) signs without a request", b)
		}
	})
}
