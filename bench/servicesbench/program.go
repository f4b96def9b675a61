package servicesbench

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"path/filepath"
	"slices"
	"time"

	"github.com/outpost-mesh/outpost/netd/ebpflb"
	"github.com/outpost-mesh/outpost/netd/nftlb"
	"github.com/outpost-mesh/outpost/netd/services"
)

// Dataplane names, as the results and tables show them.
const (
	ModeEBPF     = "ebpf"
	ModeNftables = "nftables"
	ModeDirect   = "direct"
)

// ProgramResult is the time to program one number of Services, the
// median of Runs runs each.
type ProgramResult struct {
	Services int `json:"services"`
	// Build is services.Build of the generated Services and slices.
	Build time.Duration `json:"build_ns"`
	// EBPF and Nftables are each dataplane's.
	EBPF     SyncTimes `json:"ebpf"`
	Nftables SyncTimes `json:"nftables"`
}

// SyncTimes are one dataplane's times, medians over the runs.
type SyncTimes struct {
	// Open is New: for eBPF loading and attaching the programs and
	// making the maps; for nftables opening the namespace.
	Open time.Duration `json:"open_ns"`
	// First is the first Sync of the whole table into the fresh
	// dataplane; One the Sync after that which changes one Service's
	// backends.
	First time.Duration `json:"first_ns"`
	One   time.Duration `json:"one_ns"`
	// Runs are the first Syncs of every run, for the spread.
	Runs []time.Duration `json:"runs_ns"`
}

// programmer makes fresh dataplanes in fresh node namespaces.
type programmer struct {
	bpffs  string // a bpffs of the run's own
	cgroup string // an empty cgroup of the run's own
	seq    int
}

// newEBPF opens an eBPF dataplane scoped to ns, attached to cgroup and
// pinned under a directory of its own on the run's bpffs, and says how
// long New took. The caller removes it.
func (p *programmer) newEBPF(ns *netNS, cgroup string) (*ebpflb.Dataplane, time.Duration, error) {
	c, err := ns.cookie()
	if err != nil {
		return nil, 0, err
	}
	p.seq++
	cfg := ebpflb.DefaultConfig()
	cfg.PinDir = filepath.Join(p.bpffs, fmt.Sprintf("node%d", p.seq))
	cfg.Cgroup, cfg.NetnsCookie = cgroup, c
	start := time.Now()
	d, err := ebpflb.New(cfg)
	if err != nil {
		return nil, 0, fmt.Errorf("open the eBPF dataplane: %w", err)
	}
	return d, time.Since(start), nil
}

// newNft opens an nftables dataplane in ns, Mode All: the fallback.
func newNft(ns *netNS) (*nftlb.Dataplane, time.Duration, error) {
	cfg := nftlb.DefaultConfig()
	cfg.HostNetNS, cfg.Mode = ns.path(), nftlb.All
	cfg.Table = "outpost-bench"
	cfg.PodCIDRs = []netip.Prefix{netip.PrefixFrom(backendBase, 24)}
	cfg.ClusterCIDRs = []netip.Prefix{clusterCIDR}
	start := time.Now()
	d, err := nftlb.New(cfg)
	if err != nil {
		return nil, 0, fmt.Errorf("open the nftables dataplane: %w", err)
	}
	return d, time.Since(start), nil
}

// removable is a dataplane the benchmark takes away at the end of a run.
type removable interface {
	services.Dataplane
	Remove(ctx context.Context) error
}

// timeSyncs programs full then changed into d and times both Syncs.
func timeSyncs(ctx context.Context, d services.Dataplane, full, changed services.Table) (first, one time.Duration, err error) {
	start := time.Now()
	if err := d.Sync(ctx, full); err != nil {
		return 0, 0, fmt.Errorf("first sync: %w", err)
	}
	first = time.Since(start)
	start = time.Now()
	if err := d.Sync(ctx, changed); err != nil {
		return 0, 0, fmt.Errorf("sync of one changed Service: %w", err)
	}
	return first, time.Since(start), nil
}

// measureProgram times programming n Services into each dataplane, runs
// times, taking turns, each run in a fresh node namespace.
func (p *programmer) measureProgram(ctx context.Context, n, runs int, opTimeout time.Duration) (ProgramResult, error) {
	res := ProgramResult{Services: n}
	svcs, eps := Generate(n, 0)
	svcs1, eps1 := Generate(n, 1)
	var builds []time.Duration
	var full, changed services.Table
	for range runs {
		start := time.Now()
		t, err := buildTable(compact(svcs, eps))
		if err != nil {
			return res, err
		}
		builds = append(builds, time.Since(start))
		full = t
	}
	changed, err := buildTable(compact(svcs1, eps1))
	if err != nil {
		return res, err
	}
	if d, _ := services.Diff(full, changed); len(d) != 1 {
		return res, fmt.Errorf("the changed table differs in %d frontends, want 1", len(d))
	}
	res.Build = median(builds)

	var times [2]struct{ open, first, one []time.Duration }
	for r := range runs {
		modes := []string{ModeEBPF, ModeNftables}
		for _, i := range [][]int{{0, 1}, {1, 0}}[r%2] { // take turns at going first
			mode := modes[i]
			open, first, one, err := p.programOnce(ctx, mode, full, changed, opTimeout)
			if err != nil {
				return res, fmt.Errorf("%s, %d Services: %w", mode, n, err)
			}
			times[i].open = append(times[i].open, open)
			times[i].first = append(times[i].first, first)
			times[i].one = append(times[i].one, one)
		}
	}
	for i, st := range []*SyncTimes{&res.EBPF, &res.Nftables} {
		st.Runs = slices.Clone(times[i].first)
		st.Open, st.First, st.One = median(times[i].open), median(times[i].first), median(times[i].one)
	}
	return res, nil
}

// programOnce opens a fresh dataplane of mode in a fresh namespace,
// times its Syncs, and takes it all away.
func (p *programmer) programOnce(ctx context.Context, mode string, full, changed services.Table, opTimeout time.Duration) (open, first, one time.Duration, err error) {
	ns, err := newNetNS()
	if err != nil {
		return 0, 0, 0, err
	}
	defer ns.close()
	var d removable
	switch mode {
	case ModeEBPF:
		d, open, err = p.newEBPF(ns, p.cgroup)
	default:
		d, open, err = newNft(ns)
	}
	if err != nil {
		return 0, 0, 0, err
	}
	defer func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), opTimeout)
		defer cancel()
		if rerr := d.Remove(rctx); rerr != nil {
			err = errors.Join(err, fmt.Errorf("remove: %w", rerr))
		}
		d.Close()
	}()
	sctx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	first, one, err = timeSyncs(sctx, d, full, changed)
	return open, first, one, err
}

// median returns the median of ds, 0 for none. ds is not modified.
func median(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
