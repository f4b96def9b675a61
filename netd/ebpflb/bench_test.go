package ebpflb

import (
	"context"
	"fmt"
	"maps"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/outpost-mesh/outpost/netd/internal/bpftest"
	"github.com/outpost-mesh/outpost/netd/internal/lbplan"
	"github.com/outpost-mesh/outpost/netd/services"
)

// BenchmarkSync programs n Services with 4 backends each into empty maps
// with one Sync (emptying them again is not timed). The programs are
// attached to an empty cgroup of the benchmark's own, so no socket of
// the machine passes through them.
func BenchmarkSync(b *testing.B) {
	root := needKernel(b)
	cg := filepath.Join(root, fmt.Sprintf("outpost-ebpflb-bench-%d", os.Getpid()))
	if err := os.Mkdir(cg, 0o755); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		if err := os.Remove(cg); err != nil {
			b.Errorf("remove cgroup: %v", err)
		}
	})
	for _, n := range []int{1000, 10000} {
		b.Run(fmt.Sprintf("services=%d", n), func(b *testing.B) {
			cfg := DefaultConfig()
			cfg.Cgroup = cg
			cfg.PinDir = bpffs(b)
			d, err := New(cfg)
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { d.Remove(context.Background()) })
			bpftest.BenchSync(b, d, bpftest.BigTable(n, services.ClusterIP),
				func() int { return d.lastOps }, n*(1+max(4-inlineSlots, 0)))
		})
	}
}

// BenchmarkPlan is the Go side of BenchmarkSync's first Sync of 10,000
// Services: checking the table and planning the map writes.
func BenchmarkPlan(b *testing.B) {
	full := bpftest.BigTable(10000, services.ClusterIP)
	b.ReportAllocs()
	for range b.N {
		if err := validate(full); err != nil {
			b.Fatal(err)
		}
		if p := makePlan(nil, full, &lbplan.IDs{}); len(p.Fronts.Keys) != len(full) {
			b.Fatalf("%d services entries", len(p.Fronts.Keys))
		}
	}
}

// BenchmarkPlanOne is the Go side of a Sync of 10,000 Services that
// changes one Service's backends, after the first.
func BenchmarkPlanOne(b *testing.B) {
	full := bpftest.BigTable(10000, services.ClusterIP)
	state := makePlan(nil, full, &lbplan.IDs{}).Next
	changed := maps.Clone(full)
	for k, f := range changed {
		g := *f
		g.Backends = slices.Clone(f.Backends)
		g.Backends[0].Addr = netip.MustParseAddrPort("10.43.0.1:8080")
		changed[k] = &g
		break
	}
	b.ReportAllocs()
	for range b.N {
		if err := validate(changed); err != nil {
			b.Fatal(err)
		}
		if p := makePlan(state, changed, &lbplan.IDs{Last: 20000}); p.Ops() != 1 {
			b.Fatalf("%d operations", p.Ops())
		}
	}
}
