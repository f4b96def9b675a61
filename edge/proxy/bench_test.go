package proxy

import (
	"fmt"
	"net/netip"
	"testing"

	"github.com/outpost-mesh/outpost/netd/services"
)

// BenchmarkNarrow narrows 10,000 slices of 4 endpoints, one on the node
// and one on each of peers a, b and c, with b gone and one pod of c in
// ten not ready: every slice is copied, as at a rebuild while a peer of
// the site is down.
func BenchmarkNarrow(b *testing.B) {
	const n = 10000
	nodes := [4]string{"n1", "a", "b", "c"}
	local := map[netip.Addr]bool{}
	h := peerHealth{gen: 1, gone: map[string]bool{"b": true}, unready: map[[16]byte]string{}}
	in := make([]*services.Slice, n)
	for i := range in {
		s := &services.Slice{Namespace: "default", Name: fmt.Sprintf("svc-%d-abcde", i), Service: fmt.Sprintf("svc-%d", i), AddressType: "IPv4"}
		for j, node := range nodes {
			a := netip.AddrFrom4([4]byte{10, byte(40 + j), byte(i >> 8), byte(i)})
			uid, _ := services.ParseUID(fmt.Sprintf("%08x-0000-4000-8000-%012x", i, j))
			s.Endpoints = append(s.Endpoints, services.Endpoint{Addresses: []string{a.String()}, Ready: true, Serving: true, NodeName: node, PodUID: uid})
			if j == 0 {
				local[a] = true
			}
			if j == 3 && i%10 == 0 {
				h.unready[uid] = node
			}
		}
		in[i] = s
	}
	p := &Proxy{cfg: Config{NodeName: "n1"}}
	if out := p.narrow(in, local, h); out[0].Endpoints[2].Ready || out[0].Endpoints[3].Ready || !out[1].Endpoints[3].Ready || !out[0].Endpoints[0].Ready {
		b.Fatalf("narrowed wrong: %+v", out[0].Endpoints)
	}
	b.ReportAllocs()
	for b.Loop() {
		p.narrow(in, local, h)
	}
}
