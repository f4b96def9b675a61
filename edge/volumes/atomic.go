package volumes

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// The atomic writer's names in a volume's directory, as kubelet's: the
// files live in a timestamped directory ..<time>.<random>, ..data links
// to it, and each top-level name of the content links through ..data,
// so that swapping ..data (a rename, atomic) changes every file at once.
// Names beginning with ".." are the writer's.
const (
	dataDirName    = "..data"
	newDataDirName = "..data_tmp"
	tsLayout       = "..2006_01_02_15_04_05."
)

// writeAtomic makes the visible content of dir (an existing directory)
// exactly p, as kubelet's AtomicWriter: if it differs from what ..data
// holds, a new timestamped directory is written (each file synced, modes
// exact, ownership as fsGroup asks), the top-level links are made, ..data
// is swapped to it, links no longer in p are removed, and the old
// directory is removed. It reports whether it wrote. The caller
// serializes the calls for one dir.
func writeAtomic(dir string, p payload, fsGroup *int64, now time.Time) (bool, error) {
	clean, err := cleanPayload(p)
	if err != nil {
		return false, fmt.Errorf("%w: %w", ErrInvalidSpec, err)
	}
	old, err := os.Readlink(filepath.Join(dir, dataDirName))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return false, fmt.Errorf("read %s: %w", dataDirName, err)
	}
	if old != "" && (strings.Contains(old, "/") || !strings.HasPrefix(old, "..") || old == dataDirName || old == newDataDirName) {
		old = "" // not the writer's: write anew
	}
	if old != "" {
		same, err := sameContent(dir, old, clean, fsGroup)
		if err != nil {
			return false, err
		}
		if same {
			return false, nil
		}
	}
	if err := removeStale(dir, old); err != nil {
		return false, err
	}
	ts, err := os.MkdirTemp(dir, now.UTC().Format(tsLayout))
	if err != nil {
		return false, fmt.Errorf("create timestamped directory: %w", err)
	}
	tsName := filepath.Base(ts)
	if err := writeTree(ts, clean, fsGroup); err != nil {
		os.RemoveAll(ts)
		return false, err
	}
	top := topNames(clean)
	for _, name := range top {
		if err := ensureLink(dir, name); err != nil {
			os.RemoveAll(ts)
			return false, err
		}
	}
	tmp := filepath.Join(dir, newDataDirName)
	if err := os.Symlink(tsName, tmp); err != nil {
		os.RemoveAll(ts)
		return false, fmt.Errorf("link new data directory: %w", err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, dataDirName)); err != nil {
		os.Remove(tmp)
		os.RemoveAll(ts)
		return false, fmt.Errorf("swap data directory: %w", err)
	}
	if err := syncDir(dir); err != nil {
		return true, err
	}
	if err := removeOldLinks(dir, top); err != nil {
		return true, err
	}
	if old != "" && old != tsName {
		if err := os.RemoveAll(filepath.Join(dir, old)); err != nil {
			return true, fmt.Errorf("remove old data directory: %w", err)
		}
	}
	return true, nil
}

// cleanPayload validates the paths of p and returns it keyed by cleaned
// paths; a path that is both a file and another's directory is an error.
func cleanPayload(p payload) (payload, error) {
	out := make(payload, len(p))
	for k, f := range p {
		if err := validatePath(k); err != nil {
			return nil, err
		}
		out[path.Clean(k)] = f
	}
	for k := range out {
		for d := path.Dir(k); d != "."; d = path.Dir(d) {
			if _, ok := out[d]; ok {
				return nil, fmt.Errorf("path %q is a file and the directory of %q", d, k)
			}
		}
	}
	return out, nil
}

