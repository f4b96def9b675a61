package netd

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"path/filepath"
	"strings"

	"github.com/outpost-mesh/outpost/netd/ipam"
)

// LeaseStore keeps pod IP leases across agent restarts; the agent adapts
// its checkpoint to it. Network calls it one call at a time.
type LeaseStore interface {
	// LoadLeases returns every stored lease.
	LoadLeases(ctx context.Context) ([]ipam.Lease, error)
	// SaveLease stores l, replacing the lease of l.UID, durably before it
	// returns.
	SaveLease(ctx context.Context, l ipam.Lease) error
	// DeleteLease removes uid's lease; it returns nil when there is none.
	DeleteLease(ctx context.Context, uid string) error
}

// Config configures a Network.
type Config struct {
	// Bridge names the node's pod bridge, which netd owns; it also names
	// the nf_tables table. Two agents on one machine need different ones.
	Bridge string
	// PodCIDR is the node's pod CIDR, assigned by the hub; required. Its
	// first host address is the bridge's and the pods' gateway.
	PodCIDR netip.Prefix
	// ClusterCIDR holds every node's pod CIDR; traffic from pods to
	// addresses outside it is masqueraded.
	ClusterCIDR netip.Prefix
	// ServiceCIDR holds the cluster IPs of services.
	ServiceCIDR netip.Prefix
	// MTU of the bridge and of every pod's veth.
	MTU int
	// HostNetNS is the path of the network namespace that plays the node:
	// "" for the agent's own. Every link, route, sysctl and rule netd makes
	// for the node is made there.
	HostNetNS string
	// NetNSDir is the directory where pods' network namespaces are
	// bind-mounted, as NetNSDir/<pod UID>; required, under the agent's data
	// directory.
	NetNSDir string
	// Leases keeps the IP leases; non-nil.
	Leases LeaseStore
	// Logger is non-nil.
	Logger *slog.Logger
}

// DefaultConfig returns a Config with the defaults set; PodCIDR, NetNSDir,
// Leases and Logger are the caller's to fill.
func DefaultConfig() Config {
	return Config{
		Bridge:      "outpost0",                            // one bridge per agent
		ClusterCIDR: netip.MustParsePrefix("10.42.0.0/16"), // k3s's default cluster CIDR
		ServiceCIDR: netip.MustParsePrefix("10.43.0.0/16"), // k3s's default service CIDR
		MTU:         1500,                                  // Ethernet; lower it under an overlay or a PPPoE uplink
		HostNetNS:   "",                                    // the agent's own network namespace
	}
}

// Validate reports the first problem of c.
func (c Config) Validate() error {
	if err := CheckLinkName(c.Bridge); err != nil {
		return fmt.Errorf("bridge: %w", err)
	}
	if err := ipam.CheckPrefix(c.PodCIDR); err != nil {
		return err
	}
	for _, p := range []struct {
		name string
		p    netip.Prefix
	}{{"cluster CIDR", c.ClusterCIDR}, {"service CIDR", c.ServiceCIDR}} {
		if !p.p.IsValid() || !p.p.Addr().Is4() || p.p.Masked() != p.p {
			return fmt.Errorf("%s %v: want a canonical IPv4 prefix", p.name, p.p)
		}
	}
	if !c.ClusterCIDR.Contains(c.PodCIDR.Addr()) || c.ClusterCIDR.Bits() > c.PodCIDR.Bits() {
		return fmt.Errorf("pod CIDR %s is not inside the cluster CIDR %s", c.PodCIDR, c.ClusterCIDR)
	}
	if c.ClusterCIDR.Overlaps(c.ServiceCIDR) {
		return fmt.Errorf("service CIDR %s overlaps the cluster CIDR %s", c.ServiceCIDR, c.ClusterCIDR)
	}
	if c.MTU < 576 || c.MTU > 65535 {
		return fmt.Errorf("MTU %d: want 576 to 65535", c.MTU)
	}
	if c.HostNetNS != "" && !filepath.IsAbs(c.HostNetNS) {
		return fmt.Errorf("host netns %q: want an absolute path", c.HostNetNS)
	}
	if c.NetNSDir == "" || !filepath.IsAbs(c.NetNSDir) {
		return fmt.Errorf("netns directory %q: want an absolute path", c.NetNSDir)
	}
	if c.Leases == nil {
		return errors.New("no lease store")
	}
	if c.Logger == nil {
		return errors.New("no logger")
	}
	return nil
}

// CheckLinkName accepts what the kernel accepts as an interface name, less
// ":" which netd uses as a separator in link aliases: the names of the
// links netd and its subpackages make.
func CheckLinkName(s string) error {
	switch {
	case s == "":
		return errors.New("empty name")
	case len(s) > 15:
		return fmt.Errorf("%q is longer than 15 bytes", s)
	case s == "." || s == "..":
		return fmt.Errorf("%q is not a name", s)
	case strings.ContainsAny(s, "/: \t\n"):
		return fmt.Errorf("%q holds '/', ':' or a space", s)
	}
	return nil
}
