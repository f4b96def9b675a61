package dns

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strings"
	"testing"

	miekg "github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/outpost-mesh/outpost/netd/services"
)

// Pools the random clusters of TestZoneDifferential draw from, small so
// that names, addresses and ports collide.
var (
	diffNamespaces = []string{"default", "prod", "p", "Bad_NS", "prod-2"}
	diffNames      = []string{"a", "b", "db", "web", "Web", "a-b", "x1", "svc", "-bad"}
	diffAddrs      = []string{
		"10.42.0.1", "10.42.0.2", "10.42.0.10", "10.43.0.1", "10.43.0.2", "10.43.1.1",
		"fd00:42::1", "fd00:42::2", "fd00::", "fd00:43::1", "::ffff:10.42.0.1",
		"fe80::1%eth0", "bogus", "",
	}
	diffHostnames = []string{"h0", "h1", "db", "db-0", "db0", "10-42-0-1", "H1", "Bad_", ""}
	diffPorts     = []string{"http", "dns", "db", "HTTP", "", "_x", "a-b"}
	diffProtos    = []corev1.Protocol{corev1.ProtocolTCP, corev1.ProtocolUDP, corev1.ProtocolSCTP, ""}
	diffTargets   = []string{"www.example.com", "web.prod.svc.cluster.local.", "a.p.svc.cluster.local", "10.1.2.3", "bad..name", "."}
)

func pick[T any](r *rand.Rand, s []T) T { return s[r.IntN(len(s))] }

// randomCluster returns a few Services and EndpointSlices of every kind,
// valid and not.
func randomCluster(r *rand.Rand) ([]*corev1.Service, []*discoveryv1.EndpointSlice) {
	var svcs []*corev1.Service
	var sls []*discoveryv1.EndpointSlice
	randPorts := func() []port {
		var ps []port
		for range r.IntN(3) {
			ps = append(ps, port{pick(r, diffPorts), int32(r.IntN(4)) + 80, pick(r, diffProtos)})
		}
		return ps
	}
	for range 1 + r.IntN(8) {
		ns, name := pick(r, diffNamespaces), pick(r, diffNames)
		var svc *corev1.Service
		switch r.IntN(6) {
		case 0:
			svc = headless(ns, name, randPorts()...)
		case 1:
			svc = &corev1.Service{
				ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
				Spec:       corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: pick(r, diffTargets)},
			}
		case 2:
			svc = service(ns, name, nil, randPorts()...)
			if r.IntN(2) == 0 {
				svc.Spec.ClusterIP = pick(r, diffAddrs)
			}
		default:
			var ips []string
			for range 1 + r.IntN(2) {
				ips = append(ips, pick(r, diffAddrs))
			}
			svc = service(ns, name, ips, randPorts()...)
		}
		svc.Spec.PublishNotReadyAddresses = r.IntN(4) == 0
		svcs = append(svcs, svc)
		for k := range r.IntN(3) {
			at := pick(r, []discoveryv1.AddressType{discoveryv1.AddressTypeIPv4, discoveryv1.AddressTypeIPv6, discoveryv1.AddressTypeFQDN})
			var eps []endpoint
			for range r.IntN(4) {
				e := endpoint{addr: pick(r, diffAddrs), hostname: pick(r, diffHostnames)}
				switch r.IntN(3) {
				case 1:
					e.ready = ptr.To(true)
				case 2:
					e.ready = ptr.To(false)
				}
				eps = append(eps, e)
			}
			sl := slice(ns, name, fmt.Sprintf("%s-%d", name, k), at, randPorts(), eps...)
			if len(sl.Endpoints) > 0 && r.IntN(4) == 0 {
				sl.Endpoints[0].Addresses = append(sl.Endpoints[0].Addresses, pick(r, diffAddrs))
			}
			if len(sl.Ports) > 0 && r.IntN(5) == 0 {
				sl.Ports[0].Protocol, sl.Ports[0].Port = nil, nil
			}
			sls = append(sls, sl)
		}
	}
	if r.IntN(4) == 0 {
		svcs = append(svcs, nil)
		sls = append(sls, nil)
	}
	r.Shuffle(len(svcs), func(i, j int) { svcs[i], svcs[j] = svcs[j], svcs[i] })
	r.Shuffle(len(sls), func(i, j int) { sls[i], sls[j] = sls[j], sls[i] })
	return svcs, sls
}

