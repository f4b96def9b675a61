// Package podfiles writes a pod's name-resolution files, /etc/hosts,
// /etc/hostname and /etc/resolv.conf, the way kubelet composes them, into a
// directory of the pod for the runtime to bind-mount. Composing is pure
// (Hosts, Resolv); Write is the thin shell that reads the node's files and
// writes the pod's atomically.
package podfiles

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/outpost-mesh/outpost/internal/atomicfile"
	"github.com/outpost-mesh/outpost/internal/limitread"
)

// Limits kubelet applies to a pod's resolver configuration (the API's
// validation limits with expanded DNS configuration).
const (
	MaxNameservers     = 3
	MaxSearchPaths     = 32
	MaxSearchListChars = 2048
	maxSearchPathChars = 253 // a DNS-1123 subdomain
)

// MaxFileSize bounds what is read of the node's hosts and resolver files.
const MaxFileSize = 1 << 20

// ErrTooLarge is returned for a node file longer than MaxFileSize.
var ErrTooLarge = limitread.ErrTooLarge

// File names inside the pod directory.
const (
	HostsName      = "hosts"
	HostnameName   = "hostname"
	ResolvConfName = "resolv.conf"
)

// DNSPolicy is a pod's spec.dnsPolicy.
type DNSPolicy string

// The DNS policies of the Kubernetes API.
const (
	DNSClusterFirst            DNSPolicy = "ClusterFirst"
	DNSClusterFirstWithHostNet DNSPolicy = "ClusterFirstWithHostNet"
	DNSDefault                 DNSPolicy = "Default"
	DNSNone                    DNSPolicy = "None"
)

// HostAlias is one entry of a pod's spec.hostAliases.
type HostAlias struct {
	IP        string
	Hostnames []string
}

// DNSConfig is a pod's spec.dnsConfig. An option is "name" or "name:value".
type DNSConfig struct {
	Nameservers []string
	Searches    []string
	Options     []string
}

// Pod is what the files say about one pod.
type Pod struct {
	// Hostname is the pod's hostname: spec.hostname, else its name cut to
	// 63 characters; for a host-network pod, the node's hostname.
	Hostname string
	// Domain is "<subdomain>.<namespace>.svc.<cluster domain>" when the pod
	// has spec.subdomain, else "".
	Domain string
	// Namespace is the pod's namespace, for the cluster search paths.
	Namespace string
	// IPs are the pod's addresses, written to its hosts file with its name.
	IPs         []netip.Addr
	HostNetwork bool
	HostAliases []HostAlias
	DNSPolicy   DNSPolicy  // "" means ClusterFirst, the API's default
	DNSConfig   *DNSConfig // or nil
}

// Node is what the files take from the node.
type Node struct {
	// HostsFile is the node's hosts file, copied for host-network pods;
	// "" means /etc/hosts.
	HostsFile string
	// ResolvConf is the node's resolver file; "" means /etc/resolv.conf,
	// or systemd-resolved's list of upstream servers when /etc/resolv.conf
	// names only its loopback stub, which a pod's network cannot reach.
	ResolvConf string
	// ClusterDNS are the cluster DNS servers, none until node-local DNS
	// lands: ClusterFirst pods then fall back to Default, as kubelet does.
	ClusterDNS []netip.Addr
	// ClusterDomain is the cluster's DNS domain, such as "cluster.local".
	ClusterDomain string
}

// Files are the host paths of the three files Write made, and the
// warnings kubelet would have reported as DNSConfigForming events.
type Files struct {
	Hosts, Hostname, ResolvConf string
	Warnings                    []string
}

// Write composes the pod's files and writes them atomically into dir, which
// it creates if needed, replacing what a previous call wrote. It reads the
// node's resolver file, and its hosts file for a host-network pod.
func Write(dir string, node Node, pod Pod) (Files, error) {
	if pod.Hostname == "" {
		return Files{}, errors.New("write pod files: empty hostname")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return Files{}, fmt.Errorf("write pod files: %w", err)
	}
	var nodeHosts []byte
	if pod.HostNetwork {
		path := node.HostsFile
		if path == "" {
			path = "/etc/hosts"
		}
		b, err := limitread.File(path, MaxFileSize)
		if err != nil {
			return Files{}, fmt.Errorf("read node hosts file: %w", err)
		}
		nodeHosts = b
	}
	host, err := loadNodeResolv(node.ResolvConf)
	if err != nil {
		return Files{}, err
	}
	resolv, warnings := Resolv(host, node, pod)
	f := Files{
		Hosts:      filepath.Join(dir, HostsName),
		Hostname:   filepath.Join(dir, HostnameName),
		ResolvConf: filepath.Join(dir, ResolvConfName),
		Warnings:   warnings,
	}
	for _, w := range []struct {
		path string
		data []byte
	}{
		{f.Hosts, Hosts(pod, nodeHosts)},
		{f.Hostname, []byte(pod.Hostname + "\n")},
		{f.ResolvConf, resolv.Bytes()},
	} {
		if err := atomicfile.WriteFile(w.path, w.data, 0o644); err != nil {
			return Files{}, fmt.Errorf("write pod files: %w", err)
		}
	}
	return f, nil
}

