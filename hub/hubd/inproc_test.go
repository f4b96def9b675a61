package hubd

import (
	"context"
	"crypto/x509"
	"log/slog"
	"net/http"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/outpost-mesh/outpost/hub/auth"
	"github.com/outpost-mesh/outpost/hub/store/badgerstore"
	"github.com/outpost-mesh/outpost/internal/testlog"
)

// TestInprocAdmission: the in-process client the sync endpoint writes
// with is admitted as the user of each request's context, as a request
// over HTTPS is: a node is held to NodeRestriction, the hub is not.
func TestInprocAdmission(t *testing.T) {
	ctx := context.Background()
	st, err := badgerstore.Open(badgerstore.DefaultConfig(t.TempDir()))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	log := testlog.New(t, slog.LevelInfo)
	api, spec, err := newAPI(st, log)
	if err != nil {
		t.Fatal(err)
	}
	defer api.Shutdown()
	client, err := inprocClient(newAPIHandler(st, x509.NewCertPool(), log, api, spec, http.NotFoundHandler()))
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
