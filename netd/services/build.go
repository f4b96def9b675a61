package services

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// Input is what the node knows when it builds its table. Build reads it
// and keeps nothing of it.
type Input struct {
	Node      string       // this node's name
	Zone      string       // this node's topology.kubernetes.io/zone label, "" if none
	NodeAddrs []netip.Addr // the node's own addresses, for NodePort frontends
	Services  []*Service   // nil ones are skipped
	Slices    []*Slice
	// Dead, if not nil, says an endpoint address is known dead by the node
	// (its own pod that the runtime says has exited or is not ready), so
	// that offline the node drops it at once even though the hub's slices
	// still list it ready.
	Dead func(netip.Addr) bool
}

// Problem is something of the input Build left out, and why: for logs and
// events, said once per problem.
type Problem struct {
	Service string // "namespace/name"
	Reason  string
}

func (p Problem) String() string { return p.Service + ": " + p.Reason }

// DefaultAffinity is the ClientIP session affinity timeout of a Service
// that sets none, as the API server defaults it.
const DefaultAffinity = time.Duration(corev1.DefaultClientIPServiceAffinitySeconds) * time.Second

// maxAffinitySeconds is the longest affinity timeout the API accepts.
const maxAffinitySeconds = 86400

// limits are the bounds build holds a table to: the package's Max
// constants in Build, smaller ones in tests.
type limits struct {
	frontends, backends, backendsTotal int
}

// Build returns the table kube-proxy would program on this node for in,
// and what of in it left out. It does no I/O, does not modify in and is
// deterministic: the same Services, slices and node give an equal Table
// and the same Problems, whatever their order in in.
//
// Per Service port and IP family of the Service's clusterIPs it makes a
// ClusterIP frontend, an ExternalIP frontend per spec.externalIPs and
// status.loadBalancer.ingress IP of that family, and, for NodePort and
// LoadBalancer Services, a NodePort frontend per node address of that
// family. Backends are chosen as kube-proxy's CategorizeEndpoints does:
// ready endpoints, else serving and terminating ones; zone hints when the
// Service asks for them; internalTrafficPolicy Local for ClusterIP
// frontends and externalTrafficPolicy Local for the ExternalBackends of
// the others, whose node-originated traffic goes cluster-wide as
// kube-proxy's short-circuit rules send it.
//
// When two Services claim the same frontend Key or the same nodePort and
// protocol, the older one (by creationTimestamp, then namespace/name)
// keeps it. A frontend with more than MaxBackends backends keeps the first
// MaxBackends in the table's order. Services are then added in
// namespace/name order; one that would take the table past MaxFrontends
// or MaxBackendsTotal (counting Backends and ExternalBackends) is left out
// whole, and the next ones still tried. Claims are settled before the
// limits: a Service left out for them still kept what it claimed from a
// younger one.
//
// Frontends of the returned Table may share their Backends and
// ExternalBackends slices: callers treat them as read-only. The Problems
// are sorted by Service, then Reason.
func Build(in Input) (Table, []Problem) {
	return build(in, limits{MaxFrontends, MaxBackends, MaxBackendsTotal})
}

// nsName names a Service, or the Service an EndpointSlice belongs to.
type nsName struct{ ns, name string }

// service is one Service on its way into the table.
type service struct {
	svc     *Service
	name    string // "namespace/name"
	created time.Time
	fronts  []*Frontend
	// nodePorts are the nodePorts and protocols the Service claims, even
	// where the node has no address to make a frontend of them.
	nodePorts keySet // Addr unset
	// over says the Service alone is past the limits, and why.
	over string
}

// keySet is a set of Keys in the order they were added, with a map once
// it is too long to search.
type keySet struct {
	list []Key
	m    map[Key]struct{}
}

func (s *keySet) has(k Key) bool {
	if s.m != nil {
		_, ok := s.m[k]
		return ok
	}
	return slices.Contains(s.list, k)
}

