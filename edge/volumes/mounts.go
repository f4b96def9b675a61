package volumes

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"

	"github.com/outpost-mesh/outpost/edge/runtime"
)

// Mounts returns the mounts of container c of the pod, as kubelet's
// makeMounts: one per volumeMount, in order, then the automounted service
// account volume's if the pod has it and c mounts nothing at
// AutomountPath. configMap, secret, downwardAPI and projected volumes are
// mounted read-only whatever the volumeMount says. A relative mountPath
// is made absolute.
//
// A subPath (or a subPathExpr, expanded with env, the container's
// environment, as kubelet expands $(VAR)) is resolved inside its volume:
// an absolute one, one with "..", or one whose symlinks lead out of the
// volume is an ErrInvalidSpec; a missing one is made as a directory with
// the volume root's mode. What it resolves to is opened without following
// symlinks and bind-mounted at Dir/<uid>/volume-subpaths/<volume>/
// <container>/<index>, the Mount's HostPath, so that nothing the
// container changes in the volume later moves what the runtime mounts.
// Call Mounts when (re)starting the container: the bind is made again
// each time, to what the subPath then resolves to. Teardown removes them.
//
// Mountpropagation and recursiveReadOnly are not carried (runtime.Mount
// has no such fields): mounts are private, read-only ones not recursively.
func (pv *PodVolumes) Mounts(c *corev1.Container, env []runtime.EnvVar) ([]runtime.Mount, error) {
	if c == nil {
		return nil, fmt.Errorf("%w: no container", ErrInvalidSpec)
	}
	var out []runtime.Mount
	needSubPath := false
	for i := range c.VolumeMounts {
		vm := &c.VolumeMounts[i]
		if vm.SubPath != "" || vm.SubPathExpr != "" {
			needSubPath = true
		}
		v, ok := pv.vols[vm.Name]
		if !ok {
			return nil, fmt.Errorf("%w: cannot find volume %q to mount into container %q", ErrInvalidSpec, vm.Name, c.Name)
		}
		if vm.MountPath == "" {
			return nil, fmt.Errorf("%w: volumeMount %q of container %q has no mountPath", ErrInvalidSpec, vm.Name, c.Name)
		}
		out = append(out, runtime.Mount{HostPath: v.path, ContainerPath: absolute(vm.MountPath), ReadOnly: vm.ReadOnly || v.readOnly})
	}
	if needSubPath {
		if err := validName("container", c.Name); err != nil {
			return nil, err
		}
		unlock := pv.m.lock(pv.uid)
		defer unlock()
		if _, err := os.Stat(filepath.Join(pv.m.podDir(pv.uid), volumesDir)); err != nil {
			return nil, fmt.Errorf("pod %s: volumes not set up: %w", pv.uid, err)
		}
		for i := range c.VolumeMounts {
			vm := &c.VolumeMounts[i]
			sub, err := subPathOf(vm, env)
			if err != nil {
				return nil, fmt.Errorf("volumeMount %q of container %q: %w", vm.Name, c.Name, err)
			}
			if sub == "" {
				continue
			}
			target := filepath.Join(pv.m.podDir(pv.uid), subpathsDir, vm.Name, c.Name, strconv.Itoa(i))
			if err := bindSubPath(out[i].HostPath, sub, target); err != nil {
				return nil, fmt.Errorf("volumeMount %q of container %q: %w", vm.Name, c.Name, err)
			}
			out[i].HostPath = target
		}
	}
	if pv.automount != "" && !mountsAt(c, AutomountPath) {
		out = append(out, runtime.Mount{HostPath: pv.vols[pv.automount].path, ContainerPath: AutomountPath, ReadOnly: true})
	}
	return out, nil
}

// absolute makes a mountPath absolute, as kubelet does on Linux.
func absolute(p string) string {
	if strings.HasPrefix(p, "/") {
		return p
	}
	return "/" + p
}

