package services

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
)

const (
	node = "me"
	zone = "z1"
)

var nodeAddrs = []netip.Addr{netip.MustParseAddr("192.168.1.10"), netip.MustParseAddr("fd00::10")}

type buildCase struct {
	name     string
	services []*corev1.Service
	slices   []*discoveryv1.EndpointSlice
	zone     string // defaults to zone; "-" for none
	addrs    []netip.Addr
	dead     []string
	lim      *limits
	want     []string // render's lines
	problems []string // each a substring of one Problem's String, in order
}

func runBuild(t *testing.T, tc buildCase) {
	t.Helper()
	in := Input{Node: node, Zone: zone, NodeAddrs: nodeAddrs, Services: FromServices(tc.services), Slices: FromSlices(tc.slices)}
	switch tc.zone {
	case "":
	case "-":
		in.Zone = ""
	default:
		in.Zone = tc.zone
	}
	if tc.addrs != nil {
		in.NodeAddrs = tc.addrs
	}
	if tc.dead != nil {
		in.Dead = func(a netip.Addr) bool { return slices.Contains(tc.dead, a.String()) }
	}
	lim := limits{MaxFrontends, MaxBackends, MaxBackendsTotal}
	if tc.lim != nil {
		lim = *tc.lim
	}
	tab, probs := build(in, lim)
	if err := checkTable(tab, lim); err != nil {
		t.Errorf("build: %v", err)
	}
	got := render(tab)
	if !slices.Equal(got, tc.want) {
		t.Errorf("build table:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(tc.want, "\n  "))
	}
	gotP := renderProblems(probs)
	ok := len(gotP) == len(tc.problems)
	for i := 0; ok && i < len(gotP); i++ {
		ok = strings.Contains(gotP[i], tc.problems[i])
	}
	if !ok {
		t.Errorf("build problems:\n  %s\nwant (substrings):\n  %s", strings.Join(gotP, "\n  "), strings.Join(tc.problems, "\n  "))
	}

	// The same input in reverse order builds the same.
	in.Services = slices.Clone(in.Services)
	slices.Reverse(in.Services)
	in.Slices = slices.Clone(in.Slices)
	slices.Reverse(in.Slices)
	tab2, probs2 := build(in, lim)
	if !slices.Equal(render(tab2), got) || !slices.Equal(renderProblems(probs2), gotP) {
		t.Errorf("build of the input reversed differs:\n  %s\n  %s", strings.Join(render(tab2), "\n  "), strings.Join(renderProblems(probs2), "\n  "))
	}
}

func TestBuildEndpointChoice(t *testing.T) {
	web := svc("web", ips("10.43.0.1"), ports(tcp("http", 80)))
	http := sports(sport("http", 8080))
	for _, tc := range []buildCase{{
		name:     "ready endpoints, nil conditions meaning ready",
		services: []*corev1.Service{web},
		slices: []*discoveryv1.EndpointSlice{v4("web", "web-1", http,
			ep("10.42.0.3"), ep("10.42.0.2", on(node)), ep("10.42.1.2", ready(true)))},
		want: []string{"10.43.0.1:80/TCP ClusterIP default/web:http [10.42.0.2:8080L 10.42.0.3:8080 10.42.1.2:8080]"},
	}, {
		name:     "not ready and terminating endpoints are left out while one is ready",
		services: []*corev1.Service{web},
		slices: []*discoveryv1.EndpointSlice{v4("web", "web-1", http,
			ep("10.42.0.2", ready(false)), ep("10.42.0.3", term), ep("10.42.0.4", down), ep("10.42.0.5"))},
		want: []string{"10.43.0.1:80/TCP ClusterIP default/web:http [10.42.0.5:8080]"},
	}, {
		name:     "no ready endpoint: serving terminating ones",
		services: []*corev1.Service{web},
		slices: []*discoveryv1.EndpointSlice{v4("web", "web-1", http,
			ep("10.42.0.2", ready(false)), ep("10.42.0.3", term), ep("10.42.0.4", down),
			// serving nil reads as true, as upstream's cache reads it
			ep("10.42.0.6", ready(false), terminating(true)))},
		want: []string{"10.43.0.1:80/TCP ClusterIP default/web:http [10.42.0.3:8080 10.42.0.6:8080]"},
	}, {
		name:     "serving but not terminating is never used",
		services: []*corev1.Service{web},
		slices: []*discoveryv1.EndpointSlice{v4("web", "web-1", http,
			ep("10.42.0.2", ready(false), serving(true)))},
		want: []string{"10.43.0.1:80/TCP ClusterIP default/web:http []"},
	}, {
		name:     "no slices: a frontend without backends",
		services: []*corev1.Service{web},
		want:     []string{"10.43.0.1:80/TCP ClusterIP default/web:http []"},
	}, {
		name:     "slices of other Services and namespaces are not used",
		services: []*corev1.Service{web},
		slices: []*discoveryv1.EndpointSlice{
			v4("other", "other-1", http, ep("10.42.0.2")),
			func() *discoveryv1.EndpointSlice {
				s := v4("web", "web-1", http, ep("10.42.0.3"))
				s.Namespace = "elsewhere"
				return s
			}(),
		},
		want: []string{"10.43.0.1:80/TCP ClusterIP default/web:http []"},
	}, {
		name:     "several slices merged, an endpoint in two kept once, local preferred",
		services: []*corev1.Service{web},
		slices: []*discoveryv1.EndpointSlice{
			v4("web", "web-1", http, ep("10.42.0.2"), ep("10.42.0.4")),
			v4("web", "web-2", http, ep("10.42.0.3"), ep("10.42.0.2", on(node))),
		},
		want: []string{"10.43.0.1:80/TCP ClusterIP default/web:http [10.42.0.2:8080L 10.42.0.3:8080 10.42.0.4:8080]"},
	}, {
		name:     "an endpoint in two slices, ready in one: kept ready",
		services: []*corev1.Service{web},
		slices: []*discoveryv1.EndpointSlice{
			v4("web", "web-1", http, ep("10.42.0.2", ready(false))),
			v4("web", "web-2", http, ep("10.42.0.2")),
		},
		want: []string{"10.43.0.1:80/TCP ClusterIP default/web:http [10.42.0.2:8080]"},
	}, {
		name:     "an endpoint in two slices, local in one: kept as that one says, as upstream favours local",
		services: []*corev1.Service{web},
		slices: []*discoveryv1.EndpointSlice{
			v4("web", "web-1", http, ep("10.42.0.2"), ep("10.42.0.3")),
			v4("web", "web-2", http, ep("10.42.0.2", on(node), ready(false))),
		},
		want: []string{"10.43.0.1:80/TCP ClusterIP default/web:http [10.42.0.3:8080]"},
	}, {
		name:     "same address on two target ports is two backends",
		services: []*corev1.Service{web},
		slices: []*discoveryv1.EndpointSlice{
			v4("web", "web-1", http, ep("10.42.0.2")),
			v4("web", "web-2", sports(sport("http", 8081)), ep("10.42.0.2")),
		},
		want: []string{"10.43.0.1:80/TCP ClusterIP default/web:http [10.42.0.2:8080 10.42.0.2:8081]"},
	}, {
		name: "named ports and protocols",
		services: []*corev1.Service{svc("dns", ips("10.43.0.10"),
			ports(udp("dns", 53), tcp("dns-tcp", 53), tcp("metrics", 9153),
				corev1.ServicePort{Name: "sctp", Port: 53, Protocol: corev1.ProtocolSCTP}))},
		slices: []*discoveryv1.EndpointSlice{v4("dns", "dns-1",
			sports(sportUDP("dns", 5353), sport("dns-tcp", 5353), sport("metrics", 9154), sport("unused", 1),
				discoveryv1.EndpointPort{Name: ptr("sctp"), Port: ptr(int32(5354)), Protocol: ptr(corev1.ProtocolSCTP)}),
			ep("10.42.0.2"))},
		want: []string{
			"10.43.0.10:53/SCTP ClusterIP default/dns:sctp [10.42.0.2:5354]",
			"10.43.0.10:53/TCP ClusterIP default/dns:dns-tcp [10.42.0.2:5353]",
			"10.43.0.10:53/UDP ClusterIP default/dns:dns [10.42.0.2:5353]",
			"10.43.0.10:9153/TCP ClusterIP default/dns:metrics [10.42.0.2:9154]",
		},
	}, {
		name:     "a slice port of the right name but another protocol does not match",
		services: []*corev1.Service{web},
		slices:   []*discoveryv1.EndpointSlice{v4("web", "web-1", sports(sportUDP("http", 8080)), ep("10.42.0.2"))},
		want:     []string{"10.43.0.1:80/TCP ClusterIP default/web:http []"},
	}, {
		name:     "unnamed port, nil slice port name and protocol as the API defaults them",
		services: []*corev1.Service{svc("u", ips("10.43.0.2"), ports(corev1.ServicePort{Port: 80}))},
		slices: []*discoveryv1.EndpointSlice{v4("u", "u-1",
			[]discoveryv1.EndpointPort{{Port: ptr(int32(8080))}}, ep("10.42.0.2"))},
		want: []string{"10.43.0.2:80/TCP ClusterIP default/u: [10.42.0.2:8080]"},
	}, {
		name:     "dead endpoints are left out",
		services: []*corev1.Service{web},
		slices: []*discoveryv1.EndpointSlice{v4("web", "web-1", http,
			ep("10.42.0.2", on(node)), ep("10.42.0.3"))},
		dead: []string{"10.42.0.2"},
		want: []string{"10.43.0.1:80/TCP ClusterIP default/web:http [10.42.0.3:8080]"},
	}, {
		name:     "dead before the fallback: all ready dead, the terminating ones used",
		services: []*corev1.Service{web},
		slices: []*discoveryv1.EndpointSlice{v4("web", "web-1", http,
			ep("10.42.0.2", on(node)), ep("10.42.0.3", term))},
		dead: []string{"10.42.0.2"},
		want: []string{"10.43.0.1:80/TCP ClusterIP default/web:http [10.42.0.3:8080]"},
	}, {
		name:     "a 4-in-6 endpoint address in an IPv4 slice is IPv4",
		services: []*corev1.Service{web},
		slices:   []*discoveryv1.EndpointSlice{v4("web", "web-1", http, ep("::ffff:10.42.0.2"))},
		want:     []string{"10.43.0.1:80/TCP ClusterIP default/web:http [10.42.0.2:8080]"},
	}, {
		name:     "FQDN slices are not used",
		services: []*corev1.Service{web},
		slices: []*discoveryv1.EndpointSlice{slice("web", "web-1", discoveryv1.AddressTypeFQDN, http,
			ep("example.com"))},
		want: []string{"10.43.0.1:80/TCP ClusterIP default/web:http []"},
	}} {
		t.Run(tc.name, func(t *testing.T) { runBuild(t, tc) })
	}
}

func TestBuildTrafficPolicy(t *testing.T) {
	http := sports(sport("http", 8080))
	eps := v4("web", "web-1", http, ep("10.42.0.2", on(node)), ep("10.42.0.3"), ep("10.42.0.4"))
	epsLocalTerm := v4("web", "web-1", http, ep("10.42.0.2", on(node), term), ep("10.42.0.3"))
	np := func(opts ...svcOpt) *corev1.Service {
		return svc("web", ips("10.43.0.1"), ports(nodePort(tcp("http", 80), 30080)),
			append([]svcOpt{typ(corev1.ServiceTypeNodePort)}, opts...)...)
	}
	for _, tc := range []buildCase{{
		name:     "internalTrafficPolicy Local: ClusterIP backends are the local ones",
		services: []*corev1.Service{svc("web", ips("10.43.0.1"), ports(tcp("http", 80)), iTPLocal)},
		slices:   []*discoveryv1.EndpointSlice{eps},
		want:     []string{"10.43.0.1:80/TCP ClusterIP default/web:http [10.42.0.2:8080L]"},
	}, {
		name:     "internalTrafficPolicy Local without local endpoints: none",
		services: []*corev1.Service{svc("web", ips("10.43.0.1"), ports(tcp("http", 80)), iTPLocal)},
		slices:   []*discoveryv1.EndpointSlice{v4("web", "web-1", http, ep("10.42.0.3"))},
		want:     []string{"10.43.0.1:80/TCP ClusterIP default/web:http []"},
	}, {
		name: "internalTrafficPolicy Local falls back to the local terminating one on its own",
		// the cluster-wide set has a ready endpoint, the local one does not
		services: []*corev1.Service{svc("web", ips("10.43.0.1"), ports(tcp("http", 80)), iTPLocal)},
		slices:   []*discoveryv1.EndpointSlice{epsLocalTerm},
		want:     []string{"10.43.0.1:80/TCP ClusterIP default/web:http [10.42.0.2:8080L]"},
	}, {
		name:     "NodePort, externalTrafficPolicy Cluster: one set everywhere, per node address",
		services: []*corev1.Service{np()},
		slices:   []*discoveryv1.EndpointSlice{eps},
		want: []string{
			"10.43.0.1:80/TCP ClusterIP default/web:http [10.42.0.2:8080L 10.42.0.3:8080 10.42.0.4:8080]",
			"192.168.1.10:30080/TCP NodePort default/web:http [10.42.0.2:8080L 10.42.0.3:8080 10.42.0.4:8080] ext[10.42.0.2:8080L 10.42.0.3:8080 10.42.0.4:8080]",
		},
	}, {
		name:     "NodePort, externalTrafficPolicy Local: outside traffic to local endpoints, node traffic cluster-wide",
		services: []*corev1.Service{np(eTPLocal)},
		slices:   []*discoveryv1.EndpointSlice{eps},
		want: []string{
			"10.43.0.1:80/TCP ClusterIP default/web:http [10.42.0.2:8080L 10.42.0.3:8080 10.42.0.4:8080]",
			"192.168.1.10:30080/TCP NodePort default/web:http [10.42.0.2:8080L 10.42.0.3:8080 10.42.0.4:8080] ext[10.42.0.2:8080L] local",
		},
	}, {
		name:     "externalTrafficPolicy Local without local endpoints: no external backends",
		services: []*corev1.Service{np(eTPLocal)},
		slices:   []*discoveryv1.EndpointSlice{v4("web", "web-1", http, ep("10.42.0.3"))},
		want: []string{
			"10.43.0.1:80/TCP ClusterIP default/web:http [10.42.0.3:8080]",
			"192.168.1.10:30080/TCP NodePort default/web:http [10.42.0.3:8080] ext[] local",
		},
	}, {
		name:     "externalTrafficPolicy Local, local endpoint terminating: it serves outside traffic",
		services: []*corev1.Service{np(eTPLocal)},
		slices:   []*discoveryv1.EndpointSlice{epsLocalTerm},
		want: []string{
			"10.43.0.1:80/TCP ClusterIP default/web:http [10.42.0.3:8080]",
			"192.168.1.10:30080/TCP NodePort default/web:http [10.42.0.3:8080] ext[10.42.0.2:8080L] local",
		},
	}, {
		name:     "both policies Local",
		services: []*corev1.Service{np(eTPLocal, iTPLocal)},
		slices:   []*discoveryv1.EndpointSlice{eps},
		want: []string{
			"10.43.0.1:80/TCP ClusterIP default/web:http [10.42.0.2:8080L]",
			"192.168.1.10:30080/TCP NodePort default/web:http [10.42.0.2:8080L 10.42.0.3:8080 10.42.0.4:8080] ext[10.42.0.2:8080L] local",
		},
	}, {
		name: "externalTrafficPolicy Local on a ClusterIP Service with externalIPs",
		services: []*corev1.Service{svc("web", ips("10.43.0.1"), ports(tcp("http", 80)),
			externalIPs("203.0.113.7"), eTPLocal)},
		slices: []*discoveryv1.EndpointSlice{eps},
		want: []string{
			"10.43.0.1:80/TCP ClusterIP default/web:http [10.42.0.2:8080L 10.42.0.3:8080 10.42.0.4:8080]",
			"203.0.113.7:80/TCP ExternalIP default/web:http [10.42.0.2:8080L 10.42.0.3:8080 10.42.0.4:8080] ext[10.42.0.2:8080L] local",
		},
	}, {
		name: "LoadBalancer: nodePorts, externalIPs and VIP-mode ingress IPs",
		services: []*corev1.Service{svc("lb", ips("10.43.0.5"), ports(nodePort(tcp("http", 80), 30080)),
			typ(corev1.ServiceTypeLoadBalancer), eTPLocal,
			externalIPs("203.0.113.7", "203.0.113.8"),
			ingress(
				corev1.LoadBalancerIngress{IP: "198.51.100.1"},
				corev1.LoadBalancerIngress{IP: "198.51.100.2", IPMode: ptr(corev1.LoadBalancerIPModeVIP)},
				corev1.LoadBalancerIngress{IP: "198.51.100.3", IPMode: ptr(corev1.LoadBalancerIPModeProxy)},
				corev1.LoadBalancerIngress{Hostname: "lb.example.com"},
				corev1.LoadBalancerIngress{IP: "203.0.113.7"}, // also in externalIPs: one frontend
			))},
		slices: []*discoveryv1.EndpointSlice{v4("lb", "lb-1", sports(sport("http", 8080)), ep("10.42.0.2", on(node)), ep("10.42.0.3"))},
		want: []string{
			"10.43.0.5:80/TCP ClusterIP default/lb:http [10.42.0.2:8080L 10.42.0.3:8080]",
			"192.168.1.10:30080/TCP NodePort default/lb:http [10.42.0.2:8080L 10.42.0.3:8080] ext[10.42.0.2:8080L] local",
			"198.51.100.1:80/TCP ExternalIP default/lb:http [10.42.0.2:8080L 10.42.0.3:8080] ext[10.42.0.2:8080L] local",
			"198.51.100.2:80/TCP ExternalIP default/lb:http [10.42.0.2:8080L 10.42.0.3:8080] ext[10.42.0.2:8080L] local",
			"203.0.113.7:80/TCP ExternalIP default/lb:http [10.42.0.2:8080L 10.42.0.3:8080] ext[10.42.0.2:8080L] local",
			"203.0.113.8:80/TCP ExternalIP default/lb:http [10.42.0.2:8080L 10.42.0.3:8080] ext[10.42.0.2:8080L] local",
		},
	}, {
		name: "LoadBalancer without node ports",
		services: []*corev1.Service{svc("lb", ips("10.43.0.5"), ports(tcp("http", 80)),
			typ(corev1.ServiceTypeLoadBalancer), ingress(corev1.LoadBalancerIngress{IP: "198.51.100.1"}))},
		want: []string{
			"10.43.0.5:80/TCP ClusterIP default/lb:http []",
			"198.51.100.1:80/TCP ExternalIP default/lb:http [] ext[]",
		},
	}, {
		name:     "a nodePort per node address, the node's addresses cleaned",
		services: []*corev1.Service{np()},
		addrs: []netip.Addr{
			netip.MustParseAddr("192.168.1.10"), netip.MustParseAddr("::ffff:192.168.1.10"),
			netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("fe80::1"), {},
		},
		want: []string{
			"10.0.0.1:30080/TCP NodePort default/web:http [] ext[]",
			"10.43.0.1:80/TCP ClusterIP default/web:http []",
			"192.168.1.10:30080/TCP NodePort default/web:http [] ext[]",
		},
	}, {
		name:     "no node address: no NodePort frontend",
		services: []*corev1.Service{np()},
		addrs:    []netip.Addr{},
		want:     []string{"10.43.0.1:80/TCP ClusterIP default/web:http []"},
	}, {
		name: "session affinity",
		services: []*corev1.Service{
			svc("a", ips("10.43.0.1"), ports(tcp("", 80)), affinity(nil)),
			svc("b", ips("10.43.0.2"), ports(tcp("", 80)), affinity(ptr(int32(60)))),
			svc("c", ips("10.43.0.3"), ports(tcp("", 80)), affinity(ptr(int32(0)))),
			svc("d", ips("10.43.0.4"), ports(tcp("", 80))),
		},
		want: []string{
			"10.43.0.1:80/TCP ClusterIP default/a: [] aff=3h0m0s",
			"10.43.0.2:80/TCP ClusterIP default/b: [] aff=1m0s",
			"10.43.0.3:80/TCP ClusterIP default/c: [] aff=3h0m0s",
			"10.43.0.4:80/TCP ClusterIP default/d: []",
		},
		problems: []string{"default/c: sessionAffinity timeout 0 is outside 1..86400"},
	}} {
		t.Run(tc.name, func(t *testing.T) { runBuild(t, tc) })
	}
}

func TestBuildTopology(t *testing.T) {
	http := sports(sport("http", 8080))
	close := trafficDistribution(corev1.ServiceTrafficDistributionPreferClose)
	web := func(opts ...svcOpt) []*corev1.Service {
		return []*corev1.Service{svc("web", ips("10.43.0.1"), ports(tcp("http", 80)), opts...)}
	}
	hinted := []*discoveryv1.EndpointSlice{v4("web", "web-1", http,
		ep("10.42.0.2", zones("z1")), ep("10.42.0.3", zones("z2")), ep("10.42.0.4", zones("z2", "z1")),
		ep("10.42.0.5", zones("z2"), on(node)))}
	all := "10.43.0.1:80/TCP ClusterIP default/web:http [10.42.0.2:8080 10.42.0.3:8080 10.42.0.4:8080 10.42.0.5:8080L]"
	for _, tc := range []buildCase{{
		name:     "PreferClose with every endpoint hinted: this zone's",
		services: web(close),
		slices:   hinted,
		want:     []string{"10.43.0.1:80/TCP ClusterIP default/web:http [10.42.0.2:8080 10.42.0.4:8080]"},
	}, {
		name:     "PreferSameZone",
		services: web(trafficDistribution(corev1.ServiceTrafficDistributionPreferSameZone)),
		slices:   hinted,
		want:     []string{"10.43.0.1:80/TCP ClusterIP default/web:http [10.42.0.2:8080 10.42.0.4:8080]"},
	}, {
		name:     "topology-mode Auto",
		services: web(annotate(corev1.AnnotationTopologyMode, "Auto")),
		slices:   hinted,
		want:     []string{"10.43.0.1:80/TCP ClusterIP default/web:http [10.42.0.2:8080 10.42.0.4:8080]"},
	}, {
		name:     "topology-aware-hints auto",
		services: web(annotate(corev1.DeprecatedAnnotationTopologyAwareHints, "auto")),
		slices:   hinted,
		want:     []string{"10.43.0.1:80/TCP ClusterIP default/web:http [10.42.0.2:8080 10.42.0.4:8080]"},
	}, {
		name: "the deprecated annotation wins over topology-mode",
		services: web(annotate(corev1.DeprecatedAnnotationTopologyAwareHints, "Disabled"),
			annotate(corev1.AnnotationTopologyMode, "Auto")),
		slices: hinted,
		want:   []string{all},
	}, {
		name:     "hints on a Service that does not ask for topology: all",
		services: web(),
		slices:   hinted,
		want:     []string{all},
	}, {
		name:     "another other zone: all",
		services: web(close),
		slices:   hinted,
		zone:     "z3",
		want:     []string{all},
	}, {
		name:     "node without a zone: all",
		services: web(close),
		slices:   hinted,
		zone:     "-",
		want:     []string{all},
	}, {
		name:     "a ready endpoint without hints: all",
		services: web(close),
		slices: []*discoveryv1.EndpointSlice{v4("web", "web-1", http,
			ep("10.42.0.2", zones("z1")), ep("10.42.0.3"))},
		want: []string{"10.43.0.1:80/TCP ClusterIP default/web:http [10.42.0.2:8080 10.42.0.3:8080]"},
	}, {
		name:     "a not-ready endpoint without hints does not count",
		services: web(close),
		slices: []*discoveryv1.EndpointSlice{v4("web", "web-1", http,
			ep("10.42.0.2", zones("z1")), ep("10.42.0.3", zones("z2")), ep("10.42.0.4", ready(false)))},
		want: []string{"10.43.0.1:80/TCP ClusterIP default/web:http [10.42.0.2:8080]"},
	}, {
		name:     "the zone's only ready endpoint dead: all the others",
		services: web(close),
		slices:   hinted,
		dead:     []string{"10.42.0.2", "10.42.0.4"},
		want:     []string{"10.43.0.1:80/TCP ClusterIP default/web:http [10.42.0.3:8080 10.42.0.5:8080L]"},
	}, {
		name:     "no ready endpoint: terminating ones whatever their zone",
		services: web(close),
		slices: []*discoveryv1.EndpointSlice{v4("web", "web-1", http,
			ep("10.42.0.2", zones("z1"), term), ep("10.42.0.3", zones("z2"), term))},
		want: []string{"10.43.0.1:80/TCP ClusterIP default/web:http [10.42.0.2:8080 10.42.0.3:8080]"},
	}, {
		name:     "externalTrafficPolicy Local is not narrowed by zone, node traffic is",
		services: []*corev1.Service{svc("web", ips("10.43.0.1"), ports(nodePort(tcp("http", 80), 30080)), typ(corev1.ServiceTypeNodePort), eTPLocal, close)},
		slices:   hinted,
		want: []string{
			"10.43.0.1:80/TCP ClusterIP default/web:http [10.42.0.2:8080 10.42.0.4:8080]",
			"192.168.1.10:30080/TCP NodePort default/web:http [10.42.0.2:8080 10.42.0.4:8080] ext[10.42.0.5:8080L] local",
		},
	}, {
		name:     "internalTrafficPolicy Local is not narrowed by zone",
		services: web(close, iTPLocal),
		slices:   hinted,
		want:     []string{"10.43.0.1:80/TCP ClusterIP default/web:http [10.42.0.5:8080L]"},
	}} {
		t.Run(tc.name, func(t *testing.T) { runBuild(t, tc) })
	}
}

func TestBuildDualStack(t *testing.T) {
	http := sports(sport("http", 8080))
	both := v4("web", "web-v4", http, ep("10.42.0.2", on(node)), ep("10.42.0.3"))
	both6 := v6("web", "web-v6", http, ep("fd42::2", on(node)), ep("fd42::3"))
	for _, tc := range []buildCase{{
		name: "dual-stack: each family its own frontends and endpoints",
		services: []*corev1.Service{svc("web", ips("10.43.0.1", "fd43::1"), ports(nodePort(tcp("http", 80), 30080)),
			typ(corev1.ServiceTypeNodePort), externalIPs("203.0.113.7", "2001:db8::7"))},
		slices: []*discoveryv1.EndpointSlice{both, both6},
		want: []string{
			"10.43.0.1:80/TCP ClusterIP default/web:http [10.42.0.2:8080L 10.42.0.3:8080]",
			"192.168.1.10:30080/TCP NodePort default/web:http [10.42.0.2:8080L 10.42.0.3:8080] ext[10.42.0.2:8080L 10.42.0.3:8080]",
			"203.0.113.7:80/TCP ExternalIP default/web:http [10.42.0.2:8080L 10.42.0.3:8080] ext[10.42.0.2:8080L 10.42.0.3:8080]",
			"[2001:db8::7]:80/TCP ExternalIP default/web:http [[fd42::2]:8080L [fd42::3]:8080] ext[[fd42::2]:8080L [fd42::3]:8080]",
			"[fd00::10]:30080/TCP NodePort default/web:http [[fd42::2]:8080L [fd42::3]:8080] ext[[fd42::2]:8080L [fd42::3]:8080]",
			"[fd43::1]:80/TCP ClusterIP default/web:http [[fd42::2]:8080L [fd42::3]:8080]",
		},
	}, {
		name: "IPv6 single-stack",
		services: []*corev1.Service{svc("web", ips("fd43::1"), ports(nodePort(tcp("http", 80), 30080)),
			typ(corev1.ServiceTypeNodePort))},
		slices: []*discoveryv1.EndpointSlice{both, both6},
		want: []string{
			"[fd00::10]:30080/TCP NodePort default/web:http [[fd42::2]:8080L [fd42::3]:8080] ext[[fd42::2]:8080L [fd42::3]:8080]",
			"[fd43::1]:80/TCP ClusterIP default/web:http [[fd42::2]:8080L [fd42::3]:8080]",
		},
	}, {
		name: "IPv4 single-stack with an IPv6 externalIP: left out",
		services: []*corev1.Service{svc("web", ips("10.43.0.1"), ports(tcp("http", 80)),
			externalIPs("2001:db8::7"))},
		slices:   []*discoveryv1.EndpointSlice{both, both6},
		want:     []string{"10.43.0.1:80/TCP ClusterIP default/web:http [10.42.0.2:8080L 10.42.0.3:8080]"},
		problems: []string{"default/web: externalIP 2001:db8::7 left out: the Service has no IPv6 clusterIP"},
	}, {
		name: "only spec.clusterIP set, as objects older than dual-stack",
		services: []*corev1.Service{func() *corev1.Service {
			s := svc("web", nil, ports(tcp("http", 80)))
			s.Spec.ClusterIP = "10.43.0.1"
			return s
		}()},
		slices: []*discoveryv1.EndpointSlice{both},
		want:   []string{"10.43.0.1:80/TCP ClusterIP default/web:http [10.42.0.2:8080L 10.42.0.3:8080]"},
	}, {
		name: "only spec.clusterIPs set",
		services: []*corev1.Service{func() *corev1.Service {
			s := svc("web", ips("fd43::1", "10.43.0.1"), ports(tcp("http", 80)))
			s.Spec.ClusterIP = ""
			return s
		}()},
		slices: []*discoveryv1.EndpointSlice{both},
		want: []string{
			"10.43.0.1:80/TCP ClusterIP default/web:http [10.42.0.2:8080L 10.42.0.3:8080]",
			"[fd43::1]:80/TCP ClusterIP default/web:http []",
		},
	}, {
		name:     "an endpoint of the other family in a slice: left out",
		services: []*corev1.Service{svc("web", ips("10.43.0.1"), ports(tcp("http", 80)))},
		slices:   []*discoveryv1.EndpointSlice{v4("web", "web-v4", http, ep("10.42.0.2"), ep("fd42::2"))},
		want:     []string{"10.43.0.1:80/TCP ClusterIP default/web:http [10.42.0.2:8080]"},
		problems: []string{"default/web: EndpointSlice web-v4: endpoint address fd42::2 is not IPv4 as the slice is"},
	}} {
		t.Run(tc.name, func(t *testing.T) { runBuild(t, tc) })
	}
}

func TestBuildSkipped(t *testing.T) {
	headless := svc("headless", ips("None"), ports(tcp("http", 80)))
	noIP := svc("noip", nil, ports(tcp("http", 80)))
	extName := svc("ext", ips("10.43.0.9"), ports(tcp("http", 80)), typ(corev1.ServiceTypeExternalName))
	runBuild(t, buildCase{
		services: []*corev1.Service{headless, noIP, extName},
		slices:   []*discoveryv1.EndpointSlice{v4("headless", "h-1", sports(sport("http", 80)), ep("10.42.0.2"))},
	})
}

func TestBuildConflicts(t *testing.T) {
	for _, tc := range []buildCase{{
		name: "two Services on one nodePort: the older keeps it",
		services: []*corev1.Service{
			svc("a", ips("10.43.0.1"), ports(nodePort(tcp("http", 80), 30080)), typ(corev1.ServiceTypeNodePort), created(2)),
			svc("b", ips("10.43.0.2"), ports(nodePort(tcp("http", 80), 30080)), typ(corev1.ServiceTypeNodePort), created(1)),
			// the same nodePort in UDP is another one
			svc("c", ips("10.43.0.3"), ports(nodePort(udp("dns", 53), 30080)), typ(corev1.ServiceTypeNodePort), created(3)),
		},
		want: []string{
			"10.43.0.1:80/TCP ClusterIP default/a:http []",
			"10.43.0.2:80/TCP ClusterIP default/b:http []",
			"10.43.0.3:53/UDP ClusterIP default/c:dns []",
			"192.168.1.10:30080/TCP NodePort default/b:http [] ext[]",
			"192.168.1.10:30080/UDP NodePort default/c:dns [] ext[]",
		},
		problems: []string{"default/a: nodePort 30080/TCP is already used by the older Service default/b"},
	}, {
		name: "a nodePort conflict is one even where the node has no address for it",
		services: []*corev1.Service{
			svc("a", ips("10.43.0.1"), ports(nodePort(tcp("http", 80), 30080)), typ(corev1.ServiceTypeNodePort)),
			svc("b", ips("fd43::2"), ports(nodePort(tcp("http", 80), 30080)), typ(corev1.ServiceTypeNodePort)),
		},
		addrs: []netip.Addr{},
		want: []string{
			"10.43.0.1:80/TCP ClusterIP default/a:http []",
			"[fd43::2]:80/TCP ClusterIP default/b:http []",
		},
		problems: []string{"default/b: nodePort 30080/TCP is already used by the older Service default/a"},
	}, {
		name: "same age: namespace and name decide",
		services: []*corev1.Service{
			svc("b", ips("10.43.0.1"), ports(tcp("http", 80))),
			svc("a", ips("10.43.0.1"), ports(tcp("http", 80), tcp("other", 81)), ns("zz")),
		},
		want: []string{
			"10.43.0.1:80/TCP ClusterIP default/b:http []",
			"10.43.0.1:81/TCP ClusterIP zz/a:other []",
		},
		problems: []string{"zz/a: ClusterIP 10.43.0.1:80/TCP is already used by the older Service default/b"},
	}, {
		name: "an externalIP on another Service's clusterIP and port",
		services: []*corev1.Service{
			svc("a", ips("10.43.0.1"), ports(tcp("http", 80)), created(2)),
			svc("b", ips("10.43.0.2"), ports(tcp("http", 80)), externalIPs("10.43.0.1"), created(1)),
		},
		want: []string{
			"10.43.0.1:80/TCP ExternalIP default/b:http [] ext[]",
			"10.43.0.2:80/TCP ClusterIP default/b:http []",
		},
		problems: []string{"default/a: ClusterIP 10.43.0.1:80/TCP is already used by the older Service default/b"},
	}, {
		name: "an externalIP on its own clusterIP",
		services: []*corev1.Service{
			svc("a", ips("10.43.0.1"), ports(tcp("http", 80)), externalIPs("10.43.0.1")),
		},
		want:     []string{"10.43.0.1:80/TCP ClusterIP default/a:http []"},
		problems: []string{`default/a: ExternalIP 10.43.0.1:80/TCP is already its ClusterIP of port "http"`},
	}, {
		name: "two ports of one Service on one nodePort",
		services: []*corev1.Service{svc("a", ips("10.43.0.1"),
			ports(nodePort(tcp("http", 80), 30080), nodePort(tcp("alt", 8080), 30080)), typ(corev1.ServiceTypeNodePort))},
		want: []string{
			"10.43.0.1:80/TCP ClusterIP default/a:http []",
			"10.43.0.1:8080/TCP ClusterIP default/a:alt []",
			"192.168.1.10:30080/TCP NodePort default/a:http [] ext[]",
		},
		problems: []string{`default/a: port "alt": nodePort 30080/TCP is already another port's`},
	}, {
		name: "a Service listed twice: both left out",
		services: []*corev1.Service{
			svc("a", ips("10.43.0.1"), ports(tcp("http", 80))),
			svc("a", ips("10.43.0.2"), ports(tcp("http", 80))),
			svc("b", ips("10.43.0.3"), ports(tcp("http", 80))),
		},
		want:     []string{"10.43.0.3:80/TCP ClusterIP default/b:http []"},
		problems: []string{"default/a: listed 2 times"},
	}} {
		t.Run(tc.name, func(t *testing.T) { runBuild(t, tc) })
	}
}

func TestBuildBadInput(t *testing.T) {
	http := sports(sport("http", 8080))
	web := svc("web", ips("10.43.0.1"), ports(tcp("http", 80)))
	for _, tc := range []buildCase{{
		name: "bad Services",
		services: []*corev1.Service{
			nil,
			svc("badip", ips("10.43.0.300"), ports(tcp("http", 80))),
			svc("zero", ips("0.0.0.0"), ports(tcp("http", 80))),
			svc("twov4", ips("10.43.0.2", "10.43.0.3"), ports(tcp("http", 80))),
			svc("ports", ips("10.43.0.4"), ports(tcp("zero", 0), tcp("big", 70000), tcp("neg", -1),
				corev1.ServicePort{Name: "icmp", Port: 1, Protocol: "ICMP"}, tcp("ok", 80), udp("ok-udp", 80), tcp("again", 80))),
			svc("badext", ips("10.43.0.5"), ports(tcp("http", 80)), externalIPs("nope", "224.0.0.1", "127.0.0.1", "203.0.113.1"),
				ingress(corev1.LoadBalancerIngress{IP: "::ffff:198.51.100.1"})),
			svc("badnp", ips("10.43.0.6"), ports(nodePort(tcp("http", 80), 70000)), typ(corev1.ServiceTypeNodePort)),
			svc("npclusterip", ips("10.43.0.7"), ports(nodePort(tcp("http", 80), 30080))),
			svc("weird", ips("10.43.0.8"), ports(tcp("http", 80)), typ("Weird")),
			svc("legacy", ips("010.043.000.009"), ports(tcp("http", 80))),
		},
		want: []string{
			"10.43.0.2:80/TCP ClusterIP default/twov4:http []",
			"10.43.0.4:80/TCP ClusterIP default/ports:ok []",
			"10.43.0.4:80/UDP ClusterIP default/ports:ok-udp []",
			"10.43.0.5:80/TCP ClusterIP default/badext:http []",
			"10.43.0.6:80/TCP ClusterIP default/badnp:http []",
			"10.43.0.7:80/TCP ClusterIP default/npclusterip:http []",
			"10.43.0.8:80/TCP ClusterIP default/weird:http []",
			"10.43.0.9:80/TCP ClusterIP default/legacy:http []",
			"198.51.100.1:80/TCP ExternalIP default/badext:http [] ext[]",
			"203.0.113.1:80/TCP ExternalIP default/badext:http [] ext[]",
		},
		problems: []string{
			`default/badext: externalIP "nope" is not an IP address`,
			`default/badext: externalIP 127.0.0.1 is not a unicast address`,
			`default/badext: externalIP 224.0.0.1 is not a unicast address`,
			`default/badip: clusterIP "10.43.0.300" is not an IP address`,
			`default/badnp: port "http": nodePort 70000 is outside 1..65535`,
			`default/npclusterip: port "http": nodePort 30080 on a Service of type "ClusterIP"; ignored`,
			`default/ports: port "again": 80/TCP is listed twice`,
			`default/ports: port "big": port 70000 is outside 1..65535`,
			`default/ports: port "icmp": unknown protocol "ICMP"`,
			`default/ports: port "neg": port -1 is outside 1..65535`,
			`default/ports: port "zero": port 0 is outside 1..65535`,
			`default/twov4: clusterIP 10.43.0.3 is a second IPv4 clusterIP`,
			`default/weird: unknown type "Weird", taken as ClusterIP`,
			`default/zero: clusterIP 0.0.0.0 is not a unicast address`,
		},
	}, {
		name:     "bad slices",
		services: []*corev1.Service{web},
		slices: []*discoveryv1.EndpointSlice{
			nil,
			v4("", "nolabel", http, ep("10.42.0.9")),
			v4("web", "web-1", http,
				discoveryv1.Endpoint{}, ep("10.42.0.256"), ep("127.0.0.1"), ep("169.254.0.1"), ep("fe80::1%eth0"),
				ep("10.42.0.2", func(e *discoveryv1.Endpoint) { e.NodeName = nil }),
				ep("10.42.0.3", func(e *discoveryv1.Endpoint) { e.Hints = &discoveryv1.EndpointHints{} })),
			v4("web", "web-2", []discoveryv1.EndpointPort{
				{Name: ptr("http")}, {Name: ptr("http"), Port: ptr(int32(0))}, {Name: ptr("http"), Port: ptr(int32(-5))},
				{Name: ptr("http"), Port: ptr(int32(70000))}, {Name: ptr("http"), Port: ptr(int32(1)), Protocol: ptr(corev1.Protocol("X"))},
			}, ep("10.42.0.4")),
			v4("web", "web-3", nil, ep("10.42.0.5")),
		},
		want: []string{"10.43.0.1:80/TCP ClusterIP default/web:http [10.42.0.2:8080 10.42.0.3:8080]"},
		problems: []string{
			`default/web: EndpointSlice web-1: an endpoint has no address`,
			`default/web: EndpointSlice web-1: endpoint address "10.42.0.256" is not an IP address`,
			`default/web: EndpointSlice web-1: endpoint address "fe80::1%eth0" is not an IP address`,
			`default/web: EndpointSlice web-1: endpoint address 127.0.0.1 is not a unicast address`,
			`default/web: EndpointSlice web-1: endpoint address 169.254.0.1 is not a unicast address`,
			`default/web: EndpointSlice web-2: port -5 is outside 1..65535`,
			`default/web: EndpointSlice web-2: port 70000 is outside 1..65535`,
		},
	}} {
		t.Run(tc.name, func(t *testing.T) { runBuild(t, tc) })
	}
}

func TestBuildLimits(t *testing.T) {
	many := func(n int) []discoveryv1.Endpoint {
		var eps []discoveryv1.Endpoint
		for i := range n {
			eps = append(eps, ep(netip.AddrFrom4([4]byte{10, 42, byte(i / 250), byte(1 + i%250)}).String(), on(node)))
		}
		return eps
	}
	http := sports(sport("http", 80))
	np := func(name, ip string, n int32, opts ...svcOpt) *corev1.Service {
		return svc(name, ips(ip), ports(nodePort(tcp("http", 80), n)), append([]svcOpt{typ(corev1.ServiceTypeNodePort)}, opts...)...)
	}
	for _, tc := range []buildCase{{
		name:     "a frontend keeps its first backends",
		services: []*corev1.Service{svc("a", ips("10.43.0.1"), ports(tcp("http", 80)))},
		slices:   []*discoveryv1.EndpointSlice{v4("a", "a-1", http, many(4)...)},
		lim:      &limits{frontends: 10, backends: 2, backendsTotal: 100},
		want:     []string{"10.43.0.1:80/TCP ClusterIP default/a:http [10.42.0.1:80L 10.42.0.2:80L]"},
		problems: []string{`default/a: port "http": 4 IPv4 endpoints, more than 2; the first 2 are used`},
	}, {
		name:     "local backends too",
		services: []*corev1.Service{np("a", "10.43.0.1", 30080, eTPLocal)},
		slices:   []*discoveryv1.EndpointSlice{v4("a", "a-1", http, many(3)...)},
		lim:      &limits{frontends: 10, backends: 2, backendsTotal: 100},
		want: []string{
			"10.43.0.1:80/TCP ClusterIP default/a:http [10.42.0.1:80L 10.42.0.2:80L]",
			"192.168.1.10:30080/TCP NodePort default/a:http [10.42.0.1:80L 10.42.0.2:80L] ext[10.42.0.1:80L 10.42.0.2:80L] local",
		},
		problems: []string{`default/a: port "http": 3 IPv4 endpoints`, `default/a: port "http": 3 IPv4 local endpoints`},
	}, {
		name: "too many frontends: the Services that do not fit left out, in name order",
		services: []*corev1.Service{
			np("a", "10.43.0.1", 30001), np("b", "10.43.0.2", 30002),
			svc("c", ips("10.43.0.3"), ports(tcp("http", 80))),
		},
		lim: &limits{frontends: 3, backends: 10, backendsTotal: 100},
		want: []string{
			"10.43.0.1:80/TCP ClusterIP default/a:http []",
			"10.43.0.3:80/TCP ClusterIP default/c:http []",
			"192.168.1.10:30001/TCP NodePort default/a:http [] ext[]",
		},
		problems: []string{"default/b: left out: its 2 frontends would take the node past 3"},
	}, {
		name: "too many backends in all",
		services: []*corev1.Service{
			svc("a", ips("10.43.0.1"), ports(tcp("http", 80))),
			np("b", "10.43.0.2", 30002),
			svc("c", ips("10.43.0.3"), ports(tcp("http", 80))),
		},
		slices: []*discoveryv1.EndpointSlice{
			v4("a", "a-1", http, many(3)...), v4("b", "b-1", http, many(3)...), v4("c", "c-1", http, many(3)...),
		},
		lim: &limits{frontends: 100, backends: 10, backendsTotal: 8},
		want: []string{
			"10.43.0.1:80/TCP ClusterIP default/a:http [10.42.0.1:80L 10.42.0.2:80L 10.42.0.3:80L]",
			"10.43.0.3:80/TCP ClusterIP default/c:http [10.42.0.1:80L 10.42.0.2:80L 10.42.0.3:80L]",
		},
		problems: []string{"default/b: left out: its 9 backends would take the node past 8"},
	}, {
		name:     "MaxBackends",
		services: []*corev1.Service{svc("a", ips("10.43.0.1"), ports(tcp("http", 80)))},
		slices:   []*discoveryv1.EndpointSlice{v4("a", "a-1", http, many(MaxBackends+1)...)},
		want: []string{func() string {
			var b []string
			for _, e := range many(MaxBackends) {
				b = append(b, e.Addresses[0]+":80L")
			}
			slices.SortFunc(b, func(x, y string) int {
				return netip.MustParseAddrPort(x[:len(x)-1]).Compare(netip.MustParseAddrPort(y[:len(y)-1]))
			})
			return "10.43.0.1:80/TCP ClusterIP default/a:http [" + strings.Join(b, " ") + "]"
		}()},
		problems: []string{`default/a: port "http": 1025 IPv4 endpoints, more than 1024; the first 1024 are used`},
	}} {
		t.Run(tc.name, func(t *testing.T) { runBuild(t, tc) })
	}
}

// TestBuildMaxFrontends runs the real limit: a Service of more frontends
// than a node routes is left out, and the next one kept.
func TestBuildMaxFrontends(t *testing.T) {
	var ext []string
	for i := range MaxFrontends {
		ext = append(ext, netip.AddrFrom4([4]byte{100, 64 + byte(i>>16), byte(i >> 8), byte(i)}).String())
	}
	big := svc("a", ips("10.43.0.1"), ports(tcp("http", 80)), externalIPs(ext...))
	small := svc("b", ips("10.43.0.2"), ports(tcp("http", 80)))
	tab, probs := Build(Input{Services: FromServices([]*corev1.Service{big, small})})
	if len(tab) != 1 || tab[Key{netip.MustParseAddr("10.43.0.2"), 80, TCP}] == nil {
		t.Errorf("Build: %d frontends, want only b's", len(tab))
	}
	want := []Problem{{"default/a", "left out: it alone has more than 65536 frontends"}}
	if !slices.Equal(probs, want) {
		t.Errorf("Build problems %v, want %v", probs, want)
	}
}

func TestParseIP(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want string // "" for not an address
	}{
		{"10.0.0.1", "10.0.0.1"},
		{"010.000.000.001", "10.0.0.1"},
		{"10.0.0.09", "10.0.0.9"},
		{"::ffff:10.0.0.1", "10.0.0.1"},
		{"fd00::1", "fd00::1"},
		{"fe80::1%eth0", ""},
		{"10.0.0.256", ""},
		{"10.0.0", ""},
		{"10.0.0.1.2", ""},
		{"10.0.0.0001", ""},
		{"10..0.1", ""},
		{"a.b.c.d", ""},
		{"", ""},
	} {
		a, ok := parseIP(tc.in)
		got := ""
		if ok {
			got = a.String()
		}
		if got != tc.want {
			t.Errorf("parseIP(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// TestBuildManyPorts checks each of many ports finds its own slice port,
// and that so many are not quadratic (the test would time out).
func TestBuildManyPorts(t *testing.T) {
	const n = 5000
	var sps []corev1.ServicePort
	var eps1, eps2 []discoveryv1.EndpointPort
	for i := range n {
		name := fmt.Sprintf("p%d", i)
		sps = append(sps, tcp(name, int32(1+i)))
		if i%2 == 0 {
			eps1 = append(eps1, sport(name, int32(10000+i)))
		} else {
			eps2 = append(eps2, sport(name, int32(10000+i)))
		}
	}
	s := svc("many", ips("10.43.0.1"), append(sps, tcp("dup", 1)))
	tab, probs := Build(Input{
		Services: []*Service{FromService(s)},
		Slices: FromSlices([]*discoveryv1.EndpointSlice{
			v4("many", "many-1", eps1, ep("10.42.0.1")),
			v4("many", "many-2", eps2, ep("10.42.0.2")),
		}),
	})
	want := []Problem{{"default/many", `port "dup": 1/TCP is listed twice; left out`}}
	if len(tab) != n || !slices.Equal(probs, want) {
		t.Fatalf("Build: %d frontends, problems %v; want %d and %v", len(tab), probs, n, want)
	}
	for i := range n {
		f := tab[Key{netip.MustParseAddr("10.43.0.1"), uint16(1 + i), TCP}]
		want := netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 42, 0, byte(1 + i%2)}), uint16(10000+i))
		if f == nil || len(f.Backends) != 1 || f.Backends[0].Addr != want {
			t.Fatalf("port %d: %+v, want one backend %s", 1+i, f, want)
		}
	}
}
