package auth

import (
	"crypto/rand"
	"crypto/subtle"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/outpost-mesh/outpost/sync/wire"
)

// Bootstrap tokens are kept as upstream keeps them: a Secret of type
// bootstrap.kubernetes.io/token named bootstrap-token-<id> in kube-system,
// whose data holds the token's parts and what it may be used for. Outpost
// adds the site the joining node belongs to, as a label.
const (
	BootstrapTokenNamespace = "kube-system"
	BootstrapTokenPrefix    = "bootstrap-token-"

	// Data keys of a bootstrap token Secret.
	BootstrapTokenIDKey          = "token-id"
	BootstrapTokenSecretKey      = "token-secret"
	BootstrapTokenExpirationKey  = "expiration" // RFC 3339; absent: never expires
	BootstrapTokenDescriptionKey = "description"
	BootstrapTokenUsageAuthKey   = "usage-bootstrap-authentication" // "true"

	// SiteLabel names the site of a node, and on a bootstrap token Secret
	// the site the nodes joining with it belong to.
	SiteLabel = wire.SiteLabel
)

// Lengths of a token's parts, each of [a-z0-9]; the form of a token is
// sync/wire's, which the edge checks too.
const (
	tokenIDLen     = wire.TokenIDLen
	tokenSecretLen = wire.TokenSecretLen
)

// Errors of bootstrap tokens. A joining node should be told only that its
// token was refused; which of these it was is for the hub's log.
var (
	// ErrTokenMalformed is returned for a token that is not
	// <6 chars [a-z0-9]>.<16 chars [a-z0-9]>.
	ErrTokenMalformed = wire.ErrTokenMalformed
	// ErrTokenNotFound is returned when the token's Secret does not exist,
	// is being deleted, or belongs to another token.
	ErrTokenNotFound = errors.New("bootstrap token not found")
	// ErrTokenWrongSecret is returned when the token's secret part does
	// not match its Secret's.
	ErrTokenWrongSecret = errors.New("bootstrap token secret does not match")
	// ErrTokenExpired is returned for a token past its expiration.
	ErrTokenExpired = errors.New("bootstrap token expired")
	// ErrTokenNotForAuthentication is returned when the token's Secret is
	// not a bootstrap token usable for authentication: wrong type, a bad
	// expiration, or usage-bootstrap-authentication not "true".
	ErrTokenNotForAuthentication = errors.New("bootstrap token is not usable for authentication")

	// ErrTokenRefused is what a joining node is told in place of
	// ErrTokenNotFound and ErrTokenWrongSecret (see PublicTokenError), so
	// that nobody learns which token ids exist by trying them.
	ErrTokenRefused = errors.New("bootstrap token refused: there is no such token, or its secret is wrong; check --token, or create a token on the hub with `outpost token create`")
)

// PublicTokenError returns what a joining node may be told of err, an
// error of ParseToken or ValidateBootstrapToken: ErrTokenRefused for a
// token that is not found or whose secret does not match, alike; err
// itself otherwise, since a malformed token says nothing of the hub's
// tokens and the other errors reach only a holder of the right secret.
// The hub's log keeps err.
func PublicTokenError(err error) error {
	if errors.Is(err, ErrTokenNotFound) || errors.Is(err, ErrTokenWrongSecret) {
		return ErrTokenRefused
	}
	return err
}

// GenerateToken returns a new random token's id and secret, as upstream
// makes them: 6 and 16 characters of [a-z0-9] from crypto/rand.
func GenerateToken() (id, secret string) {
	return randomToken(tokenIDLen), randomToken(tokenSecretLen)
}

const tokenChars = "abcdefghijklmnopqrstuvwxyz0123456789"

func randomToken(n int) string {
	out := make([]byte, 0, n)
	var buf [32]byte
	for len(out) < n {
		rand.Read(buf[:]) // never fails (crypto/rand since Go 1.24)
		for _, b := range buf {
			// 252 = 7*36: bytes above would bias the first characters.
			if b < 252 && len(out) < n {
				out = append(out, tokenChars[b%36])
			}
		}
	}
	return string(out)
}

// ParseToken splits a token "id.secret" into its parts. It returns an
// error wrapping ErrTokenMalformed, which does not echo the token, for
// anything else.
func ParseToken(token string) (id, secret string, err error) { return wire.ParseToken(token) }

// ValidTokenID reports whether id can be a token id: 6 characters of
// [a-z0-9].
func ValidTokenID(id string) bool { return wire.ValidTokenID(id) }

