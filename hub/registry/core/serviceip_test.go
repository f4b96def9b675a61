package core

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"strconv"
)

func TestParsePortRange(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want PortRange
		bad  bool
	}{
		{in: "30000-32767", want: PortRange{30000, 32767}},
		{in: " 8000-9000 ", want: PortRange{8000, 9000}},
		{in: "30000+2767", want: PortRange{30000, 32767}},
		{in: "31000", want: PortRange{31000, 31000}},
		{in: "", bad: true},
		{in: "0-100", bad: true},
		{in: "200-100", bad: true},
		{in: "30000-70000", bad: true},
		{in: "65000+1000", bad: true},
		{in: "a-b", bad: true},
	} {
		got, err := ParsePortRange(tc.in)
		if (err != nil) != tc.bad || got != tc.want {
			t.Errorf("ParsePortRange(%q) = %v, %v; want %v, bad %v", tc.in, got, err, tc.want, tc.bad)
		}
	}
	if s := (PortRange{30000, 32767}).String(); s != "30000-32767" {
		t.Errorf("String() = %q", s)
	}
}

func TestServiceConfigValidate(t *testing.T) {
	ports := PortRange{30000, 32767}
	for _, tc := range []struct {
		cidr string
		r    PortRange
		ok   bool
	}{
		{"10.43.0.0/16", ports, true},
		{"10.96.0.0/12", ports, true},
		{"10.43.0.0/30", ports, true},
		{"10.43.0.0/31", ports, false},
		{"10.43.0.1/16", ports, false},
		{"fd00:43::/112", ports, true},
		{"fd00:43::/64", ports, false},
		{"10.43.0.0/16", PortRange{0, 10}, false},
		{"10.43.0.0/16", PortRange{10, 5}, false},
		{"", ports, false},
	} {
		var c ServiceConfig
		if tc.cidr != "" {
			c.CIDR = netip.MustParsePrefix(tc.cidr)
		}
		c.NodePorts = tc.r
		if err := c.Validate(); (err == nil) != tc.ok {
			t.Errorf("Validate(%s, %s) = %v, want ok %v", tc.cidr, tc.r, err, tc.ok)
		}
	}
	d := DefaultServiceConfig()
	if err := d.Validate(); err != nil || d.CIDR.String() != "10.43.0.0/16" || d.NodePorts.String() != "30000-32767" || d.KubernetesIP().String() != "10.43.0.1" {
		t.Errorf("DefaultServiceConfig() = %v (%v), kubernetes IP %s", d, err, d.KubernetesIP())
	}
}

// reservations is an in-memory reserve for Assign.
type reservations map[string]bool

func (r reservations) reserve(v string) (bool, error) {
	if r[v] {
		return false, nil
	}
	r[v] = true
	return true, nil
}

// assign runs Assign as the machinery does: what a failed Assign
// reserved is released.
func (r reservations) assign(rules serviceRules, svc *corev1.Service) error {
	var taken []string
	err := rules.Assign(svc, func(v string) (bool, error) {
		ok, err := r.reserve(v)
		if ok {
			taken = append(taken, v)
		}
		return ok, err
	})
	if err != nil {
		for _, v := range taken {
			delete(r, v)
		}
	}
	return err
}

func svcRules(cfg ServiceConfig) serviceRules {
	return serviceResource(clock, cfg).Rules.(serviceRules)
}

// newService is a defaulted, prepared service of type typ with ports.
func newService(typ corev1.ServiceType, mut func(*corev1.Service), ports ...corev1.ServicePort) *corev1.Service {
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default"},
		Spec: corev1.ServiceSpec{Type: typ, Selector: map[string]string{"app": "web"}, Ports: ports}}
	if mut != nil {
		mut(svc)
	}
	r := svcRules(DefaultServiceConfig())
	r.Default(svc)
	r.PrepareForCreate(svc)
	return svc
}

func tcp(port int32) corev1.ServicePort {
	return corev1.ServicePort{Name: "p" + strconv.Itoa(int(port)), Port: port, Protocol: corev1.ProtocolTCP}
}

