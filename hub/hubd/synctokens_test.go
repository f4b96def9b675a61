package hubd

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"errors"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"

	"github.com/outpost-mesh/outpost/hub/auth"
	"github.com/outpost-mesh/outpost/hub/store"
	"github.com/outpost-mesh/outpost/sync/server"
	"github.com/outpost-mesh/outpost/sync/view"
	"github.com/outpost-mesh/outpost/sync/wire"
)

// storedForm encodes objects as the API server stores those of
// k8s.io/api: Kubernetes protobuf.
var storedForm = func() runtime.Encoder {
	s := runtime.NewScheme()
	utilruntime.Must(corev1.AddToScheme(s))
	return protobuf.NewSerializer(s, s)
}()

func putStored(t *testing.T, st store.Store, key string, obj runtime.Object) {
	t.Helper()
	var buf bytes.Buffer
	if err := storedForm.Encode(obj, &buf); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := st.Get(ctx, key, 0); err == nil {
		if _, err := st.Update(ctx, key, buf.Bytes(), 0); err != nil {
			t.Fatal(err)
		}
		return
	}
	if _, err := st.Create(ctx, key, buf.Bytes()); err != nil {
		t.Fatal(err)
	}
}

// TestSyncTokens: the views' minter issues, for a pod bound to the node,
// the tokens of its sources that the hub authenticates as its service
// account, bound to the pod and the node, living a week; and refuses a
// pod that is not the node's.
func TestSyncTokens(t *testing.T) {
	ctx := context.Background()
	st := openTestStore(t)
	cfg := DefaultSATokenConfig(t.TempDir())
	sat, err := newSATokens(cfg, st)
	if err != nil {
		t.Fatal(err)
	}
	key, err := loadSAKey(cfg.KeyFile)
	if err != nil {
		t.Fatal(err)
	}
	m := syncTokens{issuer: sat.issuer, objs: storeTokenObjects{st}}
	sa := &corev1.ServiceAccount{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ServiceAccount"}, ObjectMeta: metav1.ObjectMeta{Name: "api", Namespace: "prod", UID: "sa-uid"}}
	putStored(t, st, serviceAccountsPrefix+"prod/api", sa)
	putStored(t, st, nodesPrefix+"edge-1", &corev1.Node{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Node"}, ObjectMeta: metav1.ObjectMeta{Name: "edge-1", UID: "node-uid"}})
	pod := &corev1.Pod{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "prod", UID: "pod-uid"},
		Spec:       corev1.PodSpec{NodeName: "edge-1", ServiceAccountName: "api", Containers: []corev1.Container{{Name: "c", Image: "i"}}},
	}
	putStored(t, st, podsPrefix+"prod/web", pod)
	auto := view.TokenSource{Volume: wire.AutomountVolume, Path: "token", ExpirationSeconds: 3607, ServiceAccountDecides: true}
	vault := view.TokenSource{Volume: "vault", Path: "token", Audience: "vault", ExpirationSeconds: 600}
	req := view.TokenPod{Key: wire.Key{Resource: wire.ResourcePods, Namespace: "prod", Name: "web"}, UID: "pod-uid", ServiceAccount: "api", Sources: []view.TokenSource{auto, vault}}
	now := time.Now()

	toks, err := m.MintPodTokens(ctx, "edge-1", req, now)
	if err != nil || len(toks) != 2 {
		t.Fatalf("MintPodTokens = %+v, %v; want two tokens", toks, err)
	}
	if toks[0].Volume != wire.AutomountVolume || !slices.Equal(toks[0].Audiences, []string{auth.DefaultAPIAudience}) || toks[1].Volume != "vault" || !slices.Equal(toks[1].Audiences, []string{"vault"}) {
		t.Errorf("tokens = %+v, want the automounted one for the API, then vault's", toks)
	}
	for _, tok := range toks {
		if life := tok.Expiry.Sub(tok.IssuedAt); life != auth.EdgePodTokenLifetime {
			t.Errorf("token %s lives %v, want %v", tok.Volume, life, auth.EdgePodTokenLifetime)
		}
	}
	u, err := sat.authn.Authenticate(ctx, toks[0].Token)
	if err != nil || u.Name != "system:serviceaccount:prod:api" {
		t.Errorf("Authenticate(automounted token) = %+v, %v; want the service account", u, err)
	}
	v, _ := auth.NewTokenVerifier(auth.DefaultIssuer, []string{"vault"}, []*ecdsa.PublicKey{&key.PublicKey}, nil)
	c, err := v.Verify(toks[1].Token)
	if err != nil || c.Pod == nil || c.Pod.UID != "pod-uid" || c.Node == nil || c.Node.Name != "edge-1" || c.Node.UID != "node-uid" {
		t.Errorf("vault token claims = %+v, %v; want bound to the pod and its node", c, err)
	}

	// Not the node's pod, or no longer this pod: ErrPodGone.
	other := req
	other.UID = "older-pod-uid"
	for _, tc := range []struct {
		name string
		node string
		req  view.TokenPod
	}{
		{"another node", "edge-2", req},
		{"another pod of the name", "edge-1", other},
		{"no such pod", "edge-1", view.TokenPod{Key: wire.Key{Resource: wire.ResourcePods, Namespace: "prod", Name: "nope"}, UID: "x", ServiceAccount: "api", Sources: req.Sources}},
	} {
		if _, err := m.MintPodTokens(ctx, tc.node, tc.req, now); !errors.Is(err, server.ErrPodGone) {
			t.Errorf("MintPodTokens(%s) = %v, want ErrPodGone", tc.name, err)
		}
	}

	// A service account that declines the automounted token gets the
	// projected one only; one that is missing is a failure, not a pod
	// gone.
	no := false
	sa.AutomountServiceAccountToken = &no
	putStored(t, st, serviceAccountsPrefix+"prod/api", sa)
	if toks, err := m.MintPodTokens(ctx, "edge-1", req, now); err != nil || len(toks) != 1 || toks[0].Volume != "vault" {
		t.Errorf("MintPodTokens with automount declined = %+v, %v; want vault's only", toks, err)
	}
	missing := req
	missing.ServiceAccount = "gone"
	if _, err := m.MintPodTokens(ctx, "edge-1", missing, now); err == nil || errors.Is(err, server.ErrPodGone) {
		t.Errorf("MintPodTokens without its service account = %v, want a failure", err)
	}

	// A pod that terminated gets no more tokens.
	pod.Status.Phase = corev1.PodSucceeded
	putStored(t, st, podsPrefix+"prod/web", pod)
	if _, err := m.MintPodTokens(ctx, "edge-1", req, now); !errors.Is(err, server.ErrPodGone) {
		t.Errorf("MintPodTokens of a terminated pod = %v, want ErrPodGone", err)
	}
}