// systemdResolvConf lists systemd-resolved's upstream servers.
const systemdResolvConf = "/run/systemd/resolve/resolv.conf"

func loadNodeResolv(path string) (ResolvConf, error) {
	explicit := path != ""
	if !explicit {
		path = "/etc/resolv.conf"
	}
	rc, err := readResolv(path)
	if err != nil {
		return ResolvConf{}, err
	}
	if !explicit && len(rc.Nameservers) > 0 && len(routable(rc.Nameservers)) == 0 {
		if alt, err := readResolv(systemdResolvConf); err == nil && len(routable(alt.Nameservers)) > 0 {
			return alt, nil
		}
	}
	return rc, nil
}

func readResolv(path string) (ResolvConf, error) {
	f, err := os.Open(path)
	if err != nil {
		return ResolvConf{}, fmt.Errorf("read node resolver file: %w", err)
	}
	defer f.Close()
	rc, err := ParseResolvConf(f)
	if err != nil {
		return ResolvConf{}, fmt.Errorf("read node resolver file %s: %w", path, err)
	}
	return rc, nil
}

// Hosts returns the pod's hosts file. For a pod on its own network it is
// kubelet's managed file: the localhost lines, the pod's IPs with its
// hostname (and FQDN when Domain is set), then the host aliases. For a
// host-network pod it is the node's hosts file, nodeHosts, under kubelet's
// header, then the host aliases.
func Hosts(pod Pod, nodeHosts []byte) []byte {
	var b bytes.Buffer
	if pod.HostNetwork {
		b.WriteString("# Kubernetes-managed hosts file (host network).\n")
		b.Write(nodeHosts)
	} else {
		b.WriteString("# Kubernetes-managed hosts file.\n")
		b.WriteString("127.0.0.1\tlocalhost\n")
		b.WriteString("::1\tlocalhost ip6-localhost ip6-loopback\n")
		b.WriteString("fe00::0\tip6-localnet\n")
		b.WriteString("fe00::0\tip6-mcastprefix\n")
		b.WriteString("fe00::1\tip6-allnodes\n")
		b.WriteString("fe00::2\tip6-allrouters\n")
		for _, ip := range pod.IPs {
			if pod.Domain != "" {
				fmt.Fprintf(&b, "%s\t%s.%s\t%s\n", ip, pod.Hostname, pod.Domain, pod.Hostname)
			} else {
				fmt.Fprintf(&b, "%s\t%s\n", ip, pod.Hostname)
			}
		}
	}
	if len(pod.HostAliases) > 0 {
		b.WriteString("\n# Entries added by HostAliases.\n")
		for _, a := range pod.HostAliases {
			fmt.Fprintf(&b, "%s\t%s\n", a.IP, strings.Join(a.Hostnames, "\t"))
		}
	}
	return b.Bytes()
}

// ResolvConf is a parsed resolver configuration. Options are "name" or
// "name:value".
type ResolvConf struct {
	Nameservers []string
	Searches    []string
	Options     []string
}

// ParseResolvConf reads a resolver file as kubelet does: nameserver lines
// accumulate, the last search line and the last options line win, comments
// and unknown lines are skipped, a trailing dot of a search domain is
// dropped (and "." itself, which names no domain). It reads at most
// MaxFileSize bytes and returns ErrTooLarge past that; a nameserver line
// without an address is an error.
func ParseResolvConf(r io.Reader) (ResolvConf, error) {
	data, err := limitread.All(r, MaxFileSize)
	if err != nil {
		return ResolvConf{}, err
	}
	var rc ResolvConf
	var errs []error
	for line := range strings.SplitSeq(string(data), "\n") {
		line = strings.TrimSpace(line)
		if strings.HasPrefix(line, "#") || strings.HasPrefix(line, ";") {
			continue
		}
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		switch fields[0] {
		case "nameserver":
			if len(fields) < 2 {
				errs = append(errs, errors.New("nameserver line without an address"))
				continue
			}
			rc.Nameservers = append(rc.Nameservers, fields[1])
		case "search":
			rc.Searches = nil
			for _, s := range fields[1:] {
				if s != "." {
					rc.Searches = append(rc.Searches, strings.TrimSuffix(s, "."))
				}
			}
		case "options":
			rc.Options = slices.Clone(fields[1:])
		}
	}
	return rc, errors.Join(errs...)
}

// Bytes renders rc as a resolver file, in the order containerd writes a
// pod's: search, nameservers, options.
func (rc ResolvConf) Bytes() []byte {
	var b bytes.Buffer
	if len(rc.Searches) > 0 {
		fmt.Fprintf(&b, "search %s\n", strings.Join(rc.Searches, " "))
	}
	for _, ns := range rc.Nameservers {
		fmt.Fprintf(&b, "nameserver %s\n", ns)
	}
	if len(rc.Options) > 0 {
		fmt.Fprintf(&b, "options %s\n", strings.Join(rc.Options, " "))
	}
	return b.Bytes()
}

