package dns

import (
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"

	"github.com/outpost-mesh/outpost/netd/podfiles"
)

// MaxUpstreams is how many nameservers of a resolver file are used, as
// glibc's resolver uses at most three.
const MaxUpstreams = podfiles.MaxNameservers

// ParseResolvConf returns the upstreams of a resolver file (the node's
// /etc/resolv.conf): its nameservers, the first MaxUpstreams that are
// addresses, as host:port with port 53. It reads at most
// podfiles.MaxFileSize bytes and returns an error wrapping
// podfiles.ErrTooLarge past that. A nameserver that is not an address, or
// a nameserver line without one, is skipped; so is skip, the server's own
// address, which would loop.
func ParseResolvConf(r io.Reader, skip netip.Addr) ([]string, error) {
	rc, err := podfiles.ParseResolvConf(r)
	if errors.Is(err, podfiles.ErrTooLarge) {
		return nil, fmt.Errorf("parse resolver file: %w", err)
	}
	// Other errors are lines that name no address, skipped as the
	// resolver skips them.
	var ups []string
	for _, ns := range rc.Nameservers {
		a, err := netip.ParseAddr(ns)
		if err != nil || a.Unmap() == skip {
			continue
		}
		ups = append(ups, netip.AddrPortFrom(a.Unmap(), 53).String())
		if len(ups) == MaxUpstreams {
			break
		}
	}
	return ups, nil
}

// ReadResolvConf is ParseResolvConf of the file at path.
func ReadResolvConf(path string, skip netip.Addr) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read resolver file: %w", err)
	}
	defer f.Close()
	ups, err := ParseResolvConf(f, skip)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return ups, nil
}
