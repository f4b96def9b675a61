package discovery

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/outpost-mesh/outpost/hub/registry/typed"
	"github.com/outpost-mesh/outpost/hub/registry/typed/typedtest"
)

var (
	created = time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	now     = created.Add(3 * time.Minute)
	rules   = ResourcesWithClock(func() time.Time { return now })[0].Rules.(typed.All)
)

func slice() *discoveryv1.EndpointSlice {
	return &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Name: "web-x7k2p", Namespace: "default", ResourceVersion: "9", CreationTimestamp: metav1.NewTime(created),
			Labels: map[string]string{discoveryv1.LabelServiceName: "web"},
		},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints: []discoveryv1.Endpoint{
			{Addresses: []string{"10.42.0.7"}, Conditions: discoveryv1.EndpointConditions{Ready: new(true)}, NodeName: new("gateway-1")},
			{Addresses: []string{"10.42.1.9"}, Conditions: discoveryv1.EndpointConditions{Ready: new(false)}, Zone: new("store-114")},
		},
		Ports: []discoveryv1.EndpointPort{{Name: new("http"), Port: new(int32(8080))}},
	}
}

func TestDefault(t *testing.T) {
	s := slice()
	s.Ports = append(s.Ports, discoveryv1.EndpointPort{Port: new(int32(53)), Protocol: new(corev1.ProtocolUDP)})
	rules.Default(s)
	if p := s.Ports[0]; *p.Protocol != corev1.ProtocolTCP || *p.Name != "http" {
		t.Errorf("Default: first port %s/%s, want http/TCP", *p.Name, *p.Protocol)
	}
	if p := s.Ports[1]; p.Name == nil || *p.Name != "" || *p.Protocol != corev1.ProtocolUDP {
		t.Errorf("Default: second port name %v protocol %s, want \"\" and UDP", p.Name, *p.Protocol)
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name string
		edit func(*discoveryv1.EndpointSlice)
		want []string
	}{
		{"service slice", func(*discoveryv1.EndpointSlice) {}, nil},
		{"ipv6", func(s *discoveryv1.EndpointSlice) {
			s.AddressType = discoveryv1.AddressTypeIPv6
			s.Endpoints = []discoveryv1.Endpoint{{Addresses: []string{"fd00:10:42::7"}}}
		}, nil},
		{"fqdn", func(s *discoveryv1.EndpointSlice) {
			s.AddressType = discoveryv1.AddressTypeFQDN
			s.Endpoints = []discoveryv1.Endpoint{{Addresses: []string{"db.store-114.example.com"}}}
		}, nil},
		{"no endpoints or ports", func(s *discoveryv1.EndpointSlice) { s.Endpoints, s.Ports = nil, nil }, nil},
		{"address type missing", func(s *discoveryv1.EndpointSlice) { s.AddressType = "" }, []string{"addressType: Required value"}},
		{"address type unknown", func(s *discoveryv1.EndpointSlice) { s.AddressType = "MAC" }, []string{"addressType: Unsupported value"}},
		{"addresses of the wrong family", func(s *discoveryv1.EndpointSlice) {
			s.Endpoints[0].Addresses = []string{"fd00::1", "010.1.2.3", "nonsense"}
		}, []string{"endpoints[0].addresses[0]: Invalid value", "endpoints[0].addresses[1]: Invalid value", "endpoints[0].addresses[2]: Invalid value"}},
		{"special addresses", func(s *discoveryv1.EndpointSlice) {
			s.Endpoints[0].Addresses = []string{"127.0.0.1", "169.254.1.1", "0.0.0.0", "224.0.0.5"}
		}, []string{"endpoints[0].addresses[0]: Invalid value", "endpoints[0].addresses[1]: Invalid value",
			"endpoints[0].addresses[2]: Invalid value", "endpoints[0].addresses[3]: Invalid value"}},
		{"endpoint without addresses", func(s *discoveryv1.EndpointSlice) { s.Endpoints[1].Addresses = nil },
			[]string{"endpoints[1].addresses: Required value"}},
		{"too many addresses", func(s *discoveryv1.EndpointSlice) {
			for i := range 101 {
				s.Endpoints[0].Addresses = append(s.Endpoints[0].Addresses, fmt.Sprintf("10.0.%d.%d", i/250, i%250+1))
			}
		}, []string{"endpoints[0].addresses: Too many"}},
		{"too many endpoints", func(s *discoveryv1.EndpointSlice) {
			s.Endpoints = make([]discoveryv1.Endpoint, 1001)
		}, []string{"endpoints: Too many"}},
		{"too many ports", func(s *discoveryv1.EndpointSlice) {
			s.Ports = make([]discoveryv1.EndpointPort, 20001)
		}, []string{"ports: Too many"}},
		{"bad endpoint names", func(s *discoveryv1.EndpointSlice) {
			s.Endpoints[0].NodeName = new("Gateway_1")
			s.Endpoints[0].Hostname = new("web.0")
		}, []string{"endpoints[0].nodeName: Invalid value", "endpoints[0].hostname: Invalid value"}},
		{"hints", func(s *discoveryv1.EndpointSlice) {
			s.Endpoints[0].Hints = &discoveryv1.EndpointHints{
				ForZones: []discoveryv1.ForZone{{Name: "a"}, {Name: "a"}},
				ForNodes: []discoveryv1.ForNode{{Name: "gateway-1"}},
			}
		}, []string{"endpoints[0].hints.forZones[1].name: Duplicate value"}},
		{"ports", func(s *discoveryv1.EndpointSlice) {
			s.Ports = append(s.Ports,
				discoveryv1.EndpointPort{Name: new("http"), Port: new(int32(8443))},
				discoveryv1.EndpointPort{Name: new("Metrics"), Protocol: new(corev1.Protocol("ICMP")), AppProtocol: new("not a protocol")},
			)
		}, []string{"ports[1].name: Duplicate value", "ports[2].name: Invalid value", "ports[2].protocol: Unsupported value", "ports[2].appProtocol: Invalid value"}},
		{"two unnamed ports", func(s *discoveryv1.EndpointSlice) {
			s.Ports = []discoveryv1.EndpointPort{{Port: new(int32(80))}, {Port: new(int32(81))}}
		}, []string{"ports[1].name: Duplicate value"}},
		{"bad name", func(s *discoveryv1.EndpointSlice) { s.Name = "Web" }, []string{"metadata.name: Invalid value"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := slice()
			tt.edit(s)
			rules.Default(s)
			rules.PrepareForCreate(s)
			if got := typedtest.ErrStrings(rules.Validate(s)); !typedtest.SameErrs(got, tt.want) {
				t.Errorf("Validate(slice with %s) = %q, want %q", tt.name, got, tt.want)
			}
		})
	}
}

