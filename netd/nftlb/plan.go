package nftlb

import (
	"crypto/sha256"
	"encoding/base32"
	"encoding/binary"
	"fmt"
	"hash"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"

	"github.com/outpost-mesh/outpost/netd/services"
)

// The names of a frontend's objects start with a letter saying what they
// are, then the frontend's id (idLen characters, from its key), then for
// an endpoint's objects the endpoint's (subIDLen characters). Upper case
// keeps them apart from the base chains' names; the lengths keep them
// within the 31 bytes that kernels before 4.14 allow.
const (
	prefixFrontend = 'F' // entry chain, the target of the service-ips map
	prefixInternal = 'I' // picks among Backends
	prefixEndpoint = 'E' // one backend: masquerade where needed, affinity, dnat
	prefixAffinity = 'A' // set of clients that stick to one backend

	idLen    = 12
	subIDLen = 8
)

var b32 = base32.HexEncoding.WithPadding(base32.NoPadding)

func shortHash(n int, parts ...string) string {
	h := sha256.New()
	for _, p := range parts {
		var l [4]byte
		binary.BigEndian.PutUint32(l[:], uint32(len(p)))
		h.Write(l[:])
		h.Write([]byte(p))
	}
	return strings.ToLower(b32.EncodeToString(h.Sum(nil)))[:n]
}

// frontendID names the objects of the frontend with key k.
func frontendID(k services.Key) string {
	return shortHash(idLen, k.Addr.String(), fmt.Sprint(k.Port), fmt.Sprint(uint8(k.Proto)))
}

// ownerID returns the frontend id in the name of a chain or set, if it is
// one of a frontend's.
func ownerID(name string) (string, bool) {
	if len(name) < 1+idLen || !strings.ContainsRune("FIEA", rune(name[0])) {
		return "", false
	}
	id := name[1 : 1+idLen]
	for _, c := range id {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'v') {
			return "", false
		}
	}
	return id, true
}

// noep is what the filter chains do with a new connection to a frontend
// that has no backend for it.
type noep uint8

const (
	noepNone   noep = iota // it has backends: nothing
	noepReject             // it has none at all: refuse
	noepDrop               // it has only ones for the other side (externalTrafficPolicy Local, no local endpoint): drop, as kube-proxy does
)

// ruleSpec is one rule.
type ruleSpec struct {
	exprs []expr.Any
}

type chainSpec struct {
	name  string
	rules []ruleSpec
}

type setSpec struct {
	name    string
	timeout time.Duration
}

// frontendSpec is everything a frontend installs besides the base
// chains: its chains (the entry chain first), affinity sets, and entries
// in the no-endpoint maps.
type frontendSpec struct {
	id       string
	key      services.Key
	hash     string // of the frontend and of what of the Config shapes its rules
	comment  string // on its service-ips element: the hash, then for people
	chains   []chainSpec
	sets     []setSpec
	int, ext noep
}

// checkTable reports the first reason t cannot be installed: beyond the
// limits of services, or not well formed.
func checkTable(t services.Table) error {
	if len(t) > services.MaxFrontends {
		return fmt.Errorf("%d frontends: at most %d", len(t), services.MaxFrontends)
	}
	total := 0
	for k, f := range t {
		if f == nil {
			return fmt.Errorf("frontend %v: nil", k)
		}
		if f.Key != k {
			return fmt.Errorf("frontend %v under key %v", f.Key, k)
		}
		if !k.Addr.IsValid() || k.Addr.Is4In6() || k.Addr.Zone() != "" {
			return fmt.Errorf("frontend %v: bad address", k)
		}
		switch k.Proto {
		case services.TCP, services.UDP, services.SCTP:
		default:
			return fmt.Errorf("frontend %v: unknown protocol", k)
		}
		switch f.Kind {
		case services.ClusterIP, services.NodePort, services.ExternalIP:
		default:
			return fmt.Errorf("frontend %v: unknown %v", k, f.Kind)
		}
		if f.Affinity < 0 || f.Affinity > 24*time.Hour {
			// kube's limit is a day (86400 seconds).
			return fmt.Errorf("frontend %v: affinity timeout %v", k, f.Affinity)
		}
		for _, bs := range [][]services.Backend{f.Backends, f.ExternalBackends} {
			if len(bs) > services.MaxBackends {
				return fmt.Errorf("frontend %v: %d backends: at most %d", k, len(bs), services.MaxBackends)
			}
			total += len(bs)
			for _, b := range bs {
				a := b.Addr.Addr()
				if !a.IsValid() || a.Is4() != k.Addr.Is4() || a.Is4In6() || a.Zone() != "" || b.Addr.Port() == 0 {
					return fmt.Errorf("frontend %v: bad backend %v", k, b.Addr)
				}
			}
		}
	}
	if total > services.MaxBackendsTotal {
		return fmt.Errorf("%d backends: at most %d", total, services.MaxBackendsTotal)
	}
	return nil
}

