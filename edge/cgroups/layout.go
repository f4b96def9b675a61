package cgroups

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/outpost-mesh/outpost/internal/limitread"
)

// DefaultMountRoot is where cgroup file systems are mounted.
const DefaultMountRoot = "/sys/fs/cgroup"

// ErrNotSupported is returned by DetectLayout when no cgroup file system
// is mounted where it looks.
var ErrNotSupported = errors.New("cgroups not supported")

// Mode is how a machine's cgroups are laid out.
type Mode int

// Modes.
const (
	// V1: a hierarchy per controller (or group of them) under the mount
	// root.
	V1 Mode = iota + 1
	// Hybrid is V1 with a cgroup2 tree, without controllers, at
	// MOUNT/unified, which runc places containers in too.
	Hybrid
	// V2: one cgroup2 tree at the mount root.
	V2
)

func (m Mode) String() string {
	switch m {
	case V1:
		return "v1"
	case Hybrid:
		return "hybrid"
	case V2:
		return "v2"
	}
	return fmt.Sprintf("Mode(%d)", int(m))
}

// Layout is the cgroup hierarchies of a machine. It is read-only after
// DetectLayout and safe for concurrent use.
type Layout struct {
	mode Mode
	// dirs are the mount points of the trees a cgroup is made in: every
	// v1 hierarchy (runc joins all it knows of, named ones too) and, in
	// hybrid mode, the unified tree; on V2 the one tree.
	dirs []string
	// ctl maps a v1 controller (cpu, memory, ...) to its hierarchy's
	// mount point; on V2 each maps to the one tree.
	ctl     map[string]string
	unified string // the cgroup2 mount; "" on V1
}

// DetectLayout reads how cgroups are mounted under mountRoot ("" for
// DefaultMountRoot): V2 when mountRoot holds cgroup.controllers; else a
// v1 hierarchy for each directory (not symlink) holding cgroup.procs,
// named by its controllers ("cpu,cpuacct") or its name ("systemd"), and
// Hybrid when unified/ holds cgroup.controllers. It returns an error
// wrapping ErrNotSupported when it finds neither.
func DetectLayout(mountRoot string) (*Layout, error) {
	if mountRoot == "" {
		mountRoot = DefaultMountRoot
	}
	if exists(filepath.Join(mountRoot, "cgroup.controllers")) {
		b, err := limitread.File(filepath.Join(mountRoot, "cgroup.controllers"), smallFile)
		if err != nil {
			return nil, fmt.Errorf("detect cgroups: %w", err)
		}
		l := &Layout{mode: V2, dirs: []string{mountRoot}, ctl: map[string]string{}, unified: mountRoot}
		for _, c := range strings.Fields(string(b)) {
			l.ctl[c] = mountRoot
		}
		if _, ok := l.ctl["cpu"]; ok {
			l.ctl["cpuacct"] = mountRoot // cpu.stat holds the usage
		}
		return l, nil
	}
	ents, err := os.ReadDir(mountRoot)
	if err != nil {
		return nil, fmt.Errorf("detect cgroups: %w: %w", ErrNotSupported, err)
	}
	l := &Layout{mode: V1, ctl: map[string]string{}}
	for _, e := range ents {
		if !e.IsDir() || e.Type()&fs.ModeSymlink != 0 {
			continue
		}
		dir := filepath.Join(mountRoot, e.Name())
		if e.Name() == "unified" && exists(filepath.Join(dir, "cgroup.controllers")) {
			l.mode, l.unified = Hybrid, dir
			l.dirs = append(l.dirs, dir)
			continue
		}
		if !exists(filepath.Join(dir, "cgroup.procs")) {
			continue
		}
		l.dirs = append(l.dirs, dir)
		for _, c := range strings.Split(e.Name(), ",") {
			l.ctl[c] = dir
		}
	}
	if len(l.ctl) == 0 {
		return nil, fmt.Errorf("detect cgroups: %w: no hierarchy under %s", ErrNotSupported, mountRoot)
	}
	slices.Sort(l.dirs)
	return l, nil
}

func exists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// Unified returns the mount point of the cgroup2 tree: the one tree on
// V2, MOUNT/unified in hybrid mode, "" on V1.
func (l *Layout) Unified() string { return l.unified }

// Mode returns the layout's mode.
func (l *Layout) Mode() Mode { return l.mode }

// HybridControllers returns, in Hybrid mode, the controllers the unified
// tree holds (those no v1 hierarchy is mounted for, such as hugetlb), and
// nil in the other modes. crun refuses to run containers in hybrid mode
// unless there are none.
func (l *Layout) HybridControllers() ([]string, error) {
	if l.mode != Hybrid {
		return nil, nil
	}
	b, err := limitread.File(filepath.Join(l.unified, "cgroup.controllers"), smallFile)
	if err != nil {
		return nil, fmt.Errorf("read the unified tree's controllers: %w", err)
	}
	return strings.Fields(string(b)), nil
}

// CheckCrun returns why crun cannot run containers on l (hybrid, with
// controllers on the unified tree), with the commands that bind those
// controllers to v1 hierarchies of their own, as systemd's hybrid layout
// has them, after which crun can; or nil if it can.
func (l *Layout) CheckCrun() error {
	ctls, err := l.HybridControllers()
	if err != nil {
		return err
	}
	if len(ctls) == 0 {
		return nil
	}
	mounts := make([]string, len(ctls))
	for i, c := range ctls {
		dir := filepath.Join(filepath.Dir(l.unified), c)
		mounts[i] = fmt.Sprintf("mkdir -p %s && mount -t cgroup -o %s cgroup %s", dir, c, dir)
	}
	return fmt.Errorf("crun runs no container on this machine's hybrid cgroups, whose cgroup2 tree holds controllers (%s); "+
		"bind them to cgroup v1 hierarchies as systemd's hybrid layout does (%s)", strings.Join(ctls, " "), strings.Join(mounts, "; "))
}

// Dirs returns the mount points a cgroup is made in, one per tree. The
// caller owns the returned slice.
func (l *Layout) Dirs() []string { return slices.Clone(l.dirs) }

// controllerDir returns the directory of cgroup path in controller c's
// tree, or "" when no tree has c.
func (l *Layout) controllerDir(c, path string) string {
	m, ok := l.ctl[c]
	if !ok {
		return ""
	}
	return filepath.Join(m, path)
}

// Has reports whether the layout has controller c ("memory", "pids").
func (l *Layout) Has(c string) bool { _, ok := l.ctl[c]; return ok }
