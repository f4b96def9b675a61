package eviction

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/outpost-mesh/outpost/edge/cgroups"
	"github.com/outpost-mesh/outpost/internal/limitread"
)

// procFileLimit bounds what is read of a /proc file: meminfo is under 2 KiB.
const procFileLimit = 64 << 10

// Readings are the node's signals at one time.
type Readings struct {
	Time time.Time
	// Signals holds an observation for each signal that could be read.
	Signals map[Signal]Observation
	// MemoryTotal is the machine's memory (MemTotal), for capacity.
	MemoryTotal int64
	// DedicatedImageFs is whether images sit on another file system than
	// nodefs, which changes what pods' disk use is ranked by.
	DedicatedImageFs bool
}

// MemorySource reads the memory use memory.available is taken from when
// not the whole machine's: limit 0 for none (the machine's memory).
type MemorySource interface {
	Memory() (limit, workingSet int64, err error)
}

// CgroupMemory is a MemorySource reading a cgroup, such as the agent's
// own or the parent of the pods' root.
type CgroupMemory struct {
	Layout *cgroups.Layout // non-nil
	Path   string          // relative to each hierarchy's root
}

// Memory implements MemorySource.
func (c CgroupMemory) Memory() (limit, workingSet int64, err error) {
	st, err := c.Layout.Stats(c.Path)
	if err != nil {
		return 0, 0, err
	}
	return st.MemoryLimit, st.MemoryWorkingSet, nil
}

// Meminfo holds the /proc/meminfo lines the readings use, in bytes.
type Meminfo struct {
	Total, Free, InactiveFile int64
}

// ParseMeminfo parses /proc/meminfo content ("MemTotal:  24683652 kB").
// It fails without MemTotal, MemFree and Inactive(file).
func ParseMeminfo(b []byte) (Meminfo, error) {
	var m Meminfo
	var seen int
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 0, 1024), procFileLimit)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 2 {
			continue
		}
		var dst *int64
		switch f[0] {
		case "MemTotal:":
			dst = &m.Total
		case "MemFree:":
			dst = &m.Free
		case "Inactive(file):":
			dst = &m.InactiveFile
		default:
			continue
		}
		v, err := strconv.ParseInt(f[1], 10, 64)
		if err != nil || v < 0 || v > 1<<53 {
			return Meminfo{}, fmt.Errorf("meminfo %s %q: not a size", f[0], f[1])
		}
		if len(f) >= 3 && f[2] == "kB" {
			v *= 1024
		}
		*dst = v
		seen++
	}
	if err := sc.Err(); err != nil {
		return Meminfo{}, fmt.Errorf("meminfo: %w", err)
	}
	if m.Total == 0 || seen < 3 {
		return Meminfo{}, errors.New("meminfo: MemTotal, MemFree or Inactive(file) missing")
	}
	return m, nil
}

// MemoryObservation returns memory.available as kubelet derives it: the
// capacity (the machine's, or a smaller limit) less the working set (the
// memory in use less the inactive file cache). With a source, the
// working set is its; without, the machine's from m.
func MemoryObservation(m Meminfo, limit, workingSet int64, fromSource bool) Observation {
	capacity := m.Total
	if limit > 0 && limit < capacity {
		capacity = limit
	}
	if !fromSource {
		workingSet = max(m.Total-m.Free-m.InactiveFile, 0)
	}
	return Observation{Available: capacity - workingSet, Capacity: capacity}
}

// FsStats are a file system's sizes.
type FsStats struct {
	CapacityBytes, AvailableBytes int64
	Inodes, InodesFree            int64
	dev                           uint64
}

// StatFs reads the file system holding dir.
func StatFs(dir string) (FsStats, error) {
	var s unix.Statfs_t
	if err := unix.Statfs(dir, &s); err != nil {
		return FsStats{}, fmt.Errorf("statfs %s: %w", dir, err)
	}
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		return FsStats{}, fmt.Errorf("stat %s: %w", dir, err)
	}
	bs := int64(s.Bsize)
	return FsStats{
		CapacityBytes:  int64(s.Blocks) * bs,
		AvailableBytes: int64(s.Bavail) * bs,
		Inodes:         int64(s.Files),
		InodesFree:     int64(s.Ffree),
		dev:            uint64(st.Dev),
	}, nil
}

// PidStats are the node's task limit and count.
type PidStats struct{ Max, Running int64 }

// ReadPids reads the task limit (the lower of kernel.pid_max and
// kernel.threads-max) and the number of tasks (the total of
// /proc/loadavg), as kubelet.
func ReadPids(procDir string) (PidStats, error) {
	var p PidStats
	for _, f := range []string{"sys/kernel/pid_max", "sys/kernel/threads-max"} {
		b, err := limitread.File(filepath.Join(procDir, f), procFileLimit)
		if err != nil {
			return PidStats{}, err
		}
		v, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		if err != nil {
			return PidStats{}, fmt.Errorf("%s: %w", f, err)
		}
		if p.Max == 0 || v < p.Max {
			p.Max = v
		}
	}
	b, err := limitread.File(filepath.Join(procDir, "loadavg"), procFileLimit)
	if err != nil {
		return PidStats{}, err
	}
	n, err := ParseLoadavgTasks(b)
	if err != nil {
		return PidStats{}, err
	}
	p.Running = n
	return p, nil
}

