package syncint

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/outpost-mesh/outpost/edge/agent"
	"github.com/outpost-mesh/outpost/edge/checkpoint"
	"github.com/outpost-mesh/outpost/edge/runtime/fake"
	"github.com/outpost-mesh/outpost/internal/wait"
	"github.com/outpost-mesh/outpost/sync/wire"
)

// asToken returns a client of the hub that presents token, as a pod's
// in-cluster client does, and nothing else.
func asToken(t *testing.T, h *hub, token string) kubernetes.Interface {
	t.Helper()
	admin, err := clientcmd.BuildConfigFromFlags("", h.h.KubeconfigPath())
	if err != nil {
		t.Fatal(err)
	}
	cfg := rest.AnonymousClientConfig(admin)
	cfg.BearerToken = token
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// TestPodServiceAccountToken: a pod bound to an edge node gets, through
// sync, a token of its service account that the hub authenticates and
// that lives past the node's offline tolerance; a node that returns with
// its token due gets a fresh one at once; and
// once the pod is deleted its token is refused and gone from the node.
func TestPodServiceAccountToken(t *testing.T) {
	ctx := context.Background()
	h := startHub(t, t.TempDir())
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default"}}
	if _, err := h.client.CoreV1().ServiceAccounts("default").Create(ctx, sa, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	rt := fake.New(fake.Config{})
	cfg := agentConfig(t, h, "edge-1", h.token(t, "", time.Hour), rt)
	a, stop := runAgent(t, cfg)
	p := pod("web", "edge-1", "nginx")
	p.Spec.ServiceAccountName = "web"
	created, err := h.client.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	tokenOf := func(a *agent.Agent) func() (bool, string) {
		return func() (bool, string) {
			tok, ok := a.TokenFor(created, wire.AutomountVolume, "token")
			return ok, fmt.Sprint(tok.Expiry)
		}
	}
	wait.For(t, 20*time.Second, "web's token on edge-1", tokenOf(a))
	first, _ := a.TokenFor(created, wire.AutomountVolume, "token")
	if left := time.Until(first.Expiry); left < 6*24*time.Hour {
		t.Errorf("the token expires in %v, want about a week: the node's offline tolerance", left)
	}

	// The hub takes it for the pod's service account, which RBAC lets
	// read its namespace's pods (view, bound there) and nothing of
	// another namespace.
	if _, err := h.client.RbacV1().RoleBindings("default").Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "web-views"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "view"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: "default", Name: "web"}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var pods *corev1.PodList
	wait.For(t, 20*time.Second, "web to read its namespace's pods", func() (bool, string) {
		pods, err = asToken(t, h, first.Token).CoreV1().Pods("default").List(ctx, metav1.ListOptions{})
		return err == nil && len(pods.Items) == 1, fmt.Sprint(pods, err)
	})
	if _, err := asToken(t, h, first.Token).CoreV1().Secrets("kube-system").List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("list kube-system's secrets with the pod's token = %v, want Forbidden", err)
	}

	// The node goes away for days: its checkpoint says the token fell
	// due. It returns and is sent a fresh one at once.
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	dueInPast(t, cfg, wire.PodTokensKey("default", string(created.UID)), time.Now().Add(-time.Hour))
	a, _ = runAgent(t, cfg)
	wait.For(t, 20*time.Second, "a fresh token", func() (bool, string) {
		tok, ok := a.TokenFor(created, wire.AutomountVolume, "token")
		return ok && tok.Token != first.Token, fmt.Sprint(tok.IssuedAt)
	})
	fresh, _ := a.TokenFor(created, wire.AutomountVolume, "token")
	if _, err := asToken(t, h, fresh.Token).CoreV1().Pods("default").List(ctx, metav1.ListOptions{}); err != nil {
		t.Errorf("list pods with the fresh token = %v", err)
	}

	// The pod goes: its token is refused, and the node drops it.
	if err := h.client.CoreV1().Pods("default").Delete(ctx, "web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	wait.For(t, 40*time.Second, "web gone from the hub", func() (bool, string) {
		_, err := h.client.CoreV1().Pods("default").Get(ctx, "web", metav1.GetOptions{})
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
	if _, err := asToken(t, h, fresh.Token).CoreV1().Pods("default").List(ctx, metav1.ListOptions{}); !apierrors.IsUnauthorized(err) {
		t.Errorf("list pods with a deleted pod's token = %v, want Unauthorized", err)
	}
	wait.For(t, 20*time.Second, "web's token gone from edge-1", func() (bool, string) {
		ok, why := tokenOf(a)()
		return !ok, why
	})
}

// dueInPast rewrites the revision of the node's pod tokens at key, in its
// checkpoint, to due: what a node that was away past it holds.
func dueInPast(t *testing.T, cfg agent.Config, key wire.Key, due time.Time) {
	t.Helper()
	cp, err := checkpoint.Open(filepath.Join(cfg.DataDir, agent.CheckpointDir), cfg.Checkpoint)
	if err != nil {
		t.Fatal(err)
	}
	defer cp.Close()
	o, ok, err := cp.Get(key)
	if err != nil || !ok {
		t.Fatalf("pod tokens %v in the checkpoint: %v, %v", key, ok, err)
	}
	if err := cp.ApplyBatch([]wire.Change{{Op: wire.OpPut, Key: key, Revision: due.Unix(), Object: o.Raw}}, cp.LastRevision()); err != nil {
		t.Fatal(err)
	}
}
