package view

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/outpost-mesh/outpost/sync/wire"
)

func TestDecodeNode(t *testing.T) {
	labelled := encode(t, &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "n1", Labels: map[string]string{wire.SiteLabel: "east", "other": "x"}},
		Spec:       corev1.NodeSpec{PodCIDR: "10.244.1.0/24"},
		Status:     corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "192.0.2.1"}}},
	})
	for _, tt := range []struct {
		name string
		raw  []byte
		site string
		ok   bool
	}{
		{"labelled", labelled, "east", true},
		{"no label", encode(t, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Labels: map[string]string{"other": "x"}}}), "", true},
		{"empty label", encode(t, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Labels: map[string]string{wire.SiteLabel: ""}}}), "", true},
		{"empty", nil, "", false},
		{"no prefix", []byte(`{"kind":"Node"}`), "", false},
		{"truncated", labelled[:len(labelled)/2], "", false},
		{"a pod", encode(t, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Labels: map[string]string{wire.SiteLabel: "east"}}}), "", false},
	} {
		if site, ok := decodeNode(tt.raw); site != tt.site || ok != tt.ok {
			t.Errorf("decodeNode(%s) = %q, %v, want %q, %v", tt.name, site, ok, tt.site, tt.ok)
		}
	}
}

// FuzzDecodeNode: whatever the stored bytes, decoding a Node does not
// panic, and a Node that does not decode is in no site.
func FuzzDecodeNode(f *testing.F) {
	f.Add(storedNode(f, "n1", &nodeSpec{site: "east"}, 1))
	f.Add([]byte("k8s\x00"))
	f.Fuzz(func(t *testing.T, raw []byte) {
		if site, ok := decodeNode(raw); !ok && site != "" {
			t.Fatalf("decodeNode() = %q, false", site)
		}
	})
}
