package dns

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"hash/maphash"
	"math"
	"net/netip"
	"slices"
	"strings"

	miekg "github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/outpost-mesh/outpost/netd/services"
)

// SchemaVersion is the version of the Kubernetes DNS schema the zone
// follows, served as the TXT record dns-version.DOMAIN.
const SchemaVersion = "1.1.0"

// Zone is an immutable snapshot of the cluster's names: the records of
// DOMAIN's svc subtree, its pod subtree (answered from the name itself)
// and the PTR records of ClusterIPs and endpoint addresses. A Zone is
// safe for concurrent use; nothing changes it after NewZone.
//
// A zone of ten thousand Services holds tens of thousands of names, and
// the edge agent that keeps it has little memory. So no name is kept as a
// string: a Zone keeps one record per Service, in flat arrays of small
// pointer-free structs, with the labels in one shared string, and it
// reads a question's name label by label, right to left, to find the
// record. Owner and target names are made only when they are answered.
type Zone struct {
	domain    string // lowercase, fully qualified: "cluster.local."
	svcSuffix string // ".svc.cluster.local."
	podSuffix string // ".pod.cluster.local."
	// arena holds the labels (names with their namespaces as "NAME.NS",
	// hostnames, port names and protocols) and ExternalName targets back
	// to back; the records below point into it by offset and length.
	arena string
	// svcs holds a record per Service that has a name in the zone,
	// sorted by namespace then name, and a last record that only ends
	// the ranges of the one before: record i's hosts are
	// hosts[svcs[i].host:svcs[i+1].host], and so on.
	svcs []svcRec
	// table finds a Service by NAME.NS: an open-addressing hash table of
	// indexes of svcs plus one, 0 for a free slot, at most half full.
	table []uint32
	seed  maphash.Seed
	// hosts holds the names HOST.NAME.NS.svc of each Service, sorted by
	// label.
	hosts     []hostRec
	hostAddrs []addr16
	baseAddrs []addr16 // the A and AAAA of the Services' own names
	// ports holds the SRV names _PORT._PROTO.NAME.NS.svc of each
	// Service, sorted by protocol then port name, and a last record.
	ports []portRec
	srvs  []srvRec
	// ptr4 and ptr6 hold an entry per address and name it points back
	// to, sorted by address.
	ptr4  []ptr4
	ptr6  []ptr6
	count int // the names of the svc subtree, for Len
}

// addr16 is an address in 16 bytes, an IPv4 one as IPv4-mapped IPv6.
// The zone's addresses are unmapped, so it tells the two apart.
type addr16 [16]byte

func (a addr16) addr() netip.Addr { return netip.AddrFrom16(a).Unmap() }

// svcRec is a Service. Offsets are into the zone's arena.
type svcRec struct {
	key                      uint32 // "NAME.NS"
	cname                    uint32
	base                     uint32 // the first of baseAddrs
	host                     uint32 // the first of hosts
	port                     uint32 // the first of ports
	nameLen, nsLen, cnameLen uint8  // a CNAME target has at most 254 bytes
}

func (s *svcRec) keyLen() uint32 { return uint32(s.nameLen) + 1 + uint32(s.nsLen) }

// hostRec is a host name. Most hosts are an endpoint without a
// hostname and with one IPv4 address: such a host is this record alone,
// its address in it and its label made from the address when needed.
type hostRec struct {
	label uint32 // offset in the arena, when n is not 0
	// addr is the only address, IPv4, when cnt is 0, else the first of
	// cnt in hostAddrs.
	addr uint32
	cnt  uint16
	n    uint8 // the label's length, or 0 for dashed(the first address)
}

type portRec struct {
	name, proto uint32 // offsets in the arena, without the underscores
	srv         uint32 // the first of srvs
	nameLen     uint8
	protoLen    uint8
}

// srvRec is an SRV record's target, the index of a host among the
// Service's hosts or baseTarget for the Service's own name, and port. A
// name's records are sorted by target name, then port.
type srvRec struct {
	host uint32
	port uint16
}

const baseTarget = math.MaxUint32

// A PTR entry's ref is the index of the Service whose own name the
// address has, or the index of a host with hostRef set (the Service of a
// host is the last whose hosts start at or before it).
const hostRef = 1 << 31

type ptr4 struct {
	a   [4]byte
	ref uint32
}

type ptr6 struct {
	a   [16]byte
	ref uint32
}

// Domain returns z's domain, lowercase and fully qualified.
func (z *Zone) Domain() string { return z.domain }

// Len returns the number of names of z's svc subtree, the empty
// non-terminals included.
func (z *Zone) Len() int { return z.count }

// canonicalDomain returns domain lowercase and fully qualified.
func canonicalDomain(domain string) string {
	return strings.ToLower(strings.Trim(domain, ".")) + "."
}

