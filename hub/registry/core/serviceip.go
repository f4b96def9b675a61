package core

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/outpost-mesh/outpost/hub/apiserver"
	"github.com/outpost-mesh/outpost/hub/registry/typed"
	"github.com/outpost-mesh/outpost/sync/wire"
)

// ServiceConfig says where services' cluster IPs and node ports come
// from, as kube-apiserver's --service-cluster-ip-range and
// --service-node-port-range do. The hub serves one IP family, the CIDR's.
type ServiceConfig struct {
	// CIDR is the range of cluster IPs. Its first address after the
	// network address is the `kubernetes` service's (KubernetesIP).
	CIDR netip.Prefix
	// NodePorts is the range of node ports.
	NodePorts PortRange
}

// DefaultServiceCIDR is K3s's service range, beside the 10.42.0.0/16 pod
// range nodes get their pod CIDRs from.
var DefaultServiceCIDR = netip.MustParsePrefix("10.43.0.0/16")

// ServiceCIDR is DefaultServiceCIDR, under its former name.
//
// Deprecated: the range is ServiceConfig.CIDR; use
// DefaultServiceConfig().KubernetesIP for the `kubernetes` service.
var ServiceCIDR = DefaultServiceCIDR

// DefaultServiceConfig returns the defaults.
func DefaultServiceConfig() ServiceConfig {
	return ServiceConfig{
		CIDR:      DefaultServiceCIDR,                   // K3s's, beside its pod CIDR
		NodePorts: PortRange{First: 30000, Last: 32767}, // kube-apiserver's default
	}
}

// maxIPv6HostBits bounds an IPv6 service range to a /108, as upstream
// does, so that the range can be scanned.
const maxIPv6HostBits = 20

// Validate reports the first problem with c.
func (c ServiceConfig) Validate() error {
	if !c.CIDR.IsValid() {
		return errors.New("service CIDR is not set: give one such as 10.43.0.0/16")
	}
	if c.CIDR != c.CIDR.Masked() {
		return fmt.Errorf("service CIDR %s has host bits set: use %s", c.CIDR, c.CIDR.Masked())
	}
	host := c.CIDR.Addr().BitLen() - c.CIDR.Bits()
	switch {
	case c.CIDR.Addr().Is4() && host < 2:
		return fmt.Errorf("service CIDR %s is too small: want at most a /30", c.CIDR)
	case c.CIDR.Addr().Is6() && host < 2:
		return fmt.Errorf("service CIDR %s is too small: want at most a /126", c.CIDR)
	case c.CIDR.Addr().Is6() && host > maxIPv6HostBits:
		return fmt.Errorf("service CIDR %s is too large: an IPv6 range may be at most a /%d", c.CIDR, 128-maxIPv6HostBits)
	}
	if c.NodePorts.First < 1 || c.NodePorts.Last > 65535 || c.NodePorts.First > c.NodePorts.Last {
		return fmt.Errorf("node port range %s: want FIRST-LAST within 1-65535", c.NodePorts)
	}
	return nil
}

// KubernetesIP is the cluster IP of the `kubernetes` service in default:
// the first address after the network address.
func (c ServiceConfig) KubernetesIP() netip.Addr { return c.CIDR.Masked().Addr().Next() }

// DNSIP is the cluster IP of the cluster DNS Service, kube-system's
// kube-dns: wire.ClusterDNSAddr of the range, its tenth address, as K3s's
// 10.43.0.10. It is not valid when the range is too small to hold it.
func (c ServiceConfig) DNSIP() netip.Addr { return wire.ClusterDNSAddr(c.CIDR) }

// family is the IP family of the services' cluster IPs.
func (c ServiceConfig) family() corev1.IPFamily {
	if c.CIDR.Addr().Is6() {
		return corev1.IPv6Protocol
	}
	return corev1.IPv4Protocol
}

// PortRange is an inclusive range of ports.
type PortRange struct{ First, Last int32 }

// String returns the range as upstream prints it: "30000-32767".
func (r PortRange) String() string { return fmt.Sprintf("%d-%d", r.First, r.Last) }

// Contains reports whether port is in r.
func (r PortRange) Contains(port int32) bool { return port >= r.First && port <= r.Last }

