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
	RSS, HWM   uint64  // VmRSS and VmHWM, in bytes
	CPUSeconds float64 // utime+stime
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
	var s Sample
	if s.RSS, s.HWM, err = parseStatus(status); err != nil {
		return Sample{}, err
	}
	if s.CPUSeconds, err = parseStatCPU(stat); err != nil {
		return Sample{}, err
	}
	return s, nil
}

// parseStatus returns VmRSS and VmHWM, in bytes, from /proc/PID/status.
func parseStatus(b []byte) (rss, hwm uint64, err error) {
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		name, rest, ok := strings.Cut(sc.Text(), ":")
		if !ok || (name != "VmRSS" && name != "VmHWM") {
			continue
		}
		kb, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("parse /proc status %s: %w", name, err)
		}
		if name == "VmRSS" {
			rss = kb << 10
		} else {
			hwm = kb << 10
		}
	}
	if rss == 0 || hwm == 0 {
		return 0, 0, fmt.Errorf("parse /proc status: no VmRSS or VmHWM")
	}
	return rss, hwm, nil
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