// NewZone builds the zone of domain (such as "cluster.local") from the
// node's Services and EndpointSlices, by the Kubernetes DNS specification
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
// and slices without a service label are skipped, and so are ports whose
// protocol is not a DNS label (the API server allows only TCP, UDP and
// SCTP). Services of the same name, which the API server does not make,
// have their records together. A host name keeps at most 65535
// addresses. NewZone does not keep or change its arguments.
func NewZone(domain string, svcs []*services.Service, slices []*services.Slice) *Zone {
	return NewZoneLike(nil, domain, svcs, slices)
}

// NewZoneLike is NewZone with the new zone's arrays sized after those of
// prev, the zone it replaces (nil for none): a node rebuilds its zone at
// each change of the cluster, and one of about the last one's size is
// then made with one allocation per array, where NewZone grows each from
// nothing, leaving four times the zone's size to collect.
func NewZoneLike(prev *Zone, domain string, svcs []*services.Service, slices []*services.Slice) *Zone {
	domain = canonicalDomain(domain)
	b := zoneBuilder{
		z: &Zone{
			domain:    domain,
			svcSuffix: ".svc." + domain,
			podSuffix: ".pod." + domain,
			count:     3, // svc.DOMAIN, pod.DOMAIN, dns-version.DOMAIN
		},
		intern: make(map[string]uint32),
	}
	if prev != nil {
		b.presize(prev)
	}

	type nsName struct{ ns, name string }
	bySvc := make(map[nsName][]*services.Slice, len(slices))
	for _, sl := range slices {
		if sl == nil || sl.Service == "" {
			continue
		}
		k := nsName{sl.Namespace, sl.Service}
		bySvc[k] = append(bySvc[k], sl)
	}

	// The Services in the order of their records, those of the same
	// name (which the API server does not make) merged in their order.
	type named struct {
		ns, name string // lowercase labels
		svc      *services.Service
	}
	order := make([]named, 0, len(svcs))
	for _, svc := range svcs {
		if svc == nil {
			continue
		}
		name, ok1 := label(svc.Name)
		ns, ok2 := label(svc.Namespace)
		if ok1 && ok2 {
			order = append(order, named{ns, name, svc})
		}
	}
	slicesSortStable(order, func(a, b named) int {
		return cmp.Or(strings.Compare(a.ns, b.ns), strings.Compare(a.name, b.name))
	})
	lastNS := ""
	for i := 0; i < len(order); {
		j := i + 1
		for j < len(order) && order[j].ns == order[i].ns && order[j].name == order[i].name {
			j++
		}
		b.begin()
		for _, o := range order[i:j] {
			b.addService(o.svc, bySvc[nsName{o.svc.Namespace, o.svc.Name}])
		}
		if b.end(order[i].ns, order[i].name) && order[i].ns != lastNS {
			lastNS = order[i].ns
			b.z.count++ // NS.svc.DOMAIN
		}
		i = j
	}
	b.finish()
	return b.z
}

// slicesSortStable is slices.SortStableFunc, which NewZone's parameter
// named slices hides.
func slicesSortStable[E any](s []E, cmp func(a, b E) int) { slices.SortStableFunc(s, cmp) }

// zoneBuilder fills a Zone a Service at a time: begin, addService for
// each object of the name, end.
type zoneBuilder struct {
	z      *Zone
	arena  []byte
	intern map[string]uint32 // arena offsets of port names and protocols

	// The Service being added.
	mark     int          // the arena's length at begin
	ips      []netip.Addr // ClusterIPs
	eps      []netip.Addr // a headless service's endpoint addresses
	hosts    []tmpHost
	srvs     []tmpSRV
	cname    string
	hasCname bool
	// Scratch.
	all         []netip.Addr
	perm, order []uint32
	labels      []byte      // the Service's host labels
	spans       []labelSpan // host i's label in labels
	dash        [48]byte
}

type labelSpan struct {
	off uint32
	n   uint8
}

// tmpHost is an address of a host name; the label is in the arena.
type tmpHost struct {
	off  uint32
	n    uint8
	addr netip.Addr
}

// tmpSRV is an SRV record of a Service. A host's target is host, an
// index of tmpHosts until end resolves it to a host of the Service's.
type tmpSRV struct {
	name, proto string
	host        uint32 // or baseTarget
	port        uint16
}

func (b *zoneBuilder) begin() {
	b.mark = len(b.arena)
	b.ips, b.eps, b.hosts, b.srvs = b.ips[:0], b.eps[:0], b.hosts[:0], b.srvs[:0]
	b.cname, b.hasCname = "", false
}

