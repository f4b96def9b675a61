package hubd

import (
	"context"
	"log/slog"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/outpost-mesh/outpost/hub/controllers/nodelifecycle"
	"github.com/outpost-mesh/outpost/internal/testlog"
)

// TestNodeStatusKeepsSiteReachable: a node's status report replaces its
// status but for the hub's SiteReachable condition, unless the report
// carries one.
func TestNodeStatusKeepsSiteReachable(t *testing.T) {
	ready := corev1.NodeCondition{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady"}
	site := corev1.NodeCondition{Type: nodelifecycle.ConditionSiteReachable, Status: corev1.ConditionTrue, Reason: nodelifecycle.ReasonSitePeersSeeIt, Message: "alive per 2 of 2 site peers"}
	stale := corev1.NodeCondition{Type: corev1.NodeReady, Status: corev1.ConditionUnknown, Reason: nodelifecycle.ReasonNodeStatusUnknown}
	carried := site
	carried.Status, carried.Reason = corev1.ConditionFalse, "AsTheNodeSays"
	for _, tc := range []struct {
		name        string
		had, report []corev1.NodeCondition
		want        []corev1.NodeCondition
	}{
		{name: "kept", had: []corev1.NodeCondition{stale, site}, report: []corev1.NodeCondition{ready}, want: []corev1.NodeCondition{ready, site}},
		{name: "none to keep", had: []corev1.NodeCondition{stale}, report: []corev1.NodeCondition{ready}, want: []corev1.NodeCondition{ready}},
		{name: "the report's own", had: []corev1.NodeCondition{stale, site}, report: []corev1.NodeCondition{carried, ready}, want: []corev1.NodeCondition{carried, ready}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			had := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "edge-a"}, Status: corev1.NodeStatus{Conditions: tc.had}}
			api := fake.NewClientset(had)
			g := newSyncGlue(api, nil, 0, nil, testlog.New(t, slog.LevelInfo))
			report := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "edge-a"}, Status: corev1.NodeStatus{Conditions: tc.report}}
			if err := g.nodeStatus(context.Background(), report); err != nil {
				t.Fatal(err)
			}
			got, err := api.CoreV1().Nodes().Get(context.Background(), "edge-a", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got.Status.Conditions); diff != "" {
				t.Errorf("conditions after the report (-want +got):\n%s", diff)
			}
		})
	}
}
