package apiserver

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/ptr"
)

// fakeIssuer records the grants it is asked for and reports half the life
// asked for, with a warning, so the test sees what comes from it.
type fakeIssuer struct {
	mu     sync.Mutex
	grants []TokenGrant
}

func (f *fakeIssuer) IssueToken(_ context.Context, g TokenGrant) (IssuedToken, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.grants = append(f.grants, g)
	auds := g.Audiences
	if len(auds) == 0 {
		auds = []string{"api"}
	}
	return IssuedToken{Token: "token-for-" + g.ServiceAccount.Name, Audiences: auds, Reported: g.Requested / 2, Warnings: []string{"halved"}}, nil
}

func (f *fakeIssuer) last() TokenGrant {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.grants[len(f.grants)-1]
}

// tokenResources adds service accounts (with a token subresource), pods
// and nodes to the machinery's test resources.
func tokenResources() []Resource {
	return append(testResources(),
		Resource{GroupVersion: corev1.SchemeGroupVersion, Kind: "ServiceAccount", Plural: "serviceaccounts", Singular: "serviceaccount", Namespaced: true,
			New: func() runtime.Object { return &corev1.ServiceAccount{} }, NewList: func() runtime.Object { return &corev1.ServiceAccountList{} }, AddToScheme: corev1.AddToScheme,
			Rules: testRules{},
			Token: &TokenRules{
				Default: func(tr *authenticationv1.TokenRequest) {
					if tr.Spec.ExpirationSeconds == nil {
						tr.Spec.ExpirationSeconds = ptr.To[int64](3600)
					}
				},
				Validate: func(tr *authenticationv1.TokenRequest) field.ErrorList {
					if *tr.Spec.ExpirationSeconds < 600 {
						return field.ErrorList{field.Invalid(field.NewPath("spec", "expirationSeconds"), *tr.Spec.ExpirationSeconds, "may not specify a duration less than 10 minutes")}
					}
					return nil
				},
			}},
		Resource{GroupVersion: corev1.SchemeGroupVersion, Kind: "Pod", Plural: "pods", Singular: "pod", Namespaced: true,
			New: func() runtime.Object { return &corev1.Pod{} }, NewList: func() runtime.Object { return &corev1.PodList{} }, AddToScheme: corev1.AddToScheme,
			Rules: testRules{}},
		Resource{GroupVersion: corev1.SchemeGroupVersion, Kind: "Node", Plural: "nodes", Singular: "node",
			New: func() runtime.Object { return &corev1.Node{} }, NewList: func() runtime.Object { return &corev1.NodeList{} }, AddToScheme: corev1.AddToScheme,
			Rules: testRules{}},
	)
}

