package servicesbench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"time"

	"golang.org/x/sys/unix"

	"github.com/outpost-mesh/outpost/bench/report"
	"github.com/outpost-mesh/outpost/netd/ebpflb"
)

// Run measures as cfg says and returns the report, writing progress to
// progress. It must run as root (see Check). It works in network
// namespaces of its own, on a bpffs and an empty cgroup of its own, and
// takes all of them away before it returns, also when ctx ends first.
// eBPF programs attach to that empty cgroup, but for the connect latency,
// where they attach to this process's cgroup scoped to the benchmark's
// namespace, and the agent's stand-in's. The real agent (cfg.RealAgent)
// runs in this process's namespace, which must then hold only its
// loopback (see edgenode.Isolate), and pins on its data dir, removed
// with it.
func Run(ctx context.Context, cfg Config, progress io.Writer) (rep *Report, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := Check(cfg); err != nil {
		return nil, err
	}
	logf := func(format string, args ...any) {
		fmt.Fprintf(progress, "%s  "+format+"\n", append([]any{time.Now().Format("15:04:05")}, args...)...)
	}
	res := &Result{}
	load := func(phase string) { res.Load = append(res.Load, report.ReadLoadAvg(phase)) }
	load("start")

	dir, err := os.MkdirTemp("", "outpost-bench-services-")
	if err != nil {
		return nil, err
	}
	defer func() {
		if rerr := os.RemoveAll(dir); rerr != nil {
			err = errors.Join(err, rerr)
		}
	}()
	bpffs := filepath.Join(dir, "bpf")
	if err := ebpflb.MountBPFFS(bpffs); err != nil {
		return nil, err
	}
	defer func() {
		if uerr := unix.Unmount(bpffs, unix.MNT_DETACH); uerr != nil {
			err = errors.Join(err, fmt.Errorf("unmount bpffs: %w", uerr))
		}
	}()
	own, err := ownCgroup()
	if err != nil {
		return nil, err
	}
	empty := filepath.Join(own, fmt.Sprintf("outpost-bench-services-%d", os.Getpid()))
	if err := os.Mkdir(empty, 0o755); err != nil {
		return nil, fmt.Errorf("cgroup of the benchmark's own: %w", err)
	}
	defer func() {
		if rerr := os.Remove(empty); rerr != nil {
			err = errors.Join(err, fmt.Errorf("remove cgroup: %w", rerr))
		}
	}()
	p := &programmer{bpffs: bpffs, cgroup: empty}

	for _, n := range cfg.Sizes {
		logf("programming %d Services, %d runs a dataplane", n, cfg.Runs)
		pr, err := p.measureProgram(ctx, n, cfg.Runs, cfg.OpTimeout)
		if err != nil {
			return nil, err
		}
		res.Program = append(res.Program, pr)
		logf("  eBPF %s, nftables %s (first Sync, median)", report.Duration(pr.EBPF.First), report.Duration(pr.Nftables.First))
		load(fmt.Sprintf("program %d", n))
	}

	logf("connect latency at %v Services, %d connects a path", cfg.ConnectSizes, cfg.Connects)
	if res.Connect, err = p.measureConnects(ctx, cfg, own, logf); err != nil {
		return nil, fmt.Errorf("connect latency: %w", err)
	}
	load("connect")

	logf("DNS from a pod, a zone of %d Services, %d clients", cfg.DNSServices, cfg.DNSClients)
	d, err := measureDNS(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("dns: %w", err)
	}
	res.DNS = &d
	load("dns")

	if cfg.Agent {
		n := slices.Max(cfg.Sizes)
		logf("the agent's stand-in programming %d Services", n)
		a, err := p.measureAgent(ctx, cfg, n, dir)
		if err != nil {
			return nil, err
		}
		res.Agent = &a
		load("agent")
	}
	if cfg.RealAgent {
		n := slices.Max(cfg.Sizes)
		logf("a real agent joined to a hub, %d Services created through the hub", n)
		a, err := measureRealAgent(ctx, cfg, n, dir, logf)
		if err != nil {
			return nil, fmt.Errorf("real agent: %w", err)
		}
		res.RealAgent = &a
		load("real agent")
	}
	return NewReport(cfg, res), nil
}
