package dns

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	miekg "github.com/miekg/dns"
	"go.uber.org/goleak"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var (
	pfx = netip.MustParsePrefix
)

func discard() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

type port struct {
	name  string
	port  int32
	proto corev1.Protocol
}

func service(ns, name string, clusterIPs []string, ports ...port) *corev1.Service {
	s := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP, ClusterIPs: clusterIPs},
	}
	if len(clusterIPs) > 0 {
		s.Spec.ClusterIP = clusterIPs[0]
	}
	for _, p := range ports {
		s.Spec.Ports = append(s.Spec.Ports, corev1.ServicePort{Name: p.name, Port: p.port, Protocol: p.proto})
	}
	return s
}

func headless(ns, name string, ports ...port) *corev1.Service {
	return service(ns, name, []string{corev1.ClusterIPNone}, ports...)
}

type endpoint struct {
	addr     string
	hostname string // "" for none
	ready    *bool
}

func slice(ns, svc, name string, at discoveryv1.AddressType, ports []port, eps ...endpoint) *discoveryv1.EndpointSlice {
	sl := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: ns, Name: name,
			Labels: map[string]string{discoveryv1.LabelServiceName: svc},
		},
		AddressType: at,
	}
	for _, p := range ports {
		sl.Ports = append(sl.Ports, discoveryv1.EndpointPort{Name: ptr.To(p.name), Port: ptr.To(p.port), Protocol: ptr.To(p.proto)})
	}
	for _, e := range eps {
		ep := discoveryv1.Endpoint{Addresses: []string{e.addr}, Conditions: discoveryv1.EndpointConditions{Ready: e.ready}}
		if e.hostname != "" {
			ep.Hostname = ptr.To(e.hostname)
		}
		sl.Endpoints = append(sl.Endpoints, ep)
	}
	return sl
}

// testZone is the zone of testCluster.
func testZone() *Zone {
	svcs, slices := testCluster()
	return newZone("cluster.local", svcs, slices)
}

// testCluster is a small cluster with one of each kind of service.
func testCluster() ([]*corev1.Service, []*discoveryv1.EndpointSlice) {
	extName := func(ns, name, target string) *corev1.Service {
		return &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec:       corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: target},
		}
	}
	notReady := headless("prod", "notready")
	notReady.Spec.PublishNotReadyAddresses = true
	tcp, udp := corev1.ProtocolTCP, corev1.ProtocolUDP
	return []*corev1.Service{
			service("default", "kubernetes", []string{"10.43.0.1"}, port{"https", 443, tcp}),
			service("prod", "web", []string{"10.43.0.10", "fd00:43::10"}, port{"http", 80, tcp}, port{"dns", 53, udp}, port{"", 8080, tcp}),
			headless("prod", "db", port{"postgres", 5432, tcp}),
			headless("prod", "db6"),
			headless("prod", "empty", port{"x", 1, tcp}),
			notReady,
			extName("prod", "ext", "www.example.com"),
			extName("prod", "ext2", "web.prod.svc.cluster.local."),
			extName("prod", "extbad", "10.1.2.3"),
			service("Bad_NS", "x", []string{"10.43.0.99"}),
			nil,
		}, []*discoveryv1.EndpointSlice{
			slice("prod", "db", "db-a", discoveryv1.AddressTypeIPv4, []port{{"postgres", 5432, tcp}, {"metrics", 9187, tcp}},
				endpoint{addr: "10.42.0.5", hostname: "db-0", ready: ptr.To(true)},
				endpoint{addr: "10.42.0.6"},
				endpoint{addr: "10.42.0.7", ready: ptr.To(false)}),
			// The same endpoint in a second slice, as during a slice's
			// rebalancing: no duplicate records.
			slice("prod", "db", "db-b", discoveryv1.AddressTypeIPv4, []port{{"postgres", 5432, tcp}},
				endpoint{addr: "10.42.0.6"}),
			slice("prod", "db6", "db6-a", discoveryv1.AddressTypeIPv6, nil,
				endpoint{addr: "fd00:42::5", hostname: "db6-0"},
				endpoint{addr: "fd00:42::6"}),
			slice("prod", "notready", "nr-a", discoveryv1.AddressTypeIPv4, nil,
				endpoint{addr: "10.42.0.9", ready: ptr.To(false)}),
			slice("prod", "web", "web-a", discoveryv1.AddressTypeIPv4, []port{{"http", 8080, tcp}},
				endpoint{addr: "10.42.1.1"}),
			slice("prod", "web", "web-fqdn", discoveryv1.AddressTypeFQDN, nil,
				endpoint{addr: "host.example.com"}),
			slice("prod", "", "orphan", discoveryv1.AddressTypeIPv4, nil, endpoint{addr: "10.42.9.9"}),
			nil,
		}
}

