package dns

// The zone as it was built before the compact Zone: every name a string
// key of a map. It is the oracle of TestZoneDifferential and
// FuzzZoneLookup, and the baseline TestRefZoneRetainedHeap and
// BenchmarkLookup measure; nothing else uses it.

import (
	"cmp"
	"net/netip"
	"slices"
	"strings"

	miekg "github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/outpost-mesh/outpost/netd/services"
)

// refZone is an immutable snapshot of the cluster's names: the records of
// DOMAIN's svc subtree, its pod subtree (answered from the name itself)
// and the PTR records of ClusterIPs and endpoint addresses. A refZone is
// safe for concurrent use; nothing changes it after newRefZone.
type refZone struct {
	domain    string // lowercase, fully qualified: "cluster.local."
	podSuffix string // ".pod.cluster.local."
	// names holds every name of the svc subtree that exists, with its
	// data, including the empty non-terminals above the names with data:
	// a name in names is NODATA for a type it lacks, a name below the
	// domain and not in names (nor in the pod subtree) is NXDOMAIN.
	names map[string]*refNode
	ptrs  map[netip.Addr][]string
	// ptrAddrs is the sorted keys of ptrs, to tell whether a partial
	// reverse name has names below it.
	ptrAddrs []netip.Addr
}

// refNode is the data of one name. Targets are lowercase FQDNs.
type refNode struct {
	addrs []netip.Addr // A and AAAA, without duplicates
	cname string       // an ExternalName service's target
	srvs  []refSrv
	txt   string
}

type refSrv struct {
	port   uint16
	target string
}

// newRefZone builds the zone of domain (such as "cluster.local") from the
// refNode's Services and EndpointSlices, by the Kubernetes DNS specification
// and as CoreDNS's kubernetes plugin answers:
//
//   - NAME.NS.svc.DOMAIN: A/AAAA for each ClusterIP; for a headless
//     service, for each ready endpoint (every endpoint when the service
//     publishes not-ready addresses), and none at all (NXDOMAIN) when
//     there is no such endpoint; CNAME to the ExternalName of an
//     ExternalName service.
//   - HOST.NAME.NS.svc.DOMAIN for each such endpoint, HOST being the
//     endpoint's hostname or, without one, its address with dashes.
//   - _PORT._PROTO.NAME.NS.svc.DOMAIN: SRV for each named port, to the
//     service's name, or for a headless service to each endpoint's name
//     with the endpoint slice's port.
//   - PTR for each ClusterIP to the service's name and for each endpoint
//     address to the endpoint's name.
//   - dns-version.DOMAIN: TXT SchemaVersion.
//
// Objects with names that are not DNS labels, addresses that do not parse
// and slices without a service label are skipped. newRefZone does not keep
// or change its arguments.
func newRefZone(domain string, svcs []*corev1.Service, slices []*discoveryv1.EndpointSlice) *refZone {
	domain = canonicalDomain(domain)
	nEndpoints := 0
	for _, sl := range slices {
		if sl != nil {
			nEndpoints += len(sl.Endpoints)
		}
	}
	// Sized for a service's name, an SRV name and its empty
	// non-terminal, a namespace's name, and a name per endpoint, so that
	// the maps do not grow while they fill.
	b := refBuilder{
		z: &refZone{
			domain:    domain,
			podSuffix: ".pod." + domain,
			names:     make(map[string]*refNode, 4*len(svcs)+nEndpoints+8),
			ptrs:      make(map[netip.Addr][]string, len(svcs)+nEndpoints),
		},
	}
	b.get("svc." + domain)
	b.get("pod." + domain)
	b.get("dns-version." + domain).txt = SchemaVersion

	type nsName struct{ ns, name string }
	bySvc := make(map[nsName][]*discoveryv1.EndpointSlice, len(slices))
	for _, sl := range slices {
		if sl == nil || sl.Labels == nil {
			continue
		}
		name := sl.Labels[discoveryv1.LabelServiceName]
		if name == "" {
			continue
		}
		k := nsName{sl.Namespace, name}
		bySvc[k] = append(bySvc[k], sl)
	}
	for _, svc := range svcs {
		if svc == nil {
			continue
		}
		b.addService(svc, bySvc[nsName{svc.Namespace, svc.Name}])
	}
	b.finish()
	return b.z
}

type refBuilder struct {
	z *refZone
	// slab hands out nodes a block at a time: a zone holds tens of
	// thousands, and one allocation each was a large share of the
	// build's allocations.
	slab []refNode
}

