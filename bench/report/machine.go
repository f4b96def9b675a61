package report

import (
	"bufio"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"
)

// Machine describes where a benchmark ran, so results from different
// machines are never compared unknowingly. Fields that cannot be read on
// the platform are left empty or zero.
type Machine struct {
	// CPU is the processor model, from /proc/cpuinfo.
	CPU string `json:"cpu"`
	// CPUs is the number of CPUs the process may use (nproc).
	CPUs int `json:"cpus"`
	// MemoryBytes is the machine's total memory, from /proc/meminfo.
	MemoryBytes uint64 `json:"memory_bytes"`
	// Kernel is the operating system name, release and machine, from uname.
	Kernel    string    `json:"kernel"`
	GoVersion string    `json:"go_version"`
	GOOS      string    `json:"goos"`
	GOARCH    string    `json:"goarch"`
	Date      time.Time `json:"date"`
}

// DescribeMachine returns the description of the machine running it, dated
// now.
func DescribeMachine() Machine {
	return Machine{
		CPU:         cpuModel(),
		CPUs:        runtime.NumCPU(),
		MemoryBytes: memTotal(),
		Kernel:      kernel(),
		GoVersion:   runtime.Version(),
		GOOS:        runtime.GOOS,
		GOARCH:      runtime.GOARCH,
		Date:        time.Now().UTC().Truncate(time.Second),
	}
}

// String renders m as one "key: value" line per field.
func (m Machine) String() string {
	orUnknown := func(s string) string {
		if s == "" {
			return "unknown"
		}
		return s
	}
	mem := "unknown"
	if m.MemoryBytes > 0 {
		mem = fmt.Sprintf("%.1f GiB", float64(m.MemoryBytes)/(1<<30))
	}
	var b strings.Builder
	fmt.Fprintf(&b, "cpu:     %s\n", orUnknown(m.CPU))
	fmt.Fprintf(&b, "cpus:    %d\n", m.CPUs)
	fmt.Fprintf(&b, "memory:  %s\n", mem)
	fmt.Fprintf(&b, "kernel:  %s\n", orUnknown(m.Kernel))
	fmt.Fprintf(&b, "go:      %s %s/%s\n", m.GoVersion, m.GOOS, m.GOARCH)
	fmt.Fprintf(&b, "date:    %s\n", m.Date.Format(time.RFC3339))
	return b.String()
}

// cpuModel returns the first model name in /proc/cpuinfo ("model name" on
// x86, "Model" or "Hardware" on some ARM boards), or "".
func cpuModel() string {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return ""
	}
	defer f.Close()
	var fallback string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		key, value, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		key, value = strings.TrimSpace(key), strings.TrimSpace(value)
		switch key {
		case "model name":
			return value
		case "Model", "Hardware", "cpu model":
			if fallback == "" {
				fallback = value
			}
		}
	}
	return fallback
}

// memTotal returns MemTotal from /proc/meminfo in bytes, or 0.
func memTotal() uint64 {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "MemTotal:"); ok {
			if kb, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64); err == nil {
				return kb << 10
			}
		}
	}
	return 0
}
