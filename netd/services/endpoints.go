package services

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"

	discoveryv1 "k8s.io/api/discovery/v1"
)

// parsedSlice is one EndpointSlice of a Service, read once for all the
// Service's ports.
type parsedSlice struct {
	fam   int
	ports []slicePort
	eps   []endpoint
}

type slicePort struct {
	name  string
	proto Proto
	port  uint16
}

// portRef is a port of one of b.eps, indexed by family, name and
// protocol so a Service of many ports is not quadratic in them.
type portRef struct {
	fam   int
	name  string
	proto Proto
	port  uint16
	slice int // in b.eps
}

func (r *portRef) compare(fam int, name string, proto Proto) int {
	return cmp.Or(cmp.Compare(r.fam, fam), cmp.Compare(r.name, name), cmp.Compare(r.proto, proto))
}

// endpoint is what kube-proxy's endpoint slice cache keeps of an
// endpoint, with its hints already matched against the node's zone.
type endpoint struct {
	addr                        netip.Addr
	local                       bool
	ready, serving, terminating bool
	hinted                      bool // has zone hints
	forZone                     bool // hinted for the node's zone
}

// rank orders endpoints listed more than once (in two slices) so the one
// kept does not hang on the slices' order: a local one first, as
// kube-proxy's cache prefers, then the more usable one.
func (e *endpoint) rank() int {
	r := 0
	for _, b := range [...]bool{e.local, e.ready, e.serving, !e.terminating, e.forZone, e.hinted} {
		r <<= 1
		if b {
			r |= 1
		}
	}
	return r
}

type candidate struct {
	ap netip.AddrPort
	ep endpoint
}

// parseSlices reads the EndpointSlices of s into b.eps, those of the
// address families s has a clusterIP of. Endpoints the node knows dead
// are left out here, before anything is chosen.
func (b *builder) parseSlices(s *service, clusterIP [2]netip.Addr) {
	list := b.slices[nsName{s.svc.Namespace, s.svc.Name}]
	b.eps = b.eps[:0]
	for _, sl := range list {
		var fam int
		switch sl.AddressType {
		case discoveryv1.AddressTypeIPv4:
			fam = 0
		case discoveryv1.AddressTypeIPv6:
			fam = 1
		default:
			continue // FQDN slices are not kube-proxy's
		}
		if !clusterIP[fam].IsValid() {
			continue
		}
		// Reuse the scratch slices of an earlier Service.
		if len(b.eps) < cap(b.eps) {
			b.eps = b.eps[:len(b.eps)+1]
		} else {
			b.eps = append(b.eps, parsedSlice{})
		}
		ps := &b.eps[len(b.eps)-1]
		ps.fam, ps.ports, ps.eps = fam, ps.ports[:0], ps.eps[:0]

		for _, p := range sl.Ports {
			if p.Port == 0 {
				continue // as kube-proxy: a port for "all ports" is not supported
			}
			if p.Port < 1 || p.Port > 65535 {
				b.problem(s.name, fmt.Sprintf("EndpointSlice %s: port %d is outside 1..65535; left out", sl.Name, p.Port))
				continue
			}
			sp := slicePort{port: uint16(p.Port), name: p.Name}
			proto, ok := parseProto(p.Protocol)
			if !ok {
				continue // matches no Service port
			}
			sp.proto = proto
			ps.ports = append(ps.ports, sp)
		}
		if len(ps.ports) == 0 {
			b.eps = b.eps[:len(b.eps)-1]
			continue
		}

		for i := range sl.Endpoints {
			e := &sl.Endpoints[i]
			if len(e.Addresses) == 0 {
				b.problem(s.name, fmt.Sprintf("EndpointSlice %s: an endpoint has no address; left out", sl.Name))
				continue
			}
			// kube-proxy uses the first address only.
			a, ok := parseIP(e.Addresses[0])
			switch {
			case !ok:
				b.problem(s.name, fmt.Sprintf("EndpointSlice %s: endpoint address %q is not an IP address; left out", sl.Name, e.Addresses[0]))
				continue
			case family(a) != fam:
				b.problem(s.name, fmt.Sprintf("EndpointSlice %s: endpoint address %s is not %s as the slice is; left out", sl.Name, a, familyName(fam)))
				continue
			case !usable(a):
				b.problem(s.name, fmt.Sprintf("EndpointSlice %s: endpoint address %s is not a unicast address; left out", sl.Name, a))
				continue
			}
			if b.in.Dead != nil && b.in.Dead(a) {
				continue
			}
			ep := endpoint{
				addr:        a,
				local:       b.in.Node != "" && e.NodeName == b.in.Node,
				ready:       e.Ready,
				serving:     e.Serving,
				terminating: e.Terminating,
			}
			if len(e.Zones) > 0 {
				ep.hinted = true
				for _, z := range e.Zones {
					if b.in.Zone != "" && z == b.in.Zone {
						ep.forZone = true
						break
					}
				}
			}
			ps.eps = append(ps.eps, ep)
		}
	}

	b.ports = b.ports[:0]
	for i := range b.eps {
		for _, sp := range b.eps[i].ports {
			b.ports = append(b.ports, portRef{b.eps[i].fam, sp.name, sp.proto, sp.port, i})
		}
	}
	slices.SortFunc(b.ports, func(x, y portRef) int {
		return cmp.Or(x.compare(y.fam, y.name, y.proto), cmp.Compare(x.slice, y.slice), cmp.Compare(x.port, y.port))
	})
}

