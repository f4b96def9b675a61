package core_test

import (
	"context"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/outpost-mesh/outpost/hub/apiserver"
	"github.com/outpost-mesh/outpost/hub/registry/core"
	"github.com/outpost-mesh/outpost/hub/store/badgerstore"
)

// startAPI serves the core resources with cfg's service ranges over a
// fresh store, with the default namespace.
func startAPI(t *testing.T, cfg core.ServiceConfig) kubernetes.Interface {
	t.Helper()
	st, err := badgerstore.Open(badgerstore.DefaultConfig(t.TempDir()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	srv, err := apiserver.New(apiserver.Config{Store: st, Resources: core.Resources(core.WithServices(cfg))})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv)
	t.Cleanup(hs.Close)
	t.Cleanup(srv.Shutdown)
	ns := &corev1.Namespace{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Namespace"}, ObjectMeta: metav1.ObjectMeta{Name: "default"}}
	if err := srv.Ensure(context.Background(), []runtime.Object{ns}...); err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(&rest.Config{Host: hs.URL, QPS: -1})
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// causes returns the messages of a 422.
func causes(err error) string {
	st, ok := err.(apierrors.APIStatus)
	if !ok || st.Status().Details == nil {
		return ""
	}
	var out []string
	for _, c := range st.Status().Details.Causes {
		out = append(out, c.Field+": "+c.Message)
	}
	return strings.Join(out, "; ")
}

// TestServiceAllocationThroughTheAPI: the 422s of upstream for taken and
// out-of-range values, and node ports gained and released as a service
// changes type, through the API machinery's create, update and delete.
func TestServiceAllocationThroughTheAPI(t *testing.T) {
	cfg := core.DefaultServiceConfig()
	cs := startAPI(t, cfg)
	ctx := context.Background()
	svcs := cs.CoreV1().Services("default")
	mk := func(name string, mut func(*corev1.Service)) *corev1.Service {
		s := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.ServiceSpec{
			Selector: map[string]string{"app": name}, Ports: []corev1.ServicePort{{Port: 80}}}}
		if mut != nil {
			mut(s)
		}
		return s
	}
	_, err := svcs.Create(ctx, mk("out", func(s *corev1.Service) { s.Spec.ClusterIP = "1.2.3.4" }), metav1.CreateOptions{})
	if want := `spec.clusterIPs: Invalid value: ["1.2.3.4"]: failed to allocate IP 1.2.3.4: provided IP is not in the valid range. The range of valid IPs is 10.43.0.0/16`; !apierrors.IsInvalid(err) || causes(err) != want {
		t.Fatalf("out-of-range cluster IP: %v\ncauses %q\nwant   %q", err, causes(err), want)
	}
	_, err = svcs.Create(ctx, mk("np", func(s *corev1.Service) { s.Spec.Type = corev1.ServiceTypeNodePort; s.Spec.Ports[0].NodePort = 8080 }), metav1.CreateOptions{})
	if want := `spec.ports[0].nodePort: Invalid value: 8080: provided port is not in the valid range. The range of valid ports is 30000-32767`; causes(err) != want {
		t.Fatalf("out-of-range node port: %v\ncauses %q\nwant   %q", err, causes(err), want)
	}
	a, err := svcs.Create(ctx, mk("a", func(s *corev1.Service) { s.Spec.Type = corev1.ServiceTypeNodePort; s.Spec.Ports[0].NodePort = 30080 }), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if ip := netip.MustParseAddr(a.Spec.ClusterIP); !cfg.CIDR.Contains(ip) || a.Spec.Ports[0].NodePort != 30080 {
		t.Fatalf("service a: %s, node port %d", ip, a.Spec.Ports[0].NodePort)
	}
	_, err = svcs.Create(ctx, mk("b", func(s *corev1.Service) { s.Spec.Type = corev1.ServiceTypeNodePort; s.Spec.Ports[0].NodePort = 30080 }), metav1.CreateOptions{})
	if want := `spec.ports[0].nodePort: Invalid value: 30080: provided port is already allocated`; causes(err) != want {
		t.Fatalf("taken node port: %v\ncauses %q\nwant   %q", err, causes(err), want)
	}
	_, err = svcs.Create(ctx, mk("c", func(s *corev1.Service) { s.Spec.ClusterIP = a.Spec.ClusterIP }), metav1.CreateOptions{})
	if !strings.Contains(causes(err), "failed to allocate IP "+a.Spec.ClusterIP+": provided IP is already allocated") {
		t.Fatalf("taken cluster IP: %v", err)
	}

	// a becomes ClusterIP: 30080 is free again; b takes it.
	a.Spec.Type = corev1.ServiceTypeClusterIP
	a.Spec.Ports[0].NodePort = 0
	if a, err = svcs.Update(ctx, a, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	b, err := svcs.Create(ctx, mk("b", func(s *corev1.Service) { s.Spec.Type = corev1.ServiceTypeNodePort; s.Spec.Ports[0].NodePort = 30080 }), metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("node port released by a type change: %v", err)
	}
	// a becomes NodePort again: it gets another node port; asking for
	// b's is refused.
	a.Spec.Type = corev1.ServiceTypeNodePort
	a.Spec.Ports[0].NodePort = 30080
	if _, err := svcs.Update(ctx, a, metav1.UpdateOptions{}); !strings.Contains(causes(err), "provided port is already allocated") {
		t.Fatalf("update to a taken node port: %v", err)
	}
	a.Spec.Ports[0].NodePort = 0
	if a, err = svcs.Update(ctx, a, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if p := a.Spec.Ports[0].NodePort; !cfg.NodePorts.Contains(p) || p == 30080 {
		t.Fatalf("node port after the change back: %d", p)
	}
	// LoadBalancer with Local traffic gets a health check node port,
	// released on delete.
	lb, err := svcs.Create(ctx, mk("lb", func(s *corev1.Service) {
		s.Spec.Type = corev1.ServiceTypeLoadBalancer
		s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
	}), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	hc := lb.Spec.HealthCheckNodePort
	if !cfg.NodePorts.Contains(hc) {
		t.Fatalf("health check node port %d", hc)
	}
	if err := svcs.Delete(ctx, "lb", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := svcs.Delete(ctx, "b", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, p := range []int32{hc, b.Spec.Ports[0].NodePort} {
		if _, err := svcs.Create(ctx, mk("again", func(s *corev1.Service) { s.Spec.Type = corev1.ServiceTypeNodePort; s.Spec.Ports[0].NodePort = p }), metav1.CreateOptions{}); err != nil {
			t.Fatalf("node port %d released on delete: %v", p, err)
		}
		if err := svcs.Delete(ctx, "again", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
}
