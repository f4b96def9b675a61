//go:build unix

package childhub

import (
	"io/fs"
	"syscall"
)

// allocated returns the bytes of disk blocks allocated to a file.
func allocated(info fs.FileInfo) (uint64, bool) {
	st, ok := info.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, false
	}
	return uint64(st.Blocks) * 512, true
}
