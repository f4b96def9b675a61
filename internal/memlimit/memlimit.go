// Package memlimit chooses the Go runtime's soft memory limit for a daemon:
// the one a flag gives, or by default a share of the memory the process
// may use, its cgroup's limit or else the machine's. Only cmd sets it.
package memlimit

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"path"
	"runtime/debug"
	"strconv"
	"strings"

	"github.com/outpost-mesh/outpost/internal/bytesize"
)

// Share is the part of the memory available to the process that the
// default limit takes: the Go runtime collects garbage harder as its heap
// nears the limit, which keeps it clear of the OOM killer, and the rest is
// left to what the runtime does not count (mapped files, such as the
// store's, and the kernel's buffers).
const Share = 0.75

// Unlimited is the limit that is no limit (the runtime's own default).
const Unlimited = math.MaxInt64

// Choice is a memory limit and where it came from.
type Choice struct {
	// Bytes is the limit: Unlimited for none, negative to keep the one
	// GOMEMLIMIT gave the runtime.
	Bytes int64
	// From says how it was chosen, for the log: "flag", "GOMEMLIMIT",
	// "3/4 of the cgroup's 2.0 GiB", "3/4 of the machine's 23.5 GiB".
	From string
}

// Choose returns the limit for flag, the --memory-limit value as the user
// typed it: a size ("1.5GiB", "800MB"), "none" or "0" for no limit, or
// "auto" (or empty) for the default. The default is GOMEMLIMIT when that
// is set (env is its value, "" when unset), else Share of the lowest
// memory limit of the process's cgroups, else Share of the machine's
// memory, read under root (a file system whose root is /, with /proc and
// /sys).
func Choose(flag, env string, root fs.FS) (Choice, error) {
	switch f := strings.ToLower(strings.TrimSpace(flag)); f {
	case "none", "0":
		return Choice{Bytes: Unlimited, From: "flag"}, nil
	case "", "auto":
		if env != "" {
			return Choice{Bytes: -1, From: "GOMEMLIMIT"}, nil
		}
	default:
		n, err := bytesize.Parse(flag)
		if err != nil {
			return Choice{}, fmt.Errorf("memory limit: %w; or none, or auto", err)
		}
		if n < 64<<20 {
			return Choice{}, fmt.Errorf("memory limit %q is under 64 MiB: the hub cannot run in it; give more, or none", flag)
		}
		return Choice{Bytes: int64(min(n, Unlimited)), From: "flag"}, nil
	}
	if n, ok := cgroupLimit(root); ok {
		return Choice{Bytes: int64(float64(n) * Share), From: fmt.Sprintf("3/4 of the cgroup's %s", gib(n))}, nil
	}
	n, err := memTotal(root)
	if err != nil {
		return Choice{Bytes: Unlimited, From: "none: " + err.Error()}, nil
	}
	return Choice{Bytes: int64(float64(n) * Share), From: fmt.Sprintf("3/4 of the machine's %s", gib(n))}, nil
}

// Apply sets c as the runtime's soft memory limit and returns the limit in
// effect.
func (c Choice) Apply() int64 {
	if c.Bytes >= 0 {
		debug.SetMemoryLimit(c.Bytes)
	}
	return debug.SetMemoryLimit(-1)
}

func gib(n uint64) string { return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30)) }

// cgroupLimit returns the lowest memory limit of the process's cgroup and
// its ancestors, in cgroup v2 (memory.max) or v1 (memory.limit_in_bytes),
// and false when none is set.
func cgroupLimit(root fs.FS) (uint64, bool) {
	data, err := fs.ReadFile(root, "proc/self/cgroup")
	if err != nil {
		return 0, false
	}
	best, found := uint64(0), false
	consider := func(n uint64) {
		if !found || n < best {
			best, found = n, true
		}
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		// hierarchy-ID:controllers:path
		parts := strings.SplitN(sc.Text(), ":", 3)
		if len(parts) != 3 {
			continue
		}
		controllers, cg := parts[1], parts[2]
		var dirs []string
		var file string
		switch {
		case controllers == "":
			// v2, mounted at /sys/fs/cgroup, or beside v1 at
			// /sys/fs/cgroup/unified.
			dirs, file = []string{"sys/fs/cgroup", "sys/fs/cgroup/unified"}, "memory.max"
		case hasController(controllers, "memory"):
			dirs, file = []string{"sys/fs/cgroup/memory"}, "memory.limit_in_bytes"
		default:
			continue
		}
		for _, d := range dirs {
			for p := path.Clean("/" + cg); ; p = path.Dir(p) {
				if n, ok := readLimit(root, path.Join(d, p, file)); ok {
					consider(n)
				}
				if p == "/" {
					break
				}
			}
		}
	}
	return best, found
}

func hasController(list, name string) bool {
	for _, c := range strings.Split(list, ",") {
		if c == name {
			return true
		}
	}
	return false
}

// readLimit reads a cgroup memory limit file: "max", or a v1 limit that is
// a page short of MaxInt64, is none.
func readLimit(root fs.FS, name string) (uint64, bool) {
	data, err := fs.ReadFile(root, strings.TrimPrefix(name, "/"))
	if err != nil {
		return 0, false
	}
	s := strings.TrimSpace(string(data))
	if s == "max" {
		return 0, false
	}
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil || n == 0 || n >= 1<<62 {
		return 0, false
	}
	return n, true
}

// memTotal returns MemTotal of /proc/meminfo.
func memTotal(root fs.FS) (uint64, error) {
	data, err := fs.ReadFile(root, "proc/meminfo")
	if err != nil {
		return 0, fmt.Errorf("machine's memory unknown: %w", err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		rest, ok := strings.CutPrefix(line, "MemTotal:")
		if !ok {
			continue
		}
		f := strings.Fields(rest)
		if len(f) == 2 && f[1] == "kB" {
			if n, err := strconv.ParseUint(f[0], 10, 64); err == nil {
				return n << 10, nil
			}
		}
	}
	return 0, errors.New("machine's memory unknown: no MemTotal in /proc/meminfo")
}
