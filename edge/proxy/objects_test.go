package proxy

import (
	"net/netip"
	"reflect"
	"testing"
	"unsafe"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/outpost-mesh/outpost/netd/dns"
	"github.com/outpost-mesh/outpost/netd/services"
)

// fullObjects returns Services and EndpointSlices with every field the
// API gives them filled in, those routing and DNS read and those they do
// not.
func fullObjects() ([]*corev1.Service, []*discoveryv1.EndpointSlice) {
	created := metav1.Unix(1000, 0)
	local := corev1.ServiceInternalTrafficPolicyLocal
	web := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web", UID: "u-1", CreationTimestamp: created,
			Labels:      map[string]string{"app": "web"},
			Annotations: map[string]string{corev1.AnnotationTopologyMode: "Auto", "other": "x"}},
		Spec: corev1.ServiceSpec{
			Type: corev1.ServiceTypeLoadBalancer, Selector: map[string]string{"app": "web", "tier": "front"},
			ClusterIP: "10.43.0.20", ClusterIPs: []string{"10.43.0.20"},
			IPFamilies: []corev1.IPFamily{corev1.IPv4Protocol}, IPFamilyPolicy: ptr.To(corev1.IPFamilyPolicySingleStack),
			Ports: []corev1.ServicePort{
				{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80, TargetPort: intstr.FromString("http"), NodePort: 30080, AppProtocol: ptr.To("http")},
				{Name: "dns", Protocol: corev1.ProtocolUDP, Port: 53, TargetPort: intstr.FromInt32(5353), NodePort: 30053},
			},
			ExternalIPs:           []string{"192.0.2.10"},
			ExternalTrafficPolicy: corev1.ServiceExternalTrafficPolicyLocal, InternalTrafficPolicy: &local,
			SessionAffinity:       corev1.ServiceAffinityClientIP,
			SessionAffinityConfig: &corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: ptr.To[int32](60)}},
			HealthCheckNodePort:   31000, LoadBalancerSourceRanges: []string{"0.0.0.0/0"},
			PublishNotReadyAddresses: true,
		},
		Status: corev1.ServiceStatus{LoadBalancer: corev1.LoadBalancerStatus{Ingress: []corev1.LoadBalancerIngress{
			{IP: "192.0.2.20", Ports: []corev1.PortStatus{{Port: 80, Protocol: corev1.ProtocolTCP}}}, {Hostname: "lb.example"},
			{IP: "192.0.2.21", IPMode: ptr.To(corev1.LoadBalancerIPModeProxy)}, {IP: "192.0.2.22", IPMode: ptr.To(corev1.LoadBalancerIPModeVIP)}}}},
	}
	headless := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "db", CreationTimestamp: created},
		Spec: corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone, ClusterIPs: []string{corev1.ClusterIPNone},
			Ports: []corev1.ServicePort{{Name: "pg", Protocol: corev1.ProtocolTCP, Port: 5432}}},
	}
	ext := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "ext", CreationTimestamp: created},
		Spec:       corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: "db.example.com"},
	}
	endpoint := func(addr, node, host string, ready bool) discoveryv1.Endpoint {
		e := discoveryv1.Endpoint{
			Addresses:  []string{addr},
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(ready), Serving: ptr.To(ready), Terminating: ptr.To(!ready)},
			NodeName:   ptr.To(node), Zone: ptr.To("z1"),
			TargetRef:          &corev1.ObjectReference{Kind: "Pod", Namespace: "shop", Name: "p-" + addr, UID: "uid-" + "addr"},
			DeprecatedTopology: map[string]string{"kubernetes.io/hostname": node},
			Hints:              &discoveryv1.EndpointHints{ForZones: []discoveryv1.ForZone{{Name: "z1"}}},
		}
		if host != "" {
			e.Hostname = ptr.To(host)
		}
		return e
	}
	slice := func(svc, name string, eps ...discoveryv1.Endpoint) *discoveryv1.EndpointSlice {
		return &discoveryv1.EndpointSlice{
			ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: name, CreationTimestamp: created,
				Labels: map[string]string{discoveryv1.LabelServiceName: svc, discoveryv1.LabelManagedBy: "endpointslice-controller.k8s.io"}},
			AddressType: discoveryv1.AddressTypeIPv4,
			Ports: []discoveryv1.EndpointPort{
				{Name: ptr.To("http"), Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To[int32](8080), AppProtocol: ptr.To("http")},
				{Name: ptr.To("dns"), Protocol: ptr.To(corev1.ProtocolUDP), Port: ptr.To[int32](5353)},
				{Name: ptr.To("pg"), Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To[int32](5432)},
			},
			Endpoints: eps,
		}
	}
	return []*corev1.Service{web, headless, ext}, []*discoveryv1.EndpointSlice{
		slice("web", "web-a", endpoint("10.42.0.5", "n1", "", true), endpoint("10.42.1.5", "n2", "", false)),
		slice("db", "db-a", endpoint("10.42.0.7", "n1", "db-0", true), endpoint("10.42.1.7", "n2", "db-1", true)),
	}
}

