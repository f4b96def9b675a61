// Package servicesbench measures the node's service routing in the
// kernel, eBPF socket load-balancing (netd/ebpflb) against its nftables
// fallback (netd/nftlb, Mode All), in the same run: the time to program
// 1,000 and 10,000 Services, connect latency through a ClusterIP at 10
// and at 10,000 Services against a connection straight to a backend, the
// node DNS server's (netd/dns) queries a second from a pod, the CPU time
// and peak RSS of a fresh process doing what the agent does to program
// 10,000 Services, and those of a real edge agent joined to a real hub
// (see bench/edgenode) while 10,000 Services are created through the
// hub's API. Everything happens in network namespaces the benchmark
// makes, with eBPF programs scoped to them, and is taken away at the end.
// It backs `outpost bench services`.
package servicesbench

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"time"

	"github.com/outpost-mesh/outpost/netd/ebpflb"
)

// Config sets what is measured. Durations encode in JSON as nanoseconds.
type Config struct {
	// Binary is this outpost binary, run again as the agent's stand-in
	// (see AgentEnv). Required.
	Binary string `json:"-"`
	// Sizes are the numbers of Services programmed: 1,000 and 10,000.
	// The largest is the one the agent's CPU and RSS are measured at.
	Sizes []int `json:"sizes"`
	// Runs is how many times each programming time is measured, each in
	// a fresh node namespace; the median counts: 5.
	Runs int `json:"runs"`
	// Connects is how many TCP connections each path makes, one after
	// another, at each table size: 5,000.
	Connects int `json:"connects"`
	// ConnectBatch is how many connections a path makes before the next
	// path takes its turn: 100.
	ConnectBatch int `json:"connect_batch"`
	// ConnectSizes are the table sizes connect latency is measured at:
	// 10 and 10,000 Services.
	ConnectSizes []int `json:"connect_sizes"`
	// ConnectRounds is how many times the sizes take turns, in one order
	// then the other, each round making its share of Connects: 4.
	ConnectRounds int `json:"connect_rounds"`
	// DNSServices is the number of Services in the DNS zone: 10,000.
	DNSServices int `json:"dns_services"`
	// DNSClients is how many clients query at once, each waiting for
	// its answer before the next query: 4.
	DNSClients int `json:"dns_clients"`
	// DNSDuration is how long each kind of query is sent: 5s.
	DNSDuration time.Duration `json:"dns_duration_ns"`
	// Agent measures the agent's stand-in at the largest size.
	Agent bool `json:"agent"`
	// RealAgent measures a real edge agent, joined to a hub, while the
	// largest number of Services is created through the hub's API.
	RealAgent bool `json:"real_agent"`
	// EdgeBinary is the outpost-edge binary the real agent runs as, and
	// ContainerdBinary the containerd it manages: /usr/bin/containerd.
	// Required with RealAgent.
	EdgeBinary       string `json:"-"`
	ContainerdBinary string `json:"containerd_binary"`
	// JoinTimeout bounds the start of the hub and the agent: 2m.
	// StopTimeout is how long they get to exit after SIGTERM: 30s.
	JoinTimeout time.Duration `json:"join_timeout_ns"`
	StopTimeout time.Duration `json:"stop_timeout_ns"`
	// OpTimeout bounds one Sync, connect or query: 2m.
	OpTimeout time.Duration `json:"op_timeout_ns"`
}

// DefaultConfig returns the defaults above; Binary is left empty.
func DefaultConfig() Config {
	return Config{
		Sizes:            []int{1000, 10000},
		Runs:             5,
		Connects:         5000,
		ConnectBatch:     100,
		ConnectSizes:     []int{10, 10000},
		ConnectRounds:    4,
		DNSServices:      10000,
		DNSClients:       4,
		DNSDuration:      5 * time.Second,
		Agent:            true,
		RealAgent:        true,
		ContainerdBinary: "/usr/bin/containerd",
		JoinTimeout:      2 * time.Minute,
		StopTimeout:      30 * time.Second,
		OpTimeout:        2 * time.Minute,
	}
}

// QuickConfig returns DefaultConfig scaled down for a fast look: 1,000
// Services only, fewer runs and connections. Its figures are rough and
// the targets, stated at 10,000 Services, are not judged.
func QuickConfig() Config {
	c := DefaultConfig()
	c.Sizes = []int{1000}
	c.Runs = 3
	c.Connects = 1000
	c.ConnectSizes = []int{10, 1000}
	c.DNSServices = 1000
	c.DNSDuration = time.Second
	c.RealAgent = false
	return c
}

// maxServices bounds every size: the generated addresses are all in one
// /16 each, 4 backends a Service.
const maxServices = 16000

// Validate reports the first invalid field.
func (c Config) Validate() error {
	switch {
	case c.Binary == "" && (c.Agent || c.RealAgent):
		return errors.New("no outpost binary to run the agent's stand-in or the hub with")
	case c.RealAgent && (c.EdgeBinary == "" || c.ContainerdBinary == ""):
		return errors.New("no outpost-edge or containerd binary to run the real agent with")
	case len(c.Sizes) == 0:
		return errors.New("no number of Services to program")
	case len(c.ConnectSizes) == 0:
		return errors.New("no number of Services to measure connect latency at")
	case c.Runs < 1 || c.Connects < 1 || c.ConnectBatch < 1 || c.DNSClients < 1:
		return errors.New("runs, connects, connect batch and DNS clients must be at least 1")
	case c.ConnectRounds < 1 || c.ConnectRounds > c.Connects:
		return fmt.Errorf("%d connect rounds: want 1 to the number of connects", c.ConnectRounds)
	case c.DNSServices < 1 || c.DNSServices > maxServices:
		return fmt.Errorf("DNS zone of %d Services: want 1 to %d", c.DNSServices, maxServices)
	case c.DNSDuration <= 0 || c.OpTimeout <= 0 || c.JoinTimeout <= 0 || c.StopTimeout <= 0:
		return errors.New("durations must be positive")
	}
	for _, list := range [][]int{c.Sizes, c.ConnectSizes} {
		for i, n := range list {
			if n < 1 || n > maxServices {
				return fmt.Errorf("%d Services: want 1 to %d", n, maxServices)
			}
			if slices.Contains(list[:i], n) {
				return fmt.Errorf("%d Services given twice", n)
			}
		}
	}
	return nil
}

// ErrNotRoot is returned by Check when the benchmark does not run as root.
var ErrNotRoot = errors.New("the services benchmark needs root (network namespaces, eBPF, nftables, bpffs)")

// Check reports what this machine lacks to run the benchmark with c:
// root, the kernel features of the eBPF dataplane, a cgroup2 hierarchy,
// and for the real agent its binaries.
func Check(c Config) error {
	if os.Geteuid() != 0 {
		return ErrNotRoot
	}
	if err := ebpflb.Supported(); err != nil {
		return fmt.Errorf("eBPF service routing: %w", err)
	}
	if _, err := ownCgroup(); err != nil {
		return err
	}
	if c.RealAgent {
		return checkRealAgent(c)
	}
	return nil
}
