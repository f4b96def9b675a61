package badgerstore

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// releaseSealedValueLogs asks the kernel to page out this process's mappings
// of the value-log files in dir that badger no longer writes (all but the
// newest). Badger writes through mmap, so every byte written stays resident
// in the process until memory pressure; these pages are synced and clean,
// and reads of old values fault them back in. MADV_PAGEOUT never discards
// data (on anonymous memory it would only swap), so racing with badger
// unmapping a file is harmless. It returns the bytes advised.
func releaseSealedValueLogs(dir string) (int64, error) {
	maps, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		return 0, fmt.Errorf("read mappings: %w", err)
	}
	type span struct{ start, end uintptr }
	byFile := map[int][]span{}
	newest := -1
	sc := bufio.NewScanner(bytes.NewReader(maps))
	for sc.Scan() {
		// start-end perms offset dev inode path
		f := strings.Fields(sc.Text())
		if len(f) < 6 || filepath.Dir(f[5]) != dir || !strings.HasSuffix(f[5], ".vlog") {
			continue
		}
		fid, err := strconv.Atoi(strings.TrimSuffix(filepath.Base(f[5]), ".vlog"))
		if err != nil {
			continue
		}
		lo, hi, ok := strings.Cut(f[0], "-")
		if !ok {
			continue
		}
		start, err1 := strconv.ParseUint(lo, 16, 64)
		end, err2 := strconv.ParseUint(hi, 16, 64)
		if err1 != nil || err2 != nil || end <= start {
			continue
		}
		byFile[fid] = append(byFile[fid], span{uintptr(start), uintptr(end)})
		newest = max(newest, fid)
	}
	var advised int64
	for fid, spans := range byFile {
		if fid == newest {
			continue // badger is still appending to it
		}
		for _, s := range spans {
			_, _, errno := unix.Syscall(unix.SYS_MADVISE, s.start, s.end-s.start, unix.MADV_PAGEOUT)
			if errno == unix.EINVAL {
				return advised, fmt.Errorf("madvise(MADV_PAGEOUT): %w (needs Linux 5.4)", errno)
			}
			if errno == 0 {
				advised += int64(s.end - s.start)
			}
		}
	}
	return advised, nil
}
