package overlay

import (
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"path/filepath"

	"github.com/outpost-mesh/outpost/netd"
	"github.com/outpost-mesh/outpost/netd/ipam"
)

// ErrNotSupported is returned, wrapped, by Setup when the node's kernel
// cannot make a VXLAN device (no vxlan module): the node then has no site
// overlay, and its pods reach only pods of their own node.
var ErrNotSupported = errors.New("vxlan not supported by the kernel")

// Config configures an Overlay.
type Config struct {
	// Device names the VXLAN link, which the Overlay owns with every
	// neighbour and forwarding entry on it. Two agents on one machine
	// need different ones.
	Device string
	// VNI is the VXLAN network identifier; every node of a site uses the
	// same one.
	VNI uint32
	// Port is the UDP port VXLAN packets are sent to and received on;
	// every node of a site uses the same one.
	Port uint16
	// Underlay is this node's address on the site's LAN, the source of
	// the VXLAN packets and the address peers send them to; required.
	// IPv4 or IPv6; every peer's underlay must be of the same family.
	Underlay netip.Addr
	// UnderlayLink names the link that holds Underlay, or "" to find it
	// from the address.
	UnderlayLink string
	// PodCIDR is this node's pod CIDR (IPv4); required. Its network
	// address, which netd's IPAM never gives a pod, is the device's
	// address, and the device's MAC address derives from it (HardwareAddr).
	PodCIDR netip.Prefix
	// MTU of the device, or 0 for the underlay link's less the VXLAN
	// overhead: 50 bytes over IPv4, 70 over IPv6.
	MTU int
	// HostNetNS is the path of the network namespace that plays the node,
	// as in netd.Config: "" for the agent's own.
	HostNetNS string
	// Logger is non-nil.
	Logger *slog.Logger
}

// DefaultConfig returns a Config with the defaults set; Underlay, PodCIDR
// and Logger are the caller's to fill.
func DefaultConfig() Config {
	return Config{
		Device:    "outpost-vx", // one device per agent
		VNI:       1,            // flannel's default
		Port:      8472,         // flannel's, and Linux's VXLAN default
		MTU:       0,            // the underlay link's less the VXLAN overhead
		HostNetNS: "",           // the agent's own network namespace
	}
}

// Validate reports the first problem of c.
func (c Config) Validate() error {
	if err := netd.CheckLinkName(c.Device); err != nil {
		return fmt.Errorf("device: %w", err)
	}
	if c.VNI == 0 || c.VNI >= 1<<24 {
		return fmt.Errorf("VNI %d: want 1 to %d", c.VNI, 1<<24-1)
	}
	if c.Port == 0 {
		return errors.New("port 0: want a UDP port")
	}
	if err := checkUnderlay(c.Underlay); err != nil {
		return err
	}
	if c.UnderlayLink != "" {
		if err := netd.CheckLinkName(c.UnderlayLink); err != nil {
			return fmt.Errorf("underlay link: %w", err)
		}
	}
	if err := ipam.CheckPrefix(c.PodCIDR); err != nil {
		return err
	}
	if c.MTU != 0 && (c.MTU < 576 || c.MTU > 65535) {
		return fmt.Errorf("MTU %d: want 576 to 65535, or 0 for the underlay's less the VXLAN overhead", c.MTU)
	}
	if c.HostNetNS != "" && !filepath.IsAbs(c.HostNetNS) {
		return fmt.Errorf("host netns %q: want an absolute path", c.HostNetNS)
	}
	if c.Logger == nil {
		return errors.New("no logger")
	}
	return nil
}

// checkUnderlay accepts a unicast address a node could send from.
func checkUnderlay(a netip.Addr) error {
	switch {
	case !a.IsValid():
		return errors.New("underlay address is not set")
	case a.Zone() != "":
		return fmt.Errorf("underlay address %s has a zone", a)
	case a.Is4In6():
		return fmt.Errorf("underlay address %s is IPv4-mapped: give it as IPv4", a)
	case a.IsUnspecified(), a.IsMulticast(), a.IsLoopback(), a == netip.AddrFrom4([4]byte{255, 255, 255, 255}):
		return fmt.Errorf("underlay address %s is not a unicast address of a LAN", a)
	}
	return nil
}
