// Package review serves the review resources of authorization.k8s.io and
// authentication.k8s.io, which clients create to be answered rather than
// stored: SelfSubjectAccessReview (kubectl auth can-i),
// SelfSubjectRulesReview (kubectl auth can-i --list), SubjectAccessReview,
// LocalSubjectAccessReview, TokenReview and SelfSubjectReview (kubectl
// auth whoami), answered from the hub's own authorizer, RBAC rules and
// token authenticator. Only the hub's composition root imports it.
package review

import (
	"context"
	"fmt"
	"slices"

	authenticationv1 "k8s.io/api/authentication/v1"
	authenticationv1beta1 "k8s.io/api/authentication/v1beta1"
	authorizationv1 "k8s.io/api/authorization/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/outpost-mesh/outpost/hub/apiserver"
	"github.com/outpost-mesh/outpost/hub/auth"
)

// Authorizer decides whether a user may make a request: the hub's whole
// authorization chain.
type Authorizer interface {
	Authorize(ctx context.Context, u auth.User, a auth.Attributes) (auth.Decision, error)
}

// Rules lists what RBAC lets a user do in a namespace; an error with
// rules means the list may be incomplete.
type Rules interface {
	RulesFor(ctx context.Context, u auth.User, namespace string) ([]rbacv1.PolicyRule, error)
}

// Tokens authenticates bearer tokens: an error wrapping
// auth.ErrInvalidToken for a token that does not hold, another error for
// a failed lookup.
type Tokens interface {
	Authenticate(ctx context.Context, token string) (auth.User, error)
}

// Resources returns the review resources, answered with authz, rules and
// tokens (all non-nil).
func Resources(authz Authorizer, rules Rules, tokens Tokens) []apiserver.Resource {
	az, an := authorizationv1.SchemeGroupVersion, authenticationv1.SchemeGroupVersion
	r := reviewer{authz: authz, rules: rules, tokens: tokens}
	res := func(gv schema.GroupVersion, kind, plural string, namespaced bool, add func(*runtime.Scheme) error, newObj func() runtime.Object, c apiserver.Creator) apiserver.Resource {
		return apiserver.Resource{
			GroupVersion: gv, Kind: kind, Plural: plural, Singular: singular(plural), Namespaced: namespaced,
			New: newObj, NewList: newObj, AddToScheme: add, Creator: c,
		}
	}
	return []apiserver.Resource{
		res(az, "SelfSubjectAccessReview", "selfsubjectaccessreviews", false, authorizationv1.AddToScheme,
			func() runtime.Object { return &authorizationv1.SelfSubjectAccessReview{} }, creator[*authorizationv1.SelfSubjectAccessReview](r.selfAccess)),
		res(az, "SelfSubjectRulesReview", "selfsubjectrulesreviews", false, authorizationv1.AddToScheme,
			func() runtime.Object { return &authorizationv1.SelfSubjectRulesReview{} }, creator[*authorizationv1.SelfSubjectRulesReview](r.selfRules)),
		res(az, "SubjectAccessReview", "subjectaccessreviews", false, authorizationv1.AddToScheme,
			func() runtime.Object { return &authorizationv1.SubjectAccessReview{} }, creator[*authorizationv1.SubjectAccessReview](r.access)),
		res(az, "LocalSubjectAccessReview", "localsubjectaccessreviews", true, authorizationv1.AddToScheme,
			func() runtime.Object { return &authorizationv1.LocalSubjectAccessReview{} }, creator[*authorizationv1.LocalSubjectAccessReview](r.localAccess)),
		res(an, "TokenReview", "tokenreviews", false, authenticationv1.AddToScheme,
			func() runtime.Object { return &authenticationv1.TokenReview{} }, creator[*authenticationv1.TokenReview](r.token)),
		res(an, "SelfSubjectReview", "selfsubjectreviews", false, authenticationv1.AddToScheme,
			func() runtime.Object { return &authenticationv1.SelfSubjectReview{} }, creator[*authenticationv1.SelfSubjectReview](r.self)),
		// kubectl 1.27 asks v1beta1 for auth whoami.
		res(authenticationv1beta1.SchemeGroupVersion, "SelfSubjectReview", "selfsubjectreviews", false, authenticationv1beta1.AddToScheme,
			func() runtime.Object { return &authenticationv1beta1.SelfSubjectReview{} }, creator[*authenticationv1beta1.SelfSubjectReview](r.selfBeta)),
	}
}

func singular(plural string) string { return plural[:len(plural)-1] }

// creator adapts a function of a review's Go type to apiserver.Creator.
type creator[T runtime.Object] func(ctx context.Context, obj T) (runtime.Object, error)

