package hubd

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"slices"
	"strings"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/outpost-mesh/outpost/hub/apiserver"
	"github.com/outpost-mesh/outpost/hub/auth"
	"github.com/outpost-mesh/outpost/hub/store"
	"github.com/outpost-mesh/outpost/internal/atomicfile"
)

// SAKeyFile holds the key the hub signs service account tokens with, in
// the PKI directory, as kubeadm keeps sa.key: an ECDSA P-256 key in PEM,
// made on first start. Every hub of one cluster must hold the same key to
// accept the others' tokens.
const SAKeyFile = "sa.key"

// SATokenConfig configures the hub's service account tokens.
type SATokenConfig struct {
	// KeyFile is the signing key's path; created when missing.
	KeyFile string
	// Issuer is the tokens' iss: auth.DefaultIssuer.
	Issuer string
	// Audiences are those the hub accepts, and gives a TokenRequest that
	// names none (the first): auth.DefaultAPIAudience. The issuer is
	// accepted too, as upstream's --api-audiences defaults to it.
	Audiences []string
	// MaxExpiration shortens what a TokenRequest asks for, as upstream's
	// --service-account-max-token-expiration; 0 for no maximum, its
	// default. The week a pod on a node gets is not held to it (see
	// auth.EdgePodTokenLifetime).
	MaxExpiration time.Duration
	// Now is the clock of token checks; nil: the wall clock.
	Now func() time.Time
}

// DefaultSATokenConfig returns the defaults for a hub with its PKI in
// pkiDir.
func DefaultSATokenConfig(pkiDir string) SATokenConfig {
	return SATokenConfig{
		KeyFile:   pkiDir + string(os.PathSeparator) + SAKeyFile,
		Issuer:    auth.DefaultIssuer,
		Audiences: []string{auth.DefaultAPIAudience},
	}
}

// saTokens are the hub's service account tokens: the issuer of the
// TokenRequest API (apiserver.Config.Tokens) and the authenticator of the
// bearer tokens requests present (apiHandler.tokens).
type saTokens struct {
	issuer *auth.TokenIssuer
	authn  *auth.TokenAuthenticator
}

var _ apiserver.TokenIssuer = (*saTokens)(nil)

// newSATokens loads (or makes) the signing key of cfg and builds the
// issuer and the authenticator, which looks the objects tokens are bound
// to up in st.
func newSATokens(cfg SATokenConfig, st store.Reader) (*saTokens, error) {
	if cfg.Issuer == "" || len(cfg.Audiences) == 0 {
		return nil, errors.New("service account tokens: issuer and audiences are required")
	}
	key, err := loadSAKey(cfg.KeyFile)
	if err != nil {
		return nil, err
	}
	signer, err := auth.NewTokenSigner(key)
	if err != nil {
		return nil, err
	}
	issuer, err := auth.NewTokenIssuer(signer, cfg.Issuer, cfg.Audiences, cfg.MaxExpiration)
	if err != nil {
		return nil, err
	}
	accepted := slices.Clone(cfg.Audiences)
	if !slices.Contains(accepted, cfg.Issuer) {
		accepted = append(accepted, cfg.Issuer)
	}
	v, err := auth.NewTokenVerifier(cfg.Issuer, accepted, []*ecdsa.PublicKey{signer.Public()}, cfg.Now)
	if err != nil {
		return nil, err
	}
	return &saTokens{issuer: issuer, authn: auth.NewTokenAuthenticator(v, storeTokenObjects{st})}, nil
}

// IssueToken signs the token of a checked TokenRequest.
func (t *saTokens) IssueToken(_ context.Context, g apiserver.TokenGrant) (apiserver.IssuedToken, error) {
	out, err := t.issuer.Issue(auth.TokenGrant{
		ServiceAccount: g.ServiceAccount, Pod: g.Pod, Secret: g.Secret, Node: g.Node,
		Audiences: g.Audiences, Requested: g.Requested, Now: g.Now,
	})
	if err != nil {
		return apiserver.IssuedToken{}, err
	}
	return apiserver.IssuedToken{Token: out.Token, Audiences: out.Audiences, Reported: out.Lifetime.Reported, Warnings: out.Lifetime.Warnings}, nil
}

