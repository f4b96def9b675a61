package fleetbench

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/outpost-mesh/outpost/bench/internal/childhub"
)

// PhaseCPU is the CPU the hub, this process (the fleet) and every other
// process on the machine kept busy during one phase, in CPUs (CPU seconds
// per second): on a small machine they compete, and a busy neighbour
// slows both hub and fleet.
type PhaseCPU struct {
	Phase   string  `json:"phase"`
	Seconds float64 `json:"seconds"`
	Hub     float64 `json:"hub_cpus"`
	Fleet   float64 `json:"fleet_cpus"`
	// Others is the machine's busy time, from /proc/stat, less the hub's
	// and the fleet's; never negative.
	Others float64 `json:"other_cpus"`
}

// cpuSample is one reading of the CPU times a PhaseCPU is made of.
type cpuSample struct {
	at                 time.Time
	hub, self, machine float64 // CPU seconds
}

// sampleCPU reads the hub's (pid), this process's and the machine's CPU
// time; what cannot be read is 0.
func sampleCPU(hubPID string) cpuSample {
	s := cpuSample{at: time.Now()}
	if p, err := childhub.ReadProc(hubPID); err == nil {
		s.hub = p.CPUSeconds
	}
	if p, err := childhub.ReadProc("self"); err == nil {
		s.self = p.CPUSeconds
	}
	if b, err := os.ReadFile("/proc/stat"); err == nil {
		s.machine, _ = parseMachineBusy(b)
	}
	return s
}

// phaseCPU returns the phase between two samples. hubRestarted says the
// hub of end is a new process, whose CPU time counts from 0.
func phaseCPU(phase string, start, end cpuSample, hubRestarted bool) PhaseCPU {
	secs := end.at.Sub(start.at).Seconds()
	if secs <= 0 {
		return PhaseCPU{Phase: phase}
	}
	hub := end.hub - start.hub
	if hubRestarted {
		hub = end.hub
	}
	self := end.self - start.self
	p := PhaseCPU{Phase: phase, Seconds: secs, Hub: hub / secs, Fleet: self / secs}
	if end.machine > 0 && start.machine > 0 {
		p.Others = max((end.machine-start.machine-hub-self)/secs, 0)
	}
	return p
}

// parseMachineBusy returns the CPU time, in seconds, all CPUs spent busy
// since boot, from the first line of /proc/stat: every state but idle and
// iowait (guest time is counted in user already).
func parseMachineBusy(b []byte) (float64, error) {
	sc := bufio.NewScanner(bytes.NewReader(b))
	if !sc.Scan() {
		return 0, fmt.Errorf("parse /proc/stat: empty")
	}
	f := strings.Fields(sc.Text())
	// cpu user nice system idle iowait irq softirq steal ...
	if len(f) < 9 || f[0] != "cpu" {
		return 0, fmt.Errorf("parse /proc/stat: first line %q", sc.Text())
	}
	var busy uint64
	for i, v := range f[1:9] {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("parse /proc/stat: %w", err)
		}
		if i == 3 || i == 4 { // idle, iowait
			continue
		}
		busy += n
	}
	return float64(busy) / childhub.ClockTicks, nil
}