func TestValidateUpdate(t *testing.T) {
	old := slice()
	rules.Default(old)
	tests := []struct {
		name string
		edit func(*discoveryv1.EndpointSlice)
		want []string
	}{
		{"endpoint ready", func(s *discoveryv1.EndpointSlice) { s.Endpoints[1].Conditions.Ready = new(true) }, nil},
		{"address type", func(s *discoveryv1.EndpointSlice) {
			s.AddressType = discoveryv1.AddressTypeFQDN
			s.Endpoints = nil
		}, []string{"addressType: Invalid value"}},
	}
	for _, tt := range tests {
		s := old.DeepCopy()
		tt.edit(s)
		rules.Default(s)
		rules.PrepareForUpdate(s, old)
		if got := typedtest.ErrStrings(rules.ValidateUpdate(s, old)); !typedtest.SameErrs(got, tt.want) {
			t.Errorf("ValidateUpdate(slice %s) = %q, want %q", tt.name, got, tt.want)
		}
	}
}

func TestDeprecatedTopology(t *testing.T) {
	topology := map[string]string{corev1.LabelHostname: "gateway-1"}

	created := slice()
	created.Endpoints[0].DeprecatedTopology = topology
	rules.PrepareForCreate(created)
	if got := created.Endpoints[0].DeprecatedTopology; got != nil {
		t.Errorf("PrepareForCreate kept deprecatedTopology %v", got)
	}

	// Stored before v1 dropped it (or written through another version).
	old := slice()
	old.Endpoints[0].DeprecatedTopology = topology

	same := old.DeepCopy()
	same.Labels["x"] = "y"
	rules.PrepareForUpdate(same, old)
	if !reflect.DeepEqual(same.Endpoints[0].DeprecatedTopology, topology) {
		t.Errorf("PrepareForUpdate with the same endpoints dropped deprecatedTopology")
	}

	changed := old.DeepCopy()
	changed.Endpoints[0].NodeName = nil
	changed.Endpoints[0].Addresses = []string{"10.42.0.8"}
	rules.PrepareForUpdate(changed, old)
	if ep := changed.Endpoints[0]; ep.DeprecatedTopology != nil || ep.NodeName == nil || *ep.NodeName != "gateway-1" {
		t.Errorf("PrepareForUpdate with new endpoints: topology %v, nodeName %v; want none and gateway-1", ep.DeprecatedTopology, ep.NodeName)
	}
}

