package containerd

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"syscall"
)

// volatileDirs are the directories of the containerd in dir that hold
// what dies with the machine: containerd's state (the tasks' bundles and
// root filesystems' mounts) and runc's. They live on tmpfs, as /run is on
// a Linux machine, so that after a reboot containerd finds none of the
// tasks, shims and sockets that died with it and has nothing to clean up
// or time out on; an agent's restart without a reboot finds them as they
// were.
func volatileDirs(dir string) []string {
	return []string{filepath.Join(dir, "state"), RuncRoot(dir)}
}

// mountVolatile mounts a tmpfs on each of the containerd's volatile
// directories that is not one already. A directory that is not a mount
// point but holds something (from an agent that kept them on disk, its
// tasks perhaps running still) is left as it is, and so is every
// directory where mounting is not permitted; mountVolatile says which in
// its error, and the caller goes on.
func mountVolatile(dir string) error {
	var errs []error
	for _, d := range volatileDirs(dir) {
		if err := os.MkdirAll(d, 0o711); err != nil {
			errs = append(errs, err)
			continue
		}
		mounted, err := isMountPoint(d)
		if err != nil || mounted {
			errs = append(errs, err)
			continue
		}
		if empty, err := isEmpty(d); err != nil || !empty {
			errs = append(errs, err, fmt.Errorf("%s holds state from before: left on disk", d))
			continue
		}
		if err := syscall.Mount("tmpfs", d, "tmpfs", syscall.MS_NOSUID|syscall.MS_NODEV, "mode=0711"); err != nil {
			errs = append(errs, fmt.Errorf("mount tmpfs on %s: %w", d, err))
		}
	}
	return errors.Join(errs...)
}

// isMountPoint reports whether d is on another device than its parent.
func isMountPoint(d string) (bool, error) {
	var st, parent syscall.Stat_t
	if err := syscall.Stat(d, &st); err != nil {
		return false, err
	}
	if err := syscall.Stat(filepath.Dir(d), &parent); err != nil {
		return false, err
	}
	return st.Dev != parent.Dev, nil
}

func isEmpty(d string) (bool, error) {
	f, err := os.Open(d)
	if err != nil {
		return false, err
	}
	defer f.Close()
	_, err = f.Readdirnames(1)
	if errors.Is(err, io.EOF) {
		return true, nil
	}
	return false, err
}
