package auth

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// Service account identities, as upstream names them.
const (
	// ServiceAccountUserPrefix begins the user name of a service account:
	// system:serviceaccount:<namespace>:<name>.
	ServiceAccountUserPrefix = "system:serviceaccount:"
	// ServiceAccountsGroup holds every service account, and
	// ServiceAccountGroupPrefix+<namespace> those of one namespace.
	ServiceAccountsGroup      = "system:serviceaccounts"
	ServiceAccountGroupPrefix = "system:serviceaccounts:"
)

// ServiceAccountUser returns the user a token of service account
// namespace/name authenticates as, with upstream's groups.
func ServiceAccountUser(namespace, name string) User {
	return User{
		Name:   ServiceAccountUserPrefix + namespace + ":" + name,
		Groups: []string{ServiceAccountsGroup, ServiceAccountGroupPrefix + namespace, AuthenticatedGroup},
	}
}

// ServiceAccount returns the namespace and name of the service account u
// is, and whether u is one at all: named
// system:serviceaccount:<namespace>:<name> and a member of
// system:serviceaccounts.
func (u User) ServiceAccount() (namespace, name string, ok bool) {
	rest, ok := strings.CutPrefix(u.Name, ServiceAccountUserPrefix)
	if !ok || !u.InGroup(ServiceAccountsGroup) {
		return "", "", false
	}
	namespace, name, ok = strings.Cut(rest, ":")
	if !ok || namespace == "" || name == "" || strings.Contains(name, ":") {
		return "", "", false
	}
	return namespace, name, true
}

// DefaultIssuer is the iss of the hub's service account tokens and, with
// DefaultAPIAudience, the audience the hub accepts by default: the name of
// the API inside the cluster, as kubeadm sets --service-account-issuer.
const DefaultIssuer = "https://kubernetes.default.svc.cluster.local"

// DefaultAPIAudience is the audience of a token requested without one,
// and one the hub accepts (upstream's --api-audiences defaults to the
// issuer, which is this same name by default).
const DefaultAPIAudience = "https://kubernetes.default.svc.cluster.local"

// ObjectRef names an object a token is bound to.
type ObjectRef struct {
	Name string `json:"name"`
	UID  string `json:"uid"`
}

// TokenClaims are what a service account token says, upstream's bound
// token claims: the standard ones and those under "kubernetes.io".
type TokenClaims struct {
	Issuer    string
	Audiences []string
	IssuedAt  time.Time
	NotBefore time.Time
	Expiry    time.Time
	// ID is the token's jti, unique per token.
	ID string

	Namespace      string
	ServiceAccount ObjectRef
	// Pod, Secret and Node are the objects the token is bound to, or nil.
	// A token bound to a pod names the pod's node too, when it has one.
	Pod    *ObjectRef
	Secret *ObjectRef
	Node   *ObjectRef
	// WarnAfter is when the life the client asked for ends, for a token
	// granted a longer one (see GrantTokenLifetime); zero when none.
	WarnAfter time.Time
}

// Subject is the token's sub: the service account's user name.
func (c TokenClaims) Subject() string {
	return ServiceAccountUserPrefix + c.Namespace + ":" + c.ServiceAccount.Name
}

// jwtClaims is the JSON of a token's payload.
type jwtClaims struct {
	jwt.RegisteredClaims
	Kubernetes kubernetesClaims `json:"kubernetes.io"`
}

type kubernetesClaims struct {
	Namespace      string           `json:"namespace"`
	ServiceAccount ObjectRef        `json:"serviceaccount"`
	Pod            *ObjectRef       `json:"pod,omitempty"`
	Secret         *ObjectRef       `json:"secret,omitempty"`
	Node           *ObjectRef       `json:"node,omitempty"`
	WarnAfter      *jwt.NumericDate `json:"warnafter,omitempty"`
}

// tokenAlg is the one signing algorithm the hub signs and accepts:
// ECDSA P-256 with SHA-256, as upstream accepts it beside RS256.
const tokenAlg = "ES256"

