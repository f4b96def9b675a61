package storebench

import (
	"bufio"
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// procStatus holds the memory lines of /proc/self/status, in bytes.
type procStatus struct {
	RSS, HWM, RSSAnon, RSSFile uint64
}

// readProcStatus reads this process's memory from /proc/self/status
// (Linux only).
func readProcStatus() (procStatus, error) {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return procStatus{}, fmt.Errorf("read process memory: %w", err)
	}
	return parseProcStatus(b)
}

func parseProcStatus(b []byte) (procStatus, error) {
	var st procStatus
	fields := map[string]*uint64{
		"VmRSS":   &st.RSS,
		"VmHWM":   &st.HWM,
		"RssAnon": &st.RSSAnon,
		"RssFile": &st.RSSFile,
	}
	found := 0
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		name, rest, ok := strings.Cut(sc.Text(), ":")
		dst, want := fields[name]
		if !ok || !want {
			continue
		}
		kb, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
		if err != nil {
			return procStatus{}, fmt.Errorf("parse /proc/self/status %s: %w", name, err)
		}
		*dst = kb << 10
		found++
	}
	if st.RSS == 0 || st.HWM == 0 {
		return procStatus{}, fmt.Errorf("parse /proc/self/status: no VmRSS or VmHWM among %d fields", found)
	}
	return st, nil
}

// dirSize returns the space the files under dir take on disk (allocated
// blocks, where the platform reports them) and the sum of their sizes.
func dirSize(dir string) (disk, apparent uint64, err error) {
	err = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.Type().IsRegular() {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		apparent += uint64(info.Size())
		if blocks, ok := allocated(info); ok {
			disk += blocks
		} else {
			disk += uint64(info.Size())
		}
		return nil
	})
	if err != nil {
		return 0, 0, fmt.Errorf("measure data dir: %w", err)
	}
	return disk, apparent, nil
}