func (b *refBuilder) newNode() *refNode {
	if len(b.slab) == 0 {
		b.slab = make([]refNode, 512)
	}
	n := &b.slab[0]
	b.slab = b.slab[1:]
	return n
}

// get returns the refNode of name, making it and the empty non-terminals
// above it up to the domain.
func (b *refBuilder) get(name string) *refNode {
	if n, ok := b.z.names[name]; ok {
		return n
	}
	n := b.newNode()
	b.z.names[name] = n
	for p := refParent(name); len(p) > len(b.z.domain); p = refParent(p) {
		if _, ok := b.z.names[p]; ok {
			break
		}
		b.z.names[p] = b.newNode()
	}
	return n
}

// refParent returns name without its first label.
func refParent(name string) string {
	if i := strings.IndexByte(name, '.'); i >= 0 {
		return name[i+1:]
	}
	return ""
}

func (b *refBuilder) addService(svc *corev1.Service, slices []*discoveryv1.EndpointSlice) {
	name, ok1 := label(svc.Name)
	ns, ok2 := label(svc.Namespace)
	if !ok1 || !ok2 {
		return
	}
	base := name + "." + ns + ".svc." + b.z.domain

	if svc.Spec.Type == corev1.ServiceTypeExternalName {
		target := strings.ToLower(miekg.Fqdn(strings.TrimSuffix(svc.Spec.ExternalName, ".")))
		if _, err := netip.ParseAddr(strings.TrimSuffix(target, ".")); err == nil {
			return // an address is no name to point a CNAME at
		}
		if _, ok := miekg.IsDomainName(target); !ok || target == "." || len(target) > 254 {
			return
		}
		b.get(base).cname = target
		return
	}

	headless := svc.Spec.ClusterIP == corev1.ClusterIPNone
	if !headless {
		ips := svc.Spec.ClusterIPs
		if len(ips) == 0 && svc.Spec.ClusterIP != "" {
			ips = []string{svc.Spec.ClusterIP}
		}
		var n *refNode
		for _, s := range ips {
			a, err := netip.ParseAddr(s)
			if err != nil || a.Zone() != "" {
				continue
			}
			a = a.Unmap()
			if n == nil {
				n = b.get(base)
			}
			n.addrs = append(n.addrs, a)
			b.z.ptrs[a] = append(b.z.ptrs[a], base)
		}
		if n != nil {
			for _, p := range svc.Spec.Ports {
				pn, ok := label(p.Name)
				if !ok {
					continue
				}
				srvName := "_" + pn + "._" + refProtoLabel(p.Protocol) + "." + base
				sn := b.get(srvName)
				sn.srvs = append(sn.srvs, refSrv{uint16(p.Port), base})
			}
		}
	}

	var baseNode *refNode
	for _, sl := range slices {
		if sl.AddressType == discoveryv1.AddressTypeFQDN {
			continue
		}
		for i := range sl.Endpoints {
			ep := &sl.Endpoints[i]
			ready := ep.Conditions.Ready == nil || *ep.Conditions.Ready
			if !ready && !svc.Spec.PublishNotReadyAddresses {
				continue
			}
			host, hasHost := "", false
			if ep.Hostname != nil {
				host, hasHost = label(*ep.Hostname)
			}
			for _, s := range ep.Addresses {
				a, err := netip.ParseAddr(s)
				if err != nil || a.Zone() != "" {
					continue
				}
				a = a.Unmap()
				h := host
				if !hasHost {
					h = dashed(a)
				}
				hostName := h + "." + base
				hn := b.get(hostName)
				hn.addrs = append(hn.addrs, a)
				b.z.ptrs[a] = append(b.z.ptrs[a], hostName)
				if !headless {
					continue
				}
				if baseNode == nil {
					baseNode = b.get(base)
				}
				baseNode.addrs = append(baseNode.addrs, a)
				for _, p := range sl.Ports {
					if p.Name == nil || p.Port == nil {
						continue
					}
					pn, ok := label(*p.Name)
					if !ok {
						continue
					}
					proto := corev1.ProtocolTCP
					if p.Protocol != nil {
						proto = *p.Protocol
					}
					srvName := "_" + pn + "._" + refProtoLabel(proto) + "." + base
					sn := b.get(srvName)
					sn.srvs = append(sn.srvs, refSrv{uint16(*p.Port), hostName})
				}
			}
		}
	}
}

