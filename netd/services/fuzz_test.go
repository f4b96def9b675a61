package services

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/netip"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// fuzzInput is Build's Input as the fuzzer writes it.
type fuzzInput struct {
	Node, Zone string
	NodeAddrs  []string
	Dead       []string
	Services   []*corev1.Service
	Slices     []*discoveryv1.EndpointSlice
}

// maxFuzzInput bounds what FuzzBuild decodes.
const maxFuzzInput = 64 << 10

func FuzzBuild(f *testing.F) {
	http := sports(sport("http", 8080))
	seeds := []fuzzInput{{
		Node: node, Zone: zone, NodeAddrs: []string{"192.168.1.10", "fd00::10"},
		Services: []*corev1.Service{
			svc("web", ips("10.43.0.1", "fd43::1"), ports(nodePort(tcp("http", 80), 30080), udp("dns", 53)),
				typ(corev1.ServiceTypeLoadBalancer), eTPLocal, externalIPs("203.0.113.7", "2001:db8::7"),
				ingress(corev1.LoadBalancerIngress{IP: "198.51.100.1"}), affinity(ptr(int32(60))),
				trafficDistribution(corev1.ServiceTrafficDistributionPreferClose)),
			svc("other", ips("10.43.0.2"), ports(nodePort(tcp("http", 80), 30080)), typ(corev1.ServiceTypeNodePort), iTPLocal),
		},
		Slices: []*discoveryv1.EndpointSlice{
			v4("web", "web-1", sports(sport("http", 8080), sportUDP("dns", 53)),
				ep("10.42.0.2", on(node), zones("z1")), ep("10.42.0.3", term, zones("z2")), ep("10.42.0.4", down)),
			v6("web", "web-2", http, ep("fd42::2", on(node)), ep("fd42::3", ready(false))),
			v4("other", "other-1", http, ep("10.42.0.2"), ep("10.42.0.5", on(node))),
		},
		Dead: []string{"10.42.0.4"},
	}, {
		Services: []*corev1.Service{
			svc("a", ips("10.43.0.1"), ports(tcp("http", 80)), externalIPs("10.43.0.1", "bad")),
			svc("a", ips("None"), ports(tcp("http", 80))),
			nil,
		},
		Slices: []*discoveryv1.EndpointSlice{nil, v4("a", "a-1", []discoveryv1.EndpointPort{{}}, discoveryv1.Endpoint{})},
	}}
	for _, s := range seeds {
		data, err := json.Marshal(s)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add([]byte{})
	f.Add([]byte("\x01\x03\x02\x05\x07\x01\x02\x03\x04\x05\x06\x07\x08\x09\x0a\x0b\x0c\x03\x02\x01\x00\x04\x04\x02\x01\x03"))
	f.Add([]byte(`{"Services":[{"spec":{"clusterIP":"::ffff:10.0.0.1","ports":[{"port":1,"nodePort":1}],"type":"NodePort"}}],"NodeAddrs":["::ffff:10.0.0.2"]}`))

	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > maxFuzzInput {
			return
		}
		var fi fuzzInput
		if len(data) > 0 && data[0] == '{' {
			if err := json.Unmarshal(data, &fi); err != nil {
				return
			}
		} else {
			fi = generate(data)
		}
		in := Input{Node: fi.Node, Zone: fi.Zone, Services: FromServices(fi.Services), Slices: FromSlices(fi.Slices)}
		for _, s := range fi.NodeAddrs {
			if a, err := netip.ParseAddr(s); err == nil {
				in.NodeAddrs = append(in.NodeAddrs, a)
			}
		}
		dead := map[netip.Addr]bool{}
		for _, s := range fi.Dead {
			if a, ok := parseIP(s); ok {
				dead[a] = true
			}
		}
		in.Dead = func(a netip.Addr) bool {
			if a.Is4In6() {
				t.Errorf("Dead(%s): a 4-in-6 address", a)
			}
			return dead[a]
		}

		for _, lim := range []limits{{MaxFrontends, MaxBackends, MaxBackendsTotal}, {4, 2, 6}} {
			tab, probs := build(in, lim)
			if err := checkTable(tab, lim); err != nil {
				t.Fatalf("build(%+v): %v", lim, err)
			}
			for k, f := range tab {
				for _, b := range slices.Concat(f.Backends, f.ExternalBackends) {
					if dead[b.Addr.Addr()] {
						t.Fatalf("%s: dead backend %s", k, b.Addr)
					}
				}
			}
			for i, p := range probs {
				if p.Reason == "" {
					t.Fatalf("problem %v without a reason", p)
				}
				if i > 0 && probs[i-1] == p {
					t.Fatalf("problem %v said twice", p)
				}
			}

			in2 := in
			in2.Services = slices.Clone(in.Services)
			slices.Reverse(in2.Services)
			in2.Slices = slices.Clone(in.Slices)
			slices.Reverse(in2.Slices)
			tab2, probs2 := build(in2, lim)
			if a, b := fmt.Sprint(render(tab)), fmt.Sprint(render(tab2)); a != b {
				t.Fatalf("build depends on the input's order:\n%s\n%s", a, b)
			}
			if !slices.Equal(probs, probs2) {
				t.Fatalf("build's problems depend on the input's order:\n%v\n%v", probs, probs2)
			}
			if changed, removed := Diff(tab, tab2); len(changed) != 0 || len(removed) != 0 {
				t.Fatalf("Diff of equal builds: %d changed, %d removed", len(changed), len(removed))
			}
		}
	})
}

