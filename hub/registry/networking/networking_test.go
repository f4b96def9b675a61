package networking

import (
	"reflect"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/outpost-mesh/outpost/hub/apiserver"
	"github.com/outpost-mesh/outpost/hub/registry/typed"
	"github.com/outpost-mesh/outpost/hub/registry/typed/typedtest"
)

var (
	created = time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	now     = created.Add(26 * time.Hour)
)

func rules(t *testing.T, kind string) typed.All {
	t.Helper()
	for _, r := range ResourcesWithClock(func() time.Time { return now }) {
		if r.Kind == kind {
			return r.Rules.(typed.All)
		}
	}
	t.Fatalf("no resource of kind %s", kind)
	return nil
}

func meta(name string) metav1.ObjectMeta {
	return metav1.ObjectMeta{Name: name, Namespace: "default", ResourceVersion: "7", CreationTimestamp: metav1.NewTime(created)}
}

func policy() *networkingv1.NetworkPolicy {
	return &networkingv1.NetworkPolicy{
		ObjectMeta: meta("db"),
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}},
			Ingress: []networkingv1.NetworkPolicyIngressRule{{
				From:  []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "api"}}}},
				Ports: []networkingv1.NetworkPolicyPort{{Port: new(intstr.FromInt32(5432))}},
			}},
		},
	}
}

func TestNetworkPolicyDefaults(t *testing.T) {
	udp := corev1.ProtocolUDP
	tests := []struct {
		name      string
		edit      func(*networkingv1.NetworkPolicySpec)
		wantTypes []networkingv1.PolicyType
		wantProto []corev1.Protocol // of each rule's first port, ingress then egress
	}{
		{"ingress rules", func(*networkingv1.NetworkPolicySpec) {}, []networkingv1.PolicyType{"Ingress"}, []corev1.Protocol{"TCP"}},
		{"no rules: deny all ingress", func(s *networkingv1.NetworkPolicySpec) { s.Ingress = nil }, []networkingv1.PolicyType{"Ingress"}, nil},
		{"egress rules too", func(s *networkingv1.NetworkPolicySpec) {
			s.Egress = []networkingv1.NetworkPolicyEgressRule{{Ports: []networkingv1.NetworkPolicyPort{{Protocol: &udp, Port: new(intstr.FromInt32(53))}}}}
		}, []networkingv1.PolicyType{"Ingress", "Egress"}, []corev1.Protocol{"TCP", "UDP"}},
		{"types given", func(s *networkingv1.NetworkPolicySpec) {
			s.PolicyTypes = []networkingv1.PolicyType{networkingv1.PolicyTypeEgress}
		}, []networkingv1.PolicyType{"Egress"}, []corev1.Protocol{"TCP"}},
	}
	r := rules(t, "NetworkPolicy")
	for _, tt := range tests {
		np := policy()
		tt.edit(&np.Spec)
		r.Default(np)
		var protos []corev1.Protocol
		for _, in := range np.Spec.Ingress {
			protos = append(protos, *in.Ports[0].Protocol)
		}
		for _, e := range np.Spec.Egress {
			protos = append(protos, *e.Ports[0].Protocol)
		}
		if !reflect.DeepEqual(np.Spec.PolicyTypes, tt.wantTypes) || !reflect.DeepEqual(protos, tt.wantProto) {
			t.Errorf("Default(policy with %s) = types %v, protocols %v; want %v, %v", tt.name, np.Spec.PolicyTypes, protos, tt.wantTypes, tt.wantProto)
		}
	}
}

