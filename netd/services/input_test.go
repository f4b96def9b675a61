package services

import (
	"reflect"
	"testing"
	"unsafe"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestFromService: what Build and DNS read, with the API's defaults, and
// none of the object kept.
func TestFromService(t *testing.T) {
	if FromService(nil) != nil || FromSlice(nil) != nil {
		t.Fatal("nil objects give non-nil")
	}
	local := corev1.ServiceInternalTrafficPolicyLocal
	s := svc("web", ips("10.43.0.1"), ports(nodePort(tcp("http", 80), 30080)), typ(corev1.ServiceTypeLoadBalancer), eTPLocal,
		externalIPs("192.0.2.1"), affinity(ptr(int32(60))),
		ingress(corev1.LoadBalancerIngress{IP: "192.0.2.2"}, corev1.LoadBalancerIngress{IP: "192.0.2.3", IPMode: ptr(corev1.LoadBalancerIPModeProxy)},
			corev1.LoadBalancerIngress{IP: "192.0.2.4", IPMode: ptr(corev1.LoadBalancerIPModeVIP)}, corev1.LoadBalancerIngress{Hostname: "lb.example"}))
	s.Spec.InternalTrafficPolicy = &local
	s.Spec.Selector = map[string]string{"app": "web"}
	s.Annotations = map[string]string{corev1.AnnotationTopologyMode: "Auto"}
	got := FromService(s)
	want := &Service{
		Namespace: "default", Name: "web", Created: epoch, Type: corev1.ServiceTypeLoadBalancer,
		ClusterIP: "10.43.0.1", ClusterIPs: []string{"10.43.0.1"},
		Ports:       []ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80, NodePort: 30080}},
		ExternalIPs: []string{"192.0.2.1"}, IngressIPs: []string{"192.0.2.2", "192.0.2.4"},
		ExternalLocal: true, InternalLocal: true, ClientIPAffinity: true, AffinitySeconds: ptr(int32(60)), Topology: true,
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("FromService:\n got %+v\nwant %+v", got, want)
	}
	if got.AffinitySeconds == s.Spec.SessionAffinityConfig.ClientIP.TimeoutSeconds {
		t.Error("the affinity timeout points into the object")
	}
	if unsafe.StringData(got.ClusterIPs[0]) != unsafe.StringData(got.ClusterIP) {
		t.Error("one clusterIP is kept twice")
	}
}

// TestFromSlice: endpoints' conditions as the API defaults them, node
// names interned, ports with their defaults, the UIDs of Pods.
func TestFromSlice(t *testing.T) {
	node1, node2 := "n1", string([]byte("n1")) // equal, apart in memory
	e := v4("web", "web-1", []discoveryv1.EndpointPort{{Name: ptr("http"), Port: ptr(int32(8080))}, {}},
		ep("10.42.0.1", on(node1), zones("z1"), pod("0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0")), ep("10.42.0.2", on(node2), term),
		discoveryv1.Endpoint{Addresses: []string{"10.42.0.3"}, Hostname: ptr("db-0"), TargetRef: &corev1.ObjectReference{Kind: "Pod", Name: "db-0"}},
		discoveryv1.Endpoint{Addresses: []string{"10.42.0.4"}, TargetRef: &corev1.ObjectReference{Kind: "Node", Name: "n1", UID: "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"}})
	e.Labels[discoveryv1.LabelManagedBy] = "endpointslice-controller.k8s.io"
	e.ObjectMeta.CreationTimestamp = metav1.NewTime(epoch)
	got := FromSlice(e)
	want := &Slice{
		Namespace: "default", Name: "web-1", Service: "web", AddressType: discoveryv1.AddressTypeIPv4,
		Ports: []SlicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 8080}, {Protocol: corev1.ProtocolTCP}},
		Endpoints: []Endpoint{
			{Addresses: []string{"10.42.0.1"}, Ready: true, Serving: true, NodeName: "n1", Zones: []string{"z1"},
				PodUID: [16]byte{0x0f, 0x1e, 0x2d, 0x3c, 0x4b, 0x5a, 0x69, 0x78, 0x87, 0x96, 0xa5, 0xb4, 0xc3, 0xd2, 0xe1, 0xf0}},
			{Addresses: []string{"10.42.0.2"}, Serving: true, Terminating: true, NodeName: "n1"},
			{Addresses: []string{"10.42.0.3"}, Ready: true, Serving: true, Hostname: "db-0"},
			{Addresses: []string{"10.42.0.4"}, Ready: true, Serving: true}, // a targetRef not to a Pod
		},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("FromSlice:\n got %+v\nwant %+v", got, want)
	}
	if a, b := got.Endpoints[0].NodeName, got.Endpoints[1].NodeName; unsafe.StringData(a) != unsafe.StringData(b) {
		t.Error("node names are not interned")
	}
}

// TestParseUID: the canonical text of a UUID, in either case, and
// nothing else.
func TestParseUID(t *testing.T) {
	want := [16]byte{0x0f, 0x1e, 0x2d, 0x3c, 0x4b, 0x5a, 0x69, 0x78, 0x87, 0x96, 0xa5, 0xb4, 0xc3, 0xd2, 0xe1, 0xf0}
	for _, tc := range []struct {
		in string
		ok bool
	}{
		{"0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0", true},
		{"0F1E2D3C-4B5A-6978-8796-A5B4C3D2E1F0", true},
		{"0f1E2d3C-4b5A-6978-8796-a5B4c3D2e1F0", true},
		{string([]byte("0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0")), true},
		{"", false},
		{"00000000-0000-0000-0000-000000000000", false},          // the nil UUID
		{"0f1e2d3c4b5a69788796a5b4c3d2e1f0", false},              // no dashes
		{"0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f", false},           // short
		{"0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f00", false},         // long
		{"0f1e2d3c-4b5a-6978-8796_a5b4c3d2e1f0", false},          // not a dash
		{"0f1e2d3-c4b5a-6978-8796-a5b4c3d2e1f0", false},          // a dash misplaced
		{"-f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0", false},          // a dash for a digit
		{"0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1fg", false},          // not hex
		{"0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1 0", false},          // a space
		{"0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f\xc3", false},       // not UTF-8
		{"{0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0}", false},        // braces
		{"urn:uuid:0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0", false}, // a URN
	} {
		got, ok := ParseUID(tc.in)
		if ok != tc.ok || ok && got != want || !ok && got != [16]byte{} {
			t.Errorf("ParseUID(%q) = %x, %v; want ok %v", tc.in, got, ok, tc.ok)
		}
	}
	s := string([]byte("0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"))
	if n := testing.AllocsPerRun(100, func() { ParseUID(s); ParseUID(s[1:]) }); n != 0 {
		t.Errorf("ParseUID allocates %v times", n)
	}
}