// BootstrapTokenSecretName returns the name of the Secret of token id.
func BootstrapTokenSecretName(id string) string { return BootstrapTokenPrefix + id }

// NewBootstrapTokenSecret returns the Secret of the token id.secret, usable
// for authentication until now+ttl (ttl <= 0: it never expires), whose
// nodes join site ("" for none). The caller sets a description in
// Data[BootstrapTokenDescriptionKey] if it wants one.
func NewBootstrapTokenSecret(id, secret, site string, ttl time.Duration, now time.Time) *corev1.Secret {
	s := &corev1.Secret{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
		ObjectMeta: metav1.ObjectMeta{
			Name:      BootstrapTokenSecretName(id),
			Namespace: BootstrapTokenNamespace,
		},
		Type: corev1.SecretTypeBootstrapToken,
		Data: map[string][]byte{
			BootstrapTokenIDKey:        []byte(id),
			BootstrapTokenSecretKey:    []byte(secret),
			BootstrapTokenUsageAuthKey: []byte("true"),
		},
	}
	if ttl > 0 {
		s.Data[BootstrapTokenExpirationKey] = []byte(now.Add(ttl).UTC().Format(time.RFC3339))
	}
	if site != "" {
		s.Labels = map[string]string{SiteLabel: site}
	}
	return s
}

// BootstrapTokenExpiration returns when the token of secret expires, and
// false when it never does or its expiration does not parse.
func BootstrapTokenExpiration(secret *corev1.Secret) (time.Time, bool) {
	raw, ok := secret.Data[BootstrapTokenExpirationKey]
	if !ok {
		return time.Time{}, false
	}
	t, err := time.Parse(time.RFC3339, string(raw))
	return t, err == nil
}

// ValidateBootstrapToken checks token ("id.secret") against secret, the
// Secret named BootstrapTokenSecretName(id) in kube-system or nil when there
// is none, at now, and returns the site of the nodes joining with it. Its
// errors wrap ErrTokenMalformed, ErrTokenNotFound, ErrTokenWrongSecret,
// ErrTokenExpired or ErrTokenNotForAuthentication. The secret part is
// compared (in constant time) before anything else about the Secret, so
// that only a holder of the right secret learns whether the token expired
// or is unusable. No error carries the token's secret.
func ValidateBootstrapToken(secret *corev1.Secret, token string, now time.Time) (site string, err error) {
	id, tokenSecret, err := ParseToken(token)
	if err != nil {
		return "", err
	}
	if secret == nil || secret.Namespace != BootstrapTokenNamespace || secret.Name != BootstrapTokenSecretName(id) {
		return "", fmt.Errorf("%w: no secret %s/%s", ErrTokenNotFound, BootstrapTokenNamespace, BootstrapTokenSecretName(id))
	}
	if secret.DeletionTimestamp != nil {
		return "", fmt.Errorf("%w: token %s is being deleted", ErrTokenNotFound, id)
	}
	stored := secret.Data[BootstrapTokenSecretKey]
	if subtle.ConstantTimeCompare(stored, []byte(tokenSecret)) != 1 {
		return "", fmt.Errorf("%w: token %s", ErrTokenWrongSecret, id)
	}
	if secret.Type != corev1.SecretTypeBootstrapToken {
		return "", fmt.Errorf("%w: secret %s has type %q, want %q", ErrTokenNotForAuthentication, secret.Name, secret.Type, corev1.SecretTypeBootstrapToken)
	}
	if got := string(secret.Data[BootstrapTokenIDKey]); got != id {
		return "", fmt.Errorf("%w: secret %s holds token id %q", ErrTokenNotForAuthentication, secret.Name, got)
	}
	if raw, ok := secret.Data[BootstrapTokenExpirationKey]; ok {
		exp, err := time.Parse(time.RFC3339, string(raw))
		if err != nil {
			return "", fmt.Errorf("%w: token %s: expiration %q is not RFC 3339", ErrTokenNotForAuthentication, id, raw)
		}
		if !now.Before(exp) {
			return "", fmt.Errorf("%w: token %s expired at %s", ErrTokenExpired, id, exp.UTC().Format(time.RFC3339))
		}
	}
	if string(secret.Data[BootstrapTokenUsageAuthKey]) != "true" {
		return "", fmt.Errorf("%w: token %s: %s is not \"true\"", ErrTokenNotForAuthentication, id, BootstrapTokenUsageAuthKey)
	}
	return secret.Labels[SiteLabel], nil
}