func (b *zoneBuilder) addService(svc *services.Service, slices []*services.Slice) {
	if svc.Type == corev1.ServiceTypeExternalName {
		target := strings.ToLower(miekg.Fqdn(strings.TrimSuffix(svc.ExternalName, ".")))
		if _, err := netip.ParseAddr(strings.TrimSuffix(target, ".")); err == nil {
			return // an address is no name to point a CNAME at
		}
		if _, ok := miekg.IsDomainName(target); !ok || target == "." || len(target) > 254 {
			return
		}
		b.cname, b.hasCname = target, true
		return
	}

	headless := svc.ClusterIP == corev1.ClusterIPNone
	if !headless {
		ips := svc.ClusterIPs
		if len(ips) == 0 && svc.ClusterIP != "" {
			ips = []string{svc.ClusterIP}
		}
		any := false
		for _, s := range ips {
			a, err := netip.ParseAddr(s)
			if err != nil || a.Zone() != "" {
				continue
			}
			b.ips = append(b.ips, a.Unmap())
			any = true
		}
		if any {
			for _, p := range svc.Ports {
				pn, ok := label(p.Name)
				if !ok {
					continue
				}
				proto, ok := protoLabel(p.Protocol)
				if !ok {
					continue
				}
				b.srvs = append(b.srvs, tmpSRV{pn, proto, baseTarget, uint16(p.Port)})
			}
		}
	}

	for _, sl := range slices {
		if sl.AddressType == discoveryv1.AddressTypeFQDN {
			continue
		}
		for i := range sl.Endpoints {
			ep := &sl.Endpoints[i]
			if !ep.Ready && !svc.PublishNotReady {
				continue
			}
			host, hasHost := label(ep.Hostname)
			for _, s := range ep.Addresses {
				a, err := netip.ParseAddr(s)
				if err != nil || a.Zone() != "" {
					continue
				}
				a = a.Unmap()
				off := len(b.arena)
				if hasHost {
					b.arena = append(b.arena, host...)
				} else {
					b.arena = appendDashed(b.arena, a)
				}
				h := uint32(len(b.hosts))
				b.hosts = append(b.hosts, tmpHost{uint32(off), uint8(len(b.arena) - off), a})
				if !headless {
					continue
				}
				b.eps = append(b.eps, a)
				for _, p := range sl.Ports {
					if p.Port == 0 {
						continue // a port for all ports: no SRV record
					}
					pn, ok := label(p.Name)
					if !ok {
						continue
					}
					pl, ok := protoLabel(p.Protocol)
					if !ok {
						continue
					}
					b.srvs = append(b.srvs, tmpSRV{pn, pl, h, uint16(p.Port)})
				}
			}
		}
	}
}

// arenaLabel returns a label of the arena being built.
func (b *zoneBuilder) arenaLabel(off uint32, n uint8) []byte {
	return b.arena[off : off+uint32(n)]
}