func TestServiceAssign(t *testing.T) {
	cfg := DefaultServiceConfig()
	taken := func() reservations {
		return reservations{"10.43.0.7": true, nodePortValue(30080): true}
	}
	for _, tc := range []struct {
		name string
		svc  *corev1.Service
		err  string // the 422's "field: message", "" for success
		// check looks at the assigned service.
		check func(t *testing.T, svc *corev1.Service, res reservations)
	}{
		{name: "cluster IP from the range", svc: newService("", nil, tcp(80)),
			check: func(t *testing.T, svc *corev1.Service, res reservations) {
				ip := netip.MustParseAddr(svc.Spec.ClusterIP)
				if !cfg.CIDR.Contains(ip) || ip == cfg.KubernetesIP() || ip == cfg.CIDR.Addr() || !slices.Equal(svc.Spec.ClusterIPs, []string{svc.Spec.ClusterIP}) {
					t.Errorf("cluster IPs %q %v", svc.Spec.ClusterIP, svc.Spec.ClusterIPs)
				}
				if !res[svc.Spec.ClusterIP] || len(res) != 3 {
					t.Errorf("reservations %v", res)
				}
			}},
		{name: "cluster IP given", svc: newService("", func(s *corev1.Service) { s.Spec.ClusterIP = "10.43.9.9" }, tcp(80)),
			check: func(t *testing.T, svc *corev1.Service, res reservations) {
				if svc.Spec.ClusterIP != "10.43.9.9" || !res["10.43.9.9"] {
					t.Errorf("cluster IP %s, reservations %v", svc.Spec.ClusterIP, res)
				}
			}},
		{name: "cluster IP taken", svc: newService("", func(s *corev1.Service) { s.Spec.ClusterIP = "10.43.0.7" }, tcp(80)),
			err: `spec.clusterIPs: failed to allocate IP 10.43.0.7: provided IP is already allocated`},
		{name: "cluster IP out of range", svc: newService("", func(s *corev1.Service) { s.Spec.ClusterIP = "1.2.3.4" }, tcp(80)),
			err: `spec.clusterIPs: failed to allocate IP 1.2.3.4: provided IP is not in the valid range. The range of valid IPs is 10.43.0.0/16`},
		{name: "IPv6 on an IPv4 cluster", svc: newService("", func(s *corev1.Service) { s.Spec.IPFamilies = []corev1.IPFamily{corev1.IPv6Protocol} }, tcp(80)),
			err: `spec.ipFamilies[0]: not configured on this cluster`},
		{name: "dual-stack required", svc: newService("", func(s *corev1.Service) { s.Spec.IPFamilyPolicy = ptrTo(corev1.IPFamilyPolicyRequireDualStack) }, tcp(80)),
			err: `spec.ipFamilyPolicy: this cluster is not configured for dual-stack services`},
		{name: "dual-stack preferred gets one family", svc: newService("", func(s *corev1.Service) { s.Spec.IPFamilyPolicy = ptrTo(corev1.IPFamilyPolicyPreferDualStack) }, tcp(80)),
			check: func(t *testing.T, svc *corev1.Service, res reservations) {
				if len(svc.Spec.ClusterIPs) != 1 || !slices.Equal(svc.Spec.IPFamilies, []corev1.IPFamily{corev1.IPv4Protocol}) {
					t.Errorf("cluster IPs %v families %v", svc.Spec.ClusterIPs, svc.Spec.IPFamilies)
				}
			}},
		{name: "headless", svc: newService("", func(s *corev1.Service) { s.Spec.ClusterIP = corev1.ClusterIPNone }, tcp(80)),
			check: func(t *testing.T, svc *corev1.Service, res reservations) {
				if svc.Spec.ClusterIP != corev1.ClusterIPNone || len(res) != 2 {
					t.Errorf("cluster IP %s, reservations %v", svc.Spec.ClusterIP, res)
				}
			}},
		{name: "external name", svc: newService(corev1.ServiceTypeExternalName, func(s *corev1.Service) { s.Spec.ExternalName = "example.com" }),
			check: func(t *testing.T, svc *corev1.Service, res reservations) {
				if svc.Spec.ClusterIP != "" || len(res) != 2 {
					t.Errorf("cluster IP %s, reservations %v", svc.Spec.ClusterIP, res)
				}
			}},
		{name: "node ports from the range, shared by one port number", svc: newService(corev1.ServiceTypeNodePort, nil,
			corev1.ServicePort{Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP},
			corev1.ServicePort{Name: "dns-tcp", Port: 53, Protocol: corev1.ProtocolTCP},
			tcp(80)),
			check: func(t *testing.T, svc *corev1.Service, res reservations) {
				p := svc.Spec.Ports
				if p[0].NodePort != p[1].NodePort || p[0].NodePort == p[2].NodePort || !cfg.NodePorts.Contains(p[0].NodePort) || !cfg.NodePorts.Contains(p[2].NodePort) {
					t.Errorf("node ports %d %d %d", p[0].NodePort, p[1].NodePort, p[2].NodePort)
				}
				if !res[nodePortValue(p[0].NodePort)] || !res[nodePortValue(p[2].NodePort)] || len(res) != 5 {
					t.Errorf("reservations %v", res)
				}
			}},
		{name: "node port given for one protocol is the other's", svc: newService(corev1.ServiceTypeNodePort, nil,
			corev1.ServicePort{Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP},
			corev1.ServicePort{Name: "dns-tcp", Port: 53, Protocol: corev1.ProtocolTCP, NodePort: 30053}),
			check: func(t *testing.T, svc *corev1.Service, res reservations) {
				if p := svc.Spec.Ports; p[0].NodePort != 30053 || p[1].NodePort != 30053 || len(res) != 4 {
					t.Errorf("node ports %d %d, reservations %v", p[0].NodePort, p[1].NodePort, res)
				}
			}},
		{name: "node port taken", svc: newService(corev1.ServiceTypeNodePort, nil, tcp(443), corev1.ServicePort{Name: "http", Port: 80, NodePort: 30080}),
			err: `spec.ports[1].nodePort: provided port is already allocated`},
		{name: "node port out of range", svc: newService(corev1.ServiceTypeNodePort, nil, corev1.ServicePort{Port: 80, NodePort: 8080}),
			err: `spec.ports[0].nodePort: provided port is not in the valid range. The range of valid ports is 30000-32767`},
		{name: "load balancer without node ports keeps the one asked for", svc: newService(corev1.ServiceTypeLoadBalancer,
			func(s *corev1.Service) { s.Spec.AllocateLoadBalancerNodePorts = ptrTo(false) },
			tcp(443), corev1.ServicePort{Name: "http", Port: 80, NodePort: 31000}),
			check: func(t *testing.T, svc *corev1.Service, res reservations) {
				if p := svc.Spec.Ports; p[0].NodePort != 0 || p[1].NodePort != 31000 || !res[nodePortValue(31000)] {
					t.Errorf("node ports %d %d, reservations %v", p[0].NodePort, p[1].NodePort, res)
				}
			}},
		{name: "health check node port", svc: newService(corev1.ServiceTypeLoadBalancer,
			func(s *corev1.Service) { s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal }, tcp(80)),
			check: func(t *testing.T, svc *corev1.Service, res reservations) {
				hc := svc.Spec.HealthCheckNodePort
				if !cfg.NodePorts.Contains(hc) || hc == svc.Spec.Ports[0].NodePort || !res[nodePortValue(hc)] {
					t.Errorf("health check node port %d, node port %d, reservations %v", hc, svc.Spec.Ports[0].NodePort, res)
				}
			}},
		{name: "health check node port taken", svc: newService(corev1.ServiceTypeLoadBalancer, func(s *corev1.Service) {
			s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
			s.Spec.HealthCheckNodePort = 30080
		}, tcp(80)),
			err: `spec.healthCheckNodePort: failed to allocate requested HealthCheck NodePort 30080: provided port is already allocated`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := taken()
			if errs := svcRules(cfg).Validate(tc.svc); len(errs) > 0 {
				t.Fatalf("invalid test service: %v", errs)
			}
			err := svcRules(cfg).Assign(tc.svc, res.reserve)
			if got := statusCause(err); got != tc.err {
				t.Fatalf("Assign = %q (%v), want %q", got, err, tc.err)
			}
			if err != nil && !apierrors.IsInvalid(err) {
				t.Fatalf("Assign = %v, want a 422", err)
			}
			if err == nil && tc.check != nil {
				tc.check(t, tc.svc, res)
			}
		})
	}
}