// finish removes duplicate data, which endpoints listed in two slices or
// two services sharing an address leave, and sorts the PTR index.
func (b *refBuilder) finish() {
	for _, n := range b.z.names {
		if len(n.addrs) > 1 {
			slices.SortFunc(n.addrs, netip.Addr.Compare)
			n.addrs = slices.Compact(n.addrs)
		}
		if len(n.srvs) > 1 {
			slices.SortFunc(n.srvs, func(a, b refSrv) int {
				return cmp.Or(cmp.Compare(a.target, b.target), cmp.Compare(a.port, b.port))
			})
			n.srvs = slices.Compact(n.srvs)
		}
	}
	b.z.ptrAddrs = make([]netip.Addr, 0, len(b.z.ptrs))
	for a, targets := range b.z.ptrs {
		if len(targets) > 1 {
			slices.Sort(targets)
			b.z.ptrs[a] = slices.Compact(targets)
		}
		b.z.ptrAddrs = append(b.z.ptrAddrs, a)
	}
	slices.SortFunc(b.z.ptrAddrs, netip.Addr.Compare)
}

// lookup returns the refNode of name, a lowercase FQDN below z's domain, and
// whether the name exists. A pod name that exists has a refNode made for it.
func (z *refZone) lookup(name string) (*refNode, bool) {
	if n, ok := z.names[name]; ok {
		return n, true
	}
	rest, ok := strings.CutSuffix(name, z.podSuffix)
	if !ok {
		return nil, false
	}
	// rest is NS or ADDR.NS: CoreDNS's "pods insecure" answers any address
	// in any namespace. Namespaces are not in the snapshot, so every
	// namespace label exists.
	l, ns, two := strings.Cut(rest, ".")
	if !two {
		if _, ok := label(l); !ok {
			return nil, false
		}
		return &refNode{}, true
	}
	if _, ok := label(ns); !ok || strings.Contains(ns, ".") {
		return nil, false
	}
	a, ok := undashed(l)
	if !ok {
		return nil, false
	}
	return &refNode{addrs: []netip.Addr{a}}, true
}

// ptr returns the names of address a. The caller must not change them.
func (z *refZone) ptr(a netip.Addr) []string { return z.ptrs[a] }

// hasPTRWithin reports whether an address of p has a PTR record.
func (z *refZone) hasPTRWithin(p netip.Prefix) bool {
	i, _ := slices.BinarySearchFunc(z.ptrAddrs, p.Masked().Addr(), netip.Addr.Compare)
	return i < len(z.ptrAddrs) && p.Contains(z.ptrAddrs[i])
}

// records returns n's records of type qtype named owner (the question's
// name, in its case), and the records the additional section may hold.
func (z *refZone) records(n *refNode, owner string, qtype uint16, ttl uint32) (ans, extra []miekg.RR) {
	hdr := func(t uint16) miekg.RR_Header {
		return miekg.RR_Header{Name: owner, Rrtype: t, Class: miekg.ClassINET, Ttl: ttl}
	}
	if n.cname != "" {
		return []miekg.RR{&miekg.CNAME{Hdr: hdr(miekg.TypeCNAME), Target: n.cname}}, nil
	}
	any := qtype == miekg.TypeANY
	if qtype == miekg.TypeA || qtype == miekg.TypeAAAA || any {
		ans = appendAddrs(ans, n.addrs, owner, qtype, ttl)
	}
	if (qtype == miekg.TypeSRV || any) && len(n.srvs) > 0 {
		weight := uint16(max(1, 100/len(n.srvs)))
		seen := make(map[string]bool, len(n.srvs))
		for _, s := range n.srvs {
			ans = append(ans, &miekg.SRV{Hdr: hdr(miekg.TypeSRV), Priority: 0, Weight: weight, Port: s.port, Target: s.target})
			if seen[s.target] {
				continue
			}
			seen[s.target] = true
			if t, ok := z.names[s.target]; ok {
				extra = appendAddrs(extra, t.addrs, s.target, miekg.TypeANY, ttl)
			}
		}
	}
	if (qtype == miekg.TypeTXT || any) && n.txt != "" {
		ans = append(ans, &miekg.TXT{Hdr: hdr(miekg.TypeTXT), Txt: []string{n.txt}})
	}
	return ans, extra
}

// refProtoLabel returns the SRV label of a port's protocol, TCP when
// unset.
func refProtoLabel(p corev1.Protocol) string {
	if p == "" {
		return "tcp"
	}
	return strings.ToLower(string(p))
}

// newZone is NewZone of the API objects, as the agent makes it of what
// it keeps of them.
func newZone(domain string, svcs []*corev1.Service, slices []*discoveryv1.EndpointSlice) *Zone {
	return NewZone(domain, services.FromServices(svcs), services.FromSlices(slices))
}
