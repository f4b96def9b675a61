package usage

import (
	"slices"
	"time"

	"github.com/outpost-mesh/outpost/sync/wire"
)

// Reading is one measurement of a node or container: the CPU time it has
// used since it began (cumulative) and its memory working set.
type Reading struct {
	CPU    time.Duration
	Memory uint64
}

// ContainerReading is a container's reading. ID names the container's
// instance: a restarted container starts its CPU count again.
type ContainerReading struct {
	Name, ID string
	Reading
}

// PodReading is the readings of a pod's running containers.
type PodReading struct {
	Namespace, Name string
	Containers      []ContainerReading
}

// Sample is the readings of the node and its pods at Time.
type Sample struct {
	Time time.Time
	Node Reading
	Pods []PodReading
}

// Report returns the usage from prev to cur: CPU rates over the time
// between them, memory as of cur. A container without a reading in prev
// (new, or restarted as another instance, or whose count went back) is
// left out, as is a pod left without containers: its rate is known from
// the next sample. It returns nil when cur is not after prev. No I/O.
func Report(prev, cur Sample) *wire.Usage {
	window := cur.Time.Sub(prev.Time)
	if window <= 0 {
		return nil
	}
	type cKey struct{ ns, pod, name, id string }
	before := map[cKey]time.Duration{}
	for _, p := range prev.Pods {
		for _, c := range p.Containers {
			before[cKey{p.Namespace, p.Name, c.Name, c.ID}] = c.CPU
		}
	}
	u := &wire.Usage{Time: cur.Time, Window: window, Node: usageOf(prev.Node.CPU, cur.Node, window)}
	for _, p := range cur.Pods {
		pu := wire.PodUsage{Namespace: p.Namespace, Name: p.Name}
		for _, c := range p.Containers {
			cpu, ok := before[cKey{p.Namespace, p.Name, c.Name, c.ID}]
			if !ok || c.CPU < cpu {
				continue
			}
			pu.Containers = append(pu.Containers, wire.ContainerUsage{Name: c.Name, ResourceUsage: usageOf(cpu, c.Reading, window)})
		}
		if len(pu.Containers) > 0 {
			u.Pods = append(u.Pods, pu)
		}
	}
	return u
}

// usageOf returns the CPU rate from cpu0 to r.CPU over window, in
// nanocores, and r's memory. A count that went back reads as no use.
func usageOf(cpu0 time.Duration, r Reading, window time.Duration) wire.ResourceUsage {
	var rate uint64
	if r.CPU > cpu0 {
		// nanoseconds of CPU per second of window, in nanocores: the
		// ratio times 1e9, computed in float to keep precision and range.
		rate = uint64(float64(r.CPU-cpu0) / float64(window) * 1e9)
	}
	return wire.ResourceUsage{CPU: rate, Memory: r.Memory}
}

// Changed reports whether cur differs from base, the last full report
// sent, by enough to send it: another set of pods or containers, or a
// CPU rate or memory that moved by more than a tenth and more than what
// kubectl top shows (1m of CPU, 1Mi of memory) for the node or any
// container. Smaller moves are left for the next report that must go
// anyway, so that a node whose usage wobbles sends little. Relay counters
// that moved at all count too: they are cumulative, and the hub keeps
// those of the last full report. A nil base has always changed. No I/O.
func Changed(base, cur *wire.Usage) bool {
	if base == nil {
		return true
	}
	if !slices.Equal(base.Relay, cur.Relay) {
		return true
	}
	if moved(base.Node, cur.Node) || len(base.Pods) != len(cur.Pods) {
		return true
	}
	for i, p := range cur.Pods {
		q := base.Pods[i]
		if p.Namespace != q.Namespace || p.Name != q.Name || len(p.Containers) != len(q.Containers) {
			return true
		}
		for j, c := range p.Containers {
			d := q.Containers[j]
			if c.Name != d.Name || moved(d.ResourceUsage, c.ResourceUsage) {
				return true
			}
		}
	}
	return false
}

// The least moves Changed counts: a millicore, a MiB.
const (
	minCPUMove    = 1_000_000
	minMemoryMove = 1 << 20
)

// moved reports whether a and b differ by more than a tenth of the larger
// and by at least the least move, in CPU or memory.
func moved(a, b wire.ResourceUsage) bool {
	far := func(x, y, least uint64) bool {
		d := max(x, y) - min(x, y)
		return d >= least && d > max(x, y)/10
	}
	return far(a.CPU, b.CPU, minCPUMove) || far(a.Memory, b.Memory, minMemoryMove)
}