func (s *keySet) add(k Key) {
	s.list = append(s.list, k)
	if s.m == nil && len(s.list) > 8 {
		s.m = make(map[Key]struct{}, 2*len(s.list))
		for _, k := range s.list {
			s.m[k] = struct{}{}
		}
	} else if s.m != nil {
		s.m[k] = struct{}{}
	}
}

type builder struct {
	in       Input
	lim      limits
	node     [2][]netip.Addr // by family index
	slices   map[nsName][]*Slice
	problems []Problem

	// scratch, reused from one Service port to the next
	eps   []parsedSlice
	ports []portRef
	cands []candidate
}

func build(in Input, lim limits) (Table, []Problem) {
	b := &builder{in: in, lim: lim}
	for _, a := range in.NodeAddrs {
		a = a.Unmap()
		if !a.IsValid() || a.Zone() != "" || !usable(a) {
			continue
		}
		b.node[family(a)] = append(b.node[family(a)], a)
	}
	for f := range b.node {
		slices.SortFunc(b.node[f], netip.Addr.Compare)
		b.node[f] = slices.Compact(b.node[f])
	}
	b.slices = make(map[nsName][]*Slice, len(in.Slices))
	for _, s := range in.Slices {
		if s == nil || s.Service == "" {
			continue
		}
		k := nsName{s.Namespace, s.Service}
		b.slices[k] = append(b.slices[k], s)
	}

	store := make([]service, 0, len(in.Services))
	for _, s := range in.Services {
		if s != nil {
			store = append(store, service{svc: s, name: s.Namespace + "/" + s.Name, created: s.Created})
		}
	}
	svcs := make([]*service, len(store))
	for i := range store {
		svcs[i] = &store[i]
	}
	slices.SortFunc(svcs, func(a, b *service) int {
		return cmp.Or(cmp.Compare(a.svc.Namespace, b.svc.Namespace), cmp.Compare(a.svc.Name, b.svc.Name))
	})
	// A Service listed twice cannot be told apart from its twin in a way
	// that does not hang on the input's order: leave both out.
	kept := svcs[:0]
	for i := 0; i < len(svcs); {
		j := i + 1
		for j < len(svcs) && svcs[j].svc.Namespace == svcs[i].svc.Namespace && svcs[j].svc.Name == svcs[i].svc.Name {
			j++
		}
		if j-i > 1 {
			b.problem(svcs[i].name, fmt.Sprintf("listed %d times; left out", j-i))
		} else {
			kept = append(kept, svcs[i])
		}
		i = j
	}
	svcs = kept
	for _, s := range svcs {
		b.service(s)
	}

	// Claims: the older Service keeps a contested Key or nodePort.
	byAge := slices.Clone(svcs)
	slices.SortStableFunc(byAge, func(a, b *service) int { return a.created.Compare(b.created) })
	type owner struct {
		s *service
		f *Frontend
	}
	keys := make(map[Key]owner, len(svcs))
	nodePorts := make(map[Key]*service)
	for _, s := range byAge {
		var lost keySet
		for _, np := range s.nodePorts.list {
			if o, ok := nodePorts[np]; ok {
				lost.add(np)
				b.problem(s.name, fmt.Sprintf("nodePort %d/%s is already used by the older Service %s; left out", np.Port, np.Proto, o.name))
				continue
			}
			nodePorts[np] = s
		}
		fronts := s.fronts[:0]
		for _, f := range s.fronts {
			if f.Kind == NodePort && lost.has(Key{Port: f.Key.Port, Proto: f.Key.Proto}) {
				continue
			}
			o, ok := keys[f.Key]
			switch {
			case !ok:
				keys[f.Key] = owner{s, f}
				fronts = append(fronts, f)
			case o.s != s:
				b.problem(s.name, fmt.Sprintf("%s %s is already used by the older Service %s; left out", f.Kind, f.Key, o.s.name))
			default:
				// An address listed twice in externalIPs and ingress
				// was merged before: this is its clusterIP or a node
				// address as an externalIP.
				b.problem(s.name, fmt.Sprintf("%s %s is already its %s of port %q; left out", f.Kind, f.Key, o.f.Kind, o.f.PortName))
			}
		}
		clear(s.fronts[len(fronts):])
		s.fronts = fronts
	}

	// Limits, in namespace/name order.
	t := make(Table, len(keys))
	var nf, nb int
	for _, s := range svcs {
		sb := 0
		for _, f := range s.fronts {
			sb += len(f.Backends) + len(f.ExternalBackends)
		}
		if s.over != "" {
			b.problem(s.name, s.over)
			continue
		}
		if len(s.fronts) == 0 {
			continue
		}
		if nf+len(s.fronts) > b.lim.frontends {
			b.problem(s.name, fmt.Sprintf("left out: its %d frontends would take the node past %d", len(s.fronts), b.lim.frontends))
			continue
		}
		if nb+sb > b.lim.backendsTotal {
			b.problem(s.name, fmt.Sprintf("left out: its %d backends would take the node past %d", sb, b.lim.backendsTotal))
			continue
		}
		nf += len(s.fronts)
		nb += sb
		for _, f := range s.fronts {
			t[f.Key] = f
		}
	}

	slices.SortFunc(b.problems, func(p, q Problem) int {
		return cmp.Or(strings.Compare(p.Service, q.Service), strings.Compare(p.Reason, q.Reason))
	})
	return t, slices.Compact(b.problems)
}

