package services

import (
	"fmt"
	"net/netip"
	"testing"

	discoveryv1 "k8s.io/api/discovery/v1"
)

// benchInput is n ClusterIP Services of one port with 4 ready endpoints
// each, in one EndpointSlice each, one endpoint of the four on the node.
func benchInput(n int) Input {
	in := Input{Node: node, Zone: zone, NodeAddrs: nodeAddrs}
	for i := range n {
		name := fmt.Sprintf("svc-%d", i)
		ip := netip.AddrFrom4([4]byte{10, 43, byte(i >> 8), byte(i)}).String()
		in.Services = append(in.Services, FromService(svc(name, ips(ip), ports(tcp("http", 80)))))
		var eps []discoveryv1.Endpoint
		for j := range 4 {
			a := netip.AddrFrom4([4]byte{10, 42, byte(i >> 6), byte(i<<2 | j)}).String()
			if j == 0 {
				eps = append(eps, ep(a, on(node)))
			} else {
				eps = append(eps, ep(a))
			}
		}
		in.Slices = append(in.Slices, FromSlice(v4(name, name+"-abcde", sports(sport("http", 8080)), eps...)))
	}
	return in
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