// Resolv returns the pod's resolver configuration by kubelet's rules, from
// the node's own, host: ClusterFirst (and ClusterFirstWithHostNet) use the
// cluster DNS servers with the cluster search paths and ndots:5, or fall
// back to Default when there are none; a host-network pod's ClusterFirst is
// Default; Default is the node's configuration; None starts empty. The
// pod's DNSConfig is then appended, and the result cut to the API's limits.
// Unlike kubelet, loopback nameservers are dropped for a pod on its own
// network, where they would reach nothing. The warnings say what was cut,
// dropped or fallen back from.
func Resolv(host ResolvConf, node Node, pod Pod) (ResolvConf, []string) {
	var warnings []string
	policy := pod.DNSPolicy
	if policy == "" {
		policy = DNSClusterFirst
	}
	if policy == DNSClusterFirst && pod.HostNetwork {
		policy = DNSDefault
	}
	var rc ResolvConf
	switch policy {
	case DNSNone:
	case DNSClusterFirst, DNSClusterFirstWithHostNet:
		if len(node.ClusterDNS) > 0 {
			for _, a := range node.ClusterDNS {
				rc.Nameservers = append(rc.Nameservers, a.String())
			}
			rc.Searches = slices.Clone(host.Searches)
			if d := node.ClusterDomain; d != "" {
				rc.Searches = dedup(append([]string{pod.Namespace + ".svc." + d, "svc." + d, d}, rc.Searches...))
			}
			rc.Options = []string{"ndots:5"}
			break
		}
		warnings = append(warnings, fmt.Sprintf("no cluster DNS server is configured: %s falls back to %s", policy, DNSDefault))
		fallthrough
	default: // DNSDefault, and kubelet treats an unknown policy no better
		rc = ResolvConf{
			Nameservers: slices.Clone(host.Nameservers),
			Searches:    slices.Clone(host.Searches),
			Options:     slices.Clone(host.Options),
		}
	}
	if c := pod.DNSConfig; c != nil {
		rc.Nameservers = dedup(append(rc.Nameservers, c.Nameservers...))
		rc.Searches = dedup(append(rc.Searches, c.Searches...))
		rc.Options = mergeOptions(rc.Options, c.Options)
	}
	if !pod.HostNetwork {
		if r := routable(rc.Nameservers); len(r) < len(rc.Nameservers) {
			warnings = append(warnings, fmt.Sprintf("loopback nameservers dropped, unreachable from the pod's network: %v", slices.DeleteFunc(slices.Clone(rc.Nameservers), func(s string) bool { return slices.Contains(r, s) })))
			rc.Nameservers = r
		}
	}
	if len(rc.Nameservers) > MaxNameservers {
		rc.Nameservers = rc.Nameservers[:MaxNameservers]
		warnings = append(warnings, fmt.Sprintf("nameserver limits were exceeded, some nameservers have been omitted, the applied nameserver line is: %s", strings.Join(rc.Nameservers, " ")))
	}
	if s, cut := fitSearch(rc.Searches); cut {
		rc.Searches = s
		warnings = append(warnings, fmt.Sprintf("search line limits were exceeded, some search paths have been omitted, the applied search line is: %s", strings.Join(s, " ")))
	}
	return rc, warnings
}

// fitSearch cuts a search list to MaxSearchPaths entries, drops entries
// longer than a DNS name, and cuts entries from the end until the line fits
// MaxSearchListChars, reporting whether it changed anything.
func fitSearch(s []string) ([]string, bool) {
	cut := false
	if len(s) > MaxSearchPaths {
		s, cut = s[:MaxSearchPaths], true
	}
	kept := s[:0:0]
	for _, d := range s {
		if len(d) > maxSearchPathChars {
			cut = true
			continue
		}
		kept = append(kept, d)
	}
	for len(kept) > 0 && len(strings.Join(kept, " ")) > MaxSearchListChars {
		kept, cut = kept[:len(kept)-1], true
	}
	return kept, cut
}

// routable returns the nameservers that are not loopback addresses, in
// order. A nameserver that is not an address is kept: the resolver judges.
func routable(servers []string) []string {
	var out []string
	for _, s := range servers {
		if a, err := netip.ParseAddr(s); err == nil && a.Unmap().IsLoopback() {
			continue
		}
		out = append(out, s)
	}
	return out
}

func dedup(s []string) []string {
	seen := make(map[string]bool, len(s))
	out := s[:0:0]
	for _, v := range s {
		if !seen[v] {
			seen[v] = true
			out = append(out, v)
		}
	}
	return out
}

// mergeOptions returns base with extra merged in: an extra option replaces
// the base option of the same name in place, others are appended. Unlike
// kubelet, whose merge goes through a map, the order is stable.
func mergeOptions(base, extra []string) []string {
	name := func(o string) string { n, _, _ := strings.Cut(o, ":"); return n }
	out := slices.Clone(base)
	for _, o := range extra {
		if i := slices.IndexFunc(out, func(b string) bool { return name(b) == name(o) }); i >= 0 {
			out[i] = o
		} else {
			out = append(out, o)
		}
	}
	return dedup(out)
}
