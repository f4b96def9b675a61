package volumes

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	resourcehelper "k8s.io/component-helpers/resource"
)

// ensureDir makes dir (and its parents) with exactly perm, whatever the
// umask, as kubelet's emptyDir does, and reports whether it made it; a
// directory already there is left as it is (a container may have changed
// its mode).
func ensureDir(dir string, perm os.FileMode) (bool, error) {
	fi, err := os.Lstat(dir)
	if err == nil {
		if !fi.IsDir() {
			return false, fmt.Errorf("volume directory %s is not a directory", dir)
		}
		return false, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return false, fmt.Errorf("create volume directory: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(dir), 0o750); err != nil {
		return false, fmt.Errorf("create volume directory: %w", err)
	}
	if err := os.Mkdir(dir, perm); err != nil {
		return false, fmt.Errorf("create volume directory: %w", err)
	}
	if err := os.Chmod(dir, perm); err != nil {
		return false, fmt.Errorf("create volume directory: %w", err)
	}
	return true, nil
}

// Masks of kubelet's SetVolumeOwnership.
const (
	rwMask   = 0o660
	roMask   = 0o440
	execMask = 0o110
)

// setRootOwnership gives a volume's root directory to fsGroup as kubelet
// does for the emptyDir under every managed volume: group fsGroup,
// group-writable and searchable, set-group-ID so that new files inherit
// the group. Nothing for no fsGroup.
func setRootOwnership(dir string, fsGroup *int64) error {
	if fsGroup == nil {
		return nil
	}
	return changeOwnership(dir, *fsGroup, rwMask)
}

// changeOwnership chowns one file or directory (never through a symlink)
// to group gid and adds mask (and, for a directory, execMask and
// set-group-ID) to its mode.
func changeOwnership(p string, gid int64, mask uint32) error {
	var st unix.Stat_t
	if err := unix.Lstat(p, &st); err != nil {
		return fmt.Errorf("set volume ownership: %w", &fs.PathError{Op: "lstat", Path: p, Err: err})
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFLNK:
		return nil
	case unix.S_IFDIR:
		mask |= execMask | unix.S_ISGID
	}
	if int64(st.Gid) != gid {
		if err := unix.Lchown(p, -1, int(gid)); err != nil {
			return fmt.Errorf("set volume ownership: %w", &fs.PathError{Op: "chown", Path: p, Err: err})
		}
	}
	// chown clears set-user-ID and set-group-ID bits: mode after it.
	mode := (st.Mode & 0o7777) | mask
	if err := unix.Chmod(p, mode); err != nil {
		return fmt.Errorf("set volume ownership: %w", &fs.PathError{Op: "chmod", Path: p, Err: err})
	}
	return nil
}

// setTreeOwnership applies changeOwnership with mask to root and all
// beneath it, symlinks left alone and never followed.
func setTreeOwnership(root string, gid int64, mask uint32) error {
	return filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return changeOwnership(p, gid, mask)
	})
}

// setupEmptyDir makes an emptyDir volume: a directory of mode 0777, on a
// tmpfs of its own for medium Memory, as kubelet's.
func (m *Manager) setupEmptyDir(in *podInfo, dir string, src *corev1.EmptyDirVolumeSource) error {
	medium := corev1.StorageMediumDefault
	if src != nil {
		medium = src.Medium
	}
	switch {
	case medium == corev1.StorageMediumDefault, medium == corev1.StorageMediumMemory:
	case strings.HasPrefix(string(medium), string(corev1.StorageMediumHugePages)):
		return fmt.Errorf("%w: emptyDir medium %s", ErrUnsupported, medium)
	default:
		return fmt.Errorf("%w: emptyDir medium %q is unknown", ErrInvalidSpec, medium)
	}
	fresh, err := ensureDir(dir, 0o777)
	if err != nil {
		return err
	}
	if medium == corev1.StorageMediumMemory {
		var limit *int64
		if src.SizeLimit != nil {
			v := src.SizeLimit.Value()
			limit = &v
		}
		mounted, err := m.ensureTmpfs(dir, tmpfsSize(in.pod, in.nodeAllocatable, limit))
		if err != nil {
			return err
		}
		fresh = fresh || mounted
	}
	if !fresh { // set up before: its root is the containers' now
		return nil
	}
	return setRootOwnership(dir, in.fsGroup)
}