func TestValidateNetworkPolicy(t *testing.T) {
	ipBlock := func(cidr string, except ...string) []networkingv1.NetworkPolicyPeer {
		return []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: cidr, Except: except}}}
	}
	tests := []struct {
		name string
		edit func(*networkingv1.NetworkPolicySpec)
		want []string
	}{
		{"valid", func(*networkingv1.NetworkPolicySpec) {}, nil},
		{"empty selector selects all", func(s *networkingv1.NetworkPolicySpec) { s.PodSelector = metav1.LabelSelector{} }, nil},
		{"port range", func(s *networkingv1.NetworkPolicySpec) {
			s.Ingress[0].Ports[0].EndPort = new(int32(5440))
		}, nil},
		{"named port", func(s *networkingv1.NetworkPolicySpec) {
			s.Ingress[0].Ports[0].Port = new(intstr.FromString("postgres"))
		}, nil},
		{"ip block", func(s *networkingv1.NetworkPolicySpec) { s.Ingress[0].From = ipBlock("10.0.0.0/8", "10.1.0.0/16") }, nil},
		{"bad selector", func(s *networkingv1.NetworkPolicySpec) {
			s.PodSelector.MatchExpressions = []metav1.LabelSelectorRequirement{{Key: "app", Operator: "Like"}}
		}, []string{"spec.podSelector.matchExpressions[0].operator: Invalid value"}},
		{"bad protocol", func(s *networkingv1.NetworkPolicySpec) {
			s.Ingress[0].Ports[0].Protocol = new(corev1.Protocol("ICMP"))
		}, []string{"spec.ingress[0].ports[0].protocol: Unsupported value"}},
		{"port out of range", func(s *networkingv1.NetworkPolicySpec) { s.Ingress[0].Ports[0].Port = new(intstr.FromInt32(70000)) },
			[]string{"spec.ingress[0].ports[0].port: Invalid value"}},
		{"end before port", func(s *networkingv1.NetworkPolicySpec) { s.Ingress[0].Ports[0].EndPort = new(int32(80)) },
			[]string{"spec.ingress[0].ports[0].endPort: Invalid value"}},
		{"end with named port", func(s *networkingv1.NetworkPolicySpec) {
			s.Ingress[0].Ports[0].Port = new(intstr.FromString("postgres"))
			s.Ingress[0].Ports[0].EndPort = new(int32(6000))
		}, []string{"spec.ingress[0].ports[0].endPort: Invalid value"}},
		{"end without port", func(s *networkingv1.NetworkPolicySpec) {
			s.Ingress[0].Ports[0].Port = nil
			s.Ingress[0].Ports[0].EndPort = new(int32(6000))
		}, []string{"spec.ingress[0].ports[0].endPort: Invalid value"}},
		{"empty peer", func(s *networkingv1.NetworkPolicySpec) { s.Ingress[0].From = []networkingv1.NetworkPolicyPeer{{}} },
			[]string{"spec.ingress[0].from[0]: Required value"}},
		{"ip block and selector", func(s *networkingv1.NetworkPolicySpec) {
			s.Ingress[0].From[0].IPBlock = &networkingv1.IPBlock{CIDR: "10.0.0.0/8"}
		}, []string{"spec.ingress[0].from[0]: Forbidden"}},
		{"no cidr", func(s *networkingv1.NetworkPolicySpec) {
			s.Egress = []networkingv1.NetworkPolicyEgressRule{{To: ipBlock("")}}
		},
			[]string{"spec.egress[0].to[0].ipBlock.cidr: Required value"}},
		{"bad cidr", func(s *networkingv1.NetworkPolicySpec) {
			s.Egress = []networkingv1.NetworkPolicyEgressRule{{To: ipBlock("10.0.0.0/33")}}
		},
			[]string{"spec.egress[0].to[0].ipBlock.cidr: Invalid value"}},
		{"leading zeros", func(s *networkingv1.NetworkPolicySpec) {
			s.Egress = []networkingv1.NetworkPolicyEgressRule{{To: ipBlock("010.0.0.0/8")}}
		},
			[]string{"spec.egress[0].to[0].ipBlock.cidr: Invalid value"}},
		{"except outside", func(s *networkingv1.NetworkPolicySpec) { s.Ingress[0].From = ipBlock("10.0.0.0/8", "192.168.0.0/16") },
			[]string{"spec.ingress[0].from[0].ipBlock.except[0]: Invalid value"}},
		{"except not smaller", func(s *networkingv1.NetworkPolicySpec) { s.Ingress[0].From = ipBlock("10.0.0.0/8", "10.0.0.0/8") },
			[]string{"spec.ingress[0].from[0].ipBlock.except[0]: Invalid value"}},
		{"unknown policy type", func(s *networkingv1.NetworkPolicySpec) { s.PolicyTypes = []networkingv1.PolicyType{"Ingress", "Both"} },
			[]string{"spec.policyTypes[1]: Unsupported value"}},
		{"three policy types", func(s *networkingv1.NetworkPolicySpec) {
			s.PolicyTypes = []networkingv1.PolicyType{"Ingress", "Egress", "Ingress"}
		},
			[]string{"spec.policyTypes: Invalid value"}},
	}
	r := rules(t, "NetworkPolicy")
	for _, tt := range tests {
		np := policy()
		tt.edit(&np.Spec)
		r.Default(np)
		if got := typedtest.ErrStrings(r.Validate(np)); !typedtest.SameErrs(got, tt.want) {
			t.Errorf("Validate(policy with %s) = %q, want %q", tt.name, got, tt.want)
		}
	}
}

