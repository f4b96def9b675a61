package cgroups

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/outpost-mesh/outpost/internal/limitread"
)

// v1Unlimited is the least memory.limit_in_bytes that means no limit
// (the kernel reports PAGE_COUNTER_MAX in bytes, 2^63 less a page).
const v1Unlimited = 1 << 62

// Stats are the readings of one cgroup (and everything below it).
type Stats struct {
	// MemoryUsage is the memory charged, page cache included.
	MemoryUsage int64
	// MemoryWorkingSet is MemoryUsage less the inactive file cache (0 if
	// that is more), as kubelet and cAdvisor count a cgroup's use: what
	// memory limits and eviction compare.
	MemoryWorkingSet int64
	// MemoryLimit is the cgroup's own memory limit; 0 for none.
	MemoryLimit int64
	// CPUUsage is the CPU time used since the cgroup was made.
	CPUUsage time.Duration
	// OOMKills counts the processes the OOM killer killed in the cgroup;
	// valid when HasOOMKills (cgroup v2, and v1 on kernels from 4.13).
	OOMKills    int64
	HasOOMKills bool
	// Pids is the number of tasks; 0 without a pids controller.
	Pids int64
}

// Stats reads cgroup p's readings (p relative to each hierarchy's root).
// It returns an error wrapping fs.ErrNotExist when p does not exist. A
// reading whose controller the machine lacks stays zero.
func (l *Layout) Stats(p string) (Stats, error) {
	var s Stats
	var err error
	if l.mode == V2 {
		err = l.statsV2(filepath.Join(l.unified, p), &s)
	} else {
		err = l.statsV1(p, &s)
	}
	if err != nil {
		return Stats{}, fmt.Errorf("cgroup %s stats: %w", p, err)
	}
	return s, nil
}

func (l *Layout) statsV1(p string, s *Stats) error {
	if d := l.controllerDir("memory", p); d != "" {
		usage, err := readInt(filepath.Join(d, "memory.usage_in_bytes"))
		if err != nil {
			return err
		}
		st, err := readKV(filepath.Join(d, "memory.stat"))
		if err != nil {
			return err
		}
		s.MemoryUsage = usage
		s.MemoryWorkingSet = max(usage-st["total_inactive_file"], 0)
		if lim, err := readInt(filepath.Join(d, "memory.limit_in_bytes")); err != nil {
			return err
		} else if lim < v1Unlimited {
			s.MemoryLimit = lim
		}
		oc, err := readKV(filepath.Join(d, "memory.oom_control"))
		if err != nil {
			return err
		}
		s.OOMKills, s.HasOOMKills = oc["oom_kill"]
	}
	if d := l.controllerDir("cpuacct", p); d != "" {
		ns, err := readInt(filepath.Join(d, "cpuacct.usage"))
		if err != nil {
			return err
		}
		s.CPUUsage = time.Duration(ns)
	}
	if d := l.controllerDir("pids", p); d != "" {
		n, err := readInt(filepath.Join(d, "pids.current"))
		if err != nil {
			return err
		}
		s.Pids = n
	}
	return nil
}

func (l *Layout) statsV2(d string, s *Stats) error {
	if !exists(d) {
		return errNotExist
	}
	if l.Has("memory") {
		usage, err := readInt(filepath.Join(d, "memory.current"))
		if err != nil {
			return err
		}
		st, err := readKV(filepath.Join(d, "memory.stat"))
		if err != nil {
			return err
		}
		s.MemoryUsage = usage
		s.MemoryWorkingSet = max(usage-st["inactive_file"], 0)
		if lim, err := readMax(filepath.Join(d, "memory.max")); err != nil {
			return err
		} else {
			s.MemoryLimit = lim
		}
		ev, err := readKV(filepath.Join(d, "memory.events"))
		if err != nil {
			return err
		}
		s.OOMKills, s.HasOOMKills = ev["oom_kill"]
	}
	// cpu.stat is there without the cpu controller too.
	if cs, err := readKV(filepath.Join(d, "cpu.stat")); err == nil {
		s.CPUUsage = time.Duration(cs["usage_usec"]) * time.Microsecond
	} else if !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if l.Has("pids") {
		n, err := readInt(filepath.Join(d, "pids.current"))
		if err != nil {
			return err
		}
		s.Pids = n
	}
	return nil
}

func readInt(p string) (int64, error) {
	b, err := limitread.File(p, smallFile)
	if err != nil {
		return 0, err
	}
	v, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", p, err)
	}
	return v, nil
}

// readMax reads a cgroup v2 limit: a number, or "max" (returned as 0).
func readMax(p string) (int64, error) {
	b, err := limitread.File(p, smallFile)
	if err != nil {
		return 0, err
	}
	if s := strings.TrimSpace(string(b)); s != "max" {
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("%s: %w", p, err)
		}
		return v, nil
	}
	return 0, nil
}

func readKV(p string) (map[string]int64, error) {
	b, err := limitread.File(p, smallFile)
	if err != nil {
		return nil, err
	}
	return ParseKV(b), nil
}

// ParseKV parses a flat-keyed cgroup file (memory.stat, memory.events,
// cpu.stat, memory.oom_control): lines of a key and an integer. Lines not
// of that form are skipped, as later kernels add keys of other forms.
func ParseKV(b []byte) map[string]int64 {
	out := map[string]int64{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 0, 4096), smallFile)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 2 {
			continue
		}
		if v, err := strconv.ParseInt(f[1], 10, 64); err == nil {
			out[f[0]] = v
		}
	}
	return out
}

// ParseProcCgroup returns, from the content of /proc/PID/cgroup, the
// process's cgroup on cgroup v2 (the "0::" line) when v2, else in the v1
// hierarchy holding controller (such as "memory"). It returns an error
// wrapping fs.ErrNotExist when there is no such line.
func ParseProcCgroup(b []byte, v2 bool, controller string) (string, error) {
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 0, 4096), smallFile)
	for sc.Scan() {
		id, rest, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		ctls, p, ok := strings.Cut(rest, ":")
		if !ok || !strings.HasPrefix(p, "/") {
			continue
		}
		if v2 {
			if id == "0" && ctls == "" {
				return p, nil
			}
			continue
		}
		for _, c := range strings.Split(ctls, ",") {
			if c == controller {
				return p, nil
			}
		}
	}
	return "", fmt.Errorf("no %s cgroup in /proc/PID/cgroup: %w", controller, errNotExist)
}

// CgroupOf returns the cgroup of the process pid (0 for this process)
// that holds its memory: its memory hierarchy's on v1, its one on v2.
func (l *Layout) CgroupOf(pid int) (string, error) {
	f := "/proc/self/cgroup"
	if pid > 0 {
		f = fmt.Sprintf("/proc/%d/cgroup", pid)
	}
	b, err := limitread.File(f, smallFile)
	if err != nil {
		return "", err
	}
	return ParseProcCgroup(b, l.mode == V2, "memory")
}