// subPathOf returns vm's subPath, or its subPathExpr expanded with env,
// checked to stay inside the volume by its words: relative, no "..".
func subPathOf(vm *corev1.VolumeMount, env []runtime.EnvVar) (string, error) {
	sub := vm.SubPath
	if vm.SubPathExpr != "" {
		if sub != "" {
			return "", fmt.Errorf("%w: subPath and subPathExpr are mutually exclusive", ErrInvalidSpec)
		}
		var err error
		if sub, err = expandSubPath(vm.SubPathExpr, env); err != nil {
			return "", err
		}
	}
	if sub == "" {
		return "", nil
	}
	if strings.HasPrefix(sub, "/") {
		return "", fmt.Errorf("%w: subPath %q must not be an absolute path", ErrInvalidSpec, sub)
	}
	if strings.ContainsRune(sub, 0) {
		return "", fmt.Errorf("%w: subPath %q contains NUL", ErrInvalidSpec, sub)
	}
	for _, el := range strings.Split(sub, "/") {
		if el == ".." {
			return "", fmt.Errorf("%w: subPath %q must not contain '..'", ErrInvalidSpec, sub)
		}
	}
	return path.Clean(sub), nil
}

// expandSubPath expands $(VAR) in expr with env (a later name overriding
// an earlier one), $$ standing for $, as kubelet's expansion; a variable
// without a value is an error, as kubelet's.
func expandSubPath(expr string, env []runtime.EnvVar) (string, error) {
	vals := make(map[string]string, len(env))
	for _, e := range env {
		vals[e.Name] = e.Value
	}
	var missing []string
	var b strings.Builder
	for i := 0; i < len(expr); i++ {
		if expr[i] != '$' || i+1 >= len(expr) {
			b.WriteByte(expr[i])
			continue
		}
		switch expr[i+1] {
		case '$':
			b.WriteByte('$')
			i++
		case '(':
			end := strings.IndexByte(expr[i+2:], ')')
			if end < 0 {
				b.WriteString("$(")
				i++
				continue
			}
			name := expr[i+2 : i+2+end]
			v := vals[name]
			if v == "" {
				missing = append(missing, name)
			}
			b.WriteString(v)
			i += 2 + end
		default:
			b.WriteByte('$')
		}
	}
	if len(missing) > 0 {
		return "", fmt.Errorf("%w: subPathExpr %q: missing value for %s", ErrInvalidSpec, expr, strings.Join(missing, ", "))
	}
	return b.String(), nil
}