// maxTokenBytes bounds the tokens Verify parses: the hub's own are under
// a kilobyte; anything far larger is not one of them.
const maxTokenBytes = 16 << 10

// KeyID returns the kid of tokens signed with the private half of pub:
// the unpadded base64url SHA-256 of its PKIX DER, as upstream names keys.
func KeyID(pub *ecdsa.PublicKey) (string, error) {
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return "", fmt.Errorf("key id: %w", err)
	}
	sum := sha256.Sum256(der)
	return base64.RawURLEncoding.EncodeToString(sum[:]), nil
}

// TokenSigner signs service account tokens with one P-256 key. Its
// methods are safe for concurrent use.
type TokenSigner struct {
	key   *ecdsa.PrivateKey
	keyID string
}

// NewTokenSigner returns a signer with key, which must be a P-256 key.
func NewTokenSigner(key *ecdsa.PrivateKey) (*TokenSigner, error) {
	if key == nil || key.Curve != elliptic.P256() {
		return nil, errors.New("service account signing key: want an ECDSA P-256 key")
	}
	kid, err := KeyID(&key.PublicKey)
	if err != nil {
		return nil, err
	}
	return &TokenSigner{key: key, keyID: kid}, nil
}

// Public returns the key tokens of s verify with.
func (s *TokenSigner) Public() *ecdsa.PublicKey { return &s.key.PublicKey }

// Sign returns c as a signed JWT. An empty c.ID gets a random one.
func (s *TokenSigner) Sign(c TokenClaims) (string, error) {
	if c.Namespace == "" || c.ServiceAccount.Name == "" || c.Issuer == "" || len(c.Audiences) == 0 || c.Expiry.IsZero() {
		return "", errors.New("sign token: namespace, service account, issuer, audiences and expiry are required")
	}
	if c.ID == "" {
		id, err := newTokenID()
		if err != nil {
			return "", err
		}
		c.ID = id
	}
	claims := jwtClaims{
		RegisteredClaims: jwt.RegisteredClaims{
			Issuer:    c.Issuer,
			Subject:   c.Subject(),
			Audience:  jwt.ClaimStrings(slices.Clone(c.Audiences)),
			ExpiresAt: jwt.NewNumericDate(c.Expiry),
			NotBefore: jwt.NewNumericDate(c.NotBefore),
			IssuedAt:  jwt.NewNumericDate(c.IssuedAt),
			ID:        c.ID,
		},
		Kubernetes: kubernetesClaims{
			Namespace:      c.Namespace,
			ServiceAccount: c.ServiceAccount,
			Pod:            c.Pod,
			Secret:         c.Secret,
			Node:           c.Node,
		},
	}
	if !c.WarnAfter.IsZero() {
		claims.Kubernetes.WarnAfter = jwt.NewNumericDate(c.WarnAfter)
	}
	t := jwt.NewWithClaims(jwt.SigningMethodES256, claims)
	t.Header["kid"] = s.keyID
	signed, err := t.SignedString(s.key)
	if err != nil {
		return "", fmt.Errorf("sign token: %w", err)
	}
	return signed, nil
}

// newTokenID returns a random version 4 UUID, the form of upstream's jti.
func newTokenID() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("token id: %w", err)
	}
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:]), nil
}

// ErrInvalidToken is wrapped by the errors of a token the hub does not
// accept: malformed, signed by another key, expired, for another audience
// or issuer, or bound to objects that are gone. The request is then
// unauthenticated (401); other errors are failures of the lookups.
var ErrInvalidToken = errors.New("invalid service account token")

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalidToken, fmt.Sprintf(format, args...))
}

// TokenLeeway is the clock skew allowed when checking a token's times,
// and how long after its bound object's deletion was due a token still
// works (upstream's jwt.DefaultLeeway, a minute).
const TokenLeeway = time.Minute

// TokenVerifier checks the signature and claims of service account tokens
// with the hub's keys. Its methods are safe for concurrent use.
type TokenVerifier struct {
	keys      map[string]*ecdsa.PublicKey // by kid
	issuer    string
	audiences []string
	now       func() time.Time
}