func (b *builder) problem(svc, reason string) {
	b.problems = append(b.problems, Problem{Service: svc, Reason: reason})
}

// service makes s's candidate frontends, with their backends.
func (b *builder) service(s *service) {
	spec := s.svc
	if spec.Type == corev1.ServiceTypeExternalName {
		return
	}
	primary := spec.ClusterIP
	if primary == "" && len(spec.ClusterIPs) > 0 {
		primary = spec.ClusterIPs[0]
	}
	if primary == "" || primary == corev1.ClusterIPNone {
		return // headless, or no address yet: kube-proxy skips it
	}
	ips := spec.ClusterIPs
	if len(ips) == 0 {
		ips = []string{spec.ClusterIP}
	}
	var clusterIP [2]netip.Addr
	for _, str := range ips {
		a, ok := b.frontAddr(s, "clusterIP", str)
		if !ok {
			continue
		}
		if f := family(a); clusterIP[f].IsValid() {
			b.problem(s.name, fmt.Sprintf("clusterIP %s is a second %s clusterIP; left out", a, familyName(f)))
		} else {
			clusterIP[f] = a
		}
	}
	if !clusterIP[0].IsValid() && !clusterIP[1].IsValid() {
		return
	}

	nodePorts := false
	switch spec.Type {
	case corev1.ServiceTypeNodePort, corev1.ServiceTypeLoadBalancer:
		nodePorts = true
	case corev1.ServiceTypeClusterIP, "":
	default:
		b.problem(s.name, fmt.Sprintf("unknown type %q, taken as ClusterIP", spec.Type))
	}
	// As k8s.io/kubernetes/pkg/api/v1/service ExternallyAccessible.
	external := nodePorts || len(spec.ExternalIPs) > 0
	extLocal := external && spec.ExternalLocal
	intLocal := spec.InternalLocal

	var affinity time.Duration
	if spec.ClientIPAffinity {
		affinity = DefaultAffinity
		if spec.AffinitySeconds != nil {
			if sec := *spec.AffinitySeconds; sec >= 1 && sec <= maxAffinitySeconds {
				affinity = time.Duration(sec) * time.Second
			} else {
				b.problem(s.name, fmt.Sprintf("sessionAffinity timeout %d is outside 1..%d; using %d", sec, maxAffinitySeconds, int(DefaultAffinity/time.Second)))
			}
		}
	}

	var extIPs [2][]netip.Addr
	addExt := func(what, str string) {
		a, ok := b.frontAddr(s, what, str)
		if !ok {
			return
		}
		f := family(a)
		if !clusterIP[f].IsValid() {
			b.problem(s.name, fmt.Sprintf("%s %s left out: the Service has no %s clusterIP", what, a, familyName(f)))
			return
		}
		extIPs[f] = append(extIPs[f], a)
	}
	for _, str := range spec.ExternalIPs {
		addExt("externalIP", str)
	}
	for _, ip := range spec.IngressIPs {
		addExt("load-balancer ingress IP", ip)
	}
	// An address in both, or twice, is one frontend.
	for f := range extIPs {
		slices.SortFunc(extIPs[f], netip.Addr.Compare)
		extIPs[f] = slices.Compact(extIPs[f])
	}

	topology := spec.Topology
	b.parseSlices(s, clusterIP)

	var seen keySet // port and protocol of the ports so far (Addr unset), when many
	for i := range spec.Ports {
		p := &spec.Ports[i]
		proto, ok := parseProto(p.Protocol)
		if !ok {
			b.problem(s.name, fmt.Sprintf("port %q: unknown protocol %q; left out", p.Name, p.Protocol))
			continue
		}
		if p.Port < 1 || p.Port > 65535 {
			b.problem(s.name, fmt.Sprintf("port %q: port %d is outside 1..65535; left out", p.Name, p.Port))
			continue
		}
		pk := Key{Port: uint16(p.Port), Proto: proto}
		if dup := len(spec.Ports) > 8 && seen.has(pk) || len(spec.Ports) <= 8 && listedBefore(spec.Ports[:i], pk); dup {
			b.problem(s.name, fmt.Sprintf("port %q: %d/%s is listed twice; left out", p.Name, p.Port, proto))
			continue
		}
		if len(spec.Ports) > 8 {
			seen.add(pk)
		}
		var nodePort uint16
		switch {
		case p.NodePort == 0:
		case !nodePorts:
			b.problem(s.name, fmt.Sprintf("port %q: nodePort %d on a Service of type %q; ignored", p.Name, p.NodePort, spec.Type))
		case p.NodePort < 1 || p.NodePort > 65535:
			b.problem(s.name, fmt.Sprintf("port %q: nodePort %d is outside 1..65535; left out", p.Name, p.NodePort))
		case s.nodePorts.has(Key{Port: uint16(p.NodePort), Proto: proto}):
			b.problem(s.name, fmt.Sprintf("port %q: nodePort %d/%s is already another port's; left out", p.Name, p.NodePort, proto))
		default:
			nodePort = uint16(p.NodePort)
			s.nodePorts.add(Key{Port: nodePort, Proto: proto})
		}

		for f := range 2 {
			if !clusterIP[f].IsValid() {
				continue
			}
			n := 1 + len(extIPs[f])
			if nodePort != 0 {
				n += len(b.node[f])
			}
			if len(s.fronts)+n > b.lim.frontends {
				// Stop before a hostile Service takes the memory.
				s.over = fmt.Sprintf("left out: it alone has more than %d frontends", b.lim.frontends)
				s.fronts, s.nodePorts = nil, keySet{}
				return
			}
			// kube-proxy's UsesClusterEndpoints and UsesLocalEndpoints.
			needCluster := !intLocal || len(extIPs[f]) > 0 || (nodePort != 0 && len(b.node[f]) > 0)
			cluster, local := b.endpoints(s, p.Name, proto, f, topology, needCluster, intLocal || extLocal)
			front := func(kind Kind, a netip.Addr, port uint16) {
				fr := &Frontend{
					Key:      Key{Addr: a, Port: port, Proto: proto},
					Kind:     kind,
					Service:  s.name,
					PortName: p.Name,
					Affinity: affinity,
				}
				switch {
				case kind == ClusterIP && intLocal:
					fr.Backends = local
				case kind == ClusterIP:
					fr.Backends = cluster
				case extLocal:
					// kube-proxy short-circuits traffic from the node's
					// pods and host to the cluster-wide endpoints.
					fr.Backends, fr.ExternalBackends, fr.ExternalLocal = cluster, local, true
				default:
					fr.Backends, fr.ExternalBackends = cluster, cluster
				}
				s.fronts = append(s.fronts, fr)
			}
			front(ClusterIP, clusterIP[f], pk.Port)
			for _, a := range extIPs[f] {
				front(ExternalIP, a, pk.Port)
			}
			if nodePort != 0 {
				for _, a := range b.node[f] {
					front(NodePort, a, nodePort)
				}
			}
		}
	}
}

