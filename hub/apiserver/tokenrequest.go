package apiserver

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/outpost-mesh/outpost/hub/store"
	"github.com/outpost-mesh/outpost/internal/podrefs"
)

// TokenIssuer signs the tokens of the serviceaccounts/token subresource.
// The machinery finds the objects a TokenRequest names and checks them;
// the issuer decides the token's life and audiences and signs it. The
// hub's composition root adapts its token signer to it. Its methods must
// be safe for concurrent use.
type TokenIssuer interface {
	// IssueToken signs a token for g. An error fails the request (500).
	IssueToken(ctx context.Context, g TokenGrant) (IssuedToken, error)
}

// TokenGrant is a checked TokenRequest: the objects it names, as stored.
// The issuer does not modify them.
type TokenGrant struct {
	// ServiceAccount is the token's service account; non-nil.
	ServiceAccount *corev1.ServiceAccount
	// Pod or Secret is the object the token is bound to, or neither.
	// Node is the node the token is bound to, alone, or the node of Pod:
	// then, when that node does not exist, a stand-in with its name only,
	// as upstream names it in the token regardless.
	Pod    *corev1.Pod
	Secret *corev1.Secret
	Node   *corev1.Node
	// Audiences are those asked for; none asks for the API's own.
	Audiences []string
	// Requested is the life asked for: validated, at least ten minutes.
	Requested time.Duration
	// Now is when the request is served, the token's iat.
	Now time.Time
}

// IssuedToken is a signed token and what the TokenRequest's answer
// reports of it.
type IssuedToken struct {
	Token string
	// Audiences are the token's, for spec.audiences.
	Audiences []string
	// Reported is the life spec.expirationSeconds and
	// status.expirationTimestamp report; the token's exp may be later
	// (see TokenRules).
	Reported time.Duration
	// Warnings go to the client as Warning headers.
	Warnings []string
}

// TokenRules serve the token subresource of service accounts: a create
// of an authentication.k8s.io/v1 TokenRequest, answered with a token that
// Config.Tokens signs, as upstream's TokenREST. The machinery decodes the
// request, applies Default and Validate, looks up the service account and
// the object the token is to be bound to (a Pod, a Secret or a Node),
// checks their UIDs and that a pod runs as the service account, and asks
// the issuer.
type TokenRules struct {
	// Default fills in what the request left out, as upstream's
	// SetDefaults_TokenRequestSpec.
	Default func(*authenticationv1.TokenRequest)
	// Validate checks the defaulted request, with field paths.
	Validate func(*authenticationv1.TokenRequest) field.ErrorList
}

var tokenRequestGVK = authenticationv1.SchemeGroupVersion.WithKind("TokenRequest")

// serveToken serves POST serviceaccounts/NAME/token.
func (q *request) serveToken() error {
	if q.s.cfg.Tokens == nil {
		return apierrors.NewGenericServerResponse(http.StatusNotFound, q.verb, schema.GroupResource{}, "", "", 0, false)
	}
	gk := tokenRequestGVK.GroupKind()
	body, err := readBody(q.r)
	if err != nil {
		return err
	}
	tr := &authenticationv1.TokenRequest{}
	if len(body) > 0 {
		dec, _, err := requestDecoder(q.r, q.s.machineryCodec(), false)
		if err != nil {
			return err
		}
		if _, _, err := dec.Decode(body, &tokenRequestGVK, tr); err != nil {
			return apierrors.NewBadRequest(fmt.Sprintf("the body of the request could not be decoded as a TokenRequest: %v", err))
		}
	}
	if tr.Name != "" && tr.Name != q.ri.name {
		return apierrors.NewInvalid(gk, q.ri.name, field.ErrorList{field.Invalid(field.NewPath("metadata", "name"), tr.Name, "must match the service account name if specified")})
	}
	if tr.Namespace != "" && tr.Namespace != q.ri.namespace {
		return apierrors.NewInvalid(gk, q.ri.name, field.ErrorList{field.Invalid(field.NewPath("metadata", "namespace"), tr.Namespace, "must match the service account namespace if specified")})
	}

	saObj, err := q.s.getStored(q.ctx(), corev1.SchemeGroupVersion.WithResource("serviceaccounts"), q.ri.namespace, q.ri.name)
	if err != nil {
		return err
	}
	sa := saObj.(*corev1.ServiceAccount)

	now := q.s.now()
	tr.Name, tr.Namespace = sa.Name, sa.Namespace
	tr.CreationTimestamp = metav1.NewTime(now)
	tr.Status = authenticationv1.TokenRequestStatus{}
	rules := q.res.Token
	if rules.Default != nil {
		rules.Default(tr)
	}
	if rules.Validate != nil {
		if errs := rules.Validate(tr); len(errs) > 0 {
			return apierrors.NewInvalid(gk, "", errs)
		}
	}
	if tr.Spec.ExpirationSeconds == nil {
		return apierrors.NewInternalError(errors.New("token request without expirationSeconds after defaults"))
	}

	g := TokenGrant{
		ServiceAccount: sa,
		Audiences:      tr.Spec.Audiences,
		Requested:      time.Duration(*tr.Spec.ExpirationSeconds) * time.Second,
		Now:            now,
	}
	if err := q.bindToken(&g, tr.Spec.BoundObjectRef); err != nil {
		return err
	}
	out, err := q.s.cfg.Tokens.IssueToken(q.ctx(), g)
	if err != nil {
		return apierrors.NewInternalError(fmt.Errorf("failed to generate token: %w", err))
	}
	q.warnings = append(q.warnings, out.Warnings...)
	reported := int64(out.Reported / time.Second)
	tr.TypeMeta = metav1.TypeMeta{APIVersion: tokenRequestGVK.GroupVersion().String(), Kind: tokenRequestGVK.Kind}
	tr.Spec.Audiences = out.Audiences
	tr.Spec.ExpirationSeconds = &reported
	tr.Status = authenticationv1.TokenRequestStatus{
		Token:               out.Token,
		ExpirationTimestamp: metav1.NewTime(now.Add(out.Reported)),
	}
	return q.respond(http.StatusCreated, tr)
}