// end writes the records of the Service added since begin, named NAME.NS
// (lowercase labels), and reports whether it has any name.
func (b *zoneBuilder) end(ns, name string) bool {
	z := b.z
	if !b.hasCname && len(b.ips) == 0 && len(b.hosts) == 0 {
		b.arena = b.arena[:b.mark]
		return false
	}
	si := uint32(len(z.svcs))
	rec := svcRec{
		base: uint32(len(z.baseAddrs)),
		host: uint32(len(z.hosts)),
		port: uint32(len(z.ports)),
	}

	// Hosts: sorted by label, then address, so that a label's addresses
	// are together, in order. The SRV records' targets become the
	// indexes of the Service's hosts, and the arena keeps each label
	// once.
	perm := slices.Grow(b.perm[:0], len(b.hosts))[:len(b.hosts)] // tmpHost index -> host index
	order := b.order[:0]
	for i := range b.hosts {
		order = append(order, uint32(i))
	}
	b.perm, b.order = perm, order
	slices.SortFunc(order, func(i, j uint32) int {
		hi, hj := &b.hosts[i], &b.hosts[j]
		return cmp.Or(bytes.Compare(b.arenaLabel(hi.off, hi.n), b.arenaLabel(hj.off, hj.n)), hi.addr.Compare(hj.addr))
	})
	b.labels, b.spans = b.labels[:0], b.spans[:0]
	for k := 0; k < len(order); {
		first := &b.hosts[order[k]]
		l := b.arenaLabel(first.off, first.n)
		b.all = b.all[:0]
		for ; k < len(order); k++ {
			h := &b.hosts[order[k]]
			if !bytes.Equal(b.arenaLabel(h.off, h.n), l) {
				break
			}
			if len(b.all) == 0 || b.all[len(b.all)-1] != h.addr {
				b.all = append(b.all, h.addr)
			}
			perm[order[k]] = uint32(len(b.spans))
		}
		b.spans = append(b.spans, labelSpan{uint32(len(b.labels)), uint8(len(l))})
		b.labels = append(b.labels, l...)
		var h hostRec
		if !bytes.Equal(l, appendDashed(b.dash[:0], b.all[0])) {
			h.n = uint8(len(l)) // the label goes back into the arena below
		}
		if len(b.all) == 1 && b.all[0].Is4() {
			a := b.all[0].As4()
			h.addr = binary.BigEndian.Uint32(a[:])
		} else {
			h.addr = uint32(len(z.hostAddrs))
			for _, a := range b.all[:min(len(b.all), math.MaxUint16)] {
				z.hostAddrs = append(z.hostAddrs, addr16(a.As16()))
				h.cnt++
			}
		}
		z.hosts = append(z.hosts, h)
	}
	nHosts := uint32(len(b.spans))
	// The labels back into the arena, once each, those that addresses
	// make left out.
	b.arena = b.arena[:b.mark]
	for i, sp := range b.spans {
		if h := &z.hosts[rec.host+uint32(i)]; h.n != 0 {
			h.label = uint32(len(b.arena))
			b.arena = append(b.arena, b.labels[sp.off:sp.off+uint32(sp.n)]...)
		}
	}

	rec.key, rec.nameLen = b.appendLabel(name)
	b.arena = append(b.arena, '.')
	_, rec.nsLen = b.appendLabel(ns)
	if b.hasCname {
		rec.cname, rec.cnameLen = b.appendLabel(b.cname)
	}

	// The Service's own addresses.
	b.all = append(append(b.all[:0], b.ips...), b.eps...)
	slices.SortFunc(b.all, netip.Addr.Compare)
	for i, a := range b.all {
		if i == 0 || a != b.all[i-1] {
			z.baseAddrs = append(z.baseAddrs, addr16(a.As16()))
		}
	}

	// PTR: each ClusterIP to the Service, each host's address to it.
	slices.SortFunc(b.ips, netip.Addr.Compare)
	for i, a := range b.ips {
		if i == 0 || a != b.ips[i-1] {
			b.addPTR(a, si)
		}
	}
	for h := rec.host; h < uint32(len(z.hosts)); h++ {
		one, more := z.hostAddrsOf(h)
		if one.IsValid() {
			b.addPTR(one, h|hostRef)
		}
		for _, a := range more {
			b.addPTR(a.addr(), h|hostRef)
		}
	}

	// SRV: by protocol and port name, each name's records by target and
	// port.
	for i := range b.srvs {
		if s := &b.srvs[i]; s.host != baseTarget {
			s.host = perm[s.host]
		}
	}
	base := func() string { return name + "." + ns + z.svcSuffix }
	slices.SortFunc(b.srvs, func(x, y tmpSRV) int {
		if c := cmp.Or(strings.Compare(x.proto, y.proto), strings.Compare(x.name, y.name)); c != 0 {
			return c
		}
		return cmp.Or(b.compareTargets(base, x.host, y.host), cmp.Compare(x.port, y.port))
	})
	b.srvs = slices.Compact(b.srvs)
	nProtos := 0
	for i, s := range b.srvs {
		newName := i == 0 || s.name != b.srvs[i-1].name || s.proto != b.srvs[i-1].proto
		if i == 0 || s.proto != b.srvs[i-1].proto {
			nProtos++
		}
		if newName {
			p := portRec{srv: uint32(len(z.srvs))}
			p.name, p.nameLen = b.internLabel(s.name)
			p.proto, p.protoLen = b.internLabel(s.proto)
			z.ports = append(z.ports, p)
		}
		z.srvs = append(z.srvs, srvRec{s.host, s.port})
	}

	z.svcs = append(z.svcs, rec)
	// NAME.NS.svc, its hosts, its SRV names and the _PROTO names above
	// them.
	z.count += 1 + int(nHosts) + len(z.ports) - int(rec.port) + nProtos
	return true
}

// compareTargets compares the names of two SRV targets of the Service
// being ended, whose own name base returns.
func (b *zoneBuilder) compareTargets(base func() string, x, y uint32) int {
	if x == y {
		return 0
	}
	label := func(h uint32) []byte {
		sp := b.spans[h]
		return b.labels[sp.off : sp.off+uint32(sp.n)]
	}
	if x != baseTarget && y != baseTarget {
		// HOST.base: the labels with their dots compare as the names.
		return compareLabels(label(x), label(y))
	}
	name := func(h uint32) string {
		if h == baseTarget {
			return base()
		}
		return string(label(h)) + "." + base()
	}
	return strings.Compare(name(x), name(y))
}

// compareLabels compares x+"." and y+".".
func compareLabels(x, y []byte) int {
	n := min(len(x), len(y))
	if c := bytes.Compare(x[:n], y[:n]); c != 0 {
		return c
	}
	switch {
	case len(x) == len(y):
		return 0
	case len(x) < len(y):
		return cmp.Compare('.', y[n])
	default:
		return cmp.Compare(x[n], '.')
	}
}

func (b *zoneBuilder) appendLabel(s string) (uint32, uint8) {
	off := uint32(len(b.arena))
	b.arena = append(b.arena, s...)
	return off, uint8(len(s))
}

// internLabel returns the arena offset of s, which many records share.
func (b *zoneBuilder) internLabel(s string) (uint32, uint8) {
	if off, ok := b.intern[s]; ok {
		return off, uint8(len(s))
	}
	off, n := b.appendLabel(s)
	b.intern[s] = off
	return off, n
}