// planner renders frontends for one family's table under a Config.
type planner struct {
	cfg  Config
	fam  *family
	base string // hash of what of the Config shapes the rules
}

// baseHash is stored in the table: a table whose hash differs was made by
// another version or Config and is rebuilt.
func baseHash(cfg Config, fam *family) string {
	return shortHash(24, "nftlb/1", fam.String(), cfg.Mode.String(), fam.pod.String(), fam.cluster.String(), fmt.Sprint(cfg.MasqueradeMark))
}

func writeBackends(h hash.Hash, bs []services.Backend) {
	fmt.Fprintf(h, "%d;", len(bs))
	for _, b := range bs {
		fmt.Fprintf(h, "%s,%t;", b.Addr, b.Local)
	}
}

func (p *planner) frontendHash(f *services.Frontend) string {
	h := sha256.New()
	fmt.Fprintf(h, "%s|%v|%d|%q|%q|%t|%d|", p.base, f.Key, f.Kind, f.Service, f.PortName, f.ExternalLocal, f.Affinity)
	writeBackends(h, f.Backends)
	writeBackends(h, f.ExternalBackends)
	return strings.ToLower(b32.EncodeToString(h.Sum(nil)))[:24]
}

// routed reports whether p's mode installs f at all.
func (p *planner) routed(f *services.Frontend) bool {
	return p.cfg.Mode == All || f.Kind != services.ClusterIP
}

// plan renders f. The caller has checked it with checkTable.
func (p *planner) plan(f *services.Frontend) *frontendSpec {
	id := frontendID(f.Key)
	s := &frontendSpec{id: id, key: f.Key, hash: p.frontendHash(f)}
	s.comment = s.hash + " " + f.Kind.String() + " " + f.Service
	if f.PortName != "" {
		s.comment += ":" + f.PortName
	}
	if len(s.comment) > 200 {
		s.comment = s.comment[:200]
	}
	fam := p.fam
	masq := setMark(p.cfg.MasqueradeMark)

	// Endpoint chains, shared by both pickers.
	epNames := map[netip.AddrPort]string{}
	for _, b := range slices.Concat(f.Backends, f.ExternalBackends) {
		if _, ok := epNames[b.Addr]; ok {
			continue
		}
		sub := shortHash(subIDLen, b.Addr.String())
		name := string(prefixEndpoint) + id + sub
		epNames[b.Addr] = name
		var rules []ruleSpec
		// Replies of a pod reached through a frontend must come back
		// through the node to be translated back: masquerade a pod of
		// this node that reaches a backend on this node (kube-proxy
		// leaves this to br_netfilter and hairpin mode), and a backend
		// that reaches itself (kube-proxy's hairpin rule).
		if b.Local && fam.pod.IsValid() {
			rules = append(rules, ruleSpec{exprs: cat(fam.saddrIn(fam.pod, true), masq)})
		}
		if !(b.Local && fam.pod.Contains(b.Addr.Addr())) {
			rules = append(rules, ruleSpec{exprs: cat(fam.saddrIs(b.Addr.Addr()), masq)})
		}
		if f.Affinity > 0 {
			set := setSpec{name: affinitySetName(id, b.Addr.String(), f.Affinity), timeout: f.Affinity}
			s.sets = append(s.sets, set)
			rules = append(rules, ruleSpec{exprs: fam.updateAffinityByName(set.name, f.Affinity)})
		}
		rules = append(rules, ruleSpec{exprs: fam.dnat(b.Addr)})
		s.chains = append(s.chains, chainSpec{name: name, rules: rules})
	}
	// pick returns the rules that pick one of bs, sticking to the one a
	// client had while its affinity entry lasts.
	pick := func(bs []services.Backend) []ruleSpec {
		var rules []ruleSpec
		targets := make([]string, len(bs))
		for i, b := range bs {
			targets[i] = epNames[b.Addr]
			if f.Affinity > 0 {
				rules = append(rules, ruleSpec{exprs: fam.inAffinityByName(affinitySetName(id, b.Addr.String(), f.Affinity), targets[i])})
			}
		}
		return append(rules, pickRules(targets)...)
	}

	entry := chainSpec{name: string(prefixFrontend) + id}
	inside := []ruleSpec{{exprs: cat(fromLocal(), []expr.Any{verdict(expr.VerdictReturn)})}}
	if fam.cluster.IsValid() {
		inside = append(inside, ruleSpec{exprs: cat(fam.saddrIn(fam.cluster, true), []expr.Any{verdict(expr.VerdictReturn)})})
	}
	// toChain replaces the return verdict of the inside rules by a goto.
	toChain := func(rules []ruleSpec, chain string) []ruleSpec {
		out := make([]ruleSpec, len(rules))
		for i, r := range rules {
			e := slices.Clone(r.exprs)
			e[len(e)-1] = goTo(chain)
			out[i] = ruleSpec{exprs: e}
		}
		return out
	}
	switch {
	case f.Kind == services.ClusterIP:
		// Mode All. Connections from outside the cluster to a cluster IP
		// are masqueraded, as kube-proxy does: their reply might
		// otherwise leave by another way.
		s.int, s.ext = noepFor(len(f.Backends), len(f.Backends))
		if len(f.Backends) > 0 {
			if fam.cluster.IsValid() {
				entry.rules = append(entry.rules, ruleSpec{exprs: cat(fam.saddrIn(fam.cluster, false), masq)})
			} else {
				entry.rules = append(entry.rules, ruleSpec{exprs: cat(fromLocal(), masq)})
			}
			entry.rules = append(entry.rules, pick(f.Backends)...)
		}
	case p.cfg.Mode == External:
		// The base chains let only outside traffic in.
		_, s.ext = noepFor(len(f.Backends), len(f.ExternalBackends))
		if len(f.ExternalBackends) > 0 {
			if !f.ExternalLocal {
				entry.rules = append(entry.rules, ruleSpec{exprs: masq})
			}
			entry.rules = append(entry.rules, pick(f.ExternalBackends)...)
		}
	default:
		// Mode All, NodePort or ExternalIP: the node's processes and
		// pods go to Backends, the rest to ExternalBackends. The node's
		// own connections leave from a node address, which may not be
		// one its pods route back to: masquerade them (kube-proxy does
		// the same).
		s.int, s.ext = noepFor(len(f.Backends), len(f.ExternalBackends))
		same := slices.Equal(f.Backends, f.ExternalBackends)
		if !f.ExternalLocal && same {
			if len(f.Backends) > 0 {
				entry.rules = append(entry.rules, ruleSpec{exprs: masq})
				entry.rules = append(entry.rules, pick(f.Backends)...)
			}
			break
		}
		if !f.ExternalLocal && len(f.ExternalBackends) > 0 {
			entry.rules = append(entry.rules, ruleSpec{exprs: masq})
		} else if len(f.Backends) > 0 {
			entry.rules = append(entry.rules, ruleSpec{exprs: cat(fromLocal(), masq)})
		}
		if len(f.Backends) > 0 {
			in := chainSpec{name: string(prefixInternal) + id, rules: pick(f.Backends)}
			s.chains = append(s.chains, in)
			entry.rules = append(entry.rules, toChain(inside, in.name)...)
		} else {
			entry.rules = append(entry.rules, inside...)
		}
		if len(f.ExternalBackends) > 0 {
			entry.rules = append(entry.rules, pick(f.ExternalBackends)...)
		}
	}
	s.chains = append([]chainSpec{entry}, s.chains...)
	return s
}

