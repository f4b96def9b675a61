package childhub

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// Sample is one reading of a process's memory and CPU time from /proc
// (Linux only).
type Sample struct {
	RSS, HWM uint64 // VmRSS and VmHWM, in bytes
	// RSSAnon (heap, stacks) and RSSFile (the binary, mapped files such as
	// badger tables) split RSS; zero on kernels older than 4.5, which do
	// not report them.
	RSSAnon, RSSFile uint64
	CPUSeconds       float64 // utime+stime
}

// ReadProc reads the memory and CPU time of process pid ("self" for this
// one).
func ReadProc(pid string) (Sample, error) {
	status, err := os.ReadFile("/proc/" + pid + "/status")
	if err != nil {
		return Sample{}, fmt.Errorf("read process memory: %w", err)
	}
	stat, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return Sample{}, fmt.Errorf("read process cpu time: %w", err)
	}
	s, err := parseStatus(status)
	if err != nil {
		return Sample{}, err
	}
	if s.CPUSeconds, err = parseStatCPU(stat); err != nil {
		return Sample{}, err
	}
	return s, nil
}

// ResetPeak sets the VmHWM of process pid to its VmRSS now, so that the
// HWM of the next ReadProc is the peak since ResetPeak. It writes "5" to
// /proc/PID/clear_refs, which Linux 4.0 and later accept from the
// process's owner; where that fails, sample RSS instead.
func ResetPeak(pid string) error {
	if err := os.WriteFile("/proc/"+pid+"/clear_refs", []byte("5"), 0); err != nil {
		return fmt.Errorf("reset peak rss: %w", err)
	}
	return nil
}

// parseStatus returns the memory lines of /proc/PID/status, in bytes.
// VmRSS and VmHWM are required.
func parseStatus(b []byte) (Sample, error) {
	var s Sample
	fields := map[string]*uint64{
		"VmRSS":   &s.RSS,
		"VmHWM":   &s.HWM,
		"RssAnon": &s.RSSAnon,
		"RssFile": &s.RSSFile,
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		name, rest, ok := strings.Cut(sc.Text(), ":")
		dst, want := fields[name]
		if !ok || !want {
			continue
		}
		kb, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
		if err != nil {
			return Sample{}, fmt.Errorf("parse /proc status %s: %w", name, err)
		}
		*dst = kb << 10
	}
	if s.RSS == 0 || s.HWM == 0 {
		return Sample{}, fmt.Errorf("parse /proc status: no VmRSS or VmHWM")
	}
	return s, nil
}

// ClockTicks is USER_HZ, the unit of the times in /proc/PID/stat and
// /proc/stat: 100 on every Linux architecture Outpost runs on (it is fixed
// by the kernel's ABI, whatever CONFIG_HZ is).
const ClockTicks = 100

// parseStatCPU returns utime+stime, in seconds, from /proc/PID/stat.
func parseStatCPU(b []byte) (float64, error) {
	// The command name, field 2, is in parentheses and may hold spaces
	// and parentheses: the fields that follow start after the last ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("parse /proc stat: no command name")
	}
	fields := strings.Fields(string(b[i+1:]))
	// fields[0] is field 3 (state); utime and stime are fields 14 and 15.
	const utime, stime = 14 - 3, 15 - 3
	if len(fields) <= stime {
		return 0, fmt.Errorf("parse /proc stat: %d fields after the command name, want more than %d", len(fields), stime)
	}
	var ticks uint64
	for _, f := range []string{fields[utime], fields[stime]} {
		n, err := strconv.ParseUint(f, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("parse /proc stat cpu time: %w", err)
		}
		ticks += n
	}
	return float64(ticks) / ClockTicks, nil
}
