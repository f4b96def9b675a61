package admission

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"reflect"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	metadatafake "k8s.io/client-go/metadata/fake"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"

	"github.com/outpost-mesh/outpost/hub/apiserver"
	"github.com/outpost-mesh/outpost/hub/auth"
	"github.com/outpost-mesh/outpost/hub/controllers"
	"github.com/outpost-mesh/outpost/hub/controllers/csrsigning"
	"github.com/outpost-mesh/outpost/hub/registry/certificates"
	"github.com/outpost-mesh/outpost/hub/store/badgerstore"
	"github.com/outpost-mesh/outpost/internal/testca"
	"github.com/outpost-mesh/outpost/internal/testlog"
	"github.com/outpost-mesh/outpost/internal/wait"
)

func TestCSRRequestor(t *testing.T) {
	sent := certificatesv1.CertificateSigningRequestSpec{
		Username: "root", UID: "0", Groups: []string{"system:masters"},
		Extra: map[string]certificatesv1.ExtraValue{"scope": {"all"}},
	}
	alice := auth.User{Name: "alice", UID: "a-1", Groups: []string{"dev", auth.AuthenticatedGroup}, Extra: map[string][]string{"team": {"edge"}}}
	for _, tt := range []struct {
		name string
		ctx  context.Context
		op   apiserver.Operation
		want certificatesv1.CertificateSigningRequestSpec
	}{
		{"create by alice", auth.WithUser(context.Background(), alice), apiserver.Create, certificatesv1.CertificateSigningRequestSpec{
			Username: "alice", UID: "a-1", Groups: []string{"dev", auth.AuthenticatedGroup},
			Extra: map[string]certificatesv1.ExtraValue{"team": {"edge"}},
		}},
		{"create without a user", context.Background(), apiserver.Create, certificatesv1.CertificateSigningRequestSpec{}},
		{"update", auth.WithUser(context.Background(), alice), apiserver.Update, sent},
	} {
		c := &certificatesv1.CertificateSigningRequest{Spec: *sent.DeepCopy()}
		a := &apiserver.AdmissionAttributes{Operation: tt.op, Resource: csrResource, Object: c}
		if err := (CSRRequestor{}).Mutate(tt.ctx, a); err != nil {
			t.Fatalf("%s: Mutate: %v", tt.name, err)
		}
		if !reflect.DeepEqual(c.Spec, tt.want) {
			t.Errorf("%s: spec %+v, want %+v", tt.name, c.Spec, tt.want)
		}
	}
	alice.Groups[0] = "changed"
	c := &certificatesv1.CertificateSigningRequest{}
	_ = (CSRRequestor{}).Mutate(auth.WithUser(context.Background(), alice), &apiserver.AdmissionAttributes{Operation: apiserver.Create, Resource: csrResource, Object: c})
	alice.Groups[0], alice.Extra["team"][0] = "again", "again"
	if c.Spec.Groups[0] != "changed" || c.Spec.Extra["team"][0] != "edge" {
		t.Errorf("the CSR shares the user's slices: groups %v, extra %v", c.Spec.Groups, c.Spec.Extra)
	}
}

// signerAuthz allows what its grants name: user, verb and signer name.
type signerAuthz struct {
	grants map[[3]string]bool
	err    error
}

func (z signerAuthz) Authorize(_ context.Context, u auth.User, a auth.Attributes) (auth.Decision, error) {
	if a.APIGroup != "certificates.k8s.io" || a.Resource != "signers" || !a.ResourceRequest {
		return auth.Decision{}, nil
	}
	if z.err != nil {
		return auth.Decision{}, z.err
	}
	return auth.Decision{Allowed: z.grants[[3]string{u.Name, a.Verb, a.Name}]}, nil
}

