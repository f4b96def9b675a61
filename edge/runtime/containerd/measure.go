package containerd

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/outpost-mesh/outpost/internal/limitread"
)

// Shim is one runc shim process of a containerd namespace, as Shims finds
// it, with its memory use.
type Shim struct {
	PID         int
	Children    int    // processes whose parent it is: its containers' init processes
	RSS, PSS    uint64 // bytes, from /proc/PID/smaps_rollup
	CommandLine []string
}

// Shims returns the runc shims serving the containerd at address for
// namespace, found in /proc by their command line (-namespace NS
// -address ADDR), for benchmarks and tests.
func Shims(address, namespace string) ([]Shim, error) {
	procs, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	parents := map[int]int{} // pid -> children
	var shims []Shim
	for _, p := range procs {
		pid, err := strconv.Atoi(p.Name())
		if err != nil {
			continue
		}
		if pp := ppid(pid); pp > 0 {
			parents[pp]++
		}
		b, err := os.ReadFile(filepath.Join("/proc", p.Name(), "cmdline"))
		if err != nil || len(b) == 0 {
			continue
		}
		args := strings.Split(string(bytes.TrimRight(b, "\x00")), "\x00")
		if !strings.HasPrefix(filepath.Base(args[0]), "containerd-shim") || flag(args, "-namespace") != namespace || flag(args, "-address") != address {
			continue
		}
		shims = append(shims, Shim{PID: pid, CommandLine: args})
	}
	for i := range shims {
		s := &shims[i]
		s.Children = parents[s.PID]
		s.RSS, s.PSS, _ = Memory(s.PID)
	}
	return shims, nil
}

func flag(args []string, name string) string {
	for i := 0; i+1 < len(args); i++ {
		if args[i] == name {
			return args[i+1]
		}
	}
	return ""
}

// ppid returns the parent of pid, or 0.
func ppid(pid int) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// pid (comm) state ppid ...; comm may hold spaces and parentheses.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 2 {
		return 0
	}
	n, _ := strconv.Atoi(f[1])
	return n
}

// Memory returns the resident and proportional set sizes of process pid
// in bytes, from /proc/PID/smaps_rollup.
func Memory(pid int) (rss, pss uint64, err error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/smaps_rollup", pid))
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		f := strings.Fields(v)
		if len(f) < 1 {
			continue
		}
		n, err := strconv.ParseUint(f[0], 10, 64)
		if err != nil {
			continue
		}
		switch k {
		case "Rss":
			rss = n << 10
		case "Pss":
			pss = n << 10
		}
	}
	return rss, pss, sc.Err()
}

// ShimSockets returns the paths of the sockets of the shims serving the
// tasks of the containerd whose state dir is stateDir, from each task
// bundle's "address" file (containerd 1.6) or bootstrap.json (2.x), for
// tests and benchmarks that kill shims and remove what they leave: the
// sockets are under /run/containerd/s, which only a reboot empties.
func ShimSockets(stateDir string) []string {
	bundles, _ := filepath.Glob(filepath.Join(stateDir, "io.containerd.runtime.v2.task", "*", "*"))
	var sockets []string
	for _, b := range bundles {
		if s := shimSocket(b); s != "" && !slices.Contains(sockets, s) {
			sockets = append(sockets, s)
		}
	}
	return sockets
}

// maxBundleFile bounds what is read of a task bundle's address file.
const maxBundleFile = 4 << 10

// shimSocket returns the path of the socket of the shim serving the task
// whose bundle is dir, or "" if it names none.
func shimSocket(dir string) string {
	addr := ""
	if b, err := limitread.File(filepath.Join(dir, "address"), maxBundleFile); err == nil {
		addr = strings.TrimSpace(string(b))
	} else if b, err := limitread.File(filepath.Join(dir, "bootstrap.json"), maxBundleFile); err == nil {
		var params struct {
			Address string `json:"address"`
		}
		if json.Unmarshal(b, &params) == nil {
			addr = params.Address
		}
	}
	path, ok := strings.CutPrefix(addr, "unix://")
	if !ok || !filepath.IsAbs(path) {
		return ""
	}
	return path
}