// loadSAKey reads the ECDSA P-256 key at path (SEC 1 or PKCS #8 PEM),
// making and writing one when there is none.
func loadSAKey(path string) (*ecdsa.PrivateKey, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return nil, fmt.Errorf("generate service account key: %w", err)
		}
		der, err := x509.MarshalECPrivateKey(key)
		if err != nil {
			return nil, fmt.Errorf("encode service account key: %w", err)
		}
		if err := atomicfile.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), 0o600); err != nil {
			return nil, fmt.Errorf("write service account key: %w", err)
		}
		return key, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read service account key: %w", err)
	}
	block, _ := pem.Decode(b)
	if block == nil {
		return nil, fmt.Errorf("%s holds no PEM block: restore it from a backup, or remove it to make a new key (every token issued so far is then refused)", path)
	}
	var key any
	switch block.Type {
	case "EC PRIVATE KEY":
		key, err = x509.ParseECPrivateKey(block.Bytes)
	case "PRIVATE KEY":
		key, err = x509.ParsePKCS8PrivateKey(block.Bytes)
	default:
		return nil, fmt.Errorf("%s holds a %q block, want an EC PRIVATE KEY", path, block.Type)
	}
	if err != nil {
		return nil, fmt.Errorf("parse service account key %s: %w", path, err)
	}
	ec, ok := key.(*ecdsa.PrivateKey)
	if !ok || ec.Curve != elliptic.P256() {
		return nil, fmt.Errorf("%s is not an ECDSA P-256 key", path)
	}
	return ec, nil
}

// Where the API server keeps the objects tokens are bound to (see
// podsPrefix).
var (
	serviceAccountsPrefix = apiserver.KeyPrefix(schema.GroupResource{Resource: "serviceaccounts"})
	secretsPrefix         = apiserver.KeyPrefix(schema.GroupResource{Resource: "secrets"})
	nodesPrefix           = apiserver.KeyPrefix(schema.GroupResource{Resource: "nodes"})
)

// storeTokenObjects adapts the store to the token authenticator's
// lookups: one Get per object a token names, on every request, so that a
// token of a pod deleted a moment ago is refused at once.
type storeTokenObjects struct{ st store.Reader }

var _ auth.TokenObjects = storeTokenObjects{}

func (o storeTokenObjects) ServiceAccount(ctx context.Context, ns, name string) (*corev1.ServiceAccount, error) {
	sa := &corev1.ServiceAccount{}
	return getDecoded(ctx, o.st, serviceAccountsPrefix+ns+"/"+name, sa)
}

func (o storeTokenObjects) Pod(ctx context.Context, ns, name string) (*corev1.Pod, error) {
	return storePods(o).Get(ctx, ns, name)
}

func (o storeTokenObjects) Secret(ctx context.Context, ns, name string) (*corev1.Secret, error) {
	return getDecoded(ctx, o.st, secretsPrefix+ns+"/"+name, &corev1.Secret{})
}

func (o storeTokenObjects) Node(ctx context.Context, name string) (*corev1.Node, error) {
	return getDecoded(ctx, o.st, nodesPrefix+name, &corev1.Node{})
}

// getDecoded reads key into obj, returning nil and no error when there is
// no such key.
func getDecoded[T runtime.Object](ctx context.Context, st store.Reader, key string, obj T) (T, error) {
	var zero T
	kv, err := st.Get(ctx, key, 0)
	if errors.Is(err, store.ErrNotFound) || errors.Is(err, store.ErrInvalidKey) {
		return zero, nil
	}
	if err != nil {
		return zero, err
	}
	if err := apiserver.DecodeStored(kv.Value, obj); err != nil {
		return zero, fmt.Errorf("decode %s: %w", kv.Key, err)
	}
	return obj, nil
}

// bearerToken returns the token of r's Authorization: Bearer header, and
// whether it has one.
func bearerToken(r *http.Request) (string, bool) {
	h := r.Header.Get("Authorization")
	scheme, token, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "bearer") {
		return "", false
	}
	token = strings.TrimSpace(token)
	return token, token != ""
}

// tokenBoundObject returns the spec.boundObjectRef of the TokenRequest in
// r's body, decoded as the API server will decode it, and puts the body
// back for it to read. It returns nil when the body does not decode, is
// too large, or binds nothing: the authorizer then denies a node's
// request.
func tokenBoundObject(r *http.Request) (*auth.BoundObject, error) {
	obj, err := peekBody(r, &authenticationv1.TokenRequest{})
	if err != nil || obj == nil {
		return nil, err
	}
	ref := obj.(*authenticationv1.TokenRequest).Spec.BoundObjectRef
	if ref == nil {
		return nil, nil
	}
	return &auth.BoundObject{APIVersion: ref.APIVersion, Kind: ref.Kind, Name: ref.Name, UID: string(ref.UID)}, nil
}

// peekBody decodes r's body into into as the API server will (by
// Content-Type, JSON when none) and puts the body back for it to read. It
// returns nil and no error when there is no body or it does not decode or
// is too large: the API server refuses such a body itself. An error is a
// failed read.
func peekBody(r *http.Request, into runtime.Object) (runtime.Object, error) {
	if r.Body == nil {
		return nil, nil
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, apiserver.MaxBodyBytes+1))
	if err != nil {
		return nil, fmt.Errorf("read request body: %w", err)
	}
	r.Body = readCloser{io.MultiReader(bytes.NewReader(body), r.Body), r.Body}
	if len(body) > apiserver.MaxBodyBytes {
		return nil, nil
	}
	if err := apiserver.DecodeBody(r.Header.Get("Content-Type"), body, into); err != nil {
		return nil, nil
	}
	return into, nil
}
