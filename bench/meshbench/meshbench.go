// Package meshbench measures the site mesh (edge/mesh) with real
// memberlist on loopback, every node a Mesh of this process on a port of
// its own with mesh.DefaultConfig's timings: how long a node takes to
// join a converged site until every node sees every other alive, how long
// the others take to drop a node that crashes and one that leaves, how
// long their service proxies (edge/proxy) take to stop routing to the
// crashed node's endpoints, and how many bytes a node of an idle site
// sends. It backs `outpost bench mesh`.
package meshbench

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/outpost-mesh/outpost/edge/mesh"
)

// Config sets what is measured. Durations encode in JSON as nanoseconds.
type Config struct {
	// Sizes are the numbers of nodes of the sites measured: 3, 10 and 50.
	Sizes []int `json:"sizes"`
	// Runs is how many times the join and the deaths are timed at each
	// size, each run on a fresh site: 3. The median and the max are
	// reported.
	Runs int `json:"runs"`
	// Idle is how long the bytes a node of an idle site sends are
	// counted: 60s, four of mesh.DefaultConfig's push/pull intervals.
	Idle time.Duration `json:"idle_ns"`
	// Settle is how long a converged site is left before the bytes are
	// counted, so that the gossip of the joins has died down: 5s.
	Settle time.Duration `json:"settle_ns"`
	// Timeout bounds each wait for the nodes to see a join or a death,
	// and for a site being grown to converge: 2m, as a site of 50 nodes
	// grown one join after another took 40 to 50s.
	Timeout time.Duration `json:"timeout_ns"`

	// SyncBytes is how many bytes of pods a node's sync client is sent
	// in each run of the relayed sync measure, straight from the hub's
	// sync server and through a site peer's relay: 8 MB, half of what
	// edge/relay lets one peer burst before its cap (16 MiB a minute)
	// throttles it; 0 skips the measure. SyncObjectBytes is the size of
	// each pod: 64 KiB. SyncRuns is how many runs each way: 3.
	SyncBytes       int64 `json:"sync_bytes"`
	SyncObjectBytes int   `json:"sync_object_bytes"`
	SyncRuns        int   `json:"sync_runs"`

	// meshConfig returns the configuration every node starts from, its
	// name, site, address, keys and transport set by the benchmark; nil
	// is mesh.DefaultConfig, what is measured. Tests set faster timings.
	meshConfig func() mesh.Config
}

// DefaultConfig returns the defaults above.
func DefaultConfig() Config {
	return Config{
		Sizes:   []int{3, 10, 50},
		Runs:    3,
		Idle:    time.Minute,
		Settle:  5 * time.Second,
		Timeout: 2 * time.Minute,

		SyncBytes:       8 << 20,
		SyncObjectBytes: 64 << 10,
		SyncRuns:        3,
	}
}

// QuickConfig returns DefaultConfig scaled down for a fast look: sites of
// 3 and 10 nodes, one run, 10s of idle gossip, one run of relayed sync.
func QuickConfig() Config {
	c := DefaultConfig()
	c.Sizes = []int{3, 10}
	c.Runs = 1
	c.Idle = 10 * time.Second
	c.SyncRuns = 1
	return c
}

// maxNodes bounds a site's size: every node is a memberlist in this
// process with two sockets and a dozen goroutines.
const maxNodes = 200

// Validate reports the first invalid field.
func (c Config) Validate() error {
	switch {
	case len(c.Sizes) == 0:
		return errors.New("no site size to measure")
	case c.Runs < 1:
		return errors.New("runs must be at least 1")
	case c.Idle <= 0 || c.Timeout <= 0:
		return errors.New("idle time and timeout must be positive")
	case c.Settle < 0:
		return errors.New("settle time must not be negative")
	case c.SyncBytes < 0 || c.SyncBytes > 1<<30:
		return errors.New("sync bytes must be 0 to 1 GiB")
	case c.SyncBytes > 0 && (c.SyncRuns < 1 || c.SyncObjectBytes < 1<<10 || c.SyncObjectBytes > 512<<10):
		return errors.New("sync runs must be at least 1 and sync objects 1 KiB to 512 KiB")
	}
	for i, n := range c.Sizes {
		if n < 2 || n > maxNodes {
			return fmt.Errorf("site of %d nodes: want 2 to %d", n, maxNodes)
		}
		if slices.Contains(c.Sizes[:i], n) {
			return fmt.Errorf("site of %d nodes given twice", n)
		}
	}
	return nil
}

// nodeConfig returns the configuration every node starts from.
func (c Config) nodeConfig() mesh.Config {
	if c.meshConfig != nil {
		return c.meshConfig()
	}
	return mesh.DefaultConfig()
}