// TestValidateNetworkPolicyUpdate: what a policy already holds from
// before a rule was tightened stays acceptable; new values are checked.
func TestValidateNetworkPolicyUpdate(t *testing.T) {
	old := policy()
	old.Spec.Egress = []networkingv1.NetworkPolicyEgressRule{{To: []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: "010.0.0.0/8"}}}}}
	old.Spec.PodSelector.MatchExpressions = []metav1.LabelSelectorRequirement{{Key: "tier", Operator: metav1.LabelSelectorOpIn, Values: []string{"-bad-"}}}
	tests := []struct {
		name string
		edit func(*networkingv1.NetworkPolicy)
		want []string
	}{
		{"unchanged", func(*networkingv1.NetworkPolicy) {}, nil},
		{"new port", func(np *networkingv1.NetworkPolicy) {
			np.Spec.Ingress[0].Ports = append(np.Spec.Ingress[0].Ports, networkingv1.NetworkPolicyPort{Port: new(intstr.FromInt32(5433))})
		}, nil},
		{"old cidr moved", func(np *networkingv1.NetworkPolicy) {
			np.Spec.Ingress[0].From = np.Spec.Egress[0].To
		}, nil},
		{"new bad cidr", func(np *networkingv1.NetworkPolicy) { np.Spec.Egress[0].To[0].IPBlock.CIDR = "011.0.0.0/8" },
			[]string{"spec.egress[0].to[0].ipBlock.cidr: Invalid value"}},
		{"rename", func(np *networkingv1.NetworkPolicy) { np.Name = "db2" }, []string{"metadata.name: Invalid value"}},
	}
	r := rules(t, "NetworkPolicy")
	for _, tt := range tests {
		np := old.DeepCopy()
		tt.edit(np)
		if got := typedtest.ErrStrings(r.ValidateUpdate(np, old)); !typedtest.SameErrs(got, tt.want) {
			t.Errorf("ValidateUpdate(policy %s) = %q, want %q", tt.name, got, tt.want)
		}
	}
	if got := typedtest.ErrStrings(r.Validate(old)); len(got) != 2 {
		t.Errorf("Validate(old policy) = %q, want the cidr and the label value refused on create", got)
	}
}

func ingress() *networkingv1.Ingress {
	return &networkingv1.Ingress{
		ObjectMeta: meta("shop"),
		Spec: networkingv1.IngressSpec{
			IngressClassName: new("nginx"),
			Rules: []networkingv1.IngressRule{{
				Host: "shop.example.com",
				IngressRuleValue: networkingv1.IngressRuleValue{HTTP: &networkingv1.HTTPIngressRuleValue{Paths: []networkingv1.HTTPIngressPath{{
					Path:     "/",
					PathType: new(networkingv1.PathTypePrefix),
					Backend:  serviceBackend("web", 80),
				}}}},
			}},
			TLS: []networkingv1.IngressTLS{{Hosts: []string{"shop.example.com"}, SecretName: "shop-tls"}},
		},
	}
}