// TestZoneDifferential checks, on random clusters, that the compact Zone
// answers every name the map-of-names zone had, names around them and
// every PTR alike, record for record and in the same order.
func TestZoneDifferential(t *testing.T) {
	const domain = "cluster.local."
	qtypes := []uint16{miekg.TypeA, miekg.TypeAAAA, miekg.TypeSRV, miekg.TypeTXT, miekg.TypeCNAME, miekg.TypeANY, miekg.TypeMX}
	iterations := 3000
	if testing.Short() {
		iterations = 300
	}
	var asked, existed, ptrs int
	defer func() { t.Logf("%d names asked, %d that exist, %d PTRs", asked, existed, ptrs) }()
	var prev *Zone
	for seed := range uint64(iterations) {
		r := rand.New(rand.NewPCG(seed, 1))
		svcs, sls := randomCluster(r)
		old := newRefZone(domain, svcs, sls)
		z := newZone(domain, svcs, sls)
		fail := func(format string, args ...any) {
			t.Helper()
			t.Fatalf("seed %d: "+format, append([]any{seed}, args...)...)
		}
		// The zone sized after the last seed's, larger or smaller, is
		// the same zone.
		if diff := sameZone(NewZoneLike(prev, domain, services.FromServices(svcs), services.FromSlices(sls)), z); diff != "" {
			fail("NewZoneLike differs from NewZone: %s", diff)
		}
		prev = z
		if z.Len() != len(old.names) {
			fail("Len() = %d, want %d", z.Len(), len(old.names))
		}

		names := map[string]bool{"": true, domain: true, "x." + domain: true, "dns." + domain: true}
		for n := range old.names {
			names[n] = true
			for _, pre := range []string{"x.", "_tcp.", "_http.", "a.b.", "10-42-0-1.", "db."} {
				names[pre+n] = true
			}
			if _, rest, ok := strings.Cut(n, "."); ok {
				names["_udp."+rest] = true
				names["zz."+rest] = true
			}
		}
		for range 40 {
			var l []string
			for range 1 + r.IntN(4) {
				l = append(l, pick(r, [][]string{diffNames, diffNamespaces, diffHostnames, diffPorts, {"_http", "_tcp", "_udp", "_dns", "_", "_sctp", "svc", "pod", "1-2-3-4", "fd00-42--1", "a\\.b"}})[r.IntN(5)])
			}
			names[strings.ToLower(strings.Join(l, "."))+pick(r, []string{".svc.", ".pod.", "."})+domain] = true
		}
		for n := range names {
			or, ook := old.lookup(n)
			nr, nok := z.lookup(n)
			asked++
			if ook != nok {
				fail("lookup(%q) exists %v, want %v", n, nok, ook)
			}
			if !ook {
				continue
			}
			existed++
			if nr.cname != or.cname {
				fail("lookup(%q) CNAME %q, want %q", n, nr.cname, or.cname)
			}
			for _, qt := range qtypes {
				oa, oe := old.records(or, n, qt, 5)
				na, ne := z.records(nr, n, qt, 5)
				if !slices.Equal(rrStrings(na), rrStrings(oa)) || !slices.Equal(rrStrings(ne), rrStrings(oe)) {
					fail("records(%q, %s) = %q + %q, want %q + %q", n, miekg.TypeToString[qt],
						rrStrings(na), rrStrings(ne), rrStrings(oa), rrStrings(oe))
				}
			}
		}

		for _, s := range diffAddrs {
			a, err := netip.ParseAddr(s)
			if err != nil {
				continue
			}
			if len(old.ptr(a)) > 0 {
				ptrs++
			}
			if got, want := z.ptr(a), old.ptr(a); !slices.Equal(got, want) {
				fail("ptr(%v) = %q, want %q", a, got, want)
			}
			step := 8
			if a.Is6() {
				step = 4
			}
			for bits := 0; bits <= a.BitLen(); bits += step {
				p := netip.PrefixFrom(a, bits)
				if got, want := z.hasPTRWithin(p), old.hasPTRWithin(p); got != want {
					fail("hasPTRWithin(%v) = %v, want %v", p, got, want)
				}
			}
		}
	}
}