// statusCause renders the causes of a 422 as "field: message".
func statusCause(err error) string {
	if err == nil {
		return ""
	}
	st, ok := err.(apierrors.APIStatus)
	if !ok || st.Status().Details == nil {
		return err.Error()
	}
	var out []string
	for _, c := range st.Status().Details.Causes {
		msg := c.Message
		// field.Invalid puts the value first: keep what follows it.
		if rest, ok := strings.CutPrefix(msg, "Invalid value: "); ok {
			if _, after, ok := strings.Cut(rest, ": "); ok {
				msg = after
			}
		}
		out = append(out, c.Field+": "+msg)
	}
	return strings.Join(out, "; ")
}

// TestServiceAssignUpdate: a type change reserves what the service gains,
// values the stored service holds are not reserved again (even from a
// former range), and Held reports what is to be released.
func TestServiceAssignUpdate(t *testing.T) {
	cfg := DefaultServiceConfig()
	r := svcRules(cfg)
	old := newService("", nil, tcp(80))
	res := reservations{}
	if err := r.Assign(old, res.reserve); err != nil {
		t.Fatal(err)
	}
	np := old.DeepCopy()
	np.Spec.Type = corev1.ServiceTypeNodePort
	r.Default(np)
	r.PrepareForUpdate(np, old)
	if err := r.AssignUpdate(np, old, res.reserve); err != nil {
		t.Fatal(err)
	}
	if p := np.Spec.Ports[0].NodePort; !cfg.NodePorts.Contains(p) || !res[nodePortValue(p)] || len(res) != 2 || np.Spec.ClusterIP != old.Spec.ClusterIP {
		t.Fatalf("to NodePort: node port %d, cluster IP %s, reservations %v", p, np.Spec.ClusterIP, res)
	}
	// Back to ClusterIP: the node port is dropped and no longer held.
	back := np.DeepCopy()
	back.Spec.Type = corev1.ServiceTypeClusterIP
	r.Default(back)
	r.PrepareForUpdate(back, np)
	if err := r.AssignUpdate(back, np, func(v string) (bool, error) { t.Errorf("reserved %s again", v); return false, nil }); err != nil {
		t.Fatal(err)
	}
	if held := r.Held(back); !slices.Equal(held, []string{old.Spec.ClusterIP}) {
		t.Fatalf("Held after the change back = %v, want only the cluster IP", held)
	}

	// A service from a former range keeps its address.
	other := ServiceConfig{CIDR: netip.MustParsePrefix("10.96.0.0/12"), NodePorts: cfg.NodePorts}
	formerOld := newService("", func(s *corev1.Service) { s.Spec.ClusterIP = "10.96.0.10" }, tcp(80))
	if err := svcRules(other).Assign(formerOld, reservations{}.reserve); err != nil {
		t.Fatal(err)
	}
	upd := formerOld.DeepCopy()
	upd.Labels = map[string]string{"x": "y"}
	if err := r.AssignUpdate(upd, formerOld, reservations{}.reserve); err != nil {
		t.Fatalf("update of a service from a former range = %v", err)
	}
}

