package auth

import (
	"errors"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// TokenIssuer issues the tokens of the TokenRequest API: it decides their
// life and audiences and signs them. Its methods are safe for concurrent
// use.
type TokenIssuer struct {
	signer    *TokenSigner
	issuer    string
	audiences []string
	max       time.Duration
}

// NewTokenIssuer returns an issuer signing with signer as issuer, giving
// a request without audiences the hub's own (apiAudiences, at least one),
// and shortening what is asked to max (0: no maximum).
func NewTokenIssuer(signer *TokenSigner, issuer string, apiAudiences []string, max time.Duration) (*TokenIssuer, error) {
	if signer == nil || issuer == "" || len(apiAudiences) == 0 {
		return nil, errors.New("token issuer: signer, issuer and audiences are required")
	}
	if max < 0 {
		return nil, errors.New("token issuer: negative maximum lifetime")
	}
	return &TokenIssuer{signer: signer, issuer: issuer, audiences: slices.Clone(apiAudiences), max: max}, nil
}

// TokenGrant is one token to issue: for ServiceAccount (non-nil), bound
// to Pod (and the Node it runs on, which may be a stand-in with only a
// name when the node does not exist), to Secret, to Node alone, or to
// nothing, for Audiences (none: the hub's own), asked to live Requested,
// issued at Now.
type TokenGrant struct {
	ServiceAccount *corev1.ServiceAccount
	Pod            *corev1.Pod
	Secret         *corev1.Secret
	Node           *corev1.Node
	Audiences      []string
	Requested      time.Duration
	Now            time.Time
}

// IssuedToken is a signed token and what the answer reports of it.
type IssuedToken struct {
	Token     string
	Audiences []string
	Lifetime  TokenLifetime
}

// Issue signs the token g describes, with the life GrantTokenLifetime
// decides.
func (i *TokenIssuer) Issue(g TokenGrant) (IssuedToken, error) {
	sa := g.ServiceAccount
	if sa == nil {
		return IssuedToken{}, errors.New("issue token: no service account")
	}
	if g.Secret != nil && g.Pod != nil {
		return IssuedToken{}, errors.New("issue token: bound to a pod and a secret")
	}
	auds := g.Audiences
	if len(auds) == 0 {
		auds = i.audiences
	}
	podOnNode := g.Pod != nil && g.Pod.Spec.NodeName != ""
	life := GrantTokenLifetime(g.Requested, i.max, podOnNode)
	c := TokenClaims{
		Issuer:         i.issuer,
		Audiences:      slices.Clone(auds),
		IssuedAt:       g.Now,
		NotBefore:      g.Now,
		Expiry:         g.Now.Add(life.Actual),
		Namespace:      sa.Namespace,
		ServiceAccount: ObjectRef{Name: sa.Name, UID: string(sa.UID)},
	}
	if life.Extended() {
		c.WarnAfter = g.Now.Add(life.Reported)
	}
	switch {
	case g.Pod != nil:
		c.Pod = &ObjectRef{Name: g.Pod.Name, UID: string(g.Pod.UID)}
	case g.Secret != nil:
		c.Secret = &ObjectRef{Name: g.Secret.Name, UID: string(g.Secret.UID)}
	}
	if g.Node != nil {
		c.Node = &ObjectRef{Name: g.Node.Name, UID: string(g.Node.UID)}
	}
	tok, err := i.signer.Sign(c)
	if err != nil {
		return IssuedToken{}, err
	}
	return IssuedToken{Token: tok, Audiences: c.Audiences, Lifetime: life}, nil
}
