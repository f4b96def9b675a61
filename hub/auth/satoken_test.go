package auth

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

func newKey(t *testing.T) *ecdsa.PrivateKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

var t0 = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

func testClaims() TokenClaims {
	return TokenClaims{
		Issuer:         DefaultIssuer,
		Audiences:      []string{DefaultAPIAudience},
		IssuedAt:       t0,
		NotBefore:      t0,
		Expiry:         t0.Add(time.Hour),
		Namespace:      "prod",
		ServiceAccount: ObjectRef{Name: "api", UID: "sa-uid"},
		Pod:            &ObjectRef{Name: "api-1", UID: "pod-uid"},
		Node:           &ObjectRef{Name: "edge-1", UID: "node-uid"},
		WarnAfter:      t0.Add(30 * time.Minute),
	}
}

// payload decodes the JSON claims of a token without verifying it.
func payload(t *testing.T, token string) map[string]any {
	t.Helper()
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		t.Fatalf("token has %d parts", len(parts))
	}
	b, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func TestSignVerify(t *testing.T) {
	key := newKey(t)
	s, err := NewTokenSigner(key)
	if err != nil {
		t.Fatal(err)
	}
	c := testClaims()
	tok, err := s.Sign(c)
	if err != nil {
		t.Fatal(err)
	}
	// The claims upstream's bound tokens carry, by their JSON names.
	p := payload(t, tok)
	want := map[string]any{
		"iss": DefaultIssuer, "sub": "system:serviceaccount:prod:api",
		"aud": []any{DefaultAPIAudience},
		"exp": float64(t0.Add(time.Hour).Unix()), "iat": float64(t0.Unix()), "nbf": float64(t0.Unix()),
		"kubernetes.io": map[string]any{
			"namespace":      "prod",
			"serviceaccount": map[string]any{"name": "api", "uid": "sa-uid"},
			"pod":            map[string]any{"name": "api-1", "uid": "pod-uid"},
			"node":           map[string]any{"name": "edge-1", "uid": "node-uid"},
			"warnafter":      float64(t0.Add(30 * time.Minute).Unix()),
		},
	}
	jti, _ := p["jti"].(string)
	delete(p, "jti")
	if diff := cmp.Diff(want, p); diff != "" {
		t.Errorf("token payload (-want +got):\n%s", diff)
	}
	if len(jti) != 36 {
		t.Errorf("jti = %q, want a UUID", jti)
	}

	at := func(d time.Duration) func() time.Time { return func() time.Time { return t0.Add(d) } }
	v, err := NewTokenVerifier(DefaultIssuer, []string{"other", DefaultAPIAudience}, []*ecdsa.PublicKey{s.Public()}, at(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	got, err := v.Verify(tok)
	if err != nil {
		t.Fatalf("Verify = %v", err)
	}
	c.ID = jti
	if diff := cmp.Diff(c, got); diff != "" {
		t.Errorf("Verify claims (-signed +verified):\n%s", diff)
	}

	other, _ := NewTokenSigner(newKey(t))
	otherTok, _ := other.Sign(testClaims())
	hs := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"iss": DefaultIssuer})
	hsTok, _ := hs.SignedString([]byte("secret"))
	none := jwt.NewWithClaims(jwt.SigningMethodNone, jwt.MapClaims{"iss": DefaultIssuer})
	noneTok, _ := none.SignedString(jwt.UnsafeAllowNoneSignatureType)
	noSA := testClaims()
	noSA.ServiceAccount.UID = ""
	noSATok, _ := s.Sign(noSA)
	forged := strings.Split(tok, ".")
	forged[1] = base64.RawURLEncoding.EncodeToString([]byte(`{"iss":"` + DefaultIssuer + `","sub":"system:serviceaccount:kube-system:admin"}`))

	for _, tc := range []struct {
		name  string
		v     *TokenVerifier
		token string
		msg   string
	}{
		{"expired", mustVerifier(t, DefaultIssuer, DefaultAPIAudience, s, at(time.Hour+2*time.Minute)), tok, "has expired"},
		{"within leeway of expiry", mustVerifier(t, DefaultIssuer, DefaultAPIAudience, s, at(time.Hour+30*time.Second)), tok, ""},
		{"issued in the future", mustVerifier(t, DefaultIssuer, DefaultAPIAudience, s, at(-2*time.Minute)), tok, "not valid yet"},
		{"another audience", mustVerifier(t, DefaultIssuer, "https://vault", s, at(0)), tok, "audience"},
		{"another issuer", mustVerifier(t, "https://other", DefaultAPIAudience, s, at(0)), tok, "issuer"},
		{"another key", mustVerifier(t, DefaultIssuer, DefaultAPIAudience, s, at(0)), otherTok, "unknown key"},
		{"HS256", mustVerifier(t, DefaultIssuer, DefaultAPIAudience, s, at(0)), hsTok, "signing method"},
		{"none", mustVerifier(t, DefaultIssuer, DefaultAPIAudience, s, at(0)), noneTok, "signing method"},
		{"forged payload", mustVerifier(t, DefaultIssuer, DefaultAPIAudience, s, at(0)), strings.Join(forged, "."), "signature"},
		{"no service account uid", mustVerifier(t, DefaultIssuer, DefaultAPIAudience, s, at(0)), noSATok, "names no service account"},
		{"garbage", mustVerifier(t, DefaultIssuer, DefaultAPIAudience, s, at(0)), "abc", "malformed"},
		{"huge", mustVerifier(t, DefaultIssuer, DefaultAPIAudience, s, at(0)), strings.Repeat("a", maxTokenBytes+1), "too long"},
	} {
		_, err := tc.v.Verify(tc.token)
		switch {
		case tc.msg == "" && err != nil:
			t.Errorf("%s: Verify = %v, want nil", tc.name, err)
		case tc.msg != "" && (!errors.Is(err, ErrInvalidToken) || !strings.Contains(err.Error(), tc.msg)):
			t.Errorf("%s: Verify = %v, want ErrInvalidToken saying %q", tc.name, err, tc.msg)
		}
	}
}

