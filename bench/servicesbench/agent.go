package servicesbench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/outpost-mesh/outpost/netd/dns"
	"github.com/outpost-mesh/outpost/netd/ebpflb"
)

// AgentEnv, set in the environment of the outpost binary, makes `outpost
// bench services` the agent's stand-in (see AgentMain): its value is the
// request, as JSON.
const AgentEnv = "OUTPOST_BENCH_SERVICES_AGENT"

// agentRequest is what the stand-in is asked to do.
type agentRequest struct {
	// Objects is the file of encoded Services and EndpointSlices.
	Objects string `json:"objects"`
	// PinDir and Cgroup are the eBPF dataplane's.
	PinDir string `json:"pin_dir"`
	Cgroup string `json:"cgroup"`
}

// AgentResult is what programming n Services cost a fresh process doing
// what the agent does: read the objects as its checkpoint holds them,
// decode them, build the routing table and the DNS zone, and Sync the
// eBPF dataplane.
type AgentResult struct {
	Services int `json:"services"`
	// Phases, wall time.
	Read   time.Duration `json:"read_ns"`
	Decode time.Duration `json:"decode_ns"`
	Build  time.Duration `json:"build_ns"`
	Zone   time.Duration `json:"zone_ns"`
	Open   time.Duration `json:"open_ns"`
	Sync   time.Duration `json:"sync_ns"`
	Total  time.Duration `json:"total_ns"`
	// CPU is user and system time over the phases (getrusage).
	CPU time.Duration `json:"cpu_ns"`
	// IdleRSS is the process's RSS before it starts (VmRSS); PeakRSS its
	// high-water mark at the end (VmHWM). The kernel's ru_maxrss is not
	// used: it counts the parent's RSS from before the exec.
	IdleRSS uint64 `json:"idle_rss_bytes"`
	PeakRSS uint64 `json:"peak_rss_bytes"`
	// LiveHeap is what the Go heap holds after a collection at the end:
	// what the process keeps, without the collector's slack.
	LiveHeap uint64 `json:"live_heap_bytes"`
}

// AgentMain runs as the agent's stand-in, with the request in
// $OUTPOST_BENCH_SERVICES_AGENT, and writes its AgentResult to out as
// JSON. Its figures are of its own process: run it as a process of its
// own, in a network namespace of its own.
func AgentMain(ctx context.Context, out io.Writer) error {
	var req agentRequest
	if err := json.Unmarshal([]byte(os.Getenv(AgentEnv)), &req); err != nil {
		return fmt.Errorf("agent stand-in request: %w", err)
	}
	var res AgentResult
	var err error
	if res.IdleRSS, err = procStatus("VmRSS"); err != nil {
		return err
	}
	cpu0, err := cpuTime()
	if err != nil {
		return err
	}
	begin := time.Now()
	phase := func(d *time.Duration, start time.Time) { *d = time.Since(start) }

	start := time.Now()
	f, err := os.Open(req.Objects)
	if err != nil {
		return err
	}
	svcRaw, epsRaw, err := readObjects(bufio.NewReader(f))
	f.Close()
	if err != nil {
		return err
	}
	phase(&res.Read, start)

	start = time.Now()
	svcs, eps, err := decodeObjects(svcRaw, epsRaw)
	if err != nil {
		return err
	}
	phase(&res.Decode, start)
	res.Services = len(svcs)

	start = time.Now()
	t, err := buildTable(svcs, eps)
	if err != nil {
		return err
	}
	phase(&res.Build, start)

	start = time.Now()
	zone := dns.NewZone(domain, svcs, eps)
	phase(&res.Zone, start)

	start = time.Now()
	cfg := ebpflb.DefaultConfig()
	cfg.PinDir, cfg.Cgroup = req.PinDir, req.Cgroup
	d, err := ebpflb.New(cfg) // scoped to this process's namespace
	if err != nil {
		return err
	}
	defer d.Close() // the parent removes the pins
	phase(&res.Open, start)

	start = time.Now()
	if err := d.Sync(ctx, t); err != nil {
		return err
	}
	phase(&res.Sync, start)
	res.Total = time.Since(begin)

	cpu1, err := cpuTime()
	if err != nil {
		return err
	}
	res.CPU = cpu1 - cpu0
	if res.PeakRSS, err = procStatus("VmHWM"); err != nil {
		return err
	}
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	res.LiveHeap = ms.HeapAlloc
	// What the agent keeps stays alive until measured: its view holds
	// the encoded objects too.
	runtime.KeepAlive(svcRaw)
	runtime.KeepAlive(epsRaw)
	runtime.KeepAlive(svcs)
	runtime.KeepAlive(eps)
	runtime.KeepAlive(zone)
	runtime.KeepAlive(t)
	return json.NewEncoder(out).Encode(res)
}

// cpuTime returns the process's user and system time.
func cpuTime() (time.Duration, error) {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		return 0, fmt.Errorf("getrusage: %w", err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), nil
}

// procStatus returns a size field of /proc/self/status, in bytes.
func procStatus(field string) (uint64, error) {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, err
	}
	return parseStatus(b, field)
}

// parseStatus returns field ("VmRSS") of a /proc/PID/status, in bytes.
func parseStatus(b []byte, field string) (uint64, error) {
	for _, line := range strings.Split(string(b), "\n") {
		v, ok := strings.CutPrefix(line, field+":")
		if !ok {
			continue
		}
		f := strings.Fields(v)
		if len(f) != 2 || f[1] != "kB" {
			return 0, fmt.Errorf("%s: %q", field, line)
		}
		kb, err := strconv.ParseUint(f[0], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("%s: %w", field, err)
		}
		return kb << 10, nil
	}
	return 0, fmt.Errorf("no %s in /proc/self/status", field)
}

// measureAgent runs the agent's stand-in for n Services, in a network
// namespace of its own, and takes its routing away after.
func (p *programmer) measureAgent(ctx context.Context, cfg Config, n int, dir string) (res AgentResult, err error) {
	svcs, eps := Generate(n, 0)
	var buf bytes.Buffer
	if err := writeObjects(&buf, svcs, eps); err != nil {
		return res, err
	}
	objs := filepath.Join(dir, "objects")
	if err := os.WriteFile(objs, buf.Bytes(), 0o600); err != nil {
		return res, err
	}
	defer os.Remove(objs)
	req := agentRequest{Objects: objs, PinDir: filepath.Join(p.bpffs, "agent"), Cgroup: p.cgroup}
	defer func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cfg.OpTimeout)
		defer cancel()
		if rerr := ebpflb.RemovePins(rctx, req.PinDir); rerr != nil {
			err = errors.Join(err, fmt.Errorf("remove the stand-in's pins: %w", rerr))
		}
	}()
	rj, err := json.Marshal(req)
	if err != nil {
		return res, err
	}
	cctx, cancel := context.WithTimeout(ctx, cfg.OpTimeout)
	defer cancel()
	cmd := exec.CommandContext(cctx, cfg.Binary, "bench", "services")
	cmd.Env = append(os.Environ(), AgentEnv+"="+string(rj))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNET, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Run(); err != nil {
		return res, fmt.Errorf("agent stand-in: %w: %s", err, strings.TrimSpace(stderr.String()))
	}
	if err := json.Unmarshal(stdout.Bytes(), &res); err != nil {
		return res, fmt.Errorf("agent stand-in's result: %w", err)
	}
	if res.Services != n {
		return res, fmt.Errorf("agent stand-in programmed %d Services, want %d", res.Services, n)
	}
	return res, nil
}