// ParsePortRange parses a range as kube-apiserver's
// --service-node-port-range takes it: "FIRST-LAST", "FIRST+SIZE" (SIZE
// ports more) or "PORT".
func ParsePortRange(s string) (PortRange, error) {
	s = strings.TrimSpace(s)
	bad := fmt.Errorf("port range %q: want FIRST-LAST such as 30000-32767", s)
	num := func(v string) (int32, error) {
		n, err := strconv.ParseUint(v, 10, 16)
		if err != nil || n == 0 {
			return 0, bad
		}
		return int32(n), nil
	}
	var r PortRange
	var err error
	if first, last, ok := strings.Cut(s, "-"); ok {
		if r.First, err = num(first); err != nil {
			return PortRange{}, err
		}
		if r.Last, err = num(last); err != nil {
			return PortRange{}, err
		}
	} else if first, size, ok := strings.Cut(s, "+"); ok {
		if r.First, err = num(first); err != nil {
			return PortRange{}, err
		}
		n, err := strconv.ParseUint(size, 10, 16)
		if err != nil {
			return PortRange{}, bad
		}
		r.Last = r.First + int32(n)
	} else {
		if r.First, err = num(s); err != nil {
			return PortRange{}, err
		}
		r.Last = r.First
	}
	if r.Last > 65535 || r.First > r.Last {
		return PortRange{}, bad
	}
	return r, nil
}

// serviceRules are the service rules plus the allocation of cluster IPs
// and node ports from cfg.
type serviceRules struct {
	*typed.Rules[*corev1.Service]
	cfg ServiceConfig
}

var (
	_ apiserver.Allocator       = serviceRules{}
	_ apiserver.UpdateAllocator = serviceRules{}
)

// nodePortValue is the reserved value of a node port: one number per
// cluster whatever the protocol, as upstream. Cluster IPs are reserved
// as themselves.
func nodePortValue(port int32) string { return "nodeport/" + strconv.Itoa(int(port)) }

// Held returns the cluster IPs, node ports and health check node port a
// service holds.
func (serviceRules) Held(obj runtime.Object) []string {
	svc, ok := obj.(*corev1.Service)
	if !ok {
		return nil
	}
	var vals []string
	for _, ip := range svc.Spec.ClusterIPs {
		if ip != "" && ip != corev1.ClusterIPNone {
			vals = append(vals, ip)
		}
	}
	seen := map[int32]bool{}
	for _, p := range svc.Spec.Ports {
		if p.NodePort != 0 && !seen[p.NodePort] {
			seen[p.NodePort] = true
			vals = append(vals, nodePortValue(p.NodePort))
		}
	}
	if hc := svc.Spec.HealthCheckNodePort; hc != 0 && !seen[hc] {
		vals = append(vals, nodePortValue(hc))
	}
	return vals
}

// Assign gives a new service what it lacks and reserves what it holds:
// a cluster IP from the CIDR unless it is headless or ExternalName, node
// ports from the node port range for types NodePort and LoadBalancer
// (unless allocateLoadBalancerNodePorts is false), and a health check
// node port for a LoadBalancer with externalTrafficPolicy Local. Values
// the client gave are reserved as given; one out of range, or held by
// another service, is refused with upstream's 422.
func (r serviceRules) Assign(obj runtime.Object, reserve func(string) (bool, error)) error {
	return r.AssignUpdate(obj, nil, reserve)
}

// AssignUpdate is Assign for an update of old (nil on create): values old
// holds are the service's already, wherever they lie, and new ones are
// allocated when the service changes type.
func (r serviceRules) AssignUpdate(obj, old runtime.Object, reserve func(string) (bool, error)) error {
	svc, ok := obj.(*corev1.Service)
	if !ok {
		return nil
	}
	held := map[string]bool{}
	if old != nil {
		for _, v := range r.Held(old) {
			held[v] = true
		}
	}
	a := &serviceAllocation{cfg: r.cfg, svc: svc, held: held, reserve: reserve}
	if err := a.clusterIPs(); err != nil {
		return err
	}
	return a.nodePorts()
}

// serviceAllocation is one Assign of a service.
type serviceAllocation struct {
	cfg     ServiceConfig
	svc     *corev1.Service
	held    map[string]bool // values the stored service holds
	reserve func(string) (bool, error)
	mine    map[string]bool // values reserved for svc by this Assign
}

func (a *serviceAllocation) invalid(errs ...*field.Error) error {
	return apierrors.NewInvalid(schema.GroupKind{Kind: "Service"}, a.svc.Name, errs)
}

