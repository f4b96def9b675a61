package hubd

import (
	"context"
	"net/netip"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/outpost-mesh/outpost/internal/wait"
)

// TestNodeIPAM: a hub running its controllers gives a new Node a pod CIDR
// of its configured range and mask.
func TestNodeIPAM(t *testing.T) {
	h, _ := startHub(t, t.TempDir(), func(c *Config) {
		c.ClusterCIDR, c.NodeCIDRMaskSize = netip.MustParsePrefix("10.50.0.0/20"), 26
	})
	client, _ := clientset(t, adminConfig(t, h))
	ctx := context.Background()
	if _, err := client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "edge-1"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	wait.For(t, 30*time.Second, "a pod CIDR for edge-1", func() (bool, string) {
		n, err := client.CoreV1().Nodes().Get(ctx, "edge-1", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		if n.Spec.PodCIDR == "" {
			return false, "none"
		}
		if n.Spec.PodCIDR != "10.50.0.0/26" || len(n.Spec.PodCIDRs) != 1 || n.Spec.PodCIDRs[0] != n.Spec.PodCIDR {
			t.Fatalf("edge-1: podCIDR %q, podCIDRs %q; want 10.50.0.0/26 in both", n.Spec.PodCIDR, n.Spec.PodCIDRs)
		}
		return true, ""
	})
}