func (b *zoneBuilder) addPTR(a netip.Addr, ref uint32) {
	if a.Is4() {
		b.z.ptr4 = append(b.z.ptr4, ptr4{a.As4(), ref})
	} else {
		b.z.ptr6 = append(b.z.ptr6, ptr6{a.As16(), ref})
	}
}

// presize gives the zone's arrays and the arena room for an eighth more
// than prev's.
func (b *zoneBuilder) presize(prev *Zone) {
	z := b.z
	z.svcs = make([]svcRec, 0, room(len(prev.svcs)))
	z.hosts = make([]hostRec, 0, room(len(prev.hosts)))
	z.hostAddrs = make([]addr16, 0, room(len(prev.hostAddrs)))
	z.baseAddrs = make([]addr16, 0, room(len(prev.baseAddrs)))
	z.ports = make([]portRec, 0, room(len(prev.ports)))
	z.srvs = make([]srvRec, 0, room(len(prev.srvs)))
	z.ptr4 = make([]ptr4, 0, room(len(prev.ptr4)))
	z.ptr6 = make([]ptr6, 0, room(len(prev.ptr6)))
	b.arena = make([]byte, 0, room(len(prev.arena)))
}

func room(n int) int { return n + n/8 }

// trim returns s, or a copy without its spare capacity where that is
// over a quarter of its length.
func trim[S ~[]E, E any](s S) S {
	if cap(s)-len(s) > len(s)/4 {
		return slices.Clone(s)
	}
	return s
}

// finish ends the ranges, sorts the PTR entries without duplicates
// (which two services sharing an address leave), and gives back what the
// arrays' growth left over.
func (b *zoneBuilder) finish() {
	z := b.z
	z.svcs = append(z.svcs, svcRec{base: uint32(len(z.baseAddrs)), host: uint32(len(z.hosts)), port: uint32(len(z.ports))})
	z.ports = append(z.ports, portRec{srv: uint32(len(z.srvs))})
	slices.SortFunc(z.ptr4, func(x, y ptr4) int {
		return cmp.Or(bytes.Compare(x.a[:], y.a[:]), cmp.Compare(x.ref, y.ref))
	})
	z.ptr4 = slices.Compact(z.ptr4)
	slices.SortFunc(z.ptr6, func(x, y ptr6) int {
		return cmp.Or(bytes.Compare(x.a[:], y.a[:]), cmp.Compare(x.ref, y.ref))
	})
	z.ptr6 = slices.Compact(z.ptr6)

	z.arena = string(b.arena)
	n := 2
	for n < 2*len(z.svcs) {
		n *= 2
	}
	z.seed = maphash.MakeSeed()
	z.table = make([]uint32, n)
	for i := range z.svcs[:len(z.svcs)-1] {
		s := &z.svcs[i]
		j := maphash.String(z.seed, z.arena[s.key:s.key+s.keyLen()])
		for j &= uint64(n - 1); z.table[j] != 0; j = (j + 1) & uint64(n-1) {
		}
		z.table[j] = uint32(i) + 1
	}
	z.svcs = trim(z.svcs)
	z.hosts = trim(z.hosts)
	z.hostAddrs = trim(z.hostAddrs)
	z.baseAddrs = trim(z.baseAddrs)
	z.ports = trim(z.ports)
	z.srvs = trim(z.srvs)
	z.ptr4 = trim(z.ptr4)
	z.ptr6 = trim(z.ptr6)
}

// label returns s lowercase when it is a DNS label as Kubernetes names
// are (RFC 1123: letters, digits and inner dashes, 1 to 63 of them).
func label(s string) (string, bool) {
	if len(s) == 0 || len(s) > 63 || s[0] == '-' || s[len(s)-1] == '-' {
		return "", false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || 'A' <= c && c <= 'Z') {
			return "", false
		}
	}
	return strings.ToLower(s), true
}

// protoLabel returns the SRV label of a port's protocol, TCP when unset,
// and whether it is one: a protocol that is no DNS label has no SRV
// names.
func protoLabel(p corev1.Protocol) (string, bool) {
	switch p {
	case "", corev1.ProtocolTCP:
		return "tcp", true
	case corev1.ProtocolUDP:
		return "udp", true
	case corev1.ProtocolSCTP:
		return "sctp", true
	}
	return label(string(p))
}

// dashed returns the label naming an address as CoreDNS does: its dots or
// colons replaced by dashes, with a trailing dash of an IPv6 address
// completed by a zero ("fd00--" becomes "fd00--0").
func dashed(a netip.Addr) string {
	var buf [48]byte
	return string(appendDashed(buf[:0], a))
}

// appendDashed appends dashed(a) to dst.
func appendDashed(dst []byte, a netip.Addr) []byte {
	n := len(dst)
	dst = a.AppendTo(dst)
	s := dst[n:]
	for i, c := range s {
		if c == '.' || c == ':' {
			s[i] = '-'
		}
	}
	if dst[len(dst)-1] == '-' {
		dst = append(dst, '0')
	}
	return dst
}

