package admission

import (
	"bytes"
	"context"
	"fmt"
	"strings"

	certificatesv1 "k8s.io/api/certificates/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/outpost-mesh/outpost/hub/apiserver"
	"github.com/outpost-mesh/outpost/hub/auth"
)

var csrResource = schema.GroupResource{Group: certificatesv1.GroupName, Resource: "certificatesigningrequests"}

// CSRRequestor records who asks for a certificate: on the create of a
// CertificateSigningRequest it sets spec.username, uid, groups and extra
// to the user of the request (auth.UserFrom), overwriting whatever the
// client sent, as upstream's CSR strategy does, so that approvers see who
// really asked. A create without a user (the hub's own) gets them empty.
// The zero value is ready and safe for concurrent use.
type CSRRequestor struct{}

var _ apiserver.MutatingAdmission = CSRRequestor{}

// Handles reports whether r is certificatesigningrequests.
func (CSRRequestor) Handles(r schema.GroupResource) bool { return r == csrResource }

// Mutate sets the requestor of a CSR being created.
func (CSRRequestor) Mutate(ctx context.Context, a *apiserver.AdmissionAttributes) error {
	if a.Resource != csrResource || a.Operation != apiserver.Create || a.Subresource != "" {
		return nil
	}
	c, ok := a.Object.(*certificatesv1.CertificateSigningRequest)
	if !ok {
		return apierrors.NewForbidden(a.Resource, a.Name, fmt.Errorf("unexpected type %T", a.Object))
	}
	u, ok := auth.UserFrom(ctx)
	setRequestor(&c.Spec, u, ok)
	return nil
}

// setRequestor sets spec's requestor fields to u's, or clears them when
// there is no user.
func setRequestor(spec *certificatesv1.CertificateSigningRequestSpec, u auth.User, ok bool) {
	spec.Username, spec.UID, spec.Groups, spec.Extra = "", "", nil, nil
	if !ok {
		return
	}
	spec.Username, spec.UID = u.Name, u.UID
	spec.Groups = append([]string(nil), u.Groups...)
	if len(u.Extra) > 0 {
		spec.Extra = make(map[string]certificatesv1.ExtraValue, len(u.Extra))
		for k, v := range u.Extra {
			spec.Extra[k] = append(certificatesv1.ExtraValue(nil), v...)
		}
	}
}

// CSRSigners holds writes of a CertificateSigningRequest's subresources
// to the signer it names, as upstream's CertificateApproval and
// CertificateSigning admission plugins do: an update of approval needs
// the "approve" verb, and an update of status that changes the
// certificate or the conditions the "sign" verb, on the resource
// certificates.k8s.io/signers named by the stored spec.signerName, or by
// its domain and "/*" (e.g. example.com/*). Refusals are 403 Forbidden
// with upstream's message; an authorizer's error counts as a refusal, as
// upstream counts it. Members of system:masters, whom the authorizer lets
// do anything, and writes without a user (the hub's own) are not checked.
// Safe for concurrent use.
type CSRSigners struct {
	authz Authorizer
}

var _ apiserver.Admission = (*CSRSigners)(nil)

// NewCSRSigners returns the plugin deciding with authz, which must be
// non-nil; it may fail until authorization is ready, which refuses
// checked writes until then.
func NewCSRSigners(authz Authorizer) *CSRSigners { return &CSRSigners{authz: authz} }

// Handles reports whether r is certificatesigningrequests.
func (*CSRSigners) Handles(r schema.GroupResource) bool { return r == csrResource }

// Admit checks approvals and signatures against the signer's permissions.
func (p *CSRSigners) Admit(ctx context.Context, a apiserver.AdmissionAttributes) error {
	if a.Resource != csrResource || a.Operation != apiserver.Update {
		return nil
	}
	var verb string
	switch a.Subresource {
	case "approval":
		verb = "approve"
	case "status":
		verb = "sign"
	default:
		return nil
	}
	old, ok := a.OldObject.(*certificatesv1.CertificateSigningRequest)
	if !ok {
		return apierrors.NewForbidden(a.Resource, a.Name, fmt.Errorf("expected type CertificateSigningRequest, got: %T", a.OldObject))
	}
	c, ok := a.Object.(*certificatesv1.CertificateSigningRequest)
	if !ok {
		return apierrors.NewForbidden(a.Resource, a.Name, fmt.Errorf("expected type CertificateSigningRequest, got: %T", a.Object))
	}
	if verb == "sign" && bytes.Equal(old.Status.Certificate, c.Status.Certificate) &&
		apiequality.Semantic.DeepEqual(old.Status.Conditions, c.Status.Conditions) {
		return nil
	}
	u, ok := auth.UserFrom(ctx)
	if !ok || u.InGroup(auth.MastersGroup) {
		return nil
	}
	// The stored signer, so that an update cannot pick another.
	signer := old.Spec.SignerName
	if !p.mayForSigner(ctx, u, verb, signer) {
		return apierrors.NewForbidden(a.Resource, a.Name, fmt.Errorf("user not permitted to %s requests with signerName %q", verb, signer))
	}
	return nil
}

// mayForSigner reports whether u may verb the signer named signer, or
// every signer of its domain.
func (p *CSRSigners) mayForSigner(ctx context.Context, u auth.User, verb, signer string) bool {
	domain, _, _ := strings.Cut(signer, "/")
	for _, name := range []string{signer, domain + "/*"} {
		d, err := p.authz.Authorize(ctx, u, signerAttributes(verb, name))
		if err == nil && d.Allowed {
			return true
		}
	}
	return false
}

// signerAttributes are those of verb on the signer name, the check
// upstream makes of certificates.k8s.io/signers: what an RBAC rule with
// resources [signers] and resourceNames [name] (or none) grants.
func signerAttributes(verb, name string) auth.Attributes {
	return auth.Attributes{
		ResourceRequest: true, Verb: verb,
		APIGroup: certificatesv1.GroupName, APIVersion: "*", Resource: "signers", Name: name,
	}
}
