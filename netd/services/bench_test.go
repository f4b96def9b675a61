package services

import (
	"fmt"
	"net/netip"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
)

// benchInput is n ClusterIP Services of one port with 4 ready endpoints
// each, in one EndpointSlice each, one endpoint of the four on the node.
func benchInput(n int) Input {
	svcs, eps := benchObjects(n)
	return Input{Node: node, Zone: zone, NodeAddrs: nodeAddrs, Services: FromServices(svcs), Slices: FromSlices(eps)}
}

// benchObjects are the API objects of benchInput: each endpoint refers
// to its Pod, as the EndpointSlice controller writes them.
func benchObjects(n int) (svcs []*corev1.Service, eps []*discoveryv1.EndpointSlice) {
	for i := range n {
		name := fmt.Sprintf("svc-%d", i)
		ip := netip.AddrFrom4([4]byte{10, 43, byte(i >> 8), byte(i)}).String()
		svcs = append(svcs, svc(name, ips(ip), ports(tcp("http", 80))))
		var es []discoveryv1.Endpoint
		for j := range 4 {
			a := netip.AddrFrom4([4]byte{10, 42, byte(i >> 6), byte(i<<2 | j)}).String()
			uid := pod(fmt.Sprintf("%08x-6c1b-4b2e-9d3a-%012x", i, j))
			if j == 0 {
				es = append(es, ep(a, on(node), uid))
			} else {
				es = append(es, ep(a, uid))
			}
		}
		eps = append(eps, v4(name, name+"-abcde", sports(sport("http", 8080)), es...))
	}
	return svcs, eps
}

func BenchmarkBuild(b *testing.B) {
	in := benchInput(10000)
	if tab, probs := Build(in); len(tab) != 10000 || len(probs) != 0 {
		b.Fatalf("Build: %d frontends, %d problems (%v)", len(tab), len(probs), probs)
	}
	b.ReportAllocs()
	for b.Loop() {
		Build(in)
	}
}

// BenchmarkFromSlices decodes the benchmark's 10,000 EndpointSlices of
// 40,000 endpoints: its bytes per op are about what the node keeps of
// them.
func BenchmarkFromSlices(b *testing.B) {
	_, eps := benchObjects(10000)
	b.ReportAllocs()
	for b.Loop() {
		FromSlices(eps)
	}
}

// TestBuildLarge checks the benchmark's input builds as it should.
func TestBuildLarge(t *testing.T) {
	in := benchInput(10000)
	tab, probs := Build(in)
	if len(probs) != 0 {
		t.Fatalf("Build problems: %v", probs[:min(len(probs), 5)])
	}
	if err := checkTable(tab, limits{MaxFrontends, MaxBackends, MaxBackendsTotal}); err != nil {
		t.Fatal(err)
	}
	for k, f := range tab {
		if len(f.Backends) != 4 || !f.Backends[0].Local {
			t.Fatalf("%s: backends %v, want 4, the first local", k, f.Backends)
		}
	}
}
