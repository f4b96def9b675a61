package hubd

import (
	"context"
	"net/netip"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/outpost-mesh/outpost/hub/registry/core"
)

// TestServiceClusterIPs: services get distinct cluster IPs from the
// service CIDR, a taken IP is refused, a deleted service's IP is free
// again, the kubernetes service holds the first address and kube-dns the
// tenth, with port 53 over UDP and TCP and no selector.
func TestServiceClusterIPs(t *testing.T) {
	h, _ := startHub(t, t.TempDir())
	cs := kubernetes.NewForConfigOrDie(adminConfig(t, h))
	ctx := context.Background()
	svcs := cs.CoreV1().Services("default")
	k, err := svcs.Get(ctx, "kubernetes", metav1.GetOptions{})
	if err != nil || k.Spec.ClusterIP != "10.43.0.1" {
		t.Fatalf("kubernetes service = %v, %v; want cluster IP 10.43.0.1", k.Spec.ClusterIP, err)
	}
	dns, err := cs.CoreV1().Services("kube-system").Get(ctx, DNSService, metav1.GetOptions{})
	if err != nil || dns.Spec.ClusterIP != "10.43.0.10" || len(dns.Spec.Ports) != 2 || dns.Spec.Selector != nil ||
		dns.Spec.Ports[0].Port != 53 || dns.Spec.Ports[0].Protocol != corev1.ProtocolUDP || dns.Spec.Ports[1].Protocol != corev1.ProtocolTCP {
		t.Fatalf("kube-dns service = %+v, %v; want 10.43.0.10, port 53 over UDP and TCP, no selector", dns.Spec, err)
	}
	svc := func(name, ip string) *corev1.Service {
		return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.ServiceSpec{
			ClusterIP: ip, Ports: []corev1.ServicePort{{Port: 80}}}}
	}
	a, err := svcs.Create(ctx, svc("a", ""), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	b, err := svcs.Create(ctx, svc("b", ""), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []*corev1.Service{a, b} {
		ip, err := netip.ParseAddr(s.Spec.ClusterIP)
		if err != nil || !core.DefaultServiceCIDR.Contains(ip) || len(s.Spec.ClusterIPs) != 1 || s.Spec.ClusterIPs[0] != s.Spec.ClusterIP {
			t.Fatalf("service %s cluster IPs %q %v, want one address in %s", s.Name, s.Spec.ClusterIP, s.Spec.ClusterIPs, core.DefaultServiceCIDR)
		}
	}
	if a.Spec.ClusterIP == b.Spec.ClusterIP {
		t.Fatalf("two services share cluster IP %s", a.Spec.ClusterIP)
	}
	if _, err := svcs.Create(ctx, svc("c", a.Spec.ClusterIP), metav1.CreateOptions{}); !apierrors.IsInvalid(err) {
		t.Fatalf("create with a taken IP = %v, want Invalid", err)
	}
	headless, err := svcs.Create(ctx, svc("h", corev1.ClusterIPNone), metav1.CreateOptions{})
	if err != nil || headless.Spec.ClusterIP != corev1.ClusterIPNone {
		t.Fatalf("headless service = %v, %v", headless.Spec.ClusterIP, err)
	}
	if err := svcs.Delete(ctx, "a", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if c, err := svcs.Create(ctx, svc("c", a.Spec.ClusterIP), metav1.CreateOptions{}); err != nil || c.Spec.ClusterIP != a.Spec.ClusterIP {
		t.Fatalf("create with a released IP = %v, %v", c, err)
	}
}