func serviceBackend(name string, port int32) networkingv1.IngressBackend {
	return networkingv1.IngressBackend{Service: &networkingv1.IngressServiceBackend{Name: name, Port: networkingv1.ServiceBackendPort{Number: port}}}
}

func TestValidateIngress(t *testing.T) {
	path := func(ing *networkingv1.Ingress) *networkingv1.HTTPIngressPath { return &ing.Spec.Rules[0].HTTP.Paths[0] }
	tests := []struct {
		name string
		edit func(*networkingv1.Ingress)
		want []string
	}{
		{"valid", func(*networkingv1.Ingress) {}, nil},
		{"default backend only", func(ing *networkingv1.Ingress) {
			ing.Spec.Rules = nil
			ing.Spec.DefaultBackend = new(serviceBackend("web", 80))
		}, nil},
		{"wildcard host", func(ing *networkingv1.Ingress) { ing.Spec.Rules[0].Host = "*.example.com" }, nil},
		{"resource backend", func(ing *networkingv1.Ingress) {
			path(ing).Backend = networkingv1.IngressBackend{Resource: &corev1.TypedLocalObjectReference{APIGroup: new("k8s.example.com"), Kind: "StorageBucket", Name: "static"}}
		}, nil},
		{"named port", func(ing *networkingv1.Ingress) {
			path(ing).Backend.Service.Port = networkingv1.ServiceBackendPort{Name: "http"}
		}, nil},
		{"implementation specific regex", func(ing *networkingv1.Ingress) {
			path(ing).PathType = new(networkingv1.PathTypeImplementationSpecific)
			path(ing).Path = "/api(/|$)(.*)"
		}, nil},
		{"nothing to route", func(ing *networkingv1.Ingress) { ing.Spec.Rules = nil }, []string{"spec: Invalid value"}},
		{"no path type", func(ing *networkingv1.Ingress) { path(ing).PathType = nil },
			[]string{"spec.rules[0].http.paths[0].pathType: Required value"}},
		{"unknown path type", func(ing *networkingv1.Ingress) { path(ing).PathType = new(networkingv1.PathType("Regex")) },
			[]string{"spec.rules[0].http.paths[0].pathType: Unsupported value"}},
		{"relative path", func(ing *networkingv1.Ingress) { path(ing).Path = "api" },
			[]string{"spec.rules[0].http.paths[0].path: Invalid value"}},
		{"double slash", func(ing *networkingv1.Ingress) { path(ing).Path = "/api//v1" },
			[]string{"spec.rules[0].http.paths[0].path: Invalid value"}},
		{"dot suffix", func(ing *networkingv1.Ingress) {
			path(ing).PathType = new(networkingv1.PathTypeExact)
			path(ing).Path = "/api/.."
		},
			[]string{"spec.rules[0].http.paths[0].path: Invalid value"}},
		{"no paths", func(ing *networkingv1.Ingress) { ing.Spec.Rules[0].HTTP.Paths = nil },
			[]string{"spec.rules[0].http.paths: Required value"}},
		{"both backends", func(ing *networkingv1.Ingress) {
			path(ing).Backend.Resource = &corev1.TypedLocalObjectReference{Kind: "StorageBucket", Name: "static"}
		}, []string{"spec.rules[0].http.paths[0].backend: Invalid value"}},
		{"no backend", func(ing *networkingv1.Ingress) { path(ing).Backend = networkingv1.IngressBackend{} },
			[]string{"spec.rules[0].http.paths[0].backend: Invalid value"}},
		{"resource without kind", func(ing *networkingv1.Ingress) {
			path(ing).Backend = networkingv1.IngressBackend{Resource: &corev1.TypedLocalObjectReference{Name: "static"}}
		}, []string{"spec.rules[0].http.paths[0].backend.resource.kind: Required value"}},
		{"no service name", func(ing *networkingv1.Ingress) { path(ing).Backend.Service.Name = "" },
			[]string{"spec.rules[0].http.paths[0].backend.service.name: Required value"}},
		{"service name with digit first", func(ing *networkingv1.Ingress) { path(ing).Backend.Service.Name = "1web" },
			[]string{"spec.rules[0].http.paths[0].backend.service.name: Invalid value"}},
		{"no port", func(ing *networkingv1.Ingress) { path(ing).Backend.Service.Port = networkingv1.ServiceBackendPort{} },
			[]string{"spec.rules[0].http.paths[0].backend: Required value"}},
		{"port name and number", func(ing *networkingv1.Ingress) { path(ing).Backend.Service.Port.Name = "http" },
			[]string{"spec.rules[0].http.paths[0].backend: Invalid value"}},
		{"port out of range", func(ing *networkingv1.Ingress) { path(ing).Backend.Service.Port.Number = 65536 },
			[]string{"spec.rules[0].http.paths[0].backend.service.port.number: Invalid value"}},
		{"ip host", func(ing *networkingv1.Ingress) { ing.Spec.Rules[0].Host = "10.0.0.1" },
			[]string{"spec.rules[0].host: Invalid value"}},
		{"bad wildcard", func(ing *networkingv1.Ingress) { ing.Spec.Rules[0].Host = "shop.*.com" },
			[]string{"spec.rules[0].host: Invalid value"}},
		{"upper case host", func(ing *networkingv1.Ingress) { ing.Spec.Rules[0].Host = "Shop.example.com" },
			[]string{"spec.rules[0].host: Invalid value"}},
		{"bad tls host", func(ing *networkingv1.Ingress) { ing.Spec.TLS[0].Hosts[0] = "shop_example" },
			[]string{"spec.tls[0].hosts[0]: Invalid value"}},
		{"bad tls secret", func(ing *networkingv1.Ingress) { ing.Spec.TLS[0].SecretName = "Shop_TLS" },
			[]string{"spec.tls[0].secretName: Invalid value"}},
		{"bad class", func(ing *networkingv1.Ingress) { ing.Spec.IngressClassName = new("Nginx") },
			[]string{"spec.ingressClassName: Invalid value"}},
		{"annotation disagrees", func(ing *networkingv1.Ingress) {
			ing.Annotations = map[string]string{"kubernetes.io/ingress.class": "traefik"}
		},
			[]string{"annotations.kubernetes.io/ingress.class: Invalid value"}},
	}
	r := rules(t, "Ingress")
	for _, tt := range tests {
		ing := ingress()
		tt.edit(ing)
		r.Default(ing)
		r.PrepareForCreate(ing)
		if got := typedtest.ErrStrings(r.Validate(ing)); !typedtest.SameErrs(got, tt.want) {
			t.Errorf("Validate(ingress with %s) = %q, want %q", tt.name, got, tt.want)
		}
	}
}