func testServer(t testing.TB, mod func(*Config)) *Server {
	t.Helper()
	cfg := DefaultConfig()
	cfg.Addr = "10.42.0.1:53"
	cfg.Logger = discard()
	cfg.ServiceCIDRs = []netip.Prefix{pfx("10.43.0.0/16"), pfx("fd00:43::/112")}
	cfg.ClusterCIDRs = []netip.Prefix{pfx("10.42.0.0/16"), pfx("fd00:42::/56")}
	if mod != nil {
		mod(&cfg)
	}
	s, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return s
}

// ask sends q over the handler's TCP path (no truncation) and returns
// the response.
func ask(t testing.TB, s *Server, name string, qtype uint16) *miekg.Msg {
	t.Helper()
	req := new(miekg.Msg)
	req.SetQuestion(name, qtype)
	raw, err := req.Pack()
	if err != nil {
		t.Fatalf("pack %s: %v", name, err)
	}
	out := s.answer(context.Background(), raw, false)
	if out == nil {
		t.Fatalf("query %s %s: no response", name, miekg.TypeToString[qtype])
	}
	m := new(miekg.Msg)
	if err := m.Unpack(out); err != nil {
		t.Fatalf("query %s: unpack response: %v", name, err)
	}
	if m.Id != req.Id || !m.Response {
		t.Fatalf("query %s: response id %d response %v, want id %d", name, m.Id, m.Response, req.Id)
	}
	return m
}

// rrData renders rrs as "TYPE data" lines, sorted.
func rrData(rrs []miekg.RR) []string {
	var out []string
	for _, rr := range rrs {
		f := strings.SplitN(rr.String(), "\t", 5)
		out = append(out, f[3]+" "+f[4])
	}
	slices.Sort(out)
	return out
}