// undashed parses a label made by dashed, or any dashed spelling of an
// address: three single dashes make IPv4, anything else IPv6.
func undashed(l string) (netip.Addr, bool) {
	var s string
	if strings.Count(l, "-") == 3 && !strings.Contains(l, "--") {
		s = strings.ReplaceAll(l, "-", ".")
	} else {
		s = strings.ReplaceAll(l, "-", ":")
	}
	a, err := netip.ParseAddr(s)
	if err != nil || a.Zone() != "" || a.Is4In6() {
		return netip.Addr{}, false
	}
	return a, true
}

// ref is a name of the zone that exists, as lookup found it.
type ref struct {
	kind  refKind
	svc   uint32 // the Service (kindService, kindHost, kindSRV)
	i     uint32 // the host (kindHost) or SRV name (kindSRV)
	cname string // an ExternalName's target (kindService)
	pod   netip.Addr
}

type refKind uint8

const (
	kindEmpty   refKind = iota // an empty non-terminal: NODATA
	kindVersion                // dns-version.DOMAIN
	kindService                // NAME.NS.svc.DOMAIN
	kindHost                   // HOST.NAME.NS.svc.DOMAIN
	kindSRV                    // _PORT._PROTO.NAME.NS.svc.DOMAIN
	kindPod                    // ADDR.NS.pod.DOMAIN
)

// lookup returns the name name, a lowercase FQDN below z's domain, and
// whether it exists.
func (z *Zone) lookup(name string) (ref, bool) {
	if strings.IndexByte(name, '\\') >= 0 {
		// No name of the zone has an escaped character.
		return ref{}, false
	}
	rest, ok := strings.CutSuffix(name, z.svcSuffix)
	if !ok {
		if rest, ok := strings.CutSuffix(name, z.podSuffix); ok {
			return z.lookupPod(rest)
		}
		switch rest, _ := strings.CutSuffix(name, z.domain); rest {
		case "svc.", "pod.":
			return ref{kind: kindEmpty}, true
		case "dns-version.":
			return ref{kind: kindVersion}, true
		}
		return ref{}, false
	}
	// rest is NS, NAME.NS, HOST.NAME.NS, _PROTO.NAME.NS or
	// _PORT._PROTO.NAME.NS.
	dot := strings.LastIndexByte(rest, '.')
	if dot < 0 {
		return ref{kind: kindEmpty}, z.hasNamespace(rest)
	}
	dot = strings.LastIndexByte(rest[:dot], '.')
	si, ok := z.findService(rest[dot+1:])
	if !ok {
		return ref{}, false
	}
	if dot < 0 {
		s := &z.svcs[si]
		return ref{kind: kindService, svc: si, cname: z.arena[s.cname : s.cname+uint32(s.cnameLen)]}, true
	}
	rest = rest[:dot]
	dot = strings.LastIndexByte(rest, '.')
	if dot < 0 {
		if proto, ok := strings.CutPrefix(rest, "_"); ok {
			_, ok := z.findPort(si, proto, "")
			return ref{kind: kindEmpty}, ok
		}
		h, ok := z.findHost(si, rest)
		return ref{kind: kindHost, svc: si, i: h}, ok
	}
	proto, ok1 := strings.CutPrefix(rest[dot+1:], "_")
	port, ok2 := strings.CutPrefix(rest[:dot], "_")
	if !ok1 || !ok2 || port == "" || strings.IndexByte(port, '.') >= 0 {
		return ref{}, false
	}
	p, ok := z.findPort(si, proto, port)
	return ref{kind: kindSRV, svc: si, i: p}, ok
}

// lookupPod looks up the name rest.pod.DOMAIN.
func (z *Zone) lookupPod(rest string) (ref, bool) {
	// rest is NS or ADDR.NS: CoreDNS's "pods insecure" answers any address
	// in any namespace. Namespaces are not in the snapshot, so every
	// namespace label exists.
	l, ns, two := strings.Cut(rest, ".")
	if !two {
		_, ok := label(l)
		return ref{kind: kindEmpty}, ok
	}
	if _, ok := label(ns); !ok || strings.Contains(ns, ".") {
		return ref{}, false
	}
	a, ok := undashed(l)
	if !ok {
		return ref{}, false
	}
	return ref{kind: kindPod, pod: a}, true
}

// hasNamespace reports whether a Service of namespace ns has a name.
func (z *Zone) hasNamespace(ns string) bool {
	svcs := z.svcs[:len(z.svcs)-1]
	i, _ := slices.BinarySearchFunc(svcs, ns, func(s svcRec, ns string) int {
		return strings.Compare(z.namespace(&s), ns)
	})
	return i < len(svcs) && z.namespace(&svcs[i]) == ns
}