func TestCSRSigners(t *testing.T) {
	authz := signerAuthz{grants: map[[3]string]bool{
		{"approver", "approve", "example.com/foo"}: true,
		{"domain", "approve", "example.com/*"}:     true,
		{"signer", "sign", "example.com/foo"}:      true,
	}}
	p := NewCSRSigners(authz)
	old := &certificatesv1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{Name: "csr"},
		Spec:       certificatesv1.CertificateSigningRequestSpec{SignerName: "example.com/foo"},
	}
	approved := old.DeepCopy()
	approved.Status.Conditions = []certificatesv1.CertificateSigningRequestCondition{{Type: certificatesv1.CertificateApproved, Status: corev1.ConditionTrue}}
	issued := old.DeepCopy()
	issued.Status.Certificate = []byte("cert")
	relabelled := old.DeepCopy()
	relabelled.Labels = map[string]string{"a": "b"}
	otherSigner := approved.DeepCopy()
	otherSigner.Spec.SignerName = "other.com/x"

	const (
		approveMsg = `certificatesigningrequests.certificates.k8s.io "csr" is forbidden: user not permitted to approve requests with signerName "example.com/foo"`
		signMsg    = `certificatesigningrequests.certificates.k8s.io "csr" is forbidden: user not permitted to sign requests with signerName "example.com/foo"`
	)
	for _, tt := range []struct {
		name string
		user *auth.User
		sub  string
		obj  *certificatesv1.CertificateSigningRequest
		want string
	}{
		{"approver approves", &auth.User{Name: "approver"}, "approval", approved, ""},
		{"domain wildcard approves", &auth.User{Name: "domain"}, "approval", approved, ""},
		{"signer may not approve", &auth.User{Name: "signer"}, "approval", approved, approveMsg},
		{"judged by the stored signer", &auth.User{Name: "nobody"}, "approval", otherSigner, approveMsg},
		{"masters approve", &auth.User{Name: "admin", Groups: []string{auth.MastersGroup}}, "approval", approved, ""},
		{"the hub's own write", nil, "approval", approved, ""},
		{"signer issues", &auth.User{Name: "signer"}, "status", issued, ""},
		{"approver may not issue", &auth.User{Name: "approver"}, "status", issued, signMsg},
		{"approver may not add conditions", &auth.User{Name: "approver"}, "status", approved, signMsg},
		{"unchanged status needs nothing", &auth.User{Name: "nobody"}, "status", relabelled, ""},
		{"main resource needs nothing", &auth.User{Name: "nobody"}, "", issued, ""},
	} {
		ctx := context.Background()
		if tt.user != nil {
			ctx = auth.WithUser(ctx, *tt.user)
		}
		err := p.Admit(ctx, apiserver.AdmissionAttributes{
			Operation: apiserver.Update, Resource: csrResource, Subresource: tt.sub, Name: "csr",
			Object: tt.obj, OldObject: old,
		})
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("%s: %v, want admitted", tt.name, err)
		case tt.want != "" && (!apierrors.IsForbidden(err) || err.Error() != tt.want):
			t.Errorf("%s: %v, want 403 %q", tt.name, err, tt.want)
		}
	}

	failing := NewCSRSigners(signerAuthz{err: errors.New("authorization is starting")})
	err := failing.Admit(auth.WithUser(context.Background(), auth.User{Name: "approver"}), apiserver.AdmissionAttributes{
		Operation: apiserver.Update, Resource: csrResource, Subresource: "approval", Name: "csr", Object: approved, OldObject: old,
	})
	if !apierrors.IsForbidden(err) {
		t.Errorf("approval while the authorizer fails: %v, want 403", err)
	}
}

// testUserHeader names the user of a request to the test server below,
// standing in for the hub's authentication.
const testUserHeader = "X-Test-User"