func TestZoneAnswers(t *testing.T) {
	s := testServer(t, nil)
	if err := s.SetZone(testZone()); err != nil {
		t.Fatal(err)
	}
	const (
		noerror = miekg.RcodeSuccess
		nx      = miekg.RcodeNameError
	)
	for _, tc := range []struct {
		name  string
		qtype uint16
		rcode int
		ans   []string // "TYPE data", in any order; nil with NOERROR is NODATA
		extra []string
		soa   string // owner of the SOA in the authority section, for negatives
	}{
		// 2.3.1: A/AAAA of ClusterIPs.
		{"kubernetes.default.svc.cluster.local.", miekg.TypeA, noerror, []string{"A 10.43.0.1"}, nil, ""},
		{"web.prod.svc.cluster.local.", miekg.TypeA, noerror, []string{"A 10.43.0.10"}, nil, ""},
		{"web.prod.svc.cluster.local.", miekg.TypeAAAA, noerror, []string{"AAAA fd00:43::10"}, nil, ""},
		// NODATA: the name exists without the type.
		{"kubernetes.default.svc.cluster.local.", miekg.TypeAAAA, noerror, nil, nil, "cluster.local."},
		{"kubernetes.default.svc.cluster.local.", miekg.TypeMX, noerror, nil, nil, "cluster.local."},
		// 2.3.2: SRV of named ports, to the service's name.
		{"_https._tcp.kubernetes.default.svc.cluster.local.", miekg.TypeSRV, noerror,
			[]string{"SRV 0 100 443 kubernetes.default.svc.cluster.local."}, []string{"A 10.43.0.1"}, ""},
		{"_dns._udp.web.prod.svc.cluster.local.", miekg.TypeSRV, noerror,
			[]string{"SRV 0 100 53 web.prod.svc.cluster.local."}, []string{"A 10.43.0.10", "AAAA fd00:43::10"}, ""},
		{"_dns._tcp.web.prod.svc.cluster.local.", miekg.TypeSRV, nx, nil, nil, "cluster.local."},
		{"_https._tcp.kubernetes.default.svc.cluster.local.", miekg.TypeA, noerror, nil, nil, "cluster.local."},
		// An empty non-terminal above an SRV name is NODATA, not NXDOMAIN
		// (RFC 8020).
		{"_udp.web.prod.svc.cluster.local.", miekg.TypeSRV, noerror, nil, nil, "cluster.local."},
		// Endpoints of a ClusterIP service have names too, as in CoreDNS.
		{"10-42-1-1.web.prod.svc.cluster.local.", miekg.TypeA, noerror, []string{"A 10.42.1.1"}, nil, ""},
		// 2.4.1: a headless service's ready endpoints.
		{"db.prod.svc.cluster.local.", miekg.TypeA, noerror, []string{"A 10.42.0.5", "A 10.42.0.6"}, nil, ""},
		{"db.prod.svc.cluster.local.", miekg.TypeAAAA, noerror, nil, nil, "cluster.local."},
		{"db-0.db.prod.svc.cluster.local.", miekg.TypeA, noerror, []string{"A 10.42.0.5"}, nil, ""},
		{"10-42-0-6.db.prod.svc.cluster.local.", miekg.TypeA, noerror, []string{"A 10.42.0.6"}, nil, ""},
		// An endpoint with a hostname is not named by its address.
		{"10-42-0-5.db.prod.svc.cluster.local.", miekg.TypeA, nx, nil, nil, "cluster.local."},
		{"10-42-0-7.db.prod.svc.cluster.local.", miekg.TypeA, nx, nil, nil, "cluster.local."},
		{"db6.prod.svc.cluster.local.", miekg.TypeAAAA, noerror, []string{"AAAA fd00:42::5", "AAAA fd00:42::6"}, nil, ""},
		{"db6-0.db6.prod.svc.cluster.local.", miekg.TypeAAAA, noerror, []string{"AAAA fd00:42::5"}, nil, ""},
		{"fd00-42--6.db6.prod.svc.cluster.local.", miekg.TypeAAAA, noerror, []string{"AAAA fd00:42::6"}, nil, ""},
		// No ready endpoint: NXDOMAIN, as the spec says.
		{"empty.prod.svc.cluster.local.", miekg.TypeA, nx, nil, nil, "cluster.local."},
		{"_x._tcp.empty.prod.svc.cluster.local.", miekg.TypeSRV, nx, nil, nil, "cluster.local."},
		{"notready.prod.svc.cluster.local.", miekg.TypeA, noerror, []string{"A 10.42.0.9"}, nil, ""},
		// 2.4.2: SRV per endpoint, to its name, with the slice's port.
		{"_postgres._tcp.db.prod.svc.cluster.local.", miekg.TypeSRV, noerror, []string{
			"SRV 0 50 5432 10-42-0-6.db.prod.svc.cluster.local.",
			"SRV 0 50 5432 db-0.db.prod.svc.cluster.local.",
		}, []string{"A 10.42.0.5", "A 10.42.0.6"}, ""},
		{"_metrics._tcp.db.prod.svc.cluster.local.", miekg.TypeSRV, noerror, []string{
			"SRV 0 50 9187 10-42-0-6.db.prod.svc.cluster.local.",
			"SRV 0 50 9187 db-0.db.prod.svc.cluster.local.",
		}, []string{"A 10.42.0.5", "A 10.42.0.6"}, ""},
		// 2.5: ExternalName is a CNAME; with no upstream the target is not
		// chased.
		{"ext.prod.svc.cluster.local.", miekg.TypeA, noerror, []string{"CNAME www.example.com."}, nil, ""},
		{"ext.prod.svc.cluster.local.", miekg.TypeCNAME, noerror, []string{"CNAME www.example.com."}, nil, ""},
		{"ext2.prod.svc.cluster.local.", miekg.TypeA, noerror, []string{"A 10.43.0.10", "CNAME web.prod.svc.cluster.local."}, nil, ""},
		{"extbad.prod.svc.cluster.local.", miekg.TypeA, nx, nil, nil, "cluster.local."},
		// Pods: the address in the name, in any namespace.
		{"1-2-3-4.prod.pod.cluster.local.", miekg.TypeA, noerror, []string{"A 1.2.3.4"}, nil, ""},
		{"1-2-3-4.other.pod.cluster.local.", miekg.TypeA, noerror, []string{"A 1.2.3.4"}, nil, ""},
		{"1-2-3-4.prod.pod.cluster.local.", miekg.TypeAAAA, noerror, nil, nil, "cluster.local."},
		{"fd00-42--7.prod.pod.cluster.local.", miekg.TypeAAAA, noerror, []string{"AAAA fd00:42::7"}, nil, ""},
		{"1-2-3.prod.pod.cluster.local.", miekg.TypeA, nx, nil, nil, "cluster.local."},
		{"01-2-3-4.prod.pod.cluster.local.", miekg.TypeA, nx, nil, nil, "cluster.local."},
		{"web.prod.pod.cluster.local.", miekg.TypeA, nx, nil, nil, "cluster.local."},
		{"x.1-2-3-4.prod.pod.cluster.local.", miekg.TypeA, nx, nil, nil, "cluster.local."},
		{"prod.pod.cluster.local.", miekg.TypeA, noerror, nil, nil, "cluster.local."},
		// The tree above the names.
		{"prod.svc.cluster.local.", miekg.TypeA, noerror, nil, nil, "cluster.local."},
		{"nons.svc.cluster.local.", miekg.TypeA, nx, nil, nil, "cluster.local."},
		{"svc.cluster.local.", miekg.TypeA, noerror, nil, nil, "cluster.local."},
		{"pod.cluster.local.", miekg.TypeA, noerror, nil, nil, "cluster.local."},
		{"cluster.local.", miekg.TypeA, noerror, nil, nil, "cluster.local."},
		{"cluster.local.", miekg.TypeNS, noerror, []string{"NS ns.dns.cluster.local."}, []string{"A 10.42.0.1"}, ""},
		{"ns.dns.cluster.local.", miekg.TypeA, noerror, []string{"A 10.42.0.1"}, nil, ""},
		{"ns.dns.cluster.local.", miekg.TypeAAAA, noerror, nil, nil, "cluster.local."},
		{"dns.cluster.local.", miekg.TypeA, noerror, nil, nil, "cluster.local."},
		{"x.dns.cluster.local.", miekg.TypeA, nx, nil, nil, "cluster.local."},
		{"other.cluster.local.", miekg.TypeA, nx, nil, nil, "cluster.local."},
		// 2.2: the schema version.
		{"dns-version.cluster.local.", miekg.TypeTXT, noerror, []string{`TXT "1.1.0"`}, nil, ""},
		// What a pod's search list makes of outside names (ndots:5).
		{"example.com.prod.svc.cluster.local.", miekg.TypeA, nx, nil, nil, "cluster.local."},
		{"example.com.svc.cluster.local.", miekg.TypeA, nx, nil, nil, "cluster.local."},
		{"example.com.cluster.local.", miekg.TypeA, nx, nil, nil, "cluster.local."},
		{"kubernetes.default.svc.cluster.local.prod.svc.cluster.local.", miekg.TypeA, nx, nil, nil, "cluster.local."},
		// 2.3.3 and 2.4.3: PTR of ClusterIPs and endpoints.
		{"1.0.43.10.in-addr.arpa.", miekg.TypePTR, noerror, []string{"PTR kubernetes.default.svc.cluster.local."}, nil, ""},
		{"5.0.42.10.in-addr.arpa.", miekg.TypePTR, noerror, []string{"PTR db-0.db.prod.svc.cluster.local."}, nil, ""},
		{"6.0.42.10.in-addr.arpa.", miekg.TypePTR, noerror, []string{"PTR 10-42-0-6.db.prod.svc.cluster.local."}, nil, ""},
		{"0.1.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.3.4.0.0.0.0.d.f.ip6.arpa.", miekg.TypePTR, noerror,
			[]string{"PTR web.prod.svc.cluster.local."}, nil, ""},
		{"5.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.2.4.0.0.0.0.d.f.ip6.arpa.", miekg.TypePTR, noerror,
			[]string{"PTR db6-0.db6.prod.svc.cluster.local."}, nil, ""},
		{"1.0.43.10.in-addr.arpa.", miekg.TypeA, noerror, nil, nil, "43.10.in-addr.arpa."},
		{"7.0.42.10.in-addr.arpa.", miekg.TypePTR, nx, nil, nil, "42.10.in-addr.arpa."},
		{"99.0.43.10.in-addr.arpa.", miekg.TypePTR, nx, nil, nil, "43.10.in-addr.arpa."},
		{"0.43.10.in-addr.arpa.", miekg.TypePTR, noerror, nil, nil, "43.10.in-addr.arpa."},
		{"9.43.10.in-addr.arpa.", miekg.TypePTR, nx, nil, nil, "43.10.in-addr.arpa."},
		{"43.10.in-addr.arpa.", miekg.TypeSOA, noerror, []string{"SOA ns.dns.cluster.local. hostmaster.cluster.local. SERIAL 7200 1800 86400 5"}, nil, ""},
		{"9.9.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.3.4.0.0.0.0.d.f.ip6.arpa.", miekg.TypePTR, nx, nil, nil,
			"0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.3.4.0.0.0.0.d.f.ip6.arpa."},
		{"9.9.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.2.4.0.0.0.0.d.f.ip6.arpa.", miekg.TypePTR, nx, nil, nil,
			"0.0.0.0.0.0.2.4.0.0.0.0.d.f.ip6.arpa."},
		{"cluster.local.", miekg.TypeSOA, noerror, []string{"SOA ns.dns.cluster.local. hostmaster.cluster.local. SERIAL 7200 1800 86400 5"}, nil, ""},
	} {
		t.Run(fmt.Sprintf("%s_%s", tc.name, miekg.TypeToString[tc.qtype]), func(t *testing.T) {
			m := ask(t, s, tc.name, tc.qtype)
			serial := fmt.Sprint(s.zone.Load().serial)
			var want []string
			for _, a := range tc.ans {
				want = append(want, strings.Replace(a, "SERIAL", serial, 1))
			}
			slices.Sort(want)
			if m.Rcode != tc.rcode || !slices.Equal(rrData(m.Answer), want) {
				t.Fatalf("query(%s %s) = %s %q, want %s %q", tc.name, miekg.TypeToString[tc.qtype],
					miekg.RcodeToString[m.Rcode], rrData(m.Answer), miekg.RcodeToString[tc.rcode], want)
			}
			if !m.Authoritative {
				t.Errorf("query(%s): not authoritative", tc.name)
			}
			if tc.extra != nil && !slices.Equal(rrData(m.Extra), tc.extra) {
				t.Errorf("query(%s) additional = %q, want %q", tc.name, rrData(m.Extra), tc.extra)
			}
			if tc.soa == "" {
				if len(m.Ns) != 0 {
					t.Errorf("query(%s) authority = %v, want none", tc.name, m.Ns)
				}
				return
			}
			if len(m.Ns) != 1 || m.Ns[0].Header().Rrtype != miekg.TypeSOA || m.Ns[0].Header().Name != tc.soa {
				t.Fatalf("query(%s) authority = %v, want the SOA of %s", tc.name, m.Ns, tc.soa)
			}
			if soa := m.Ns[0].(*miekg.SOA); soa.Minttl != 5 || soa.Hdr.Ttl != 5 {
				t.Errorf("query(%s) SOA TTL %d minimum %d, want 5 and 5", tc.name, soa.Hdr.Ttl, soa.Minttl)
			}
		})
	}
}