// TestSlimKeepsWhatIsRead: the table and the zone built from the slimmed
// objects are those built from the objects whole, and the slimmed ones
// hold none of what is not read.
func TestSlimKeepsWhatIsRead(t *testing.T) {
	svcs, slices := fullObjects()
	slimS := make([]*corev1.Service, len(svcs))
	for i, s := range svcs {
		slimS[i] = slimService(s)
	}
	slimE := make([]*discoveryv1.EndpointSlice, len(slices))
	for i, e := range slices {
		slimE[i] = slimSlice(e)
	}
	for _, zone := range []string{"", "z1"} {
		build := func(svcs []*corev1.Service, slices []*discoveryv1.EndpointSlice) (services.Table, []services.Problem) {
			in := services.Input{Node: "n1", Zone: zone, NodeAddrs: []netip.Addr{netip.MustParseAddr("192.0.2.1")}}
			for _, s := range svcs {
				in.Services = append(in.Services, services.FromService(s))
			}
			for _, s := range slices {
				in.Slices = append(in.Slices, services.FromSlice(s))
			}
			return services.Build(in)
		}
		want, wantProblems := build(svcs, slices)
		got, gotProblems := build(slimS, slimE)
		if len(want) == 0 || !reflect.DeepEqual(got, want) || !reflect.DeepEqual(gotProblems, wantProblems) {
			t.Errorf("zone %q: the table from slimmed objects differs:\n got %v %v\nwant %v %v", zone, got, gotProblems, want, wantProblems)
		}
	}
	if want, got := dns.NewZone("cluster.local", svcs, slices), dns.NewZone("cluster.local", slimS, slimE); want.Len() < 5 || !reflect.DeepEqual(got, want) {
		t.Errorf("the zone from slimmed objects differs: %d names, want %d", got.Len(), want.Len())
	}

	if s := slimS[0]; s.Spec.Selector != nil || s.UID != "" || s.Labels != nil || len(s.Annotations) != 1 || s.Spec.IPFamilies != nil {
		t.Errorf("slimmed Service keeps what is not read: %+v", s)
	}
	for _, e := range slimE {
		for _, ep := range e.Endpoints {
			if ep.TargetRef != nil || ep.DeprecatedTopology != nil || ep.Zone != nil {
				t.Errorf("slimmed endpoint keeps what is not read: %+v", ep)
			}
		}
		if len(e.Labels) != 1 {
			t.Errorf("slimmed slice keeps labels %v", e.Labels)
		}
	}
	if a, b := slimE[0].Endpoints[0].NodeName, slimE[1].Endpoints[0].NodeName; *a != "n1" || *b != "n1" || ptrData(*a) != ptrData(*b) {
		t.Error("node names are not interned")
	}
}

// ptrData returns where s's bytes are.
func ptrData(s string) *byte { return unsafe.StringData(s) }
