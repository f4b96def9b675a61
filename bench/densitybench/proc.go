package densitybench

import (
	"fmt"
	"strconv"
	"time"

	"github.com/outpost-mesh/outpost/bench/internal/childhub"
	"github.com/outpost-mesh/outpost/edge/runtime/containerd"
)

// Memory is one reading of the node's memory, in bytes.
type Memory struct {
	AgentRSS  uint64 `json:"agent_rss"`
	AgentAnon uint64 `json:"agent_anon"` // RssAnon: heap and stacks
	AgentPSS  uint64 `json:"agent_pss"`
	// ContainerdRSS and ContainerdPSS are the agent's containerd's.
	ContainerdRSS uint64 `json:"containerd_rss"`
	ContainerdPSS uint64 `json:"containerd_pss"`
	// Shims is the number of runc shims serving the node's containerd
	// namespace, ShimRSS and ShimPSS their sums, and ShimChildren the
	// processes they are the parent of (the containers' init processes).
	Shims        int    `json:"shims"`
	ShimChildren int    `json:"shim_children"`
	ShimRSS      uint64 `json:"shim_rss"`
	ShimPSS      uint64 `json:"shim_pss"`
	// AgentCPU, ContainerdCPU and ShimCPU are the CPUs (1 = one CPU
	// busy) each used on average over the settle before the reading: the
	// node's idle cost at this pod count.
	AgentCPU      float64 `json:"agent_cpu"`
	ContainerdCPU float64 `json:"containerd_cpu"`
	ShimCPU       float64 `json:"shim_cpu"`
}

// cpuTimes are the CPU seconds used so far by the agent, its containerd
// and the shims.
type cpuTimes struct{ agent, containerd, shims float64 }

// readCPU reads the CPU seconds of the agent, containerd (0: none) and
// the shims of the containerd at sock serving namespace. A process that
// cannot be read counts 0.
func readCPU(agentPID, ctrdPID int, sock, namespace string) cpuTimes {
	cpu := func(pid int) float64 {
		if pid <= 0 {
			return 0
		}
		s, err := childhub.ReadProc(strconv.Itoa(pid))
		if err != nil {
			return 0
		}
		return s.CPUSeconds
	}
	t := cpuTimes{agent: cpu(agentPID), containerd: cpu(ctrdPID)}
	shims, _ := containerd.Shims(sock, namespace)
	for _, sh := range shims {
		t.shims += cpu(sh.PID)
	}
	return t
}

// setCPU sets m's CPU fields from the CPU times before and after a window
// of d.
func (m *Memory) setCPU(before, after cpuTimes, d time.Duration) {
	if d <= 0 {
		return
	}
	sec := d.Seconds()
	m.AgentCPU = max(after.agent-before.agent, 0) / sec
	m.ContainerdCPU = max(after.containerd-before.containerd, 0) / sec
	m.ShimCPU = max(after.shims-before.shims, 0) / sec
}

// TotalPSS is the node's whole proportional set: agent, containerd, shims
// (not the containers' own processes, which are the workload's).
func (m Memory) TotalPSS() uint64 { return m.AgentPSS + m.ContainerdPSS + m.ShimPSS }

// PerPodOverhead returns what each of n pods costs the node beyond idle:
// the growth of the agent's and containerd's PSS from idle plus the
// shims' PSS (over idle's, which has none), divided by n. It is signed: a
// process may shrink after idle. n <= 0 gives 0.
func PerPodOverhead(idle, at Memory, n int) int64 {
	if n <= 0 {
		return 0
	}
	delta := func(a, b uint64) int64 { return int64(b) - int64(a) }
	total := delta(idle.AgentPSS, at.AgentPSS) + delta(idle.ContainerdPSS, at.ContainerdPSS) + delta(idle.ShimPSS, at.ShimPSS)
	return total / int64(n)
}

// readMemory reads the memory of the agent at agentPID, of its
// containerd at ctrdPID (0: not running, read as zero), and of the shims
// of the containerd at sock serving namespace.
func readMemory(agentPID, ctrdPID int, sock, namespace string) (Memory, error) {
	var m Memory
	s, err := childhub.ReadProc(strconv.Itoa(agentPID))
	if err != nil {
		return m, fmt.Errorf("agent memory: %w", err)
	}
	m.AgentRSS, m.AgentAnon = s.RSS, s.RSSAnon
	if _, m.AgentPSS, err = containerd.Memory(agentPID); err != nil {
		return m, fmt.Errorf("agent pss: %w", err)
	}
	if ctrdPID > 0 {
		if m.ContainerdRSS, m.ContainerdPSS, err = containerd.Memory(ctrdPID); err != nil {
			return m, fmt.Errorf("containerd memory: %w", err)
		}
	}
	shims, err := containerd.Shims(sock, namespace)
	if err != nil {
		return m, fmt.Errorf("find shims: %w", err)
	}
	for _, sh := range shims {
		m.Shims++
		m.ShimChildren += sh.Children
		m.ShimRSS += sh.RSS
		m.ShimPSS += sh.PSS
	}
	return m, nil
}