// bindSubPath resolves sub inside the volume at volPath and bind-mounts
// what it names on target.
func bindSubPath(volPath, sub, target string) error {
	base, err := filepath.EvalSymlinks(volPath)
	if err != nil {
		return fmt.Errorf("resolve volume path: %w", err)
	}
	full := filepath.Join(volPath, sub)
	if _, err := os.Stat(full); errors.Is(err, fs.ErrNotExist) {
		fi, err := os.Stat(base)
		if err != nil {
			return fmt.Errorf("create subPath: %w", err)
		}
		if err := safeMkdirAll(base, sub, uint32(fi.Mode().Perm())); err != nil {
			return err
		}
	}
	real, err := filepath.EvalSymlinks(full)
	if err != nil {
		return fmt.Errorf("resolve subPath %q: %w", sub, err)
	}
	if real != base && !strings.HasPrefix(real, strings.TrimSuffix(base, "/")+"/") {
		return fmt.Errorf("%w: subPath %q leads out of its volume", ErrInvalidSpec, sub)
	}
	rel, err := filepath.Rel(base, real)
	if err != nil {
		return fmt.Errorf("resolve subPath %q: %w", sub, err)
	}
	fd, err := openBeneath(base, rel)
	if err != nil {
		return fmt.Errorf("%w: subPath %q: %w", ErrInvalidSpec, sub, err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Errorf("stat subPath %q: %w", sub, err)
	}
	if err := prepareTarget(target, st.Mode&unix.S_IFMT == unix.S_IFDIR); err != nil {
		return err
	}
	if err := unix.Mount("/proc/self/fd/"+strconv.Itoa(fd), target, "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("bind subPath %q: %w", sub, err)
	}
	return nil
}

// openBeneath opens rel (clean, relative, no "..") beneath the directory
// base without following any symlink, and returns an O_PATH descriptor.
func openBeneath(base, rel string) (int, error) {
	fd, err := unix.Open(base, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("open %s: %w", base, err)
	}
	if rel == "." {
		return fd, nil
	}
	for _, el := range strings.Split(rel, "/") {
		nfd, err := unix.Openat(fd, el, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		unix.Close(fd)
		if err != nil {
			return -1, fmt.Errorf("open %s: %w", el, err)
		}
		fd = nfd
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			unix.Close(fd)
			return -1, fmt.Errorf("stat %s: %w", el, err)
		}
		if st.Mode&unix.S_IFMT == unix.S_IFLNK {
			unix.Close(fd)
			return -1, fmt.Errorf("%s became a symlink while resolving", el)
		}
	}
	return fd, nil
}

// safeMkdirAll makes the directories of rel beneath base with perm, as
// kubelet's SafeMakeDir, refusing to pass through a symlink or a
// non-directory.
func safeMkdirAll(base, rel string, perm uint32) error {
	fd, err := unix.Open(base, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("create subPath: %w", err)
	}
	defer func() { unix.Close(fd) }()
	for _, el := range strings.Split(rel, "/") {
		if el == "." || el == "" {
			continue
		}
		created := false
		if err := unix.Mkdirat(fd, el, perm); err == nil {
			created = true
		} else if !errors.Is(err, unix.EEXIST) {
			return fmt.Errorf("create subPath %q: %w", rel, err)
		}
		nfd, err := unix.Openat(fd, el, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR) {
				return fmt.Errorf("%w: subPath %q: %s is a symlink or not a directory", ErrInvalidSpec, rel, el)
			}
			return fmt.Errorf("create subPath %q: %w", rel, err)
		}
		unix.Close(fd)
		fd = nfd
		if created {
			if err := unix.Fchmod(fd, perm); err != nil {
				return fmt.Errorf("create subPath %q: %w", rel, err)
			}
		}
	}
	return nil
}

// prepareTarget makes target an empty directory (isDir) or file to bind
// on, unmounting what an earlier bind left there.
func prepareTarget(target string, isDir bool) error {
	if err := os.MkdirAll(filepath.Dir(target), 0o750); err != nil {
		return fmt.Errorf("create subPath target: %w", err)
	}
	if _, err := os.Lstat(target); err == nil {
		real, err := filepath.EvalSymlinks(target)
		if err != nil {
			return fmt.Errorf("resolve subPath target: %w", err)
		}
		for range 16 { // binds stacked by earlier calls, at most
			mounts, err := readMountInfo()
			if err != nil {
				return err
			}
			if !isMountPoint(mounts, real) {
				break
			}
			if err := unix.Unmount(real, unix.MNT_DETACH); err != nil {
				return fmt.Errorf("unmount old subPath bind: %w", err)
			}
		}
	}
	fi, err := os.Lstat(target)
	switch {
	case err == nil && fi.IsDir() == isDir && (isDir || fi.Mode().IsRegular()):
		return nil
	case err == nil:
		if err := os.Remove(target); err != nil {
			return fmt.Errorf("replace subPath target: %w", err)
		}
	case !errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("subPath target: %w", err)
	}
	if isDir {
		if err := os.Mkdir(target, 0o750); err != nil {
			return fmt.Errorf("create subPath target: %w", err)
		}
		return nil
	}
	f, err := os.OpenFile(target, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o640)
	if err != nil {
		return fmt.Errorf("create subPath target: %w", err)
	}
	return f.Close()
}

func isMountPoint(mounts []mountInfo, p string) bool {
	for _, mi := range mounts {
		if mi.mountPoint == p {
			return true
		}
	}
	return false
}