// TestServiceIPExhaustion: every address of a small range but the
// network, .1 and broadcast ones is handed out once, then a 500.
func TestServiceIPExhaustion(t *testing.T) {
	cfg := ServiceConfig{CIDR: netip.MustParsePrefix("10.43.0.0/28"), NodePorts: PortRange{30000, 30003}}
	r := svcRules(cfg)
	res := reservations{}
	for i := 0; i < 13; i++ {
		svc := newService(corev1.ServiceTypeNodePort, nil, tcp(80))
		err := res.assign(r, svc)
		if i >= 4 {
			if !apierrors.IsInternalError(err) || !strings.Contains(err.Error(), "range is full (30000-30003)") {
				t.Fatalf("service %d: Assign = %v, want the node port range full", i, err)
			}
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 13; i++ {
		svc := newService("", nil, tcp(80))
		err := res.assign(r, svc)
		if i < 13-4 && err != nil {
			t.Fatalf("service %d: %v", i, err)
		}
		if i >= 13-4 && !apierrors.IsInternalError(err) {
			t.Fatalf("service %d: Assign on a full range = %v, want an internal error", i, err)
		}
	}
	svc := newService("", nil, tcp(80))
	if err := res.assign(r, svc); !apierrors.IsInternalError(err) {
		t.Fatalf("Assign on a full range = %v, want an internal error", err)
	}
	for _, ip := range []string{"10.43.0.0", "10.43.0.1", "10.43.0.15"} {
		if res[ip] {
			t.Errorf("%s was handed out", ip)
		}
	}
	for i := 2; i <= 14; i++ {
		if ip := addrAt(cfg.CIDR.Addr(), uint64(i)).String(); !res[ip] {
			t.Errorf("%s was never handed out", ip)
		}
	}
}

// TestServiceDynamicBand: addresses and ports picked by the hub come from
// the upper band while it has room, leaving the lower one to clients.
func TestServiceDynamicBand(t *testing.T) {
	cfg := DefaultServiceConfig()
	r := svcRules(cfg)
	res := reservations{}
	for i := 0; i < 200; i++ {
		svc := newService(corev1.ServiceTypeNodePort, nil, tcp(80))
		if err := r.Assign(svc, res.reserve); err != nil {
			t.Fatal(err)
		}
		if ip := netip.MustParseAddr(svc.Spec.ClusterIP); ip.Less(netip.MustParseAddr("10.43.1.0")) {
			t.Fatalf("dynamic cluster IP %s in the lower band (first 256)", ip)
		}
		if p := svc.Spec.Ports[0].NodePort; p < 30000+86 {
			t.Fatalf("dynamic node port %d in the lower band (first 86)", p)
		}
	}
}

func TestAddrAt(t *testing.T) {
	for _, tc := range []struct {
		base string
		off  uint64
		want string
	}{
		{"10.43.0.0", 1, "10.43.0.1"},
		{"10.43.0.0", 256, "10.43.1.0"},
		{"10.43.0.0", 65535, "10.43.255.255"},
		{"fd00::", 0x10001, "fd00::1:1"},
	} {
		if got := addrAt(netip.MustParseAddr(tc.base), tc.off).String(); got != tc.want {
			t.Errorf("addrAt(%s, %d) = %s, want %s", tc.base, tc.off, got, tc.want)
		}
	}
}

func TestServiceIPv6Range(t *testing.T) {
	cfg := ServiceConfig{CIDR: netip.MustParsePrefix("fd00:43::/112"), NodePorts: PortRange{30000, 32767}}
	r := serviceResource(clock, cfg).Rules.(serviceRules)
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default"},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80}}}}
	r.Default(svc)
	r.PrepareForCreate(svc)
	if errs := r.Validate(svc); len(errs) > 0 {
		t.Fatal(errs)
	}
	if err := r.Assign(svc, reservations{}.reserve); err != nil {
		t.Fatal(err)
	}
	if ip := netip.MustParseAddr(svc.Spec.ClusterIP); !cfg.CIDR.Contains(ip) || !slices.Equal(svc.Spec.IPFamilies, []corev1.IPFamily{corev1.IPv6Protocol}) {
		t.Fatalf("IPv6 service: %s %v", svc.Spec.ClusterIP, svc.Spec.IPFamilies)
	}
}

func TestDNSIP(t *testing.T) {
	for cidr, want := range map[string]string{
		"10.43.0.0/16":  "10.43.0.10",
		"10.96.0.0/12":  "10.96.0.10",
		"10.0.0.16/28":  "10.0.0.26",
		"10.0.0.8/29":   "", // eight addresses: the tenth is outside
		"10.0.0.0/28":   "10.0.0.10",
		"fd00:43::/108": "fd00:43::a",
	} {
		c := ServiceConfig{CIDR: netip.MustParsePrefix(cidr)}
		got := ""
		if ip := c.DNSIP(); ip.IsValid() {
			got = ip.String()
		}
		if got != want {
			t.Errorf("DNSIP of %s = %q, want %q", cidr, got, want)
		}
	}
}
