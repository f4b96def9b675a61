package netd

import (
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// ErrHostPortConflict is returned by AddPod when a hostPort of the pod is
// already held, by another pod or twice in the pod.
var ErrHostPortConflict = errors.New("hostPort already in use")

// Protocol is a hostPort's protocol, spelled as in the Kubernetes API.
type Protocol string

// The protocols of a hostPort.
const (
	TCP  Protocol = "TCP"
	UDP  Protocol = "UDP"
	SCTP Protocol = "SCTP"
)

// ipProto returns p's IP protocol number.
func (p Protocol) ipProto() (byte, bool) {
	switch p {
	case TCP, "":
		return 6, true
	case UDP:
		return 17, true
	case SCTP:
		return 132, true
	}
	return 0, false
}

// PodSpec is what AddPod needs of a pod.
type PodSpec struct {
	// UID names the pod's network namespace file, veth and lease: letters,
	// digits, '-', '_' and '.', at most 128 bytes.
	UID       string
	Namespace string // for logs
	Name      string // for logs
	HostPorts []HostPort
}

// HostPort forwards a port of the node to a port of the pod, as a
// container port's hostPort does.
type HostPort struct {
	Protocol Protocol // "" means TCP
	// HostIP is the node address the port is on: the zero Addr or 0.0.0.0
	// for every address of the node, loopback included.
	HostIP        netip.Addr
	HostPort      uint16
	ContainerPort uint16
}

// allIPs reports whether h listens on every address of the node.
func (h HostPort) allIPs() bool { return !h.HostIP.IsValid() || h.HostIP.IsUnspecified() }

// key returns h in a normal form: protocol set, HostIP 0.0.0.0 for all.
func (h HostPort) key() HostPort {
	if h.Protocol == "" {
		h.Protocol = TCP
	}
	if h.allIPs() {
		h.HostIP = netip.IPv4Unspecified()
	}
	return h
}

func (h HostPort) String() string {
	k := h.key()
	return fmt.Sprintf("%s %s -> %d", strings.ToLower(string(k.Protocol)), netip.AddrPortFrom(k.HostIP, k.HostPort), k.ContainerPort)
}

// conflicts reports whether a and b claim the same port of the node.
func conflicts(a, b HostPort) bool {
	a, b = a.key(), b.key()
	return a.Protocol == b.Protocol && a.HostPort == b.HostPort && (a.allIPs() || b.allIPs() || a.HostIP == b.HostIP)
}

// checkUID accepts pod UIDs that are safe as file names and fit a rule
// comment: Kubernetes UIDs, and kubelet's static pod hashes.
func checkUID(uid string) error {
	if uid == "" || len(uid) > 128 || uid == "." || uid == ".." {
		return fmt.Errorf("pod UID %q: want 1 to 128 bytes", uid)
	}
	for _, r := range uid {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.') {
			return fmt.Errorf("pod UID %q: holds %q, want letters, digits, '-', '_', '.'", uid, r)
		}
	}
	return nil
}

// checkSpec returns an error unless s can be set up.
func checkSpec(s PodSpec) error {
	if err := checkUID(s.UID); err != nil {
		return err
	}
	for i, h := range s.HostPorts {
		if _, ok := h.Protocol.ipProto(); !ok {
			return fmt.Errorf("hostPort %d: protocol %q: want TCP, UDP or SCTP", i, h.Protocol)
		}
		if h.HostIP.IsValid() && !h.HostIP.Is4() {
			return fmt.Errorf("hostPort %d: host IP %s is not IPv4", i, h.HostIP)
		}
		if h.HostPort == 0 || h.ContainerPort == 0 {
			return fmt.Errorf("hostPort %d: %v: ports must be 1 to 65535", i, h)
		}
		for _, o := range s.HostPorts[:i] {
			if conflicts(h, o) {
				return fmt.Errorf("hostPort %v: %w by the pod's own %v", h, ErrHostPortConflict, o)
			}
		}
	}
	return nil
}

// maxComment bounds a rule comment, as the kernel does (NFT_USERDATA_MAXLEN).
const maxComment = 256

// ruleComment is the comment of the rule that carries hp for pod uid; Sweep
// and the conflict check read it back with parseRuleComment.
func ruleComment(uid string, hp HostPort) string {
	k := hp.key()
	return fmt.Sprintf("%s %s %s %d", uid, strings.ToLower(string(k.Protocol)), netip.AddrPortFrom(k.HostIP, k.HostPort), k.ContainerPort)
}

// parseRuleComment reads a comment made by ruleComment. ok is false for
// anything else, such as a rule another program added to the chain.
func parseRuleComment(s string) (uid string, hp HostPort, ok bool) {
	if len(s) > maxComment {
		return "", HostPort{}, false
	}
	f := strings.Fields(s)
	if len(f) != 4 || checkUID(f[0]) != nil {
		return "", HostPort{}, false
	}
	hp.Protocol = Protocol(strings.ToUpper(f[1]))
	if _, known := hp.Protocol.ipProto(); !known || hp.Protocol == "" {
		return "", HostPort{}, false
	}
	ap, err := netip.ParseAddrPort(f[2])
	if err != nil || !ap.Addr().Is4() || ap.Port() == 0 {
		return "", HostPort{}, false
	}
	cp, err := strconv.ParseUint(f[3], 10, 16)
	if err != nil || cp == 0 {
		return "", HostPort{}, false
	}
	hp.HostIP, hp.HostPort, hp.ContainerPort = ap.Addr(), ap.Port(), uint16(cp)
	return f[0], hp, true
}
