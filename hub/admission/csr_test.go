package admission

import (
	"context"
	"errors"
	"reflect"
	"testing"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/outpost-mesh/outpost/hub/apiserver"
	"github.com/outpost-mesh/outpost/hub/auth"
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
