// Package bpfpin is the kernel plumbing that netd's eBPF dataplanes
// (netd/ebpflb and netd/tcnat) share: maps and links pinned on a bpffs,
// so that the routing outlives the agent and the next agent adopts it;
// a check of which program a pinned link runs; and map writes in
// batches. What each dataplane pins, and the layouts of its maps, stay
// the dataplane's own. Only packages under netd import it.
package bpfpin

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"
)

// MountBPFFS mounts a bpffs at path, made if missing, unless one is
// there already.
func MountBPFFS(path string) error {
	if err := os.MkdirAll(path, 0o700); err != nil {
		return fmt.Errorf("bpffs: %w", err)
	}
	if ok, err := IsBPFFS(path); err != nil || ok {
		return err
	}
	if err := unix.Mount("bpffs", path, "bpf", 0, "mode=0700"); err != nil {
		return fmt.Errorf("mount bpffs at %s: %w", path, err)
	}
	return nil
}

// IsBPFFS reports whether path is on a bpffs. A path that does not
// exist is an error wrapping os.ErrNotExist.
func IsBPFFS(path string) (bool, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return false, fmt.Errorf("statfs %s: %w", path, err)
	}
	return uint32(st.Type) == unix.BPF_FS_MAGIC, nil
}

// MakeDir makes the pin directory dir (mode 0700) and those above it
// that are missing, after checking that the nearest of them that exists
// is on a bpffs: nothing is made off bpffs.
func MakeDir(dir string) error {
	d := dir
	for {
		if _, err := os.Stat(d); err == nil || d == "/" {
			break
		}
		d = filepath.Dir(d)
	}
	if ok, err := IsBPFFS(d); err != nil {
		return err
	} else if !ok {
		return fmt.Errorf("pin dir %s: not on a bpffs mount", dir)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("pin dir: %w", err)
	}
	return nil
}

// Names returns the names of the entries of dir that start with prefix,
// in name order; none if dir does not exist.
func Names(dir, prefix string) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("pin dir: %w", err)
	}
	var out []string
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), prefix) {
			out = append(out, e.Name())
		}
	}
	return out, nil
}

// RemovePins removes the pins names under dir, in their order, then dir
// (an error if anything else is left in it). What is already gone is
// not an error, nor is a dir that does not exist; a dir off bpffs is,
// and nothing is removed from it. With no handle left open, an unpinned link detaches and an
// unpinned map is freed.
func RemovePins(dir string, names []string) error {
	if ok, err := IsBPFFS(dir); errors.Is(err, os.ErrNotExist) {
		return nil
	} else if err != nil {
		return err
	} else if !ok {
		return fmt.Errorf("pin dir %s: not on a bpffs mount", dir)
	}
	var errs []error
	for _, name := range names {
		if err := os.Remove(filepath.Join(dir, name)); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	if err := os.Remove(dir); err != nil && !errors.Is(err, os.ErrNotExist) {
		errs = append(errs, fmt.Errorf("pin dir: %w", err))
	}
	return errors.Join(errs...)
}

// OpenMap loads the map pinned at path, or makes and pins it (pinned
// true). A pinned map whose type, sizes or flags are not spec's is an
// error: the dataplane must be removed to change its layout.
func OpenMap(path string, spec *ebpf.MapSpec) (m *ebpf.Map, pinned bool, err error) {
	m, err = ebpf.LoadPinnedMap(path, nil)
	if err == nil {
		if err := spec.Compatible(m); err != nil {
			m.Close()
			return nil, false, fmt.Errorf("pinned at %s: %w (Remove the dataplane to change its layout or sizes)", path, err)
		}
		return m, false, nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		return nil, false, fmt.Errorf("load pinned: %w", err)
	}
	m, err = ebpf.NewMap(spec)
	if err != nil {
		return nil, false, fmt.Errorf("create: %w", err)
	}
	if err := m.Pin(path); err != nil {
		m.Close()
		return nil, false, fmt.Errorf("pin: %w", err)
	}
	return m, true, nil
}

// Runs reports whether the link of info runs the program insns (by its
// tag). A program's tag leaves out which maps it reads: see UsesOnly.
func Runs(info *link.Info, insns asm.Instructions) (bool, error) {
	pinfo, err := programInfo(info)
	if err != nil {
		return false, err
	}
	// Marshalling resolves the jumps' offsets, which the tag covers.
	insns = slices.Clone(insns)
	if err := insns.Marshal(io.Discard, nativeEndian()); err != nil {
		return false, fmt.Errorf("marshal program: %w", err)
	}
	return insns.HasTag(pinfo.Tag, nativeEndian())
}

// UsesOnly reports whether the program of the link of info reads no map
// but maps: a link may run this version's program on maps that are no
// longer pinned (after a New that failed part way, say), which Runs
// cannot tell.
func UsesOnly(info *link.Info, maps map[string]*ebpf.Map) (bool, error) {
	pinfo, err := programInfo(info)
	if err != nil {
		return false, err
	}
	used, ok := pinfo.MapIDs()
	if !ok {
		return false, fmt.Errorf("link's program info: no map ids: %w", ebpf.ErrNotSupported)
	}
	ours := map[ebpf.MapID]bool{}
	for _, m := range maps {
		info, err := m.Info()
		if err != nil {
			return false, fmt.Errorf("map info: %w", err)
		}
		if id, ok := info.ID(); ok {
			ours[id] = true
		}
	}
	for _, id := range used {
		if !ours[id] {
			return false, nil
		}
	}
	return true, nil
}

// programInfo returns the info of the program of the link of info.
func programInfo(info *link.Info) (*ebpf.ProgramInfo, error) {
	p, err := ebpf.NewProgramFromID(info.Program)
	if err != nil {
		return nil, fmt.Errorf("link's program: %w", err)
	}
	defer p.Close()
	pinfo, err := p.Info()
	if err != nil {
		return nil, fmt.Errorf("link's program info: %w", err)
	}
	return pinfo, nil
}

// nativeEndian is the machine's byte order as one of the two values
// asm's marshalling knows (it does not know binary.NativeEndian).
func nativeEndian() binary.ByteOrder {
	if binary.NativeEndian.Uint16([]byte{1, 0}) == 1 {
		return binary.LittleEndian
	}
	return binary.BigEndian
}
