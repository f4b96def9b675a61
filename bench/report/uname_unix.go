//go:build unix

package report

import "golang.org/x/sys/unix"

// kernel returns uname's system name, release and machine, e.g.
// "Linux 6.8.0-45-generic x86_64".
func kernel() string {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return ""
	}
	return unix.ByteSliceToString(u.Sysname[:]) + " " +
		unix.ByteSliceToString(u.Release[:]) + " " +
		unix.ByteSliceToString(u.Machine[:])
}