// TestValidateIngressUpdate: an ingress stored with values upstream once
// accepted stays updatable; the leniency is what the stored one needs.
func TestValidateIngressUpdate(t *testing.T) {
	tests := []struct {
		name      string
		old, edit func(*networkingv1.Ingress)
		want      []string
	}{
		{"bad secret kept", func(ing *networkingv1.Ingress) { ing.Spec.TLS[0].SecretName = "Shop_TLS" },
			func(ing *networkingv1.Ingress) { ing.Labels = map[string]string{"team": "shop"} }, nil},
		{"bad secret new", func(*networkingv1.Ingress) {},
			func(ing *networkingv1.Ingress) { ing.Spec.TLS[0].SecretName = "Shop_TLS" }, []string{"spec.tls[0].secretName: Invalid value"}},
		{"wildcard rule without path type kept", func(ing *networkingv1.Ingress) {
			ing.Spec.Rules[0].Host = "*.example.com"
			ing.Spec.Rules[0].HTTP.Paths[0].PathType = nil
		}, func(*networkingv1.Ingress) {}, nil},
		{"service name with digit kept", func(ing *networkingv1.Ingress) { ing.Spec.Rules[0].HTTP.Paths[0].Backend.Service.Name = "1web" },
			func(ing *networkingv1.Ingress) { ing.Spec.DefaultBackend = new(serviceBackend("2web", 80)) }, nil},
		{"status ignored", func(*networkingv1.Ingress) {},
			func(ing *networkingv1.Ingress) {
				ing.Status.LoadBalancer.Ingress = []networkingv1.IngressLoadBalancerIngress{{IP: "not an ip"}}
			}, nil},
	}
	r := rules(t, "Ingress")
	for _, tt := range tests {
		old := ingress()
		tt.old(old)
		ing := old.DeepCopy()
		tt.edit(ing)
		r.PrepareForUpdate(ing, old)
		if got := typedtest.ErrStrings(r.ValidateUpdate(ing, old)); !typedtest.SameErrs(got, tt.want) {
			t.Errorf("ValidateUpdate(ingress %s) = %q, want %q", tt.name, got, tt.want)
		}
	}
}