func (z *Zone) namespace(s *svcRec) string {
	return z.arena[s.key+uint32(s.nameLen)+1 : s.key+s.keyLen()]
}

// findService returns the index of the Service named key, "NAME.NS".
func (z *Zone) findService(key string) (uint32, bool) {
	mask := uint64(len(z.table) - 1)
	for j := maphash.String(z.seed, key) & mask; ; j = (j + 1) & mask {
		i := z.table[j]
		if i == 0 {
			return 0, false
		}
		if s := &z.svcs[i-1]; z.arena[s.key:s.key+s.keyLen()] == key {
			return i - 1, true
		}
	}
}

// findHost returns the index of the host of Service si labelled l.
func (z *Zone) findHost(si uint32, l string) (uint32, bool) {
	lo, hi := z.svcs[si].host, z.svcs[si+1].host
	var buf [48]byte
	for lo < hi {
		m := lo + (hi-lo)/2
		switch hl := z.appendHostLabel(buf[:0], m); {
		case string(hl) == l:
			return m, true
		case string(hl) < l:
			lo = m + 1
		default:
			hi = m
		}
	}
	return 0, false
}

// appendHostLabel appends the label of host h.
func (z *Zone) appendHostLabel(dst []byte, h uint32) []byte {
	r := &z.hosts[h]
	if r.n != 0 {
		return append(dst, z.arena[r.label:r.label+uint32(r.n)]...)
	}
	one, more := z.hostAddrsOf(h)
	if !one.IsValid() {
		one = more[0].addr()
	}
	return appendDashed(dst, one)
}

// hostAddrsOf returns the addresses of host h: one, or more.
func (z *Zone) hostAddrsOf(h uint32) (one netip.Addr, more []addr16) {
	r := &z.hosts[h]
	if r.cnt == 0 {
		var a [4]byte
		binary.BigEndian.PutUint32(a[:], r.addr)
		return netip.AddrFrom4(a), nil
	}
	return netip.Addr{}, z.hostAddrs[r.addr : r.addr+uint32(r.cnt)]
}

// findPort returns the index of the SRV name _name._proto of Service si;
// with name "", whether the Service has one of protocol proto.
func (z *Zone) findPort(si uint32, proto, name string) (uint32, bool) {
	// A Service has few ports.
	for i := z.svcs[si].port; i < z.svcs[si+1].port; i++ {
		p := &z.ports[i]
		if z.arena[p.proto:p.proto+uint32(p.protoLen)] == proto && (name == "" || z.arena[p.name:p.name+uint32(p.nameLen)] == name) {
			return i, true
		}
	}
	return 0, false
}

// svcOfHost returns the index of the Service of host h.
func (z *Zone) svcOfHost(h uint32) uint32 {
	// The last Service whose hosts start at or before h: those before
	// it with no host start there too.
	i, _ := slices.BinarySearchFunc(z.svcs, h+1, func(s svcRec, t uint32) int { return cmp.Compare(s.host, t) })
	return uint32(i - 1)
}

// appendName appends the name of Service si, or of its host h when h is
// not baseTarget.
func (z *Zone) appendName(dst []byte, si, h uint32) []byte {
	if h != baseTarget {
		dst = z.appendHostLabel(dst, h)
		dst = append(dst, '.')
	}
	s := &z.svcs[si]
	dst = append(dst, z.arena[s.key:s.key+s.keyLen()]...)
	return append(dst, z.svcSuffix...)
}

func (z *Zone) name(si, h uint32) string {
	var buf [128]byte
	return string(z.appendName(buf[:0], si, h))
}

// ptr returns the names of address a, sorted.
func (z *Zone) ptr(a netip.Addr) []string {
	var names []string
	add := func(ref uint32) {
		if ref&hostRef != 0 {
			h := ref &^ hostRef
			names = append(names, z.name(z.svcOfHost(h), h))
		} else {
			names = append(names, z.name(ref, baseTarget))
		}
	}
	if a.Is4() {
		k := a.As4()
		i, _ := slices.BinarySearchFunc(z.ptr4, k, func(p ptr4, k [4]byte) int { return bytes.Compare(p.a[:], k[:]) })
		for ; i < len(z.ptr4) && z.ptr4[i].a == k; i++ {
			add(z.ptr4[i].ref)
		}
	} else {
		k := a.As16()
		i, _ := slices.BinarySearchFunc(z.ptr6, k, func(p ptr6, k [16]byte) int { return bytes.Compare(p.a[:], k[:]) })
		for ; i < len(z.ptr6) && z.ptr6[i].a == k; i++ {
			add(z.ptr6[i].ref)
		}
	}
	if len(names) > 1 {
		slices.Sort(names)
		names = slices.Compact(names)
	}
	return names
}