// ParseLoadavgTasks returns the task total of /proc/loadavg content
// ("0.42 0.57 1.32 1/93 17706" gives 93).
func ParseLoadavgTasks(b []byte) (int64, error) {
	f := strings.Fields(string(b))
	if len(f) < 4 {
		return 0, fmt.Errorf("loadavg %q: too few fields", b)
	}
	_, total, ok := strings.Cut(f[3], "/")
	if !ok {
		return 0, fmt.Errorf("loadavg %q: no running/total", b)
	}
	n, err := strconv.ParseInt(total, 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("loadavg %q: bad total", b)
	}
	return n, nil
}

// Read takes the node's readings as cfg says where from. A signal that
// cannot be read is left out (and its thresholds not evaluated); the
// error joins why. Readings are empty of a signal only then.
func Read(cfg *Config, now time.Time) (Readings, error) {
	r := Readings{Time: now, Signals: map[Signal]Observation{}}
	var errs []error
	b, err := limitread.File(filepath.Join(cfg.ProcDir, "meminfo"), procFileLimit)
	if err == nil {
		var mi Meminfo
		if mi, err = ParseMeminfo(b); err == nil {
			r.MemoryTotal = mi.Total
			var limit, ws int64
			if cfg.Memory != nil {
				limit, ws, err = cfg.Memory.Memory()
			}
			if err == nil {
				r.Signals[SignalMemoryAvailable] = MemoryObservation(mi, limit, ws, cfg.Memory != nil)
			}
		}
	}
	if err != nil {
		errs = append(errs, fmt.Errorf("memory: %w", err))
	}
	var nodeDev uint64
	if cfg.DataDir != "" {
		if fs, err := StatFs(cfg.DataDir); err != nil {
			errs = append(errs, fmt.Errorf("nodefs: %w", err))
		} else {
			nodeDev = fs.dev
			r.Signals[SignalNodeFsAvailable] = Observation{fs.AvailableBytes, fs.CapacityBytes}
			r.Signals[SignalNodeFsInodesFree] = Observation{fs.InodesFree, fs.Inodes}
		}
	}
	if cfg.ImageFsDir != "" {
		if fs, err := StatFs(cfg.ImageFsDir); err != nil {
			errs = append(errs, fmt.Errorf("imagefs: %w", err))
		} else {
			r.DedicatedImageFs = nodeDev != 0 && fs.dev != nodeDev
			r.Signals[SignalImageFsAvailable] = Observation{fs.AvailableBytes, fs.CapacityBytes}
			r.Signals[SignalImageFsInodesFree] = Observation{fs.InodesFree, fs.Inodes}
		}
	}
	if p, err := ReadPids(cfg.ProcDir); err != nil {
		errs = append(errs, fmt.Errorf("pids: %w", err))
	} else {
		r.Signals[SignalPIDAvailable] = Observation{p.Max - p.Running, p.Max}
	}
	return r, errors.Join(errs...)
}

// maxDirEntries bounds the entries DirUsage walks, so that a pod that
// made millions of files costs a bounded time per round; what it counts
// then is a floor.
const maxDirEntries = 100_000

// DirUsage returns the bytes (of blocks allocated) and inodes used under
// dir, staying on dir's file system (a tmpfs emptyDir mounted below is
// memory, not disk), as cAdvisor measures a pod's volumes and logs. A
// dir that does not exist uses nothing. It counts at most
// maxDirEntries entries.
func DirUsage(dir string) (bytes, inodes int64, err error) {
	var root unix.Stat_t
	if err := unix.Lstat(dir, &root); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return 0, 0, nil
		}
		return 0, 0, fmt.Errorf("stat %s: %w", dir, err)
	}
	seen := map[uint64]bool{} // hard links, by inode, counted once
	var n int
	err = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, os.ErrNotExist) {
				return nil // gone meanwhile
			}
			return err
		}
		if n++; n > maxDirEntries {
			return filepath.SkipAll
		}
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			if errors.Is(err, os.ErrNotExist) {
				return nil
			}
			return err
		}
		if uint64(st.Dev) != uint64(root.Dev) {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if st.Nlink > 1 && !d.IsDir() {
			if seen[uint64(st.Ino)] {
				return nil
			}
			seen[uint64(st.Ino)] = true
		}
		bytes += int64(st.Blocks) * 512
		inodes++
		return nil
	})
	if err != nil {
		return 0, 0, fmt.Errorf("measure %s: %w", dir, err)
	}
	return bytes, inodes, nil
}