func TestValidateIngressStatus(t *testing.T) {
	lb := func(in ...networkingv1.IngressLoadBalancerIngress) networkingv1.IngressStatus {
		return networkingv1.IngressStatus{LoadBalancer: networkingv1.IngressLoadBalancerStatus{Ingress: in}}
	}
	tests := []struct {
		name     string
		old, new networkingv1.IngressStatus
		want     []string
	}{
		{"ip", lb(), lb(networkingv1.IngressLoadBalancerIngress{IP: "192.0.2.10"}), nil},
		{"hostname", lb(), lb(networkingv1.IngressLoadBalancerIngress{Hostname: "lb.example.com"}), nil},
		{"bad ip", lb(), lb(networkingv1.IngressLoadBalancerIngress{IP: "192.0.2"}), []string{"status.loadBalancer.ingress[0].ip: Invalid value"}},
		{"leading zeros new", lb(), lb(networkingv1.IngressLoadBalancerIngress{IP: "192.0.2.010"}), []string{"status.loadBalancer.ingress[0].ip: Invalid value"}},
		{"leading zeros kept", lb(networkingv1.IngressLoadBalancerIngress{IP: "192.0.2.010"}), lb(networkingv1.IngressLoadBalancerIngress{IP: "192.0.2.010"}), nil},
		{"ip as hostname", lb(), lb(networkingv1.IngressLoadBalancerIngress{Hostname: "192.0.2.10"}), []string{"status.loadBalancer.ingress[0].hostname: Invalid value"}},
	}
	r := rules(t, "Ingress").(apiserver.StatusValidator)
	for _, tt := range tests {
		old := ingress()
		old.Status = tt.old
		ing := old.DeepCopy()
		ing.Status = tt.new
		if got := typedtest.ErrStrings(r.ValidateStatusUpdate(ing, old)); !typedtest.SameErrs(got, tt.want) {
			t.Errorf("ValidateStatusUpdate(ingress %s) = %q, want %q", tt.name, got, tt.want)
		}
	}
}

func ingressClass() *networkingv1.IngressClass {
	return &networkingv1.IngressClass{
		ObjectMeta: metav1.ObjectMeta{Name: "nginx", ResourceVersion: "7", CreationTimestamp: metav1.NewTime(created)},
		Spec: networkingv1.IngressClassSpec{
			Controller: "k8s.io/ingress-nginx",
			Parameters: &networkingv1.IngressClassParametersReference{APIGroup: new("k8s.example.com"), Kind: "IngressParameters", Name: "external-lb"},
		},
	}
}

func TestIngressClassDefaults(t *testing.T) {
	r := rules(t, "IngressClass")
	ic := ingressClass()
	r.Default(ic)
	if s := ic.Spec.Parameters.Scope; s == nil || *s != networkingv1.IngressClassParametersReferenceScopeCluster {
		t.Errorf("Default(class without scope): scope %v, want Cluster", s)
	}
	ic.Spec.Parameters = nil
	r.Default(ic)
	if ic.Spec.Parameters != nil {
		t.Errorf("Default(class without parameters): parameters %v, want none", ic.Spec.Parameters)
	}
}