// sameZone returns how a's records differ from b's, "" if they do not.
// Their hash tables are not compared: each zone has a seed of its own.
func sameZone(a, b *Zone) string {
	switch {
	case a.domain != b.domain || a.svcSuffix != b.svcSuffix || a.podSuffix != b.podSuffix || a.count != b.count:
		return fmt.Sprintf("domain %q count %d, want %q count %d", a.domain, a.count, b.domain, b.count)
	case a.arena != b.arena:
		return fmt.Sprintf("arena %q, want %q", a.arena, b.arena)
	case !slices.Equal(a.svcs, b.svcs) || !slices.Equal(a.hosts, b.hosts) || !slices.Equal(a.hostAddrs, b.hostAddrs) || !slices.Equal(a.baseAddrs, b.baseAddrs):
		return fmt.Sprintf("services %v hosts %v %v addrs %v, want %v %v %v %v", a.svcs, a.hosts, a.hostAddrs, a.baseAddrs, b.svcs, b.hosts, b.hostAddrs, b.baseAddrs)
	case !slices.Equal(a.ports, b.ports) || !slices.Equal(a.srvs, b.srvs):
		return fmt.Sprintf("ports %v srvs %v, want %v %v", a.ports, a.srvs, b.ports, b.srvs)
	case !slices.Equal(a.ptr4, b.ptr4) || !slices.Equal(a.ptr6, b.ptr6):
		return fmt.Sprintf("ptr %v %v, want %v %v", a.ptr4, a.ptr6, b.ptr4, b.ptr6)
	}
	return ""
}

func rrStrings(rrs []miekg.RR) []string {
	var out []string
	for _, rr := range rrs {
		out = append(out, rr.String())
	}
	return out
}

// FuzzZoneLookup asks the compact zone and the map-of-names zone of
// testZone's cluster any name: they must agree on whether it exists and
// on its records.
func FuzzZoneLookup(f *testing.F) {
	for _, n := range []string{
		"db.prod.svc.cluster.local.", "_postgres._tcp.db.prod.svc.cluster.local.", "_tcp.db.prod.svc.cluster.local.",
		"10-42-0-6.db.prod.svc.cluster.local.", "db-0.db.prod.svc.cluster.local.", "prod.svc.cluster.local.",
		"1-2-3-4.prod.pod.cluster.local.", "fd00-42--6.db6.prod.svc.cluster.local.", "ext.prod.svc.cluster.local.",
		"dns-version.cluster.local.", "a\\.b.prod.svc.cluster.local.",
	} {
		f.Add(n, miekg.TypeANY)
	}
	svcs, sls := testCluster()
	old := newRefZone("cluster.local", svcs, sls)
	z := newZone("cluster.local", svcs, sls)
	f.Fuzz(func(t *testing.T, name string, qtype uint16) {
		name = strings.ToLower(name)
		if !miekg.IsSubDomain("cluster.local.", name) || name == "cluster.local." {
			return
		}
		or, ook := old.lookup(name)
		nr, nok := z.lookup(name)
		if ook != nok || (ook && nr.cname != or.cname) {
			t.Fatalf("lookup(%q) = %v %q, want %v %q", name, nok, nr.cname, ook, or.cname)
		}
		if !ook {
			return
		}
		oa, oe := old.records(or, name, qtype, 5)
		na, ne := z.records(nr, name, qtype, 5)
		if !slices.Equal(rrStrings(na), rrStrings(oa)) || !slices.Equal(rrStrings(ne), rrStrings(oe)) {
			t.Fatalf("records(%q, %d) = %q + %q, want %q + %q", name, qtype, rrStrings(na), rrStrings(ne), rrStrings(oa), rrStrings(oe))
		}
	})
}
