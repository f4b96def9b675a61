package usage

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/outpost-mesh/outpost/edge/cgroups"
	"github.com/outpost-mesh/outpost/edge/runtime"
)

// NodeScope says what the node's own usage counts.
type NodeScope int

const (
	// Machine counts the whole machine, from /proc/stat (CPU time not
	// idle) and /proc/meminfo (MemTotal less MemAvailable): what a
	// gateway, which runs one agent, is. The default.
	Machine NodeScope = iota
	// AgentCgroup counts the agent's cgroup tree (its pods, under the
	// cgroups root): honest for several agents sharing one machine, as in
	// tests and simulation, where Machine would count the others' too.
	AgentCgroup
)

// Cgroups reads a node's running containers from their cgroups: each
// container's is below its pod's, named by its container ID.
type Cgroups struct {
	Runtime runtime.Runtime  // lists the pods and their containers
	Manager *cgroups.Manager // finds each pod's cgroup
	Node    NodeScope
	// ProcDir is where /proc is; "" for /proc.
	ProcDir string
}

// Sample implements Source.
func (c *Cgroups) Sample(ctx context.Context) (Sample, error) {
	pods, err := c.Runtime.List(ctx)
	if err != nil {
		return Sample{}, fmt.Errorf("list pods: %w", err)
	}
	var s Sample
	lay := c.Manager.Layout()
	for _, p := range pods {
		dir, err := c.Manager.PodPath(types.UID(p.Pod.UID))
		if err != nil {
			continue // not started yet, or gone
		}
		pr := PodReading{Namespace: p.Pod.Namespace, Name: p.Pod.Name}
		for _, ct := range p.Containers {
			_, id, ok := strings.Cut(ct.ID, "://")
			if ct.State != runtime.StateRunning || !ok || id == "" {
				continue
			}
			st, err := lay.Stats(path.Join(dir, id))
			if errors.Is(err, fs.ErrNotExist) {
				continue // it just exited
			} else if err != nil {
				return Sample{}, err
			}
			pr.Containers = append(pr.Containers, ContainerReading{Name: ct.Name, ID: id, Reading: Reading{CPU: st.CPUUsage, Memory: uint64(max(st.MemoryWorkingSet, 0))}})
		}
		if len(pr.Containers) > 0 {
			s.Pods = append(s.Pods, pr)
		}
	}
	sortPods(s.Pods)
	switch c.Node {
	case AgentCgroup:
		st, err := lay.Stats(c.Manager.Root())
		if err != nil {
			return Sample{}, err
		}
		s.Node = Reading{CPU: st.CPUUsage, Memory: uint64(max(st.MemoryWorkingSet, 0))}
	default:
		if s.Node, err = machine(cmp.Or(c.ProcDir, "/proc")); err != nil {
			return Sample{}, err
		}
	}
	return s, nil
}

// userHZ is the unit of /proc/stat's times, 100 on every Linux port.
const userHZ = 100

// machine reads the whole machine's CPU time not idle and memory in use.
func machine(proc string) (Reading, error) {
	b, err := os.ReadFile(path.Join(proc, "stat"))
	if err != nil {
		return Reading{}, err
	}
	line, _, _ := bytes.Cut(b, []byte("\n"))
	f := strings.Fields(string(line))
	if len(f) < 5 || f[0] != "cpu" {
		return Reading{}, fmt.Errorf("%s/stat: no cpu line", proc)
	}
	var busy uint64
	for i, v := range f[1:] {
		if i == 3 || i == 4 || i >= 8 { // idle, iowait; guest times are in user already
			continue
		}
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return Reading{}, fmt.Errorf("%s/stat: %w", proc, err)
		}
		busy += n
	}
	mi, err := os.Open(path.Join(proc, "meminfo"))
	if err != nil {
		return Reading{}, err
	}
	defer mi.Close()
	var total, avail uint64
	sc := bufio.NewScanner(mi)
	for sc.Scan() {
		k, v, _ := strings.Cut(sc.Text(), ":")
		n, _ := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		switch k {
		case "MemTotal":
			total = n << 10
		case "MemAvailable":
			avail = n << 10
		}
	}
	if err := sc.Err(); err != nil {
		return Reading{}, err
	}
	return Reading{CPU: time.Duration(busy) * time.Second / userHZ, Memory: total - min(avail, total)}, nil
}

// Synthetic is a FAKE source for the fake runtime's nodes, which run no
// processes: every running container uses CPU (nanocores) and Memory
// (bytes) from its start, and the node BaseCPU and BaseMemory more than
// its containers.
// The numbers are made up; they exist so that kubectl top has something
// to show in tests and fleet simulation.
type Synthetic struct {
	Runtime             runtime.Runtime
	CPU, Memory         uint64
	BaseCPU, BaseMemory uint64
	Start               time.Time        // when the node's CPU count began
	Now                 func() time.Time // or nil for time.Now
}

// Sample implements Source.
func (f *Synthetic) Sample(ctx context.Context) (Sample, error) {
	pods, err := f.Runtime.List(ctx)
	if err != nil {
		return Sample{}, fmt.Errorf("list pods: %w", err)
	}
	now := time.Now()
	if f.Now != nil {
		now = f.Now()
	}
	used := func(rate uint64, since time.Time) time.Duration {
		return time.Duration(float64(now.Sub(since)) * float64(rate) / 1e9)
	}
	s := Sample{Node: Reading{CPU: used(f.BaseCPU, f.Start), Memory: f.BaseMemory}}
	for _, p := range pods {
		pr := PodReading{Namespace: p.Pod.Namespace, Name: p.Pod.Name}
		for _, ct := range p.Containers {
			if ct.State != runtime.StateRunning {
				continue
			}
			r := Reading{CPU: used(f.CPU, ct.StartedAt), Memory: f.Memory}
			pr.Containers = append(pr.Containers, ContainerReading{Name: ct.Name, ID: ct.ID, Reading: r})
			s.Node.Memory += f.Memory
		}
		if len(pr.Containers) > 0 {
			s.Pods = append(s.Pods, pr)
		}
	}
	// The node's CPU counts its running containers' rates over the whole
	// time since Start, a stand-in that stays monotonic.
	s.Node.CPU += used(f.CPU*uint64(countRunning(s.Pods)), f.Start)
	sortPods(s.Pods)
	return s, nil
}

func countRunning(pods []PodReading) int {
	n := 0
	for _, p := range pods {
		n += len(p.Containers)
	}
	return n
}

// sortPods orders pods by namespace and name, and their containers by
// name, so that Worth compares like with like.
func sortPods(pods []PodReading) {
	slices.SortFunc(pods, func(a, b PodReading) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
	})
	for _, p := range pods {
		slices.SortFunc(p.Containers, func(a, b ContainerReading) int { return cmp.Compare(a.Name, b.Name) })
	}
}