func TestZoneCaseAndTTL(t *testing.T) {
	s := testServer(t, func(c *Config) { c.TTL = 30 * time.Second })
	s.SetZone(testZone())
	m := ask(t, s, "KuberNetes.DEFAULT.svc.Cluster.Local.", miekg.TypeA)
	if len(m.Answer) != 1 {
		t.Fatalf("query = %v, want one A", m)
	}
	h := m.Answer[0].Header()
	if h.Name != "KuberNetes.DEFAULT.svc.Cluster.Local." || h.Ttl != 30 {
		t.Errorf("answer named %q TTL %d, want the question's case and 30", h.Name, h.Ttl)
	}
	if m.Question[0].Name != "KuberNetes.DEFAULT.svc.Cluster.Local." {
		t.Errorf("question = %v, want it as asked", m.Question[0])
	}
}

func TestZoneBeforeSync(t *testing.T) {
	s := testServer(t, nil)
	for _, name := range []string{"kubernetes.default.svc.cluster.local.", "1.0.43.10.in-addr.arpa."} {
		if m := ask(t, s, name, miekg.TypeA); m.Rcode != miekg.RcodeServerFailure {
			t.Errorf("query(%s) before SetZone = %s, want SERVFAIL", name, miekg.RcodeToString[m.Rcode])
		}
	}
	if err := s.SetZone(newZone("other.local", nil, nil)); !errors.Is(err, ErrDomain) {
		t.Errorf("SetZone(other.local) = %v, want ErrDomain", err)
	}
	s.SetZone(newZone("Cluster.Local.", nil, nil))
	if m := ask(t, s, "kubernetes.default.svc.cluster.local.", miekg.TypeA); m.Rcode != miekg.RcodeNameError {
		t.Errorf("query after SetZone(empty) = %s, want NXDOMAIN", miekg.RcodeToString[m.Rcode])
	}
}

