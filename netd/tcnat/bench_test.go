package tcnat

import (
	"context"
	"fmt"
	"net/netip"
	"path/filepath"
	"testing"

	"github.com/vishvananda/netlink"

	"github.com/outpost-mesh/outpost/internal/netnstest"
	"github.com/outpost-mesh/outpost/netd/internal/bpftest"
	"github.com/outpost-mesh/outpost/netd/services"
)

// bigTable returns n NodePort frontends with 4 external backends each.
func bigTable(n int) services.Table {
	t := make(services.Table, n)
	for i := range n {
		k := services.Key{Addr: netip.AddrFrom4([4]byte{172, 16 + byte(i>>16), byte(i >> 8), byte(i)}), Port: 30080, Proto: services.TCP}
		f := &services.Frontend{Key: k, Kind: services.NodePort, Service: fmt.Sprintf("default/s%d", i)}
		for j := range 4 {
			a := netip.AddrFrom4([4]byte{10, 42, byte(i >> 6), byte(i<<2 | j)})
			f.ExternalBackends = append(f.ExternalBackends, services.Backend{Addr: netip.AddrPortFrom(a, 8080)})
		}
		t[k] = f
	}
	return t
}

// BenchmarkSync programs n NodePort Services with 4 backends each into
// empty maps with one Sync (emptying them again is not timed). The
// programs are attached to a veth, down, in a namespace of the
// benchmark's own, which no packet crosses.
func BenchmarkSync(b *testing.B) {
	needKernel(b)
	node := netnstest.NewNS(b, "node")
	netnstest.WithNL(b, node, func(h *netlink.Handle) {
		if err := h.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "lan0"}, PeerName: "lan1"}); err != nil {
			b.Fatal(err)
		}
	})
	for _, n := range []int{1000, 10000} {
		b.Run(fmt.Sprintf("services=%d", n), func(b *testing.B) {
			cfg := DefaultConfig()
			cfg.PinDir = filepath.Join(bpftest.Mount(b), "node")
			cfg.HostNetNS, cfg.Interfaces = node, []string{"lan0"}
			d, err := New(cfg)
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { d.Remove(context.Background()) })
			full, ctx := bigTable(n), context.Background()
			b.ResetTimer()
			for range b.N {
				if err := d.Sync(ctx, full); err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				if d.lastOps != 5*n {
					b.Fatalf("Sync made %d map changes, want %d", d.lastOps, 5*n)
				}
				if err := d.Sync(ctx, nil); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
		})
	}
}
