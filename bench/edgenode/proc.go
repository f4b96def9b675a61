package edgenode

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// nodeProcess reports whether a process, by its command line (NUL
// separated, as /proc/PID/cmdline) and its /proc/PID/cgroup, belongs to
// the node whose containerd listens at sock and whose cgroups are under
// cgroupRoot ("/outpost-<node>"): a shim of that containerd, the
// containerd itself (its --config is under dataDir), or anything in the
// node's cgroups (the containers).
func nodeProcess(cmdline, cgroup []byte, dataDir, sock, cgroupRoot string) bool {
	args := strings.Split(string(bytes.TrimRight(cmdline, "\x00")), "\x00")
	if len(args) > 0 && args[0] != "" {
		base := args[0][strings.LastIndexByte(args[0], '/')+1:]
		switch {
		case strings.HasPrefix(base, "containerd-shim"):
			if argAfter(args, "-address") == sock {
				return true
			}
		case base == "containerd":
			if strings.HasPrefix(argAfter(args, "--config"), dataDir+"/") {
				return true
			}
		}
	}
	for _, line := range strings.Split(string(cgroup), "\n") {
		// hierarchy-ID:controllers:path
		parts := strings.SplitN(line, ":", 3)
		if len(parts) == 3 && (parts[2] == cgroupRoot || strings.HasPrefix(parts[2], cgroupRoot+"/") || strings.HasPrefix(parts[2], cgroupRoot+"-")) {
			return true
		}
	}
	return false
}

func argAfter(args []string, name string) string {
	for i := 0; i+1 < len(args); i++ {
		if args[i] == name {
			return args[i+1]
		}
	}
	return ""
}

// Processes returns the live processes of the node (see nodeProcess):
// its containerd, shims and containers, leaving out this process and
// zombies.
func (n *Node) Processes() []int {
	dataDir, sock, cgroupRoot := n.Dir, n.Sock(), n.CgroupRoot()
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		cmdline, _ := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		cgroup, _ := os.ReadFile("/proc/" + e.Name() + "/cgroup")
		if nodeProcess(cmdline, cgroup, dataDir, sock, cgroupRoot) && !zombie(pid) {
			out = append(out, pid)
		}
	}
	return out
}

// zombie reports whether pid has exited (or is gone) and waits to be
// reaped.
func zombie(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	i := bytes.LastIndexByte(b, ')')
	return i < 0 || i+2 >= len(b) || b[i+2] == 'Z'
}