func (c creator[T]) Create(ctx context.Context, obj runtime.Object) (runtime.Object, error) {
	o, ok := obj.(T)
	if !ok {
		return nil, apierrors.NewInternalError(fmt.Errorf("review of type %T", obj))
	}
	return c(ctx, o)
}

type reviewer struct {
	authz  Authorizer
	rules  Rules
	tokens Tokens
}

// requester returns the user of the request ctx belongs to.
func requester(ctx context.Context) (auth.User, error) {
	u, ok := auth.UserFrom(ctx)
	if !ok {
		return auth.User{}, apierrors.NewBadRequest("no user on the request")
	}
	return u, nil
}

var (
	gkSSAR = schema.GroupKind{Group: authorizationv1.GroupName, Kind: "SelfSubjectAccessReview"}
	gkSAR  = schema.GroupKind{Group: authorizationv1.GroupName, Kind: "SubjectAccessReview"}
	gkLSAR = schema.GroupKind{Group: authorizationv1.GroupName, Kind: "LocalSubjectAccessReview"}
	gkTR   = schema.GroupKind{Group: authenticationv1.GroupName, Kind: "TokenReview"}
)

// attributes returns the authorization attributes a review's spec asks
// about, or the validation errors of a spec that asks about neither a
// resource nor a path, or both, as upstream's validation has it.
func attributes(res *authorizationv1.ResourceAttributes, nonRes *authorizationv1.NonResourceAttributes, spec *field.Path) (auth.Attributes, field.ErrorList) {
	switch {
	case res == nil && nonRes == nil:
		return auth.Attributes{}, field.ErrorList{field.Required(spec.Child("resourceAttributes"), "exactly one of nonResourceAttributes or resourceAttributes must be specified")}
	case res != nil && nonRes != nil:
		return auth.Attributes{}, field.ErrorList{field.Invalid(spec.Child("nonResourceAttributes"), nonRes, `cannot be specified in combination with resourceAttributes`)}
	case nonRes != nil:
		return auth.Attributes{Verb: nonRes.Verb, Path: nonRes.Path}, nil
	}
	return auth.Attributes{
		ResourceRequest: true, Verb: res.Verb, APIGroup: res.Group, APIVersion: res.Version,
		Resource: res.Resource, Subresource: res.Subresource, Namespace: res.Namespace, Name: res.Name,
	}, nil
}

// decide answers whether u may make a, as status.
func (r reviewer) decide(ctx context.Context, u auth.User, a auth.Attributes) authorizationv1.SubjectAccessReviewStatus {
	d, err := r.authz.Authorize(ctx, u, a)
	st := authorizationv1.SubjectAccessReviewStatus{Allowed: d.Allowed, Reason: d.Reason}
	if err != nil {
		st.EvaluationError = err.Error()
	}
	return st
}

func (r reviewer) selfAccess(ctx context.Context, rv *authorizationv1.SelfSubjectAccessReview) (runtime.Object, error) {
	u, err := requester(ctx)
	if err != nil {
		return nil, err
	}
	a, errs := attributes(rv.Spec.ResourceAttributes, rv.Spec.NonResourceAttributes, field.NewPath("spec"))
	if len(errs) > 0 {
		return nil, apierrors.NewInvalid(gkSSAR, "", errs)
	}
	rv.Status = r.decide(ctx, u, a)
	return rv, nil
}

func (r reviewer) access(ctx context.Context, rv *authorizationv1.SubjectAccessReview) (runtime.Object, error) {
	spec := field.NewPath("spec")
	a, errs := attributes(rv.Spec.ResourceAttributes, rv.Spec.NonResourceAttributes, spec)
	if rv.Spec.User == "" && len(rv.Spec.Groups) == 0 {
		errs = append(errs, field.Invalid(spec.Child("user"), rv.Spec.User, `at least one of user or group must be specified`))
	}
	if len(errs) > 0 {
		return nil, apierrors.NewInvalid(gkSAR, "", errs)
	}
	rv.Status = r.decide(ctx, specUser(rv.Spec), a)
	return rv, nil
}

// specUser is the user a SubjectAccessReview asks about.
func specUser(spec authorizationv1.SubjectAccessReviewSpec) auth.User {
	u := auth.User{Name: spec.User, Groups: spec.Groups, UID: spec.UID}
	if len(spec.Extra) > 0 {
		u.Extra = map[string][]string{}
		for k, v := range spec.Extra {
			u.Extra[k] = slices.Clone(v)
		}
	}
	return u
}