// TestZoneSwap checks that a new zone is answered from at once, and that
// the SOA serial grows.
func TestZoneSwap(t *testing.T) {
	s := testServer(t, nil)
	s.SetZone(testZone())
	serial := s.zone.Load().serial
	s.SetZone(newZone("cluster.local", []*corev1.Service{service("default", "kubernetes", []string{"10.43.0.2"})}, nil))
	m := ask(t, s, "kubernetes.default.svc.cluster.local.", miekg.TypeA)
	if got := rrData(m.Answer); !slices.Equal(got, []string{"A 10.43.0.2"}) {
		t.Errorf("after swap: %q, want A 10.43.0.2", got)
	}
	if s.zone.Load().serial <= serial {
		t.Errorf("serial %d after %d, want it to grow", s.zone.Load().serial, serial)
	}
}

func TestParseReverse(t *testing.T) {
	for _, tc := range []struct {
		name string
		want netip.Prefix
		ok   bool
	}{
		{"4.3.2.1.in-addr.arpa.", pfx("1.2.3.4/32"), true},
		{"2.1.in-addr.arpa.", pfx("1.2.0.0/16"), true},
		{"in-addr.arpa.", pfx("0.0.0.0/0"), true},
		{"04.3.2.1.in-addr.arpa.", netip.Prefix{}, false},
		{"256.3.2.1.in-addr.arpa.", netip.Prefix{}, false},
		{"5.4.3.2.1.in-addr.arpa.", netip.Prefix{}, false},
		{"x.1.in-addr.arpa.", netip.Prefix{}, false},
		{"b.a.9.8.ip6.arpa.", pfx("89ab::/16"), true},
		{"1.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.8.b.d.0.1.0.0.2.ip6.arpa.", pfx("2001:db8::1/128"), true},
		{"10.a.ip6.arpa.", netip.Prefix{}, false},
		{"g.ip6.arpa.", netip.Prefix{}, false},
		{"example.com.", netip.Prefix{}, false},
	} {
		got, ok := parseReverse(tc.name)
		if ok != tc.ok || (ok && got != tc.want) {
			t.Errorf("parseReverse(%s) = %v %v, want %v %v", tc.name, got, ok, tc.want, tc.ok)
		}
		if ok && got.Bits()%8 == 0 {
			if back := reverseName(got); back != tc.name {
				t.Errorf("reverseName(%v) = %s, want %s", got, back, tc.name)
			}
		}
	}
}