func TestValidateIngressClass(t *testing.T) {
	params := func(ic *networkingv1.IngressClass) *networkingv1.IngressClassParametersReference {
		return ic.Spec.Parameters
	}
	tests := []struct {
		name string
		edit func(*networkingv1.IngressClass)
		want []string
	}{
		{"valid", func(*networkingv1.IngressClass) {}, nil},
		{"no parameters", func(ic *networkingv1.IngressClass) { ic.Spec.Parameters = nil }, nil},
		{"namespaced parameters", func(ic *networkingv1.IngressClass) {
			params(ic).Scope = new(networkingv1.IngressClassParametersReferenceScopeNamespace)
			params(ic).Namespace = new("ingress")
		}, nil},
		{"no controller", func(ic *networkingv1.IngressClass) { ic.Spec.Controller = "" }, []string{"spec.controller: Required value"}},
		{"controller without domain", func(ic *networkingv1.IngressClass) { ic.Spec.Controller = "nginx" }, []string{"spec.controller: Invalid value"}},
		{"namespace scope without namespace", func(ic *networkingv1.IngressClass) {
			params(ic).Scope = new(networkingv1.IngressClassParametersReferenceScopeNamespace)
		}, []string{"spec.parameters.namespace: Required value"}},
		{"cluster scope with namespace", func(ic *networkingv1.IngressClass) { params(ic).Namespace = new("ingress") },
			[]string{"spec.parameters.namespace: Forbidden"}},
		{"unknown scope", func(ic *networkingv1.IngressClass) { params(ic).Scope = new("Node") },
			[]string{"spec.parameters.scope: Unsupported value"}},
		{"parameters without kind", func(ic *networkingv1.IngressClass) { params(ic).Kind = "" },
			[]string{"spec.parameters.kind: Required value"}},
		{"namespaced class", func(ic *networkingv1.IngressClass) { ic.Namespace = "default" },
			[]string{"metadata.namespace: Forbidden"}},
	}
	r := rules(t, "IngressClass")
	for _, tt := range tests {
		ic := ingressClass()
		tt.edit(ic)
		r.Default(ic)
		if got := typedtest.ErrStrings(r.Validate(ic)); !typedtest.SameErrs(got, tt.want) {
			t.Errorf("Validate(class with %s) = %q, want %q", tt.name, got, tt.want)
		}
	}

	old := ingressClass()
	r.Default(old)
	for _, tt := range []struct {
		name string
		edit func(*networkingv1.IngressClass)
		want []string
	}{
		{"new parameters", func(ic *networkingv1.IngressClass) { params(ic).Name = "internal-lb" }, nil},
		{"new controller", func(ic *networkingv1.IngressClass) { ic.Spec.Controller = "example.com/traefik" }, []string{"spec.controller: Invalid value"}},
	} {
		ic := old.DeepCopy()
		tt.edit(ic)
		if got := typedtest.ErrStrings(r.ValidateUpdate(ic, old)); !typedtest.SameErrs(got, tt.want) {
			t.Errorf("ValidateUpdate(class with %s) = %q, want %q", tt.name, got, tt.want)
		}
	}
}