// take reserves v for the service and reports whether it got it.
func (a *serviceAllocation) take(v string) (bool, error) {
	if a.held[v] || a.mine[v] {
		return true, nil
	}
	ok, err := a.reserve(v)
	if ok {
		if a.mine == nil {
			a.mine = map[string]bool{}
		}
		a.mine[v] = true
	}
	return ok, err
}

func (a *serviceAllocation) clusterIPs() error {
	spec := &a.svc.Spec
	if spec.Type == corev1.ServiceTypeExternalName || isHeadless(a.svc) {
		return nil
	}
	ipsPath := specPath.Child("clusterIPs")
	fam := a.cfg.family()
	kept := len(spec.ClusterIPs) > 0
	for _, ip := range spec.ClusterIPs {
		kept = kept && a.held[ip]
	}
	if kept {
		return nil // the stored service's, even from a former range
	}
	for i, f := range spec.IPFamilies {
		if f != fam {
			return a.invalid(field.Invalid(specPath.Child("ipFamilies").Index(i), f, "not configured on this cluster"))
		}
	}
	if spec.IPFamilyPolicy != nil && *spec.IPFamilyPolicy == corev1.IPFamilyPolicyRequireDualStack {
		return a.invalid(field.Invalid(specPath.Child("ipFamilyPolicy"), *spec.IPFamilyPolicy, "this cluster is not configured for dual-stack services"))
	}
	for i, ip := range spec.ClusterIPs {
		if a.held[ip] {
			continue
		}
		addr, err := netip.ParseAddr(ip)
		if err != nil {
			return a.invalid(field.Invalid(ipsPath.Index(i), ip, "must be a valid IP address"))
		}
		if (addr.Is6() && fam != corev1.IPv6Protocol) || (addr.Is4() && fam != corev1.IPv4Protocol) {
			return a.invalid(field.Invalid(ipsPath.Index(i), spec.ClusterIPs, fmt.Sprintf("%s is not configured on this cluster", familyOf(addr))))
		}
		if !a.cfg.CIDR.Contains(addr) {
			return a.invalid(field.Invalid(ipsPath, spec.ClusterIPs, fmt.Sprintf(
				"failed to allocate IP %s: provided IP is not in the valid range. The range of valid IPs is %s", ip, a.cfg.CIDR)))
		}
		ok, err := a.take(ip)
		if err != nil {
			return err
		}
		if !ok {
			return a.invalid(field.Invalid(ipsPath, spec.ClusterIPs, fmt.Sprintf("failed to allocate IP %s: provided IP is already allocated", ip)))
		}
	}
	if len(spec.ClusterIPs) > 0 {
		return nil
	}
	ip, err := a.nextIP()
	if err != nil {
		return err
	}
	spec.ClusterIP = ip
	spec.ClusterIPs = []string{ip}
	if len(spec.IPFamilies) == 0 {
		spec.IPFamilies = []corev1.IPFamily{fam}
	}
	return nil
}

func familyOf(addr netip.Addr) corev1.IPFamily {
	if addr.Is4() {
		return corev1.IPv4Protocol
	}
	return corev1.IPv6Protocol
}

// nextIP reserves a free cluster IP. As upstream (KEP-3070), the lower
// band of the range is left to clients that ask for an address of their
// choice: dynamic allocation starts at a random address of the upper
// band and falls back to the lower one once the upper one is full. The
// network address, the `kubernetes` service's first address and the
// IPv4 broadcast address are never handed out.
func (a *serviceAllocation) nextIP() (string, error) {
	cidr := a.cfg.CIDR.Masked()
	size := uint64(1) << (cidr.Addr().BitLen() - cidr.Bits())
	first, last := uint64(2), size-1 // skip the network address and .1
	if cidr.Addr().Is4() {
		last = size - 2 // and the broadcast address
	}
	lower := min(max(16, size/16), 256)
	v, err := a.scan(first, last, lower, func(off uint64) string { return addrAt(cidr.Addr(), off).String() })
	if err != nil {
		return "", err
	}
	if v == "" {
		return "", apierrors.NewInternalError(fmt.Errorf("failed to allocate a serviceIP: range is full (%s)", a.cfg.CIDR))
	}
	return v, nil
}

