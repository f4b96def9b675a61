package bpftest

import (
	"context"
	"fmt"
	"net/netip"
	"testing"

	"github.com/outpost-mesh/outpost/netd/services"
)

// BigTable returns n frontends of kind (n at most 2^20), TCP, with 4
// backends each: in Backends, and in ExternalBackends too unless kind is
// services.ClusterIP. A ClusterIP listens on port 80, others on 30080.
func BigTable(n int, kind services.Kind) services.Table {
	port := uint16(30080)
	if kind == services.ClusterIP {
		port = 80
	}
	t := make(services.Table, n)
	for i := range n {
		k := services.Key{Addr: netip.AddrFrom4([4]byte{172, 16 + byte(i>>16), byte(i >> 8), byte(i)}), Port: port, Proto: services.TCP}
		f := &services.Frontend{Key: k, Kind: kind, Service: fmt.Sprintf("default/s%d", i)}
		for j := range 4 {
			a := netip.AddrFrom4([4]byte{10, 42, byte(i >> 6), byte(i<<2 | j)})
			f.Backends = append(f.Backends, services.Backend{Addr: netip.AddrPortFrom(a, 8080)})
		}
		if kind != services.ClusterIP {
			f.ExternalBackends = f.Backends
		}
		t[k] = f
	}
	return t
}

// BenchSync times b.N Syncs of full into d's empty maps, emptying them
// again after each (not timed), and fails b unless each Sync made wantOps
// map changes, as lastOps reports them.
func BenchSync(b *testing.B, d services.Dataplane, full services.Table, lastOps func() int, wantOps int) {
	b.Helper()
	ctx := context.Background()
	b.ResetTimer()
	for range b.N {
		if err := d.Sync(ctx, full); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		if got := lastOps(); got != wantOps {
			b.Fatalf("Sync made %d map changes, want %d", got, wantOps)
		}
		if err := d.Sync(ctx, nil); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
}