// listedBefore reports whether one of ports has k's port and protocol:
// seen without a set, for the few ports most Services have.
func listedBefore(ports []ServicePort, k Key) bool {
	for i := range ports {
		if proto, ok := parseProto(ports[i].Protocol); ok && proto == k.Proto && ports[i].Port == int32(k.Port) {
			return true
		}
	}
	return false
}

// frontAddr parses a frontend address of s, saying why it is left out if
// it cannot be one.
func (b *builder) frontAddr(s *service, what, str string) (netip.Addr, bool) {
	a, ok := parseIP(str)
	switch {
	case !ok:
		b.problem(s.name, fmt.Sprintf("%s %q is not an IP address; left out", what, str))
	case !usable(a):
		b.problem(s.name, fmt.Sprintf("%s %s is not a unicast address; left out", what, a))
	default:
		return a, true
	}
	return netip.Addr{}, false
}

func parseProto(p corev1.Protocol) (Proto, bool) {
	switch p {
	case corev1.ProtocolTCP, "": // "" is what the API defaults to TCP
		return TCP, true
	case corev1.ProtocolUDP:
		return UDP, true
	case corev1.ProtocolSCTP:
		return SCTP, true
	}
	return 0, false
}

// family is 0 for IPv4 and 1 for IPv6; a is never 4-in-6.
func family(a netip.Addr) int {
	if a.Is4() {
		return 0
	}
	return 1
}

