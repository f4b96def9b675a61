package agent

import (
	"github.com/outpost-mesh/outpost/edge/usage"
)

// The FAKE usage of the fake runtime's nodes, which run no processes:
// made-up numbers so that kubectl top has something to show in tests and
// fleet simulation.
const (
	fakeContainerCPU    = 2_000_000 // nanocores: 2m
	fakeContainerMemory = 8 << 20
	fakeNodeCPU         = 50_000_000 // 50m
	fakeNodeMemory      = 128 << 20
)

// buildUsage makes the meter of the node's usage: from the pods' cgroups
// on a runtime of real containers, synthetic on the fake runtime's nodes.
// It samples every Sync.UsageInterval, the least time between reports,
// and takes in the counters of the node's relay for its site peers.
func (a *Agent) buildUsage() error {
	cfg := usage.DefaultConfig()
	if a.real != nil {
		cfg.Source = &usage.Cgroups{Runtime: a.rt, Manager: a.real.cgroups, Node: a.cfg.NodeUsage}
	} else {
		cfg.Source = &usage.Synthetic{Runtime: a.rt, CPU: fakeContainerCPU, Memory: fakeContainerMemory,
			BaseCPU: fakeNodeCPU, BaseMemory: fakeNodeMemory, Start: a.now(), Now: a.now}
	}
	if a.cfg.Sync.UsageInterval > 0 {
		cfg.Interval = a.cfg.Sync.UsageInterval
	}
	cfg.Refresh = max(cfg.Refresh, cfg.Interval)
	cfg.Relayed = a.relayUsage
	cfg.Logger, cfg.Now = a.log.With("component", "usage"), a.now
	m, err := usage.New(cfg)
	if err != nil {
		return err
	}
	a.usage = m
	return nil
}