// tmpfsSize returns the size of a memory-backed volume as kubelet's
// emptyDir computes it: the node's allocatable memory, or the pod's
// memory limit if it has one below that, or the volume's sizeLimit
// (limit, nil for none) if below both; values of 0 or less are passed
// over. 0 means no size option: the kernel's default, half the node's
// memory.
func tmpfsSize(pod *corev1.Pod, nodeAllocatable corev1.ResourceList, limit *int64) int64 {
	var size int64
	if q, ok := nodeAllocatable[corev1.ResourceMemory]; ok && q.Value() > 0 {
		size = q.Value()
	}
	below := func(v int64) bool { return v > 0 && (size == 0 || v <= size) }
	if v := podMemoryLimit(pod); below(v) {
		size = v
	}
	if limit != nil && below(*limit) {
		size = *limit
	}
	return size
}

// podMemoryLimit returns the memory limit of pod's cgroup as kubelet's
// ResourceConfigForPod sets it: with pod-level limits, or when every
// container declares one; 0 for none.
func podMemoryLimit(pod *corev1.Pod) int64 {
	if !resourcehelper.IsPodLevelResourcesSet(pod) {
		for _, cs := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
			for i := range cs {
				if _, ok := cs[i].Resources.Limits[corev1.ResourceMemory]; !ok {
					return 0
				}
			}
		}
	}
	lims := resourcehelper.PodLimits(pod, resourcehelper.PodResourcesOptions{})
	q, ok := lims[corev1.ResourceMemory]
	if !ok {
		return 0
	}
	return q.Value()
}

// ensureTmpfs mounts a tmpfs of size bytes (0: the kernel's default) on
// dir unless one is mounted there, and reports whether it mounted. Swap
// is kept out where the kernel allows (noswap, Linux 6.4), so that
// secrets never reach a disk.
func (m *Manager) ensureTmpfs(dir string, size int64) (bool, error) {
	real, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return false, fmt.Errorf("mount tmpfs: %w", err)
	}
	switch on, err := tmpfsRoot(real); {
	case err != nil:
		return false, fmt.Errorf("mount tmpfs: %w", err)
	case on:
		return false, nil
	}
	var opts []string
	if size > 0 {
		opts = append(opts, fmt.Sprintf("size=%d", size))
	}
	if m.noswap.Load() != 2 {
		err := unix.Mount("tmpfs", real, "tmpfs", 0, strings.Join(append(opts, "noswap"), ","))
		if err == nil {
			m.noswap.Store(1)
			return true, nil
		}
		if !errors.Is(err, unix.EINVAL) || m.noswap.Load() == 1 {
			return false, fmt.Errorf("mount tmpfs on %s: %w", real, err)
		}
		m.noswap.Store(2)
	}
	if err := unix.Mount("tmpfs", real, "tmpfs", 0, strings.Join(opts, ",")); err != nil {
		return false, fmt.Errorf("mount tmpfs on %s: %w", real, err)
	}
	return true, nil
}

// tmpfsRoot reports whether dir is the root of a tmpfs: it is on a tmpfs
// and on another device than its parent (every tmpfs mount is a device
// of its own). It costs two stats and a statfs, where a look in
// mountinfo would cost a read of every mount of the node, and the pods'
// projected volumes are checked every time the node's view changes.
func tmpfsRoot(dir string) (bool, error) {
	var fs unix.Statfs_t
	if err := unix.Statfs(dir, &fs); err != nil {
		return false, &os.PathError{Op: "statfs", Path: dir, Err: err}
	}
	if fs.Type != unix.TMPFS_MAGIC {
		return false, nil
	}
	var st, parent unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		return false, &os.PathError{Op: "stat", Path: dir, Err: err}
	}
	if err := unix.Stat(filepath.Dir(dir), &parent); err != nil {
		return false, &os.PathError{Op: "stat", Path: filepath.Dir(dir), Err: err}
	}
	return st.Dev != parent.Dev, nil
}

