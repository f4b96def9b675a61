package hubd

import (
	"context"
	"crypto/x509"
	"log/slog"
	"net/http"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/outpost-mesh/outpost/hub/auth"
	"github.com/outpost-mesh/outpost/hub/registry/core"
	"github.com/outpost-mesh/outpost/hub/store/badgerstore"
	"github.com/outpost-mesh/outpost/internal/testlog"
	"github.com/outpost-mesh/outpost/internal/wait"
)

// startInprocAPI serves the hub's API (no policy hooks) over a fresh
// store with the default namespaces, until the test ends, and returns the
// store and the handler in-process clients reach it through.
func startInprocAPI(t *testing.T) (*badgerstore.Store, *apiHandler, *slog.Logger) {
	t.Helper()
	st, err := badgerstore.Open(badgerstore.DefaultConfig(t.TempDir()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	log := testlog.New(t, slog.LevelInfo)
	api, spec, err := newAPI(st, core.DefaultServiceConfig(), nil, nil, nil, nil, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(api.Shutdown)
	if err := ensureNamespaces(context.Background(), api); err != nil {
		t.Fatal(err)
	}
	return st, newAPIHandler(st, x509.NewCertPool(), log, api, spec, http.NotFoundHandler()), log
}

// TestInprocAdmission: the in-process client the sync endpoint writes
// with is admitted as the user of each request's context, as a request
// over HTTPS is: a node is held to NodeRestriction, the hub is not.
func TestInprocAdmission(t *testing.T) {
	ctx := context.Background()
	_, h, log := startInprocAPI(t)
	client, err := inprocClient(h, log)
	if err != nil {
		t.Fatal(err)
	}
	nodes := client.CoreV1().Nodes()
	hub, node := auth.WithUser(ctx, hubUser), auth.WithUser(ctx, nodeUser("edge-a"))
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "edge-a", Labels: map[string]string{auth.SiteLabel: "store-1"}}}
	if _, err := nodes.Create(hub, n, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create as the hub: %v", err)
	}

	move := []byte(`{"metadata":{"labels":{"` + auth.SiteLabel + `":"store-2"}}}`)
	_, err = nodes.Patch(node, "edge-a", types.MergePatchType, move, metav1.PatchOptions{})
	if want := `nodes "edge-a" is forbidden: node "edge-a" is not allowed to modify labels: ` + auth.SiteLabel; !apierrors.IsForbidden(err) || err.Error() != want {
		t.Errorf("site moved as the node: %v, want Forbidden %q", err, want)
	}
	if _, err := nodes.Patch(node, "edge-a", types.MergePatchType, []byte(`{"metadata":{"labels":{"kubernetes.io/arch":"arm64"}}}`), metav1.PatchOptions{}); err != nil {
		t.Errorf("arch label set as the node: %v", err)
	}
	if _, err := nodes.Patch(hub, "edge-a", types.MergePatchType, move, metav1.PatchOptions{}); err != nil {
		t.Errorf("site moved as the hub: %v", err)
	}
	got, err := nodes.Get(hub, "edge-a", metav1.GetOptions{})
	if err != nil || got.Labels[auth.SiteLabel] != "store-2" || got.Labels[corev1.LabelArchStable] != "arm64" {
		t.Errorf("Node after the patches = %v, %v; want site store-2 (the hub's) and arch arm64 (the node's)", got.Labels, err)
	}
}

// TestInprocWatch: the in-process transport streams, so a watch through
// it sees events as they happen, and stopping it ends the API's side.
func TestInprocWatch(t *testing.T) {
	ctx := context.Background()
	_, h, log := startInprocAPI(t)
	client, _, err := inprocClientsAs(h, hubUser, "test", log)
	if err != nil {
		t.Fatal(err)
	}
	cms := client.CoreV1().ConfigMaps("default")
	w, err := cms.Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatalf("watch: %v", err)
	}
	defer w.Stop()
	if _, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "a"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	select {
	case ev := <-w.ResultChan():
		if cm, ok := ev.Object.(*corev1.ConfigMap); !ok || ev.Type != "ADDED" || cm.Name != "a" {
			t.Fatalf("first watch event = %s %T, want ADDED of ConfigMap a", ev.Type, ev.Object)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no watch event within 30s of the create")
	}
	w.Stop()
	wait.For(t, 30*time.Second, "the watch to end", func() (bool, string) {
		_, open := <-w.ResultChan()
		return !open, "result channel still open"
	})

	anon, err := inprocClient(h, log) // a context without a user
	if err != nil {
		t.Fatal(err)
	}
	if _, err := anon.CoreV1().ConfigMaps("default").List(ctx, metav1.ListOptions{}); !apierrors.IsUnauthorized(err) && !apierrors.IsForbidden(err) {
		t.Errorf("list without a user = %v, want refused", err)
	}
}