func TestTokenRequest(t *testing.T) {
	iss := &fakeIssuer{}
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	h := startTestServer(t, func(c *Config) {
		c.Resources = tokenResources()
		c.Tokens = iss
		c.Now = func() time.Time { return now }
	})
	ctx := context.Background()
	cs := h.client.CoreV1()
	createNamespace(t, h, "default")
	sa, err := cs.ServiceAccounts("default").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "web"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	mkPod := func(name, node, account string) *corev1.Pod {
		p, err := cs.Pods("default").Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: corev1.PodSpec{NodeName: node, ServiceAccountName: account, Containers: []corev1.Container{{Name: "c", Image: "i"}}}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	onNode := mkPod("on-node", "edge-1", "web")
	onGone := mkPod("on-gone-node", "edge-gone", "web")
	mkPod("other-sa", "", "")
	node, err := cs.Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "edge-1"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	secret, err := cs.Secrets("default").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "s"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}

	// Bound to a pod on a node: the pod, its node, the defaults.
	tr, err := cs.ServiceAccounts("default").CreateToken(ctx, "web", &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
		BoundObjectRef: &authenticationv1.BoundObjectReference{APIVersion: "v1", Kind: "Pod", Name: "on-node", UID: onNode.UID},
	}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("CreateToken: %v", err)
	}
	g := iss.last()
	if g.ServiceAccount.UID != sa.UID || g.Pod == nil || g.Pod.UID != onNode.UID || g.Node == nil || g.Node.UID != node.UID ||
		g.Requested != time.Hour || !g.Now.Equal(now) || len(g.Audiences) != 0 {
		t.Errorf("grant = %+v, want the service account, the pod and its node, an hour, no audiences", g)
	}
	if tr.Status.Token != "token-for-web" || *tr.Spec.ExpirationSeconds != 1800 || !tr.Status.ExpirationTimestamp.Time.Equal(now.Add(30*time.Minute)) ||
		!slices.Equal(tr.Spec.Audiences, []string{"api"}) || tr.Name != "web" || tr.Namespace != "default" {
		t.Errorf("answer = %+v, want the issuer's token, life and audiences", tr)
	}

	// A pod whose node is gone names the node anyway; a secret; audiences.
	if _, err := cs.ServiceAccounts("default").CreateToken(ctx, "web", &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
		BoundObjectRef: &authenticationv1.BoundObjectReference{APIVersion: "v1", Kind: "Pod", Name: "on-gone-node"},
	}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if g := iss.last(); g.Pod.UID != onGone.UID || g.Node == nil || g.Node.Name != "edge-gone" || g.Node.UID != "" {
		t.Errorf("grant for a pod on a missing node = %+v, want a stand-in node", g)
	}
	if _, err := cs.ServiceAccounts("default").CreateToken(ctx, "web", &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
		Audiences: []string{"vault"}, ExpirationSeconds: ptr.To[int64](7200),
		BoundObjectRef: &authenticationv1.BoundObjectReference{APIVersion: "v1", Kind: "Secret", Name: "s"},
	}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if g := iss.last(); g.Secret == nil || g.Secret.UID != secret.UID || g.Pod != nil || g.Requested != 2*time.Hour || !slices.Equal(g.Audiences, []string{"vault"}) {
		t.Errorf("grant for a secret = %+v", g)
	}

	for _, tc := range []struct {
		name, sa string
		tr       *authenticationv1.TokenRequest
		check    func(error) bool
		msg      string
	}{
		{"no such service account", "nobody", &authenticationv1.TokenRequest{}, apierrors.IsNotFound, `serviceaccounts "nobody" not found`},
		{"no such pod", "web", boundTo("Pod", "missing", ""), apierrors.IsNotFound, `pods "missing" not found`},
		{"pod of another service account", "web", boundTo("Pod", "other-sa", ""), apierrors.IsBadRequest, `cannot bind token for serviceaccount "web" to pod running with different serviceaccount name.`},
		{"pod recreated", "web", boundTo("Pod", "on-node", "old-uid"), apierrors.IsConflict, "the UID in the bound object reference (old-uid) does not match the UID in record"},
		{"a config map", "web", boundTo("ConfigMap", "c", ""), apierrors.IsBadRequest, "cannot bind token to object of type /v1, Kind=ConfigMap"},
		{"too short", "web", &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](60)}}, apierrors.IsInvalid, "may not specify a duration less than 10 minutes"},
		{"another name in the body", "web", &authenticationv1.TokenRequest{ObjectMeta: metav1.ObjectMeta{Name: "x"}}, apierrors.IsInvalid, "must match the service account name if specified"},
	} {
		_, err := cs.ServiceAccounts("default").CreateToken(ctx, tc.sa, tc.tr, metav1.CreateOptions{})
		if !tc.check(err) || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("%s: CreateToken = %v, want an error saying %q", tc.name, err, tc.msg)
		}
	}

	// Discovery lists the subresource as upstream does.
	rl, err := h.client.Discovery().ServerResourcesForGroupVersion("v1")
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, r := range rl.APIResources {
		if r.Name == "serviceaccounts/token" {
			found = r.Group == "authentication.k8s.io" && r.Version == "v1" && r.Kind == "TokenRequest" && slices.Equal(r.Verbs, []string{"create"}) && r.Namespaced
		}
	}
	if !found {
		t.Errorf("discovery of v1 lacks serviceaccounts/token as authentication.k8s.io/v1 TokenRequest: %+v", rl.APIResources)
	}
}

func boundTo(kind, name, uid string) *authenticationv1.TokenRequest {
	return &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
		BoundObjectRef: &authenticationv1.BoundObjectReference{APIVersion: "v1", Kind: kind, Name: name, UID: typesUID(uid)},
	}}
}

// TestTokenRequestWithoutIssuer: no signing key, no subresource.
func TestTokenRequestWithoutIssuer(t *testing.T) {
	h := startTestServer(t, func(c *Config) { c.Resources = tokenResources() })
	ctx := context.Background()
	createNamespace(t, h, "default")
	if _, err := h.client.CoreV1().ServiceAccounts("default").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "web"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := h.client.CoreV1().ServiceAccounts("default").CreateToken(ctx, "web", &authenticationv1.TokenRequest{}, metav1.CreateOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("CreateToken without an issuer = %v, want 404", err)
	}
	rl, err := h.client.Discovery().ServerResourcesForGroupVersion("v1")
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rl.APIResources {
		if r.Name == "serviceaccounts/token" {
			t.Errorf("discovery lists serviceaccounts/token without an issuer")
		}
	}
}

func createNamespace(t *testing.T, h *testHub, name string) {
	t.Helper()
	if _, err := h.client.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}
