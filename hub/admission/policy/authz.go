package policy

import (
	"context"

	admissionauthorizer "k8s.io/apiserver/pkg/admission/plugin/authorizer"
	"k8s.io/apiserver/pkg/authorization/authorizer"

	"github.com/outpost-mesh/outpost/hub/auth"
)

// Authorizer decides whether a user may make a request: the hub's whole
// authorization chain, which the CEL authorizer variable asks.
type Authorizer interface {
	Authorize(ctx context.Context, u auth.User, a auth.Attributes) (auth.Decision, error)
}

// cachingAuthorizer returns the authorizer CEL asks on a's behalf,
// caching its answers for one request as upstream's does; nil when a is
// nil, and expressions that use the authorizer then fail to evaluate.
func cachingAuthorizer(a Authorizer) authorizer.UnconditionalAuthorizer {
	if a == nil {
		return nil
	}
	return admissionauthorizer.NewCachingAuthorizer(upstreamAuthorizer{a})
}

// upstreamAuthorizer lets upstream's CEL authorizer library ask the
// hub's Authorizer.
type upstreamAuthorizer struct{ authz Authorizer }

var _ authorizer.UnconditionalAuthorizer = upstreamAuthorizer{}

// Authorize translates upstream's attributes into the hub's and the
// hub's decision back: allowed, no opinion (left to a later authorizer
// that did not allow it either), or denied.
func (u upstreamAuthorizer) Authorize(ctx context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
	var usr auth.User
	if info := a.GetUser(); info != nil {
		usr = auth.User{Name: info.GetName(), UID: info.GetUID(), Groups: info.GetGroups(), Extra: info.GetExtra()}
	}
	d, err := u.authz.Authorize(ctx, usr, auth.Attributes{
		ResourceRequest: a.IsResourceRequest(),
		Path:            a.GetPath(),
		Verb:            a.GetVerb(),
		APIGroup:        a.GetAPIGroup(),
		APIVersion:      a.GetAPIVersion(),
		Resource:        a.GetResource(),
		Subresource:     a.GetSubresource(),
		Namespace:       a.GetNamespace(),
		Name:            a.GetName(),
	})
	switch {
	case err != nil:
		return authorizer.DecisionNoOpinion, "", err
	case d.Allowed:
		return authorizer.DecisionAllow, d.Reason, nil
	case d.NoOpinion:
		return authorizer.DecisionNoOpinion, d.Reason, nil
	default:
		return authorizer.DecisionDeny, d.Reason, nil
	}
}