// checkHostPath checks a hostPath volume's path against its type as
// kubelet's hostPath plugin does, making a DirectoryOrCreate (0755) or
// FileOrCreate (0644, in an existing directory) that is missing, and
// returns the path.
func checkHostPath(src *corev1.HostPathVolumeSource) (string, error) {
	p := src.Path
	if !filepath.IsAbs(p) || strings.ContainsRune(p, 0) {
		return "", fmt.Errorf("%w: hostPath %q must be an absolute path", ErrInvalidSpec, p)
	}
	for _, el := range strings.Split(p, "/") {
		if el == ".." {
			return "", fmt.Errorf("%w: hostPath %q must not contain '..'", ErrInvalidSpec, p)
		}
	}
	typ := corev1.HostPathUnset
	if src.Type != nil {
		typ = *src.Type
	}
	switch typ {
	case corev1.HostPathUnset:
		return p, nil
	case corev1.HostPathDirectoryOrCreate:
		if _, err := os.Stat(p); errors.Is(err, fs.ErrNotExist) {
			if err := os.MkdirAll(p, 0o755); err != nil {
				return "", fmt.Errorf("create hostPath directory: %w", err)
			}
		}
		typ = corev1.HostPathDirectory
	case corev1.HostPathFileOrCreate:
		if _, err := os.Stat(p); errors.Is(err, fs.ErrNotExist) {
			if _, err := os.Stat(filepath.Dir(p)); err != nil {
				return "", fmt.Errorf("%w: hostPath %s of type FileOrCreate: its directory must exist: %w", ErrInvalidSpec, p, err)
			}
			f, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY, 0o644)
			if err != nil {
				return "", fmt.Errorf("create hostPath file: %w", err)
			}
			f.Close()
		}
		typ = corev1.HostPathFile
	}
	want := map[corev1.HostPathType]struct {
		mode fs.FileMode
		what string
	}{
		corev1.HostPathDirectory: {fs.ModeDir, "directory"},
		corev1.HostPathFile:      {0, "file"},
		corev1.HostPathSocket:    {fs.ModeSocket, "socket file"},
		corev1.HostPathCharDev:   {fs.ModeDevice | fs.ModeCharDevice, "character device"},
		corev1.HostPathBlockDev:  {fs.ModeDevice, "block device"},
	}
	w, ok := want[typ]
	if !ok {
		return "", fmt.Errorf("%w: hostPath type %q is not a valid type", ErrInvalidSpec, typ)
	}
	fi, err := os.Stat(p)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return "", fmt.Errorf("%w: hostPath %s doesn't exist", ErrInvalidSpec, p)
		}
		return "", fmt.Errorf("%w: hostPath type check failed, %s is not a %s: %w", ErrInvalidSpec, p, w.what, err)
	}
	if got := fi.Mode().Type(); got != w.mode {
		return "", fmt.Errorf("%w: hostPath type check failed: %s is not a %s, it's a %s", ErrInvalidSpec, p, w.what, describeType(got))
	}
	return p, nil
}

func describeType(t fs.FileMode) string {
	switch {
	case t == 0:
		return "file"
	case t == fs.ModeDir:
		return "directory"
	case t == fs.ModeSocket:
		return "socket file"
	case t == fs.ModeDevice|fs.ModeCharDevice:
		return "character device"
	case t == fs.ModeDevice:
		return "block device"
	case t == fs.ModeNamedPipe:
		return "named pipe"
	}
	return t.String()
}