func TestRows(t *testing.T) {
	manyHosts := ingress()
	manyHosts.Spec.TLS = nil
	manyHosts.Spec.IngressClassName = nil
	for _, h := range []string{"b.example.com", "", "c.example.com", "d.example.com", ""} {
		manyHosts.Spec.Rules = append(manyHosts.Spec.Rules, networkingv1.IngressRule{Host: h})
	}
	manyHosts.Status.LoadBalancer.Ingress = []networkingv1.IngressLoadBalancerIngress{
		{IP: "192.0.2.20"}, {Hostname: "lb.example.com"}, {IP: "192.0.2.10", Hostname: "ignored.example.com"}, {IP: "192.0.2.10"},
	}
	noHosts := ingress()
	noHosts.Spec.Rules[0].Host = ""
	defaultClass := ingressClass()
	defaultClass.Annotations = map[string]string{networkingv1.AnnotationIsDefaultIngressClass: "true"}
	defaultClass.Spec.Parameters.APIGroup = nil
	bare := ingressClass()
	bare.Spec.Parameters = nil
	everything := policy()
	everything.Spec.PodSelector = metav1.LabelSelector{}
	tests := []struct {
		kind string
		obj  runtime.Object
		want []interface{}
	}{
		{"NetworkPolicy", policy(), []interface{}{"db", "app=db", "26h"}},
		{"NetworkPolicy", everything, []interface{}{"db", "<none>", "26h"}},
		{"Ingress", ingress(), []interface{}{"shop", "nginx", "shop.example.com", "", "80, 443", "26h"}},
		{"Ingress", noHosts, []interface{}{"shop", "nginx", "*", "", "80, 443", "26h"}},
		{"Ingress", manyHosts, []interface{}{"shop", "<none>", "shop.example.com,b.example.com,c.example.com + 3 more...",
			"192.0.2.10,192.0.2.20,lb.example.com", "80", "26h"}},
		{"IngressClass", ingressClass(), []interface{}{"nginx", "k8s.io/ingress-nginx", "IngressParameters.k8s.example.com/external-lb", "26h"}},
		{"IngressClass", defaultClass, []interface{}{"nginx (default)", "k8s.io/ingress-nginx", "IngressParameters/external-lb", "26h"}},
		{"IngressClass", bare, []interface{}{"nginx", "k8s.io/ingress-nginx", "<none>", "26h"}},
	}
	for _, tt := range tests {
		r := rules(t, tt.kind)
		if got := r.Row(tt.obj); !reflect.DeepEqual(got, tt.want) {
			t.Errorf("Row(%s %v) = %#v, want %#v", tt.kind, tt.want[0], got, tt.want)
		}
	}
}

func TestColumns(t *testing.T) {
	tests := []struct {
		kind string
		want []string
	}{
		{"NetworkPolicy", []string{"Name", "Pod-Selector", "Age"}},
		{"Ingress", []string{"Name", "Class", "Hosts", "Address", "Ports", "Age"}},
		{"IngressClass", []string{"Name", "Controller", "Parameters", "Age"}},
	}
	for _, tt := range tests {
		var got []string
		for _, c := range rules(t, tt.kind).Columns() {
			got = append(got, c.Name)
		}
		if !reflect.DeepEqual(got, tt.want) {
			t.Errorf("Columns(%s) = %q, want %q", tt.kind, got, tt.want)
		}
	}
}

// TestResources: the names, scopes and subresources kubectl
// api-resources shows upstream.
func TestResources(t *testing.T) {
	type shape struct {
		Plural, Singular, Short string
		Namespaced, Status, Gen bool
	}
	want := map[string]shape{
		"NetworkPolicy": {"networkpolicies", "networkpolicy", "netpol", true, false, true},
		"Ingress":       {"ingresses", "ingress", "ing", true, true, true},
		"IngressClass":  {"ingressclasses", "ingressclass", "", false, false, true},
	}
	rs := Resources()
	if len(rs) != len(want) {
		t.Errorf("Resources() has %d resources, want %d", len(rs), len(want))
	}
	for _, r := range rs {
		short := ""
		if len(r.ShortNames) > 0 {
			short = r.ShortNames[0]
		}
		got := shape{r.Plural, r.Singular, short, r.Namespaced, r.Status, r.Generation}
		if got != want[r.Kind] || len(r.ShortNames) > 1 || len(r.Categories) > 0 || r.GroupVersion != networkingv1.SchemeGroupVersion ||
			r.Scale != nil || r.Rules.(typed.All).AllowCreateOnUpdate() {
			t.Errorf("Resources() %s = %+v, categories %v; want %+v, none", r.Kind, got, r.Categories, want[r.Kind])
		}
	}
}

// TestWrongType: the rules, given an object of another type, neither
// panic nor accept it.
func TestWrongType(t *testing.T) { typedtest.WrongType(t, Resources()) }