func TestReverseZone(t *testing.T) {
	cidrs := []netip.Prefix{pfx("10.32.0.0/12"), pfx("fd00:42::/56")}
	for _, tc := range []struct {
		p    netip.Prefix
		apex string
		ok   bool
	}{
		{pfx("10.40.1.2/32"), "40.10.in-addr.arpa.", true},
		{pfx("10.47.0.0/16"), "47.10.in-addr.arpa.", true},
		{pfx("10.48.0.1/32"), "", false},
		{pfx("10.0.0.0/8"), "", false},
		{pfx("fd00:42:0:ff::1/128"), "0.0.0.0.0.0.2.4.0.0.0.0.d.f.ip6.arpa.", true},
		{pfx("fd00:42:0:100::1/128"), "", false},
	} {
		apex, ok := reverseZone(cidrs, tc.p)
		if apex != tc.apex || ok != tc.ok {
			t.Errorf("reverseZone(%v) = %q %v, want %q %v", tc.p, apex, ok, tc.apex, tc.ok)
		}
	}
}

func TestDashed(t *testing.T) {
	for _, s := range []string{"10.42.0.6", "fd00:42::6", "fd00::", "2001:db8:1:2:3:4:5:6"} {
		a := netip.MustParseAddr(s)
		d := dashed(a)
		if _, ok := label(d); !ok {
			t.Errorf("dashed(%s) = %q, not a label", s, d)
		}
		if back, ok := undashed(d); !ok || back != a {
			t.Errorf("undashed(dashed(%s) = %q) = %v %v", s, d, back, ok)
		}
	}
}