// scan reserves a free value among the offsets first..last: from a
// random offset of the upper band [lower, last], wrapping, then the same
// in the lower band [first, lower). It returns "" when all are taken.
func (a *serviceAllocation) scan(first, last, lower uint64, value func(uint64) string) (string, error) {
	lower = max(lower, first)
	bands := [][2]uint64{{lower, last}, {first, lower - 1}}
	if lower > last {
		bands = [][2]uint64{{first, last}}
	}
	for _, b := range bands {
		if b[1] < b[0] {
			continue
		}
		n := b[1] - b[0] + 1
		start := rand.Uint64N(n)
		for i := uint64(0); i < n; i++ {
			v := value(b[0] + (start+i)%n)
			ok, err := a.take(v)
			if err != nil {
				return "", err
			}
			if ok {
				return v, nil
			}
		}
	}
	return "", nil
}

// addrAt returns base plus off.
func addrAt(base netip.Addr, off uint64) netip.Addr {
	b := base.As16()
	for i := 15; i >= 0 && off > 0; i-- {
		sum := uint64(b[i]) + off&0xff
		b[i] = byte(sum)
		off = off>>8 + sum>>8
	}
	a := netip.AddrFrom16(b)
	if base.Is4() {
		return a.Unmap()
	}
	return a
}

// nodePorts reserves the node ports and the health check node port, as
// upstream's allocator: ports that share a port number (TCP and UDP 53)
// share a node port, and a port given with allocation off is still
// reserved.
func (a *serviceAllocation) nodePorts() error {
	spec := &a.svc.Spec
	allocate := needsNodePorts(a.svc)
	if spec.Type == corev1.ServiceTypeNodePort || spec.Type == corev1.ServiceTypeLoadBalancer {
		byPort := map[int32]int32{}
		for i := range spec.Ports {
			p := &spec.Ports[i]
			if p.NodePort == 0 {
				if !allocate {
					continue
				}
				if np := byPort[p.Port]; np != 0 {
					p.NodePort = np
					continue
				}
				for _, q := range spec.Ports[i+1:] {
					if q.Port == p.Port && q.NodePort != 0 {
						p.NodePort = q.NodePort // the one the client asked for
						break
					}
				}
			}
			if p.NodePort != 0 {
				if err := a.takePort(p.NodePort, specPath.Child("ports").Index(i).Child("nodePort"), ""); err != nil {
					return err
				}
			} else {
				np, err := a.nextPort()
				if err != nil {
					return err
				}
				p.NodePort = np
			}
			if byPort[p.Port] == 0 {
				byPort[p.Port] = p.NodePort
			}
		}
	}
	if !needsHealthCheckNodePort(a.svc) {
		return nil
	}
	if hc := spec.HealthCheckNodePort; hc != 0 {
		return a.takePort(hc, specPath.Child("healthCheckNodePort"), fmt.Sprintf("failed to allocate requested HealthCheck NodePort %d: ", hc))
	}
	np, err := a.nextPort()
	if err != nil {
		return err
	}
	spec.HealthCheckNodePort = np
	return nil
}

// takePort reserves a node port the client asked for.
func (a *serviceAllocation) takePort(port int32, p *field.Path, prefix string) error {
	v := nodePortValue(port)
	if a.held[v] || a.mine[v] {
		return nil
	}
	if !a.cfg.NodePorts.Contains(port) {
		return a.invalid(field.Invalid(p, port, fmt.Sprintf("%sprovided port is not in the valid range. The range of valid ports is %s", prefix, a.cfg.NodePorts)))
	}
	ok, err := a.take(v)
	if err != nil {
		return err
	}
	if !ok {
		return a.invalid(field.Invalid(p, port, prefix+"provided port is already allocated"))
	}
	return nil
}

// nextPort reserves a free node port, from the upper band first as
// nextIP does (the lower band is upstream's: at least 16 ports, at most
// 128).
func (a *serviceAllocation) nextPort() (int32, error) {
	r := a.cfg.NodePorts
	size := uint64(r.Last - r.First + 1)
	lower := min(max(16, size/32), 128)
	v, err := a.scan(0, size-1, lower, func(off uint64) string { return nodePortValue(r.First + int32(off)) })
	if err != nil {
		return 0, err
	}
	if v == "" {
		return 0, apierrors.NewInternalError(fmt.Errorf("failed to allocate a nodePort: range is full (%s)", r))
	}
	n, _ := strconv.Atoi(strings.TrimPrefix(v, "nodeport/"))
	return int32(n), nil
}