func mustVerifier(t *testing.T, iss, aud string, s *TokenSigner, now func() time.Time) *TokenVerifier {
	t.Helper()
	v, err := NewTokenVerifier(iss, []string{aud}, []*ecdsa.PublicKey{s.Public()}, now)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestCheckBinding(t *testing.T) {
	now := t0
	meta := func(uid string, deleted time.Duration) metav1.ObjectMeta {
		m := metav1.ObjectMeta{UID: types.UID(uid)}
		if deleted != 0 {
			ts := metav1.NewTime(now.Add(deleted))
			m.DeletionTimestamp = &ts
		}
		return m
	}
	sa := &corev1.ServiceAccount{ObjectMeta: meta("sa-uid", 0)}
	running := &corev1.Pod{ObjectMeta: meta("pod-uid", 0), Status: corev1.PodStatus{Phase: corev1.PodRunning}}
	podClaims := testClaims()
	secretClaims := testClaims()
	secretClaims.Pod, secretClaims.Node = nil, nil
	secretClaims.Secret = &ObjectRef{Name: "s", UID: "secret-uid"}
	nodeClaims := testClaims()
	nodeClaims.Pod = nil
	plain := testClaims()
	plain.Pod, plain.Node = nil, nil

	for _, tc := range []struct {
		name   string
		claims TokenClaims
		objs   BoundObjects
		msg    string // "" when the token holds
	}{
		{"unbound", plain, BoundObjects{ServiceAccount: sa}, ""},
		{"service account gone", plain, BoundObjects{}, "service account prod/api does not exist"},
		{"service account recreated", plain, BoundObjects{ServiceAccount: &corev1.ServiceAccount{ObjectMeta: meta("new", 0)}}, "service account UID (new) does not match claim (sa-uid)"},
		{"service account deleted long ago", plain, BoundObjects{ServiceAccount: &corev1.ServiceAccount{ObjectMeta: meta("sa-uid", -2*time.Minute)}}, "has been deleted"},
		{"service account being deleted", plain, BoundObjects{ServiceAccount: &corev1.ServiceAccount{ObjectMeta: meta("sa-uid", -30*time.Second)}}, ""},

		{"pod running", podClaims, BoundObjects{ServiceAccount: sa, Pod: running}, ""},
		{"pod pending", podClaims, BoundObjects{ServiceAccount: sa, Pod: &corev1.Pod{ObjectMeta: meta("pod-uid", 0)}}, ""},
		{"pod gone", podClaims, BoundObjects{ServiceAccount: sa}, "bound pod prod/api-1 does not exist"},
		{"pod recreated", podClaims, BoundObjects{ServiceAccount: sa, Pod: &corev1.Pod{ObjectMeta: meta("new", 0)}}, "pod UID (new) does not match"},
		{"pod in its grace period", podClaims, BoundObjects{ServiceAccount: sa, Pod: &corev1.Pod{ObjectMeta: meta("pod-uid", 20*time.Second)}}, ""},
		{"pod deletion overdue", podClaims, BoundObjects{ServiceAccount: sa, Pod: &corev1.Pod{ObjectMeta: meta("pod-uid", -61*time.Second)}}, "has been deleted"},
		{"pod succeeded", podClaims, BoundObjects{ServiceAccount: sa, Pod: &corev1.Pod{ObjectMeta: meta("pod-uid", 0), Status: corev1.PodStatus{Phase: corev1.PodSucceeded}}}, "has terminated (Succeeded)"},
		{"pod failed", podClaims, BoundObjects{ServiceAccount: sa, Pod: &corev1.Pod{ObjectMeta: meta("pod-uid", 0), Status: corev1.PodStatus{Phase: corev1.PodFailed}}}, "has terminated (Failed)"},
		// the node of a pod-bound token is informative only
		{"pod's node gone", podClaims, BoundObjects{ServiceAccount: sa, Pod: running}, ""},

		{"secret", secretClaims, BoundObjects{ServiceAccount: sa, Secret: &corev1.Secret{ObjectMeta: meta("secret-uid", 0)}}, ""},
		{"secret gone", secretClaims, BoundObjects{ServiceAccount: sa}, "bound secret prod/s does not exist"},
		{"secret recreated", secretClaims, BoundObjects{ServiceAccount: sa, Secret: &corev1.Secret{ObjectMeta: meta("x", 0)}}, "secret UID (x) does not match"},

		{"node", nodeClaims, BoundObjects{ServiceAccount: sa, Node: &corev1.Node{ObjectMeta: meta("node-uid", 0)}}, ""},
		{"node gone", nodeClaims, BoundObjects{ServiceAccount: sa}, "bound node edge-1 does not exist"},
		{"node recreated", nodeClaims, BoundObjects{ServiceAccount: sa, Node: &corev1.Node{ObjectMeta: meta("x", 0)}}, "node UID (x) does not match"},
	} {
		err := CheckBinding(tc.claims, tc.objs, now)
		switch {
		case tc.msg == "" && err != nil:
			t.Errorf("%s: CheckBinding = %v, want nil", tc.name, err)
		case tc.msg != "" && (!errors.Is(err, ErrInvalidToken) || !strings.Contains(err.Error(), tc.msg)):
			t.Errorf("%s: CheckBinding = %v, want ErrInvalidToken saying %q", tc.name, err, tc.msg)
		}
	}
}

func TestGrantTokenLifetime(t *testing.T) {
	const h = time.Hour
	for _, tc := range []struct {
		requested, max   time.Duration
		podOnNode        bool
		reported, actual time.Duration
		warning          string
	}{
		{h, 0, false, h, h, ""},
		{h, 0, true, h, EdgePodTokenLifetime, ""},
		{3607 * time.Second, 0, true, 3607 * time.Second, EdgePodTokenLifetime, ""},
		{30 * 24 * h, 0, true, 30 * 24 * h, 30 * 24 * h, ""},
		{48 * h, 24 * h, false, 24 * h, 24 * h, "requested expiration of 172800 seconds shortened to 86400 seconds"},
		// the edge extension is not held to the maximum
		{48 * h, 24 * h, true, 24 * h, EdgePodTokenLifetime, "requested expiration of 172800 seconds shortened to 86400 seconds"},
		{24 * h, 24 * h, false, 24 * h, 24 * h, ""},
	} {
		l := GrantTokenLifetime(tc.requested, tc.max, tc.podOnNode)
		warning := strings.Join(l.Warnings, "; ")
		if l.Reported != tc.reported || l.Actual != tc.actual || warning != tc.warning {
			t.Errorf("GrantTokenLifetime(%v, %v, %v) = %+v, want reported %v, actual %v, warning %q",
				tc.requested, tc.max, tc.podOnNode, l, tc.reported, tc.actual, tc.warning)
		}
		if l.Extended() != (tc.actual > tc.reported) {
			t.Errorf("GrantTokenLifetime(%v, %v, %v).Extended() = %v", tc.requested, tc.max, tc.podOnNode, l.Extended())
		}
	}
}

// fakeObjects serves the objects of a token from fields and counts calls.
type fakeObjects struct {
	sa    *corev1.ServiceAccount
	pod   *corev1.Pod
	err   error
	calls []string
}

func (f *fakeObjects) ServiceAccount(_ context.Context, ns, name string) (*corev1.ServiceAccount, error) {
	f.calls = append(f.calls, "sa "+ns+"/"+name)
	return f.sa, f.err
}
func (f *fakeObjects) Pod(_ context.Context, ns, name string) (*corev1.Pod, error) {
	f.calls = append(f.calls, "pod "+ns+"/"+name)
	return f.pod, f.err
}
func (f *fakeObjects) Secret(_ context.Context, ns, name string) (*corev1.Secret, error) {
	f.calls = append(f.calls, "secret "+ns+"/"+name)
	return nil, f.err
}
func (f *fakeObjects) Node(_ context.Context, name string) (*corev1.Node, error) {
	f.calls = append(f.calls, "node "+name)
	return nil, f.err
}

var _ TokenObjects = (*fakeObjects)(nil)

// TestIssueAuthenticate issues a token as the TokenRequest API does and
// authenticates it as the HTTP layer does.
func TestIssueAuthenticate(t *testing.T) {
	s, _ := NewTokenSigner(newKey(t))
	iss, err := NewTokenIssuer(s, DefaultIssuer, []string{DefaultAPIAudience}, 0)
	if err != nil {
		t.Fatal(err)
	}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "prod", Name: "api", UID: "sa-uid"}}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "prod", Name: "api-1", UID: "pod-uid"}, Spec: corev1.PodSpec{NodeName: "edge-1"}}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "edge-1", UID: "node-uid"}}
	out, err := iss.Issue(TokenGrant{ServiceAccount: sa, Pod: pod, Node: node, Requested: time.Hour, Now: t0})
	if err != nil {
		t.Fatal(err)
	}
	if out.Lifetime.Reported != time.Hour || out.Lifetime.Actual != EdgePodTokenLifetime || !cmp.Equal(out.Audiences, []string{DefaultAPIAudience}) {
		t.Errorf("Issue = %+v, want an hour reported, a week granted, the API audience", out)
	}
	p := payload(t, out.Token)
	if exp := p["exp"].(float64); exp != float64(t0.Add(EdgePodTokenLifetime).Unix()) {
		t.Errorf("exp = %v, want a week after issue", exp)
	}
	if wa := p["kubernetes.io"].(map[string]any)["warnafter"].(float64); wa != float64(t0.Add(time.Hour).Unix()) {
		t.Errorf("warnafter = %v, want an hour after issue", wa)
	}

	v, _ := NewTokenVerifier(DefaultIssuer, []string{DefaultAPIAudience}, []*ecdsa.PublicKey{s.Public()}, func() time.Time { return t0.Add(2 * time.Hour) })
	objs := &fakeObjects{sa: sa, pod: pod}
	a := NewTokenAuthenticator(v, objs)
	u, err := a.Authenticate(context.Background(), out.Token)
	if err != nil || !cmp.Equal(u, ServiceAccountUser("prod", "api")) {
		t.Errorf("Authenticate = %+v, %v; want the service account", u, err)
	}
	if want := []string{"sa prod/api", "pod prod/api-1"}; !cmp.Equal(objs.calls, want) {
		t.Errorf("lookups = %v, want %v (the node of a pod-bound token is not looked up)", objs.calls, want)
	}

	objs.pod = nil
	if _, err := a.Authenticate(context.Background(), out.Token); !errors.Is(err, ErrInvalidToken) {
		t.Errorf("Authenticate with the pod gone = %v, want ErrInvalidToken", err)
	}
	boom := errors.New("store down")
	objs.err = boom
	if _, err := a.Authenticate(context.Background(), out.Token); !errors.Is(err, boom) || errors.Is(err, ErrInvalidToken) {
		t.Errorf("Authenticate with a failing lookup = %v, want %v and not ErrInvalidToken", err, boom)
	}

	// A pod not on a node gets what it asks, audiences included.
	pending := pod.DeepCopy()
	pending.Spec.NodeName = ""
	out, err = iss.Issue(TokenGrant{ServiceAccount: sa, Pod: pending, Audiences: []string{"https://vault"}, Requested: time.Hour, Now: t0})
	if err != nil || out.Lifetime.Extended() || !cmp.Equal(out.Audiences, []string{"https://vault"}) {
		t.Errorf("Issue(pending pod) = %+v, %v; want an hour for the vault", out, err)
	}
	if _, ok := payload(t, out.Token)["kubernetes.io"].(map[string]any)["warnafter"]; ok {
		t.Errorf("a token not extended carries warnafter")
	}
}