// clientAs returns a client of the server at url whose requests are
// those of user ("" for none).
func clientAs(t *testing.T, url, user string) kubernetes.Interface {
	t.Helper()
	cfg := &rest.Config{Host: url, QPS: -1}
	if user != "" {
		cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
			return roundTripperFunc(func(r *http.Request) (*http.Response, error) {
				r = r.Clone(r.Context())
				r.Header.Set(testUserHeader, user)
				return rt.RoundTrip(r)
			})
		}
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// TestCSRThroughTheAPI runs the whole flow on a real API server with the
// plugins and the signing controller: alice asks for a certificate in
// another's name and gets her own; a user without the approve verb is
// refused; an approver approves; the controller issues a certificate that
// the CA verifies for client authentication, for alice.
func TestCSRThroughTheAPI(t *testing.T) {
	st, err := badgerstore.Open(badgerstore.DefaultConfig(t.TempDir()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	authz := signerAuthz{grants: map[[3]string]bool{{"approver", "approve", "kubernetes.io/*"}: true}}
	srv, err := apiserver.New(apiserver.Config{
		Store: st, Resources: certificates.Resources(),
		Mutation: CSRRequestor{}, Admission: Chain{NewCSRSigners(authz)},
	})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if name := r.Header.Get(testUserHeader); name != "" {
			r = r.WithContext(auth.WithUser(r.Context(), auth.User{Name: name, Groups: []string{"dev", auth.AuthenticatedGroup}}))
		}
		srv.ServeHTTP(w, r)
	}))
	t.Cleanup(hs.Close)
	t.Cleanup(srv.Shutdown)

	// The signing controller, as the hub's own (no user).
	ca := testca.New(t)
	signer, err := csrsigning.NewCASigner(ca.Cert, ca.Key, nil)
	if err != nil {
		t.Fatal(err)
	}
	hub := clientAs(t, hs.URL, "")
	inf := informers.NewSharedInformerFactory(hub, 0)
	ctl, err := csrsigning.New(controllers.Context{
		Client: hub, Metadata: metadatafake.NewSimpleMetadataClient(scheme.Scheme), Informers: inf, Clock: clock.RealClock{},
		Events: func(string) record.EventRecorder { return record.NewFakeRecorder(10) },
		Logger: testlog.New(t, slog.LevelInfo),
	}, csrsigning.DefaultConfig(signer))
	if err != nil {
		t.Fatal(err)
	}
	bg := wait.Start(t, 10*time.Second, "csrsigning Run", ctl.Run)
	stop := make(chan struct{})
	inf.Start(stop)
	t.Cleanup(func() { bg.Stop(); close(stop); inf.Shutdown() })

	ctx := context.Background()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{Subject: pkix.Name{CommonName: "alice", Organization: []string{"dev"}}}, key)
	if err != nil {
		t.Fatal(err)
	}
	c, err := clientAs(t, hs.URL, "alice").CertificatesV1().CertificateSigningRequests().Create(ctx, &certificatesv1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{Name: "alice"},
		Spec: certificatesv1.CertificateSigningRequestSpec{
			Request:    pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}),
			SignerName: certificatesv1.KubeAPIServerClientSignerName,
			Usages:     []certificatesv1.KeyUsage{certificatesv1.UsageClientAuth},
			Username:   "admin", Groups: []string{auth.MastersGroup},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	if c.Spec.Username != "alice" || !reflect.DeepEqual(c.Spec.Groups, []string{"dev", auth.AuthenticatedGroup}) {
		t.Errorf("requestor %q %v, want alice's", c.Spec.Username, c.Spec.Groups)
	}

	c.Status.Conditions = []certificatesv1.CertificateSigningRequestCondition{{
		Type: certificatesv1.CertificateApproved, Status: corev1.ConditionTrue, Reason: "KubectlApprove",
	}}
	_, err = clientAs(t, hs.URL, "alice").CertificatesV1().CertificateSigningRequests().UpdateApproval(ctx, "alice", c, metav1.UpdateOptions{})
	if want := `certificatesigningrequests.certificates.k8s.io "alice" is forbidden: user not permitted to approve requests with signerName "kubernetes.io/kube-apiserver-client"`; !apierrors.IsForbidden(err) || err.Error() != want {
		t.Fatalf("self-approval: %v, want 403 %q", err, want)
	}
	csrs := clientAs(t, hs.URL, "approver").CertificatesV1().CertificateSigningRequests()
	if _, err := csrs.UpdateApproval(ctx, "alice", c, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("approve: %v", err)
	}
	var issued []byte
	wait.For(t, 10*time.Second, "certificate issued", func() (bool, string) {
		got, err := csrs.Get(ctx, "alice", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		issued = got.Status.Certificate
		return len(issued) > 0, "no certificate yet"
	})
	block, _ := pem.Decode(issued)
	if block == nil {
		t.Fatalf("issued %q, not PEM", issued)
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cert.Verify(x509.VerifyOptions{Roots: ca.Pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Fatalf("verify: %v", err)
	}
	if u := auth.UserFromCertificate(cert); u.Name != "alice" || !u.InGroup("dev") {
		t.Errorf("the certificate names %+v, want alice in dev", u)
	}
}