// pickRules send a connection to one of targets, each as likely: the
// first with probability 1/n, else the second with 1/(n-1), and so on,
// as kube-proxy's iptables mode does.
//
// Not kube-proxy's nftables "numgen random mod n vmap { 0 : goto ...,
// ... }": an anonymous map per frontend makes a transaction of n
// frontends take time in n² (the kernel walks the whole transaction to
// bind each anonymous set), 19 s for 3,000 frontends; named maps, one
// per frontend, are looked up by name along a list (14 s for 10,000);
// and one map shared by all frontends is checked against each of its
// bindings at every element added. Rules cost nothing of the kind.
func pickRules(targets []string) []ruleSpec {
	rules := make([]ruleSpec, len(targets))
	for i, t := range targets {
		m := len(targets) - i
		if m == 1 {
			rules[i] = ruleSpec{exprs: []expr.Any{goTo(t)}}
			break
		}
		rules[i] = ruleSpec{exprs: []expr.Any{
			&expr.Numgen{Register: reg1, Modulus: uint32(m), Type: unix.NFT_NG_RANDOM},
			&expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: binaryutil.NativeEndian.PutUint32(0)},
			goTo(t),
		}}
	}
	return rules
}

// noepFor returns what becomes of connections from inside and from
// outside, given how many backends each may use.
func noepFor(internal, external int) (in, ext noep) {
	if internal == 0 {
		in = noepReject
	}
	switch {
	case external > 0:
	case internal == 0:
		ext = noepReject
	default:
		ext = noepDrop
	}
	return in, ext
}

func affinitySetName(id, backend string, timeout time.Duration) string {
	return string(prefixAffinity) + id + shortHash(subIDLen, backend, fmt.Sprint(int64(timeout)))
}
