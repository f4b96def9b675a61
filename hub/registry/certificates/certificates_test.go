package certificates

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"reflect"
	"strings"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/outpost-mesh/outpost/hub/registry/typed/typedtest"
)

var t0 = time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)

// requestPEM returns a PEM certificate request for CN=alice, O=dev.
func requestPEM(t testing.TB) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{Subject: pkix.Name{CommonName: "alice", Organization: []string{"dev"}}}, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der})
}

// certificatePEM returns a self-signed PEM certificate.
func certificatePEM(t testing.TB) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.CreateCertificate(rand.Reader, &x509.Certificate{SerialNumber: big.NewInt(1), NotBefore: t0, NotAfter: t0.Add(time.Hour)}, &x509.Certificate{SerialNumber: big.NewInt(1)}, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

func newCSR(req []byte) *csr {
	return &csr{
		ObjectMeta: metav1.ObjectMeta{Name: "alice", ResourceVersion: "5"},
		Spec: certificatesv1.CertificateSigningRequestSpec{
			Request:    req,
			SignerName: certificatesv1.KubeAPIServerClientSignerName,
			Usages:     []certificatesv1.KeyUsage{certificatesv1.UsageClientAuth},
			Username:   "alice",
		},
	}
}

// cond returns a condition of type t, True and stamped, as stored.
func cond(t certificatesv1.RequestConditionType) certificatesv1.CertificateSigningRequestCondition {
	at := metav1.NewTime(t0.Add(-time.Minute))
	return certificatesv1.CertificateSigningRequestCondition{Type: t, Status: corev1.ConditionTrue, Reason: "Test", LastUpdateTime: at, LastTransitionTime: at}
}

func TestValidateCreate(t *testing.T) {
	req := requestPEM(t)
	tampered := []byte(strings.Replace(string(req), string(req[40:44]), "AAAA", 1))
	tests := []struct {
		name string
		mut  func(*csr)
		want []string
	}{
		{"valid", func(*csr) {}, nil},
		{"no name", func(c *csr) { c.Name = "" }, []string{"metadata.name: Required value"}},
		{"no request", func(c *csr) { c.Spec.Request = nil }, []string{"spec.request: Invalid value"}},
		{"certificate, not request", func(c *csr) { c.Spec.Request = certificatePEM(t) }, []string{"spec.request: Invalid value"}},
		{"bad signature", func(c *csr) { c.Spec.Request = tampered }, []string{"spec.request: Invalid value"}},
		{"no usages", func(c *csr) { c.Spec.Usages = nil }, []string{"spec.usages: Required value"}},
		{"unknown usage", func(c *csr) { c.Spec.Usages = append(c.Spec.Usages, "flying") }, []string{"spec.usages[1]: Unsupported value"}},
		{"duplicate usage", func(c *csr) { c.Spec.Usages = append(c.Spec.Usages, certificatesv1.UsageClientAuth) }, []string{"spec.usages[1]: Duplicate value"}},
		{"no signer", func(c *csr) { c.Spec.SignerName = "" }, []string{"spec.signerName: Required value"}},
		{"legacy signer", func(c *csr) { c.Spec.SignerName = LegacyUnknownSignerName }, []string{"spec.signerName: Invalid value"}},
		{"signer without path", func(c *csr) { c.Spec.SignerName = "example.com" }, []string{"spec.signerName: Invalid value"}},
		{"signer with one-label domain", func(c *csr) { c.Spec.SignerName = "example/signer" }, []string{"spec.signerName: Invalid value"}},
		{"signer with bad path", func(c *csr) { c.Spec.SignerName = "example.com/Signer" }, []string{"spec.signerName: Invalid value"}},
		{"custom signer", func(c *csr) { c.Spec.SignerName = "example.com/ns.signer" }, nil},
		{"short expiry", func(c *csr) { c.Spec.ExpirationSeconds = new(int32(599)) }, []string{"spec.expirationSeconds: Invalid value"}},
		{"10 minute expiry", func(c *csr) { c.Spec.ExpirationSeconds = new(int32(600)) }, nil},
		{"condition without status", func(c *csr) {
			c.Status.Conditions = []certificatesv1.CertificateSigningRequestCondition{{Type: certificatesv1.CertificateApproved}}
		}, []string{"status.conditions[0].status: Required value"}},
		{"approved false", func(c *csr) {
			c.Status.Conditions = []certificatesv1.CertificateSigningRequestCondition{{Type: certificatesv1.CertificateApproved, Status: corev1.ConditionFalse}}
		}, []string{"status.conditions[0].status: Unsupported value"}},
		{"approved and denied", func(c *csr) {
			c.Status.Conditions = []certificatesv1.CertificateSigningRequestCondition{cond(certificatesv1.CertificateApproved), cond(certificatesv1.CertificateDenied)}
		}, []string{"status.conditions[1].type: Invalid value"}},
		{"duplicate condition", func(c *csr) {
			c.Status.Conditions = []certificatesv1.CertificateSigningRequestCondition{cond("Custom"), cond("Custom")}
		}, []string{"status.conditions[1].type: Duplicate value"}},
		{"no condition type", func(c *csr) {
			c.Status.Conditions = []certificatesv1.CertificateSigningRequestCondition{{Status: corev1.ConditionUnknown}}
		}, []string{"status.conditions[0].type: Required value"}},
		{"garbage certificate", func(c *csr) { c.Status.Certificate = []byte("nope") }, []string{"status.certificate: Invalid value"}},
		{"request as certificate", func(c *csr) { c.Status.Certificate = req }, []string{"status.certificate: Invalid value"}},
	}
	for _, tt := range tests {
		c := newCSR(req)
		tt.mut(c)
		if got := typedtest.ErrStrings(validateCreate(c)); !typedtest.SameErrs(got, tt.want) {
			t.Errorf("%s: validateCreate = %q, want %q", tt.name, got, tt.want)
		}
	}
}

func TestSignerNameMessages(t *testing.T) {
	p := field.NewPath("spec", "signerName")
	for name, want := range map[string]string{
		"":                     `spec.signerName: Required value: signerName must be provided`,
		"a/b/c":                `spec.signerName: Invalid value: "a/b/c": must be a fully qualified domain and path of the form 'example.com/signer-name'`,
		"example/x":            `spec.signerName: Invalid value: "example": should be a domain with at least two segments separated by dots`,
		"exa_mple.com/x":       `spec.signerName: Invalid value: "exa_mple.com": validating label "exa_mple": a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')`,
		"example.com/my.sig_n": `spec.signerName: Invalid value: "my.sig_n": validating label "sig_n": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')`,
	} {
		errs := ValidateSignerName(p, name)
		if len(errs) != 1 || errs[0].Error() != want {
			t.Errorf("ValidateSignerName(%q) = %v\nwant %s", name, errs, want)
		}
	}
}

func TestLegacySignerToleratedOnUpdate(t *testing.T) {
	old := newCSR(requestPEM(t))
	old.Spec.SignerName = LegacyUnknownSignerName
	c := old.DeepCopy()
	c.Labels = map[string]string{"a": "b"}
	if errs := validateUpdate(c, old); len(errs) != 0 {
		t.Errorf("update of a legacy-unknown CSR's labels: %v, want none", errs)
	}
}

func TestPrepare(t *testing.T) {
	c := newCSR(requestPEM(t))
	c.Status = certificatesv1.CertificateSigningRequestStatus{Conditions: []certificatesv1.CertificateSigningRequestCondition{cond(certificatesv1.CertificateApproved)}, Certificate: []byte("x")}
	rules := csrRules(func() time.Time { return t0 })
	rules.PrepareForCreate(c)
	if len(c.Status.Conditions) != 0 || c.Status.Certificate != nil || c.Spec.Username != "alice" {
		t.Errorf("PrepareForCreate: status %+v, username %q; want an empty status, username kept", c.Status, c.Spec.Username)
	}
	old := newCSR(requestPEM(t))
	old.Status.Conditions = []certificatesv1.CertificateSigningRequestCondition{cond(certificatesv1.CertificateDenied)}
	upd := c.DeepCopy()
	upd.Labels = map[string]string{"a": "b"}
	upd.Spec.SignerName = "example.com/other"
	rules.PrepareForUpdate(upd, old)
	if !reflect.DeepEqual(upd.Spec, old.Spec) || !reflect.DeepEqual(upd.Status, old.Status) || upd.Labels["a"] != "b" {
		t.Errorf("PrepareForUpdate kept spec %+v status %+v labels %v; want the stored spec and status, the new labels", upd.Spec, upd.Status, upd.Labels)
	}
}

// TestApproval: the approval subresource takes conditions, and only
// them, from the request, stamps them, and refuses removals.
func TestApproval(t *testing.T) {
	update := approvalUpdater(func() time.Time { return t0 })
	stored := newCSR(requestPEM(t))
	stored.Status.Conditions = []certificatesv1.CertificateSigningRequestCondition{{Type: "Custom", Status: corev1.ConditionTrue, LastTransitionTime: metav1.NewTime(t0.Add(-time.Hour))}}

	req := stored.DeepCopy()
	req.Spec.Usages = []certificatesv1.KeyUsage{certificatesv1.UsageServerAuth}
	req.Status.Certificate = certificatePEM(t)
	req.Status.Conditions = append(req.Status.Conditions, certificatesv1.CertificateSigningRequestCondition{Type: certificatesv1.CertificateApproved, Status: corev1.ConditionTrue})
	req.Status.Conditions[0].LastTransitionTime = metav1.Time{}
	out := stored.DeepCopy()
	update(req, out)
	if !reflect.DeepEqual(out.Spec, stored.Spec) || out.Status.Certificate != nil {
		t.Errorf("approval changed spec or certificate: %+v, %q", out.Spec, out.Status.Certificate)
	}
	if len(out.Status.Conditions) != 2 || out.Status.Conditions[1].Type != certificatesv1.CertificateApproved {
		t.Fatalf("approval conditions = %+v, want Custom and Approved", out.Status.Conditions)
	}
	if a := out.Status.Conditions[1]; !a.LastUpdateTime.Time.Equal(t0) || !a.LastTransitionTime.Time.Equal(t0) {
		t.Errorf("Approved stamped %v, %v; want %v for both", a.LastUpdateTime, a.LastTransitionTime, t0)
	}
	if c := out.Status.Conditions[0]; !c.LastTransitionTime.Time.Equal(t0.Add(-time.Hour)) {
		t.Errorf("Custom transition %v, want the stored %v", c.LastTransitionTime, t0.Add(-time.Hour))
	}
	if errs := validateApproval(out, stored); len(errs) != 0 {
		t.Errorf("validate approval: %v", errs)
	}

	// Approving then denying, or dropping the approval, is refused.
	approved := out
	deny := approved.DeepCopy()
	deny.Status.Conditions = append(deny.Status.Conditions, cond(certificatesv1.CertificateDenied))
	next := approved.DeepCopy()
	update(deny, next)
	if got, want := typedtest.ErrStrings(validateApproval(next, approved)), []string{"status.conditions[2].type: Invalid value"}; !typedtest.SameErrs(got, want) {
		t.Errorf("deny an approved CSR: %q, want %q", got, want)
	}
	drop := approved.DeepCopy()
	drop.Status.Conditions = drop.Status.Conditions[:1]
	next = approved.DeepCopy()
	update(drop, next)
	if got, want := typedtest.ErrStrings(validateApproval(next, approved)), []string{"status.conditions: Forbidden"}; !typedtest.SameErrs(got, want) {
		t.Errorf("remove the approval: %q, want %q", got, want)
	}
}

// TestStatusUpdate: the status subresource sets the certificate once and
// conditions other than Approved and Denied, whose stored instances it
// keeps, and may not add them.
func TestStatusUpdate(t *testing.T) {
	rules := csrRules(func() time.Time { return t0 })
	// statusUpdate is the machinery's status update: prepare, then validate.
	statusUpdate := func(obj, old *certificatesv1.CertificateSigningRequest) field.ErrorList {
		rules.PrepareForStatusUpdate(obj, old)
		return rules.ValidateStatusUpdate(obj, old)
	}
	stored := newCSR(requestPEM(t))
	stored.Status.Conditions = []certificatesv1.CertificateSigningRequestCondition{cond(certificatesv1.CertificateApproved)}

	c := stored.DeepCopy()
	c.Status.Certificate = certificatePEM(t)
	c.Status.Conditions[0].Reason = "Changed"
	if errs := statusUpdate(c, stored); len(errs) != 0 {
		t.Fatalf("issue a certificate: %v", errs)
	}
	if c.Status.Conditions[0].Reason != "Test" {
		t.Errorf("status update changed the Approved condition's reason to %q", c.Status.Conditions[0].Reason)
	}

	again := c.DeepCopy()
	again.Status.Certificate = certificatePEM(t)
	if got, want := typedtest.ErrStrings(statusUpdate(again, c)), []string{"status.certificate: Forbidden"}; !typedtest.SameErrs(got, want) {
		t.Errorf("replace the certificate: %q, want %q", got, want)
	}

	deny := stored.DeepCopy()
	deny.Status.Conditions = nil
	deny.Status.Conditions = append(deny.Status.Conditions, cond(certificatesv1.CertificateDenied))
	got := typedtest.ErrStrings(statusUpdate(deny, stored))
	if want := []string{"status.conditions: Forbidden", "status.conditions: Forbidden"}; !typedtest.SameErrs(got, want) {
		t.Errorf("swap Approved for Denied through status: %q, want %q", got, want)
	}

	failed := stored.DeepCopy()
	failed.Status.Conditions = append(failed.Status.Conditions, certificatesv1.CertificateSigningRequestCondition{Type: certificatesv1.CertificateFailed, Status: corev1.ConditionTrue, Reason: "SignerValidationFailure"})
	if errs := statusUpdate(failed, stored); len(errs) != 0 {
		t.Errorf("add Failed through status: %v", errs)
	}
	if f := failed.Status.Conditions[1]; !f.LastUpdateTime.Time.Equal(t0) {
		t.Errorf("Failed lastUpdateTime %v, want %v", f.LastUpdateTime, t0)
	}

	// The main resource sets neither.
	main := stored.DeepCopy()
	main.Status.Certificate = certificatePEM(t)
	if got, want := typedtest.ErrStrings(validateUpdate(main, stored)), []string{"status.certificate: Forbidden"}; !typedtest.SameErrs(got, want) {
		t.Errorf("set a certificate through the main resource: %q, want %q", got, want)
	}
}

func TestRow(t *testing.T) {
	now := t0.Add(time.Hour)
	rules := csrRules(func() time.Time { return now })
	c := newCSR(nil)
	c.CreationTimestamp = metav1.NewTime(t0)
	c.Spec.ExpirationSeconds = new(int32(3600))
	c.Status.Conditions = []certificatesv1.CertificateSigningRequestCondition{cond(certificatesv1.CertificateApproved), cond(certificatesv1.CertificateFailed)}
	c.Status.Certificate = []byte("x")
	want := []interface{}{"alice", "60m", certificatesv1.KubeAPIServerClientSignerName, "alice", "60m", "Approved,Failed,Issued"}
	if got := rules.Row(c); !reflect.DeepEqual(got, want) {
		t.Errorf("Row = %v, want %v", got, want)
	}
	c.Spec.ExpirationSeconds, c.Spec.SignerName, c.Status = nil, "", certificatesv1.CertificateSigningRequestStatus{}
	want = []interface{}{"alice", "60m", "<none>", "alice", "<none>", "Pending"}
	if got := rules.Row(c); !reflect.DeepEqual(got, want) {
		t.Errorf("Row = %v, want %v", got, want)
	}
	var names []string
	for _, col := range rules.Columns() {
		names = append(names, col.Name)
	}
	if want := []string{"Name", "Age", "SignerName", "Requestor", "RequestedDuration", "Condition"}; !reflect.DeepEqual(names, want) {
		t.Errorf("columns %q, want %q", names, want)
	}
}

func TestWrongType(t *testing.T) { typedtest.WrongType(t, Resources()) }

// FuzzCheckRequest: spec.request, bytes a client sends, never crashes
// validation. The API machinery bounds the request body.
func FuzzCheckRequest(f *testing.F) {
	f.Add(requestPEM(f))
	f.Add([]byte("-----BEGIN CERTIFICATE REQUEST-----\nAAAA\n-----END CERTIFICATE REQUEST-----\n"))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		c := newCSR(b)
		c.Status.Certificate = b
		_ = validateCreate(c)
	})
}