func familyName(f int) string {
	if f == 0 {
		return "IPv4"
	}
	return "IPv6"
}

// usable reports whether a may be a frontend or an endpoint: the API
// refuses unspecified, loopback, link-local and multicast addresses there.
func usable(a netip.Addr) bool {
	return !a.IsUnspecified() && !a.IsLoopback() && !a.IsLinkLocalUnicast() && !a.IsMulticast()
}

// parseIP parses an address as the API (and kube-proxy's ParseIPSloppy)
// reads it: IPv4 may have leading zeros, read as decimal, as objects
// stored before the API refused them can; 4-in-6 addresses are IPv4; no
// zones.
func parseIP(s string) (netip.Addr, bool) {
	a, err := netip.ParseAddr(s)
	if err != nil {
		var ok bool
		if a, ok = parseLegacyIPv4(s); !ok {
			return netip.Addr{}, false
		}
	}
	if a.Zone() != "" {
		return netip.Addr{}, false
	}
	return a.Unmap(), true
}

func parseLegacyIPv4(s string) (netip.Addr, bool) {
	var b [4]byte
	for i := range 4 {
		field := s
		if i < 3 {
			dot := strings.IndexByte(s, '.')
			if dot < 0 {
				return netip.Addr{}, false
			}
			field, s = s[:dot], s[dot+1:]
		}
		if len(field) == 0 || len(field) > 3 {
			return netip.Addr{}, false
		}
		n := 0
		for _, c := range []byte(field) {
			if c < '0' || c > '9' {
				return netip.Addr{}, false
			}
			n = n*10 + int(c-'0')
		}
		if n > 255 {
			return netip.Addr{}, false
		}
		b[i] = byte(n)
	}
	return netip.AddrFrom4(b), true
}