// hasPTRWithin reports whether an address of p has a PTR record.
func (z *Zone) hasPTRWithin(p netip.Prefix) bool {
	m := p.Masked().Addr()
	if m.Is4() {
		k := m.As4()
		i, _ := slices.BinarySearchFunc(z.ptr4, k, func(e ptr4, k [4]byte) int { return bytes.Compare(e.a[:], k[:]) })
		return i < len(z.ptr4) && p.Contains(netip.AddrFrom4(z.ptr4[i].a))
	}
	k := m.As16()
	i, _ := slices.BinarySearchFunc(z.ptr6, k, func(e ptr6, k [16]byte) int { return bytes.Compare(e.a[:], k[:]) })
	return i < len(z.ptr6) && p.Contains(netip.AddrFrom16(z.ptr6[i].a))
}

// addrs returns the A and AAAA of r's name: one, or more.
func (z *Zone) addrs(r ref) (one netip.Addr, more []addr16) {
	switch r.kind {
	case kindService:
		return netip.Addr{}, z.baseAddrs[z.svcs[r.svc].base:z.svcs[r.svc+1].base]
	case kindHost:
		return z.hostAddrsOf(r.i)
	case kindPod:
		return r.pod, nil
	}
	return netip.Addr{}, nil
}

// appendAddrsOf appends the A and AAAA records of addrs' result.
func appendAddrsOf(rrs []miekg.RR, one netip.Addr, more []addr16, owner string, qtype uint16, ttl uint32) []miekg.RR {
	if one.IsValid() {
		rrs = appendAddr(rrs, one, owner, qtype, ttl)
	}
	for _, a := range more {
		rrs = appendAddr(rrs, a.addr(), owner, qtype, ttl)
	}
	return rrs
}

// records returns the records of r of type qtype named owner (the
// question's name, in its case), and the records the additional section
// may hold.
func (z *Zone) records(r ref, owner string, qtype uint16, ttl uint32) (ans, extra []miekg.RR) {
	hdr := func(t uint16) miekg.RR_Header {
		return miekg.RR_Header{Name: owner, Rrtype: t, Class: miekg.ClassINET, Ttl: ttl}
	}
	if r.cname != "" {
		return []miekg.RR{&miekg.CNAME{Hdr: hdr(miekg.TypeCNAME), Target: r.cname}}, nil
	}
	any := qtype == miekg.TypeANY
	if qtype == miekg.TypeA || qtype == miekg.TypeAAAA || any {
		one, more := z.addrs(r)
		ans = appendAddrsOf(ans, one, more, owner, qtype, ttl)
	}
	if (qtype == miekg.TypeSRV || any) && r.kind == kindSRV {
		srvs := z.srvs[z.ports[r.i].srv:z.ports[r.i+1].srv]
		weight := uint16(max(1, 100/len(srvs)))
		first := z.svcs[r.svc].host
		var buf [128]byte
		target := ""
		for i, s := range srvs {
			h := s.host
			if h != baseTarget {
				h += first
			}
			same := i > 0 && s.host == srvs[i-1].host
			if !same {
				target = string(z.appendName(buf[:0], r.svc, h))
			}
			ans = append(ans, &miekg.SRV{Hdr: hdr(miekg.TypeSRV), Priority: 0, Weight: weight, Port: s.port, Target: target})
			if same {
				continue
			}
			t := ref{kind: kindService, svc: r.svc}
			if h != baseTarget {
				t = ref{kind: kindHost, svc: r.svc, i: h}
			}
			one, more := z.addrs(t)
			extra = appendAddrsOf(extra, one, more, target, miekg.TypeANY, ttl)
		}
	}
	if (qtype == miekg.TypeTXT || any) && r.kind == kindVersion {
		ans = append(ans, &miekg.TXT{Hdr: hdr(miekg.TypeTXT), Txt: []string{SchemaVersion}})
	}
	return ans, extra
}

// appendAddrs appends the A (qtype A), AAAA (AAAA) or both (ANY) records
// of addrs named owner.
func appendAddrs(rrs []miekg.RR, addrs []netip.Addr, owner string, qtype uint16, ttl uint32) []miekg.RR {
	for _, a := range addrs {
		rrs = appendAddr(rrs, a, owner, qtype, ttl)
	}
	return rrs
}

// appendAddr appends the A or AAAA record of a named owner when qtype
// asks for it.
func appendAddr(rrs []miekg.RR, a netip.Addr, owner string, qtype uint16, ttl uint32) []miekg.RR {
	if a.Is4() && qtype != miekg.TypeAAAA {
		rrs = append(rrs, &miekg.A{
			Hdr: miekg.RR_Header{Name: owner, Rrtype: miekg.TypeA, Class: miekg.ClassINET, Ttl: ttl},
			A:   a.AsSlice(),
		})
	}
	if a.Is6() && qtype != miekg.TypeA {
		rrs = append(rrs, &miekg.AAAA{
			Hdr:  miekg.RR_Header{Name: owner, Rrtype: miekg.TypeAAAA, Class: miekg.ClassINET, Ttl: ttl},
			AAAA: a.AsSlice(),
		})
	}
	return rrs
}
