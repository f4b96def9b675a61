package volumes

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"

	"golang.org/x/sys/unix"
)

// Teardown removes the volumes of the pod with uid: it unmounts every
// mount beneath the pod's directory (tmpfs volumes, subPath binds),
// deepest first, and only once none is left removes the directory. It
// never follows a symlink and never enters a hostPath: those are not
// under the pod's directory, and a subPath bind of one is unmounted (and
// its target removed only if empty) before anything is removed. The
// pod's containers must be gone. Tearing down a pod that has no volumes
// is not an error.
func (m *Manager) Teardown(ctx context.Context, uid string) error {
	if err := validUID(uid); err != nil {
		return err
	}
	unlock := m.lock(uid)
	defer unlock()
	return m.teardown(ctx, uid)
}

func (m *Manager) teardown(ctx context.Context, uid string) error {
	dir := m.podDir(uid)
	if _, err := os.Lstat(dir); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	real, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return fmt.Errorf("tear down pod %s: %w", uid, err)
	}
	for range 16 { // mounts stacked on one another, at most
		if err := ctx.Err(); err != nil {
			return err
		}
		mounts, err := readMountInfo()
		if err != nil {
			return fmt.Errorf("tear down pod %s: %w", uid, err)
		}
		under := mountsUnder(mounts, real)
		if len(under) == 0 {
			return m.removePodDir(uid, dir)
		}
		for _, p := range under {
			if err := unix.Unmount(p, 0); err != nil {
				if err := unix.Unmount(p, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) {
					return fmt.Errorf("tear down pod %s: unmount %s: %w", uid, p, err)
				}
			}
			m.log.Debug("unmounted pod volume", "pod", uid, "path", p)
		}
	}
	return fmt.Errorf("tear down pod %s: mounts remain beneath %s", uid, real)
}

// removePodDir removes a pod directory with nothing mounted beneath it:
// the subPath targets, which are empty once unbound, with Remove alone
// (so that a bind that is somehow still there stops it), then the rest.
func (m *Manager) removePodDir(uid, dir string) error {
	if err := removeEmptyTree(filepath.Join(dir, subpathsDir)); err != nil {
		return fmt.Errorf("tear down pod %s: %w", uid, err)
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("tear down pod %s: %w", uid, err)
	}
	return nil
}

// removeEmptyTree removes root, whose files must all be empty and whose
// directories hold nothing else, bottom-up with Remove alone.
func removeEmptyTree(root string) error {
	var paths []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type().IsRegular() {
			fi, err := d.Info()
			if err != nil {
				return err
			}
			if fi.Size() != 0 {
				return fmt.Errorf("subPath target %s is not empty: still bound?", p)
			}
		}
		paths = append(paths, p)
		return nil
	})
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	slices.Reverse(paths)
	for _, p := range paths {
		if err := os.Remove(p); err != nil {
			return err
		}
	}
	return nil
}

// Sweep tears down the volumes of every pod under Dir that keep does not
// keep: what a crash or a restart left behind. The agent calls it at
// start, once it knows its pods. Entries of Dir that cannot be pod
// directories are left alone.
func (m *Manager) Sweep(ctx context.Context, keep func(uid string) bool) error {
	ents, err := os.ReadDir(m.cfg.Dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("sweep volumes: %w", err)
	}
	var errs []error
	for _, e := range ents {
		uid := e.Name()
		if !e.IsDir() || validUID(uid) != nil || keep(uid) {
			continue
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		m.log.Info("removing volumes of a pod no longer kept", "pod", uid)
		if err := m.Teardown(ctx, uid); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