func TestRow(t *testing.T) {
	many := slice()
	many.Ports = []discoveryv1.EndpointPort{{Port: new(int32(80))}, {Name: new("dns")}, {}, {Port: new(int32(443))}}
	many.Endpoints = []discoveryv1.Endpoint{
		{Addresses: []string{"10.0.0.1", "10.0.0.2"}},
		{Addresses: []string{"10.0.0.3"}},
		{Addresses: []string{"10.0.0.4", "10.0.0.5"}},
	}
	empty := slice()
	empty.Ports, empty.Endpoints = nil, nil
	empty.CreationTimestamp = metav1.Time{}

	tests := []struct {
		obj  *discoveryv1.EndpointSlice
		want []interface{}
	}{
		{slice(), []interface{}{"web-x7k2p", "IPv4", "8080", "10.42.0.7,10.42.1.9", "3m"}},
		{many, []interface{}{"web-x7k2p", "IPv4", "80,dns,* + 1 more...", "10.0.0.1,10.0.0.2,10.0.0.3 + 2 more...", "3m"}},
		{empty, []interface{}{"web-x7k2p", "IPv4", "<unset>", "<unset>", "<unknown>"}},
	}
	for _, tt := range tests {
		if got := rules.Row(tt.obj); !reflect.DeepEqual(got, tt.want) {
			t.Errorf("Row = %#v, want %#v", got, tt.want)
		}
	}
	var names []string
	for _, c := range rules.Columns() {
		names = append(names, c.Name)
	}
	if got := strings.Join(names, " "); got != "Name AddressType Ports Endpoints Age" {
		t.Errorf("Columns() = %s", got)
	}
}

func TestResources(t *testing.T) {
	r := Resources()
	if len(r) != 1 {
		t.Fatalf("Resources() has %d resources", len(r))
	}
	s := r[0]
	if s.GroupVersion != discoveryv1.SchemeGroupVersion || s.Plural != "endpointslices" || s.Singular != "endpointslice" || s.Kind != "EndpointSlice" ||
		!s.Namespaced || len(s.ShortNames) > 0 || len(s.Categories) > 0 || s.Status || s.Scale != nil || s.Rules.(typed.All).AllowCreateOnUpdate() {
		t.Errorf("endpointslices resource = %+v", s)
	}
	if f := s.Rules.(typed.All).Fields(slice()); f == nil || len(f) != 0 {
		t.Errorf("Fields = %v, want an empty set", f)
	}
}

// TestWrongType: the rules, given an object of another type, neither
// panic nor accept it.
func TestWrongType(t *testing.T) { typedtest.WrongType(t, Resources()) }
