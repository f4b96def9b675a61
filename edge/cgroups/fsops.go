package cgroups

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/outpost-mesh/outpost/internal/limitread"
)

var errNotExist = fs.ErrNotExist

// smallFile bounds what is read of a cgroup control file or /proc file
// other than a process list: memory.stat, the largest, is a few KiB.
const smallFile = 64 << 10

// v2Controllers are the controllers enabled for the pod tree on cgroup
// v2 where the machine has them, as runc enables them for containers.
var v2Controllers = []string{"cpuset", "cpu", "io", "memory", "hugetlb", "pids"}

// writeValue writes v to the control file at p. On cgroupfs the file
// exists or the write fails; under a test's fake root it is created.
func writeValue(p, v string) error {
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.WriteString(v); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", p, err)
	}
	return f.Close()
}

// ensure creates cgroup p in every tree, with its parents, and sets r.
func (l *Layout) ensure(p string, r Resources) error {
	for _, d := range l.dirs {
		var err error
		switch {
		case l.mode == V2:
			err = mkdirV2(d, p)
		case d == l.ctl["cpuset"]:
			err = mkdirCpuset(d, p)
		default:
			err = os.MkdirAll(filepath.Join(d, p), 0o755)
		}
		if err != nil {
			return err
		}
	}
	return l.set(p, r)
}

// components returns the cgroups from the top down to p: "/a/b" gives
// "/a", "/a/b".
func components(p string) []string {
	var out []string
	cur := ""
	for _, c := range strings.Split(strings.Trim(p, "/"), "/") {
		if c == "" {
			continue
		}
		cur += "/" + c
		out = append(out, cur)
	}
	return out
}

// mkdirV2 creates p under mount, enabling the controllers the machine has
// in each parent's cgroup.subtree_control on the way down, and in p's
// own, so that p and the containers below it are limited.
func mkdirV2(mount, p string) error {
	b, err := limitread.File(filepath.Join(mount, "cgroup.controllers"), smallFile)
	if err != nil {
		return err
	}
	have := strings.Fields(string(b))
	var want []string
	for _, c := range v2Controllers {
		if slices.Contains(have, c) {
			want = append(want, c)
		}
	}
	parent := mount
	for _, c := range components(p) {
		if err := enableControllers(parent, want); err != nil {
			return err
		}
		dir := filepath.Join(mount, c)
		if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
			return err
		}
		parent = dir
	}
	return enableControllers(parent, want)
}

// enableControllers enables want in dir's subtree_control, skipping what
// is enabled already. cpu, memory and pids must take; others (cpuset,
// io, hugetlb) may fail where the kernel refuses them.
func enableControllers(dir string, want []string) error {
	f := filepath.Join(dir, "cgroup.subtree_control")
	var on []string
	if b, err := limitread.File(f, smallFile); err == nil {
		for _, c := range strings.Fields(string(b)) {
			on = append(on, strings.TrimPrefix(c, "+"))
		}
	}
	var missing []string
	for _, c := range want {
		if !slices.Contains(on, c) {
			missing = append(missing, "+"+c)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	if writeValue(f, strings.Join(append(prefixed(on), missing...), " ")) == nil {
		return nil
	}
	for _, c := range missing {
		if err := writeValue(f, c); err != nil {
			switch c {
			case "+cpu", "+memory", "+pids":
				return fmt.Errorf("enable %s in %s: %w", c[1:], dir, err)
			}
		}
	}
	return nil
}

func prefixed(cs []string) []string {
	out := make([]string, len(cs))
	for i, c := range cs {
		out[i] = "+" + c
	}
	return out
}

// mkdirCpuset creates p in the v1 cpuset hierarchy at mount, copying
// cpuset.cpus and cpuset.mems down from the parent into each new level,
// as runc does, since a cpuset cgroup with none takes no process.
func mkdirCpuset(mount, p string) error {
	parent := mount
	for _, c := range components(p) {
		dir := filepath.Join(mount, c)
		if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
			return err
		}
		for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
			cur, err := limitread.File(filepath.Join(dir, f), smallFile)
			if err != nil {
				return err
			}
			if strings.TrimSpace(string(cur)) != "" {
				continue
			}
			v, err := limitread.File(filepath.Join(parent, f), smallFile)
			if err != nil {
				return err
			}
			if err := writeValue(filepath.Join(dir, f), strings.TrimSpace(string(v))); err != nil {
				return err
			}
		}
		parent = dir
	}
	return nil
}

// set writes r to cgroup p's control files.
func (l *Layout) set(p string, r Resources) error {
	period := r.CPUPeriod
	if period == 0 {
		period = QuotaPeriod
	}
	if l.mode == V2 {
		return l.setV2(filepath.Join(l.unified, p), r, period)
	}
	if d := l.controllerDir("cpu", p); d != "" {
		if r.CPUShares > 0 {
			if err := writeValue(filepath.Join(d, "cpu.shares"), strconv.FormatUint(r.CPUShares, 10)); err != nil {
				return err
			}
		}
		quota := "-1"
		if r.CPUQuota > 0 {
			quota = strconv.FormatInt(r.CPUQuota, 10)
		}
		// The kernel refuses a period below the quota in force: when the
		// period will not take, set the quota first.
		periodFile, quotaFile := filepath.Join(d, "cpu.cfs_period_us"), filepath.Join(d, "cpu.cfs_quota_us")
		if err := writeValue(periodFile, strconv.FormatInt(period, 10)); err != nil {
			if err := writeValue(quotaFile, quota); err != nil {
				return err
			}
			if err := writeValue(periodFile, strconv.FormatInt(period, 10)); err != nil {
				return err
			}
		} else if err := writeValue(quotaFile, quota); err != nil {
			return err
		}
	}
	if d := l.controllerDir("memory", p); d != "" {
		v := "-1"
		if r.MemoryLimit > 0 {
			v = strconv.FormatInt(r.MemoryLimit, 10)
		}
		if err := writeValue(filepath.Join(d, "memory.limit_in_bytes"), v); err != nil {
			return err
		}
	}
	if d := l.controllerDir("pids", p); d != "" {
		if err := writeValue(filepath.Join(d, "pids.max"), maxOr(r.PidsLimit)); err != nil {
			return err
		}
	}
	return nil
}