// NewTokenVerifier returns a verifier of tokens of issuer, signed with
// one of keys, for at least one of audiences; now is its clock (nil: the
// wall clock).
func NewTokenVerifier(issuer string, audiences []string, keys []*ecdsa.PublicKey, now func() time.Time) (*TokenVerifier, error) {
	if issuer == "" || len(audiences) == 0 || len(keys) == 0 {
		return nil, errors.New("token verifier: issuer, audiences and keys are required")
	}
	if now == nil {
		now = time.Now
	}
	v := &TokenVerifier{keys: map[string]*ecdsa.PublicKey{}, issuer: issuer, audiences: slices.Clone(audiences), now: now}
	for _, k := range keys {
		if k == nil || k.Curve != elliptic.P256() {
			return nil, errors.New("token verifier: want ECDSA P-256 keys")
		}
		kid, err := KeyID(k)
		if err != nil {
			return nil, err
		}
		v.keys[kid] = k
	}
	return v, nil
}

// Verify returns the claims of token if it is one of the hub's service
// account tokens, signed by one of its keys, of its issuer, for one of its
// audiences, and current (with TokenLeeway). It does not check the
// objects the token is bound to (see CheckBinding). Errors wrap
// ErrInvalidToken.
func (v *TokenVerifier) Verify(token string) (TokenClaims, error) {
	if len(token) > maxTokenBytes {
		return TokenClaims{}, invalid("token of %d bytes is too long", len(token))
	}
	var claims jwtClaims
	_, err := jwt.ParseWithClaims(token, &claims, func(t *jwt.Token) (any, error) {
		kid, _ := t.Header["kid"].(string)
		if k, ok := v.keys[kid]; ok {
			return k, nil
		}
		if len(v.keys) == 1 && kid == "" {
			for _, k := range v.keys {
				return k, nil
			}
		}
		return nil, errors.New("signed by an unknown key")
	},
		jwt.WithValidMethods([]string{tokenAlg}),
		jwt.WithIssuer(v.issuer),
		jwt.WithAudience(v.audiences...),
		jwt.WithLeeway(TokenLeeway),
		jwt.WithTimeFunc(v.now),
		jwt.WithExpirationRequired(),
		jwt.WithIssuedAt(),
	)
	switch {
	case errors.Is(err, jwt.ErrTokenExpired):
		return TokenClaims{}, invalid("service account token has expired")
	case errors.Is(err, jwt.ErrTokenNotValidYet):
		return TokenClaims{}, invalid("service account token is not valid yet")
	case errors.Is(err, jwt.ErrTokenUsedBeforeIssued):
		return TokenClaims{}, invalid("service account token is issued in the future")
	case err != nil:
		return TokenClaims{}, invalid("%v", err)
	}
	k := claims.Kubernetes
	if k.Namespace == "" || k.ServiceAccount.Name == "" || k.ServiceAccount.UID == "" {
		return TokenClaims{}, invalid("token names no service account")
	}
	if want := ServiceAccountUserPrefix + k.Namespace + ":" + k.ServiceAccount.Name; claims.Subject != want {
		return TokenClaims{}, invalid("subject %q does not match the service account %s", claims.Subject, want)
	}
	c := TokenClaims{
		Issuer:         claims.Issuer,
		Audiences:      []string(claims.Audience),
		ID:             claims.ID,
		Namespace:      k.Namespace,
		ServiceAccount: k.ServiceAccount,
		Pod:            k.Pod,
		Secret:         k.Secret,
		Node:           k.Node,
	}
	c.Expiry = claims.ExpiresAt.Time
	if claims.IssuedAt != nil {
		c.IssuedAt = claims.IssuedAt.Time
	}
	if claims.NotBefore != nil {
		c.NotBefore = claims.NotBefore.Time
	}
	if k.WarnAfter != nil {
		c.WarnAfter = k.WarnAfter.Time
	}
	return c, nil
}
