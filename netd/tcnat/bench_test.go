package tcnat

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/vishvananda/netlink"

	"github.com/outpost-mesh/outpost/internal/netnstest"
	"github.com/outpost-mesh/outpost/netd/internal/bpftest"
	"github.com/outpost-mesh/outpost/netd/services"
)

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
			bpftest.BenchSync(b, d, bpftest.BigTable(n, services.NodePort),
				func() int { return d.lastOps }, 5*n)
		})
	}
}