// generate makes an input from data read as choices among small sets of
// values, good and bad, so that the fuzzer reaches conflicts, limits and
// every rule far sooner than through JSON.
func generate(data []byte) fuzzInput {
	next := func() int {
		if len(data) == 0 {
			return 0
		}
		b := data[0]
		data = data[1:]
		return int(b)
	}
	pick := func(vals ...string) string { return vals[next()%len(vals)] }
	addrs := []string{"10.0.0.1", "10.0.0.2", "10.0.0.3", "fd00::1", "fd00::2", "::ffff:10.0.0.1", "010.000.000.002",
		"192.168.1.10", "fd00::10", "None", "", "bad", "0.0.0.0", "127.0.0.1", "224.0.0.1", "fe80::1%eth0", "169.254.1.1"}
	addr := func() string { return pick(addrs...) }
	optBool := func() *bool {
		switch next() % 3 {
		case 1:
			return ptr(true)
		case 2:
			return ptr(false)
		}
		return nil
	}
	names := []string{"a", "b", "c"}
	ports := []int32{80, 53, 8080, 0, -1, 70000}
	protos := []corev1.Protocol{corev1.ProtocolTCP, corev1.ProtocolUDP, corev1.ProtocolSCTP, "", "X"}

	fi := fuzzInput{Node: node, Zone: pick("", "z1", "z2")}
	for range next() % 4 {
		fi.NodeAddrs = append(fi.NodeAddrs, addr())
	}
	for range next() % 5 {
		fi.Dead = append(fi.Dead, addr())
	}
	for range next() % 6 {
		if next()%16 == 0 {
			fi.Services = append(fi.Services, nil)
			continue
		}
		s := &corev1.Service{}
		s.Namespace = pick("default", "x")
		s.Name = pick(names...)
		s.CreationTimestamp = metav1.NewTime(epoch.Add(time.Duration(next()%3) * time.Minute))
		s.Spec.Type = corev1.ServiceType(pick("ClusterIP", "NodePort", "LoadBalancer", "ExternalName", "", "Weird"))
		for range next() % 3 {
			s.Spec.ClusterIPs = append(s.Spec.ClusterIPs, addr())
		}
		if len(s.Spec.ClusterIPs) > 0 && next()%4 != 0 {
			s.Spec.ClusterIP = s.Spec.ClusterIPs[0]
		}
		for range next() % 3 {
			s.Spec.ExternalIPs = append(s.Spec.ExternalIPs, addr())
		}
		for range next() % 3 {
			ing := corev1.LoadBalancerIngress{IP: addr()}
			switch next() % 3 {
			case 1:
				ing.IPMode = ptr(corev1.LoadBalancerIPModeVIP)
			case 2:
				ing.IPMode = ptr(corev1.LoadBalancerIPModeProxy)
			}
			s.Status.LoadBalancer.Ingress = append(s.Status.LoadBalancer.Ingress, ing)
		}
		for range next() % 4 {
			s.Spec.Ports = append(s.Spec.Ports, corev1.ServicePort{
				Name:     pick("", "http", "dns"),
				Port:     ports[next()%len(ports)],
				Protocol: protos[next()%len(protos)],
				NodePort: []int32{0, 30080, 30081, 70000}[next()%4],
			})
		}
		flags := next()
		if flags&1 != 0 {
			s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
		}
		if flags&2 != 0 {
			iTPLocal(s)
		}
		switch flags >> 2 & 3 {
		case 1:
			trafficDistribution(corev1.ServiceTrafficDistributionPreferClose)(s)
		case 2:
			annotate(corev1.AnnotationTopologyMode, "Auto")(s)
		case 3:
			annotate(corev1.DeprecatedAnnotationTopologyAwareHints, "Disabled")(s)
		}
		switch flags >> 4 & 3 {
		case 1:
			affinity(nil)(s)
		case 2:
			affinity(ptr(int32(60)))(s)
		case 3:
			affinity(ptr(int32(-1)))(s)
		}
		fi.Services = append(fi.Services, s)
	}
	for range next() % 6 {
		if next()%16 == 0 {
			fi.Slices = append(fi.Slices, nil)
			continue
		}
		sl := &discoveryv1.EndpointSlice{}
		sl.Namespace = pick("default", "x")
		sl.Name = pick("s1", "s2", "s3")
		sl.Labels = map[string]string{discoveryv1.LabelServiceName: pick(names...)}
		sl.AddressType = discoveryv1.AddressType(pick("IPv4", "IPv6", "FQDN"))
		for range next() % 3 {
			var p discoveryv1.EndpointPort
			if n := next() % 4; n > 0 {
				p.Name = ptr([]string{"", "http", "dns"}[n-1])
			}
			if n := next() % (len(ports) + 1); n > 0 {
				p.Port = ptr(ports[n-1] + 1)
			}
			if n := next() % (len(protos) + 1); n > 0 {
				p.Protocol = &protos[n-1]
			}
			sl.Ports = append(sl.Ports, p)
		}
		for range next() % 5 {
			var e discoveryv1.Endpoint
			for range next() % 3 {
				e.Addresses = append(e.Addresses, addr())
			}
			if n := next() % 3; n > 0 {
				e.NodeName = ptr([]string{node, "other"}[n-1])
			}
			e.Conditions = discoveryv1.EndpointConditions{Ready: optBool(), Serving: optBool(), Terminating: optBool()}
			if n := next() % 4; n > 0 {
				e.Hints = &discoveryv1.EndpointHints{}
				for _, z := range [][]string{nil, {"z1"}, {"z1", "z2"}}[n-1] {
					e.Hints.ForZones = append(e.Hints.ForZones, discoveryv1.ForZone{Name: z})
				}
			}
			sl.Endpoints = append(sl.Endpoints, e)
		}
		fi.Slices = append(fi.Slices, sl)
	}
	return fi
}

// FuzzParseUID checks ParseUID against encoding/hex: a UID is
// accepted exactly when its dashes are in place, the rest is hex, and
// it is not the nil UUID, and its bytes are those of its digits.
func FuzzParseUID(f *testing.F) {
	for _, s := range []string{"0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0", "0F1E2D3C-4B5A-6978-8796-A5B4C3D2E1F0",
		"00000000-0000-0000-0000-000000000000", "0f1e2d3c4b5a69788796a5b4c3d2e1f0", "", "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1fg"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, ok := ParseUID(s)
		var want [16]byte
		wantOK := len(s) == 36 && s[8] == '-' && s[13] == '-' && s[18] == '-' && s[23] == '-'
		if wantOK {
			b, err := hex.DecodeString(s[:8] + s[9:13] + s[14:18] + s[19:23] + s[24:])
			wantOK = err == nil && len(b) == 16
			if wantOK {
				want = [16]byte(b)
				wantOK = want != [16]byte{}
			}
		}
		if !wantOK {
			want = [16]byte{}
		}
		if ok != wantOK || got != want {
			t.Errorf("ParseUID(%q) = %x, %v; want %x, %v", s, got, ok, want, wantOK)
		}
	})
}
