package volumes

import (
	"bytes"
	"fmt"
	"slices"
	"strings"

	"github.com/outpost-mesh/outpost/internal/limitread"
)

// mountInfo is one line of /proc/self/mountinfo, the fields used here.
type mountInfo struct {
	mountPoint string
	fsType     string
}

// maxMountInfo bounds what readMountInfo reads: a node with tens of
// thousands of mounts stays well under it.
const maxMountInfo = 32 << 20

// readMountInfo returns the mounts of the calling process's mount
// namespace.
func readMountInfo() ([]mountInfo, error) {
	b, err := limitread.File("/proc/self/mountinfo", maxMountInfo)
	if err != nil {
		return nil, err
	}
	return parseMountInfo(b)
}

// parseMountInfo parses mountinfo lines (proc(5)): "36 35 98:0 /mnt1
// /mnt2 rw,noatime master:1 - ext3 /dev/root rw". Paths are unescaped
// (\040 is a space).
func parseMountInfo(b []byte) ([]mountInfo, error) {
	var out []mountInfo
	for n, line := range bytes.Split(b, []byte("\n")) {
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		fields := strings.Fields(string(line))
		sep := -1
		for i := 6; i < len(fields); i++ {
			if fields[i] == "-" {
				sep = i
				break
			}
		}
		if len(fields) < 7 || sep < 0 || sep+1 >= len(fields) {
			return nil, fmt.Errorf("mountinfo line %d: malformed", n+1)
		}
		out = append(out, mountInfo{mountPoint: unescapeOctal(fields[4]), fsType: fields[sep+1]})
	}
	return out, nil
}

// unescapeOctal undoes the kernel's \ooo escapes of space, tab, newline
// and backslash.
func unescapeOctal(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && isOctal(s, i+1) {
			b.WriteByte((s[i+1]-'0')<<6 | (s[i+2]-'0')<<3 | (s[i+3] - '0'))
			i += 3
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func isOctal(s string, i int) bool {
	if i+3 > len(s) {
		return false
	}
	for _, c := range []byte(s[i : i+3]) {
		if c < '0' || c > '7' {
			return false
		}
	}
	return s[i] <= '3'
}

// mountsUnder returns the mount points at or beneath dir (a path without
// symlinks), deepest first.
func mountsUnder(mounts []mountInfo, dir string) []string {
	var out []string
	for _, mi := range mounts {
		if mi.mountPoint == dir || strings.HasPrefix(mi.mountPoint, dir+"/") {
			out = append(out, mi.mountPoint)
		}
	}
	// Deepest first: a longer path is never the parent of a shorter one.
	slices.SortStableFunc(out, func(a, b string) int { return len(b) - len(a) })
	return out
}