func (l *Layout) setV2(d string, r Resources, period int64) error {
	if l.Has("cpu") {
		if r.CPUShares > 0 {
			if err := writeValue(filepath.Join(d, "cpu.weight"), strconv.FormatUint(SharesToWeight(r.CPUShares), 10)); err != nil {
				return err
			}
		}
		if err := writeValue(filepath.Join(d, "cpu.max"), maxOr(r.CPUQuota)+" "+strconv.FormatInt(period, 10)); err != nil {
			return err
		}
	}
	if l.Has("memory") {
		if err := writeValue(filepath.Join(d, "memory.max"), maxOr(r.MemoryLimit)); err != nil {
			return err
		}
	}
	if l.Has("pids") {
		if err := writeValue(filepath.Join(d, "pids.max"), maxOr(r.PidsLimit)); err != nil {
			return err
		}
	}
	return nil
}

// maxOr returns v in decimal, or "max" for 0 (no limit).
func maxOr(v int64) string {
	if v <= 0 {
		return "max"
	}
	return strconv.FormatInt(v, 10)
}

// children returns the names of cgroup p's child cgroups in any tree.
func (l *Layout) children(p string) ([]string, error) {
	var out []string
	for _, d := range l.dirsOf(p) {
		ents, err := os.ReadDir(d)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, err
		}
		for _, e := range ents {
			if e.IsDir() && !slices.Contains(out, e.Name()) {
				out = append(out, e.Name())
			}
		}
	}
	slices.Sort(out)
	return out, nil
}

func (l *Layout) existsAny(p string) bool {
	for _, d := range l.dirsOf(p) {
		if exists(d) {
			return true
		}
	}
	return false
}

// remove removes cgroup p and every cgroup below it from every tree.
// When one will not go because processes are left in it, their processes
// are killed and the removal is tried again, until killTimeout.
func (l *Layout) remove(ctx context.Context, p string, killTimeout time.Duration) error {
	err := l.rmdirAll(p)
	if err == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, killTimeout)
	defer cancel()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		if kerr := l.killAll(p); kerr != nil {
			return fmt.Errorf("%w (kill what is left: %w)", err, kerr)
		}
		if err = l.rmdirAll(p); err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (after killing what was left: %w)", err, ctx.Err())
		case <-tick.C:
		}
	}
}

// rmdirAll removes cgroup p, children first, in every tree; a tree
// without it is skipped.
func (l *Layout) rmdirAll(p string) error {
	var errs []error
	for _, d := range l.dirsOf(p) {
		if err := rmdirTree(d); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func rmdirTree(dir string) error {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range ents {
		if e.IsDir() {
			if err := rmdirTree(filepath.Join(dir, e.Name())); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return err
			}
		}
	}
	if err := unix.Rmdir(dir); err != nil && !errors.Is(err, syscall.ENOENT) {
		return &fs.PathError{Op: "rmdir", Path: dir, Err: err}
	}
	return nil
}

// killAll sends SIGKILL to every process in cgroup p and below, in every
// tree.
func (l *Layout) killAll(p string) error {
	var errs []error
	for _, d := range l.dirsOf(p) {
		err := filepath.WalkDir(d, func(path string, e fs.DirEntry, err error) error {
			if err != nil {
				if errors.Is(err, fs.ErrNotExist) {
					return nil
				}
				return err
			}
			if !e.IsDir() {
				return nil
			}
			return eachPid(filepath.Join(path, "cgroup.procs"), func(pid int) {
				if err := unix.Kill(pid, unix.SIGKILL); err != nil && !errors.Is(err, unix.ESRCH) {
					errs = append(errs, fmt.Errorf("kill %d: %w", pid, err))
				}
			})
		})
		if err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// eachPid calls fn with each PID listed in the cgroup.procs file at p; a
// missing file lists none.
func eachPid(p string, fn func(int)) error {
	f, err := os.Open(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		pid, err := strconv.Atoi(strings.TrimSpace(sc.Text()))
		if err != nil || pid <= 0 {
			return fmt.Errorf("%s: bad pid %q", p, sc.Text())
		}
		fn(pid)
	}
	return sc.Err()
}

// Procs returns the PIDs of the processes in cgroup p itself (not below
// it), read from its memory tree on v1 (any tree when it has no memory
// controller) or the one tree on v2. The caller owns the returned slice.
func (l *Layout) Procs(p string) ([]int, error) {
	d := l.controllerDir("memory", p)
	if d == "" {
		d = filepath.Join(l.dirs[0], p)
	}
	var out []int
	if !exists(d) {
		return nil, fmt.Errorf("cgroup %s: %w", p, errNotExist)
	}
	err := eachPid(filepath.Join(d, "cgroup.procs"), func(pid int) { out = append(out, pid) })
	return out, err
}