// endpoints returns the backends of the Service port named name with
// protocol proto in address family fam: cluster for "Cluster" traffic
// policy, local for "Local", as kube-proxy's CategorizeEndpoints chooses
// them from the slices parseSlices read. Both are sorted by address then
// port, and hold at most b.lim.backends.
//
// Only the sets asked for are made, and said to be cut.
func (b *builder) endpoints(s *service, name string, proto Proto, fam int, topology, needCluster, needLocal bool) (cluster, local []Backend) {
	c := b.cands[:0]
	i, _ := slices.BinarySearchFunc(b.ports, 0, func(r portRef, _ int) int { return r.compare(fam, name, proto) })
	for ; i < len(b.ports) && b.ports[i].compare(fam, name, proto) == 0; i++ {
		r := &b.ports[i]
		for _, e := range b.eps[r.slice].eps {
			c = append(c, candidate{netip.AddrPortFrom(e.addr, r.port), e})
		}
	}
	b.cands = c
	if len(c) == 0 {
		return nil, nil
	}
	slices.SortFunc(c, func(x, y candidate) int {
		return cmp.Or(x.ap.Compare(y.ap), cmp.Compare(y.ep.rank(), x.ep.rank()))
	})
	c = slices.CompactFunc(c, func(x, y candidate) bool { return x.ap == y.ap })

	// Zone hints are used when every ready endpoint has some and one at
	// least is for this node's zone (topology.go's topologyModeFromHints,
	// node hints aside).
	if needCluster {
		cluster = b.clusterSet(c, topology)
	}
	if needLocal {
		local = pick(c, func(e *endpoint) bool { return e.local && e.ready })
		if local == nil {
			local = pick(c, func(e *endpoint) bool { return e.local && e.serving && e.terminating })
		}
	}

	if len(cluster) > b.lim.backends {
		b.problem(s.name, fmt.Sprintf("port %q: %d %s endpoints, more than %d; the first %d are used", name, len(cluster), familyName(fam), b.lim.backends, b.lim.backends))
		cluster = cluster[:b.lim.backends:b.lim.backends]
	}
	if len(local) > b.lim.backends {
		b.problem(s.name, fmt.Sprintf("port %q: %d %s local endpoints, more than %d; the first %d are used", name, len(local), familyName(fam), b.lim.backends, b.lim.backends))
		local = local[:b.lim.backends:b.lim.backends]
	}
	return cluster, local
}

// clusterSet returns the backends of the candidates c for "Cluster"
// traffic policy.
func (b *builder) clusterSet(c []candidate, topology bool) []Backend {
	useZone := false
	if topology && b.in.Zone != "" {
		ready, allHinted, forZone := false, true, false
		for i := range c {
			e := &c[i].ep
			if !e.ready {
				continue
			}
			ready = true
			allHinted = allHinted && e.hinted
			forZone = forZone || e.forZone
		}
		useZone = ready && allHinted && forZone
	}

	cluster := pick(c, func(e *endpoint) bool { return e.ready && (!useZone || e.forZone) })
	if cluster == nil {
		// No ready endpoint anywhere (topology never empties the set):
		// fall back to the serving, terminating ones.
		cluster = pick(c, func(e *endpoint) bool { return e.serving && e.terminating })
	}
	return cluster
}

// pick returns the backends of the candidates ok keeps, nil if none.
func pick(c []candidate, ok func(*endpoint) bool) []Backend {
	n := 0
	for i := range c {
		if ok(&c[i].ep) {
			n++
		}
	}
	if n == 0 {
		return nil
	}
	out := make([]Backend, 0, n)
	for i := range c {
		if ok(&c[i].ep) {
			out = append(out, Backend{Addr: c[i].ap, Local: c[i].ep.local})
		}
	}
	return out
}