func (r reviewer) localAccess(ctx context.Context, rv *authorizationv1.LocalSubjectAccessReview) (runtime.Object, error) {
	spec := field.NewPath("spec")
	a, errs := attributes(rv.Spec.ResourceAttributes, rv.Spec.NonResourceAttributes, spec)
	switch {
	case rv.Spec.User == "" && len(rv.Spec.Groups) == 0:
		errs = append(errs, field.Invalid(spec.Child("user"), rv.Spec.User, `at least one of user or group must be specified`))
	case rv.Spec.NonResourceAttributes != nil:
		errs = append(errs, field.Invalid(spec.Child("nonResourceAttributes"), rv.Spec.NonResourceAttributes, `disallowed on this kind of request`))
	case rv.Spec.ResourceAttributes != nil && rv.Spec.ResourceAttributes.Namespace != rv.Namespace:
		errs = append(errs, field.Invalid(spec.Child("resourceAttributes", "namespace"), rv.Spec.ResourceAttributes.Namespace, `must match metadata.namespace`))
	}
	if len(errs) > 0 {
		return nil, apierrors.NewInvalid(gkLSAR, "", errs)
	}
	rv.Status = r.decide(ctx, specUser(rv.Spec), a)
	return rv, nil
}

func (r reviewer) selfRules(ctx context.Context, rv *authorizationv1.SelfSubjectRulesReview) (runtime.Object, error) {
	u, err := requester(ctx)
	if err != nil {
		return nil, err
	}
	rules, err := r.rules.RulesFor(ctx, u, rv.Spec.Namespace)
	st := authorizationv1.SubjectRulesReviewStatus{
		ResourceRules: []authorizationv1.ResourceRule{}, NonResourceRules: []authorizationv1.NonResourceRule{},
	}
	if err != nil {
		st.Incomplete, st.EvaluationError = true, err.Error()
	}
	if u.InGroup(auth.MastersGroup) {
		// What the privileged-group authorizer allows, before RBAC.
		rules = append(rules,
			rbacv1.PolicyRule{Verbs: []string{"*"}, APIGroups: []string{"*"}, Resources: []string{"*"}},
			rbacv1.PolicyRule{Verbs: []string{"*"}, NonResourceURLs: []string{"*"}})
	}
	for _, rule := range rules {
		if len(rule.Resources) > 0 {
			st.ResourceRules = append(st.ResourceRules, authorizationv1.ResourceRule{
				Verbs: slices.Clone(rule.Verbs), APIGroups: slices.Clone(rule.APIGroups),
				Resources: slices.Clone(rule.Resources), ResourceNames: slices.Clone(rule.ResourceNames),
			})
		}
		if len(rule.NonResourceURLs) > 0 {
			st.NonResourceRules = append(st.NonResourceRules, authorizationv1.NonResourceRule{
				Verbs: slices.Clone(rule.Verbs), NonResourceURLs: slices.Clone(rule.NonResourceURLs),
			})
		}
	}
	rv.Status = st
	return rv, nil
}

func (r reviewer) token(ctx context.Context, rv *authenticationv1.TokenReview) (runtime.Object, error) {
	if rv.Spec.Token == "" {
		return nil, apierrors.NewInvalid(gkTR, "", field.ErrorList{field.Required(field.NewPath("spec", "token"), "token is required")})
	}
	u, err := r.tokens.Authenticate(ctx, rv.Spec.Token)
	if err != nil {
		// Whether the token is bad or could not be checked, the
		// review says so without a 500, as upstream's does.
		rv.Status = authenticationv1.TokenReviewStatus{Authenticated: false, Error: err.Error()}
		return rv, nil
	}
	rv.Status = authenticationv1.TokenReviewStatus{Authenticated: true, User: userInfo(u), Audiences: rv.Spec.Audiences}
	return rv, nil
}

func (r reviewer) self(ctx context.Context, rv *authenticationv1.SelfSubjectReview) (runtime.Object, error) {
	u, err := requester(ctx)
	if err != nil {
		return nil, err
	}
	rv.Status.UserInfo = userInfo(u)
	return rv, nil
}

func (r reviewer) selfBeta(ctx context.Context, rv *authenticationv1beta1.SelfSubjectReview) (runtime.Object, error) {
	u, err := requester(ctx)
	if err != nil {
		return nil, err
	}
	rv.Status.UserInfo = userInfo(u)
	return rv, nil
}

func userInfo(u auth.User) authenticationv1.UserInfo {
	info := authenticationv1.UserInfo{Username: u.Name, UID: u.UID, Groups: slices.Clone(u.Groups)}
	if len(u.Extra) > 0 {
		info.Extra = map[string]authenticationv1.ExtraValue{}
		for k, v := range u.Extra {
			info.Extra[k] = slices.Clone(v)
		}
	}
	return info
}