// bindToken looks up the object ref names in the request's namespace and
// puts it in g, as upstream's TokenREST checks it.
func (q *request) bindToken(g *TokenGrant, ref *authenticationv1.BoundObjectReference) error {
	if ref == nil {
		return nil
	}
	gvk := schema.FromAPIVersionAndKind(ref.APIVersion, ref.Kind)
	ctx, ns := q.ctx(), q.ri.namespace
	var uid types.UID
	switch {
	case gvk.Group == "" && gvk.Kind == "Pod":
		obj, err := q.s.getStored(ctx, corev1.SchemeGroupVersion.WithResource("pods"), ns, ref.Name)
		if err != nil {
			return err
		}
		pod := obj.(*corev1.Pod)
		if podServiceAccount(pod) != g.ServiceAccount.Name {
			return apierrors.NewBadRequest(fmt.Sprintf("cannot bind token for serviceaccount %q to pod running with different serviceaccount name.", g.ServiceAccount.Name))
		}
		g.Pod, uid = pod, pod.UID
		if node := pod.Spec.NodeName; node != "" {
			obj, err := q.s.getStored(ctx, corev1.SchemeGroupVersion.WithResource("nodes"), "", node)
			switch {
			case apierrors.IsNotFound(err):
				g.Node = &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}
			case err != nil:
				return err
			default:
				g.Node = obj.(*corev1.Node)
			}
		}
	case gvk.Group == "" && gvk.Kind == "Secret":
		obj, err := q.s.getStored(ctx, corev1.SchemeGroupVersion.WithResource("secrets"), ns, ref.Name)
		if err != nil {
			return err
		}
		g.Secret = obj.(*corev1.Secret)
		uid = g.Secret.UID
	case gvk.Group == "" && gvk.Kind == "Node":
		obj, err := q.s.getStored(ctx, corev1.SchemeGroupVersion.WithResource("nodes"), "", ref.Name)
		if err != nil {
			return err
		}
		g.Node = obj.(*corev1.Node)
		uid = g.Node.UID
	default:
		return apierrors.NewBadRequest(fmt.Sprintf("cannot bind token to object of type %s", gvk.String()))
	}
	if ref.UID != "" && uid != ref.UID {
		return apierrors.NewConflict(schema.GroupResource{Group: gvk.Group, Resource: gvk.Kind}, ref.Name,
			fmt.Errorf("the UID in the bound object reference (%s) does not match the UID in record. The object might have been deleted and then recreated", ref.UID))
	}
	return nil
}

// podServiceAccount is the service account pod runs as.
func podServiceAccount(pod *corev1.Pod) string {
	found := ""
	podrefs.Visit(pod, func(resource, name string) bool {
		if resource == podrefs.ServiceAccounts {
			found = name
			return false
		}
		return true
	})
	return found
}

// getStored returns the stored object gvr namespace/name, or the API
// error to answer: 404 when it does not exist or the resource is not
// served.
func (s *Server) getStored(ctx context.Context, gvr schema.GroupVersionResource, namespace, name string) (runtime.Object, error) {
	res := s.res().byGVR[gvr]
	if res == nil {
		return nil, apierrors.NewNotFound(gvr.GroupResource(), name)
	}
	kv, err := s.store.Get(ctx, res.key(namespace, name), 0)
	if errors.Is(err, store.ErrInvalidKey) {
		return nil, apierrors.NewNotFound(res.gr, name)
	}
	if err != nil {
		return nil, storeError(err, res.gr, name)
	}
	obj, err := res.decode(kv)
	if err != nil {
		return nil, apierrors.NewInternalError(err)
	}
	return obj, nil
}