// topNames returns the first elements of p's paths, sorted.
func topNames(p payload) []string {
	var out []string
	for k := range p {
		first, _, _ := strings.Cut(k, "/")
		out = append(out, first)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// fileMode returns the permission bits a file of mode gets on disk:
// fsGroup's ownership makes it group-readable, as kubelet's for these
// read-only volumes.
func fileMode(mode uint32, fsGroup *int64) uint32 {
	if fsGroup != nil {
		mode |= roMask
	}
	return mode & 0o777
}

// sameContent reports whether dir's data directory old holds exactly p
// (same files, bytes and modes, no others) and every top-level name of p
// links through ..data.
func sameContent(dir, old string, p payload, fsGroup *int64) (bool, error) {
	root := filepath.Join(dir, old)
	seen := 0
	same := true
	err := filepath.WalkDir(root, func(fp string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if fp == root {
			return nil
		}
		rel, _ := filepath.Rel(root, fp)
		if d.IsDir() {
			if !hasPrefixDir(p, rel) {
				same = false
				return filepath.SkipAll
			}
			return nil
		}
		f, ok := p[rel]
		if !ok || !d.Type().IsRegular() {
			same = false
			return filepath.SkipAll
		}
		seen++
		info, err := d.Info()
		if err != nil {
			return err
		}
		if uint32(info.Mode().Perm()) != fileMode(f.mode, fsGroup) {
			same = false
			return filepath.SkipAll
		}
		b, err := os.ReadFile(fp)
		if err != nil {
			return err
		}
		if !bytes.Equal(b, f.data) {
			same = false
			return filepath.SkipAll
		}
		return nil
	})
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("compare volume content: %w", err)
	}
	if !same || seen != len(p) {
		return false, nil
	}
	for _, name := range topNames(p) {
		if t, err := os.Readlink(filepath.Join(dir, name)); err != nil || t != path.Join(dataDirName, name) {
			return false, nil
		}
	}
	return true, nil
}

// hasPrefixDir reports whether d is a directory of some path of p.
func hasPrefixDir(p payload, d string) bool {
	for k := range p {
		if strings.HasPrefix(k, d+"/") {
			return true
		}
	}
	return false
}

// removeStale removes what a crashed write left in dir: a ..data_tmp
// link and timestamped directories other than keep.
func removeStale(dir, keep string) error {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("read volume directory: %w", err)
	}
	for _, e := range ents {
		n := e.Name()
		if !strings.HasPrefix(n, "..") || n == dataDirName || n == keep {
			continue
		}
		if err := os.RemoveAll(filepath.Join(dir, n)); err != nil {
			return fmt.Errorf("remove stale %s: %w", n, err)
		}
	}
	return nil
}

// writeTree writes p's files into the empty directory ts, each synced,
// with its exact mode and owner, then gives the tree to fsGroup.
func writeTree(ts string, p payload, fsGroup *int64) error {
	if err := os.Chmod(ts, 0o755); err != nil {
		return fmt.Errorf("write volume content: %w", err)
	}
	for _, k := range slices.Sorted(maps.Keys(p)) {
		f := p[k]
		full := filepath.Join(ts, k)
		if err := mkdirAllExact(ts, path.Dir(k)); err != nil {
			return err
		}
		if err := writeFile(full, f); err != nil {
			return err
		}
	}
	if fsGroup != nil {
		if err := setTreeOwnership(ts, *fsGroup, roMask); err != nil {
			return err
		}
	}
	return syncDir(ts)
}

// mkdirAllExact makes the directories rel beneath root with mode 0755.
func mkdirAllExact(root, rel string) error {
	if rel == "." {
		return nil
	}
	cur := root
	for _, el := range strings.Split(rel, "/") {
		cur = filepath.Join(cur, el)
		if err := os.Mkdir(cur, 0o755); err != nil {
			if errors.Is(err, fs.ErrExist) {
				continue
			}
			return fmt.Errorf("write volume content: %w", err)
		}
		if err := os.Chmod(cur, 0o755); err != nil {
			return fmt.Errorf("write volume content: %w", err)
		}
	}
	return nil
}

// writeFile creates name with f's content, mode and owner, and syncs it.
func writeFile(name string, f file) error {
	fd, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("write volume content: %w", err)
	}
	_, err = fd.Write(f.data)
	if err == nil && f.uid != nil {
		err = fd.Chown(int(*f.uid), -1)
	}
	if err == nil {
		err = fd.Chmod(fs.FileMode(f.mode & 0o777))
	}
	if err == nil {
		err = fd.Sync()
	}
	if cerr := fd.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("write volume content: %w", err)
	}
	return nil
}

// ensureLink makes dir/name a link to ..data/name.
func ensureLink(dir, name string) error {
	link := filepath.Join(dir, name)
	want := path.Join(dataDirName, name)
	t, err := os.Readlink(link)
	if err == nil && t == want {
		return nil
	}
	if err == nil || !errors.Is(err, fs.ErrNotExist) {
		// Something else is there: not the writer's; replace it.
		if err := os.RemoveAll(link); err != nil {
			return fmt.Errorf("link %s: %w", name, err)
		}
	}
	if err := os.Symlink(want, link); err != nil {
		return fmt.Errorf("link %s: %w", name, err)
	}
	return nil
}

// removeOldLinks removes the top-level links of dir not in keep (sorted).
func removeOldLinks(dir string, keep []string) error {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("read volume directory: %w", err)
	}
	for _, e := range ents {
		n := e.Name()
		if strings.HasPrefix(n, "..") || e.Type()&fs.ModeSymlink == 0 {
			continue
		}
		if _, found := slices.BinarySearch(keep, n); found {
			continue
		}
		if err := os.Remove(filepath.Join(dir, n)); err != nil {
			return fmt.Errorf("remove old link %s: %w", n, err)
		}
	}
	return nil
}

// syncDir fsyncs a directory, so that the names in it survive a power cut.
func syncDir(dir string) error {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	defer unix.Close(fd)
	if err := unix.Fsync(fd); err != nil {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	return nil
}
