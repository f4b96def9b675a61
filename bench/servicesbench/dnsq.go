package servicesbench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/netip"
	"sync"
	"time"

	miekg "github.com/miekg/dns"

	"github.com/outpost-mesh/outpost/bench/report"
	"github.com/outpost-mesh/outpost/netd/dns"
)

// The DNS network: the node's bridge-like address and a pod joined to it
// by a veth.
var (
	dnsNodeAddr = netip.MustParseAddr("10.88.0.1")
	dnsPodAddr  = netip.MustParseAddr("10.88.0.2")
)

const (
	// externalName is the name outside the cluster the pods ask for, in
	// the cache after the first query.
	externalName = "example.com."
	// dnsQueryTimeout bounds one query.
	dnsQueryTimeout = 2 * time.Second
)

var externalAddr = netip.MustParseAddr("192.0.2.7")

// DNSResult is the node DNS server's throughput and latency from a pod.
type DNSResult struct {
	Services int `json:"services"`
	// Names is the zone's number of names.
	Names   int        `json:"names"`
	Clients int        `json:"clients"`
	Kinds   []DNSQuery `json:"kinds"`
}

// DNSQuery is one kind of query's figures.
type DNSQuery struct {
	Kind     string         `json:"kind"`
	Queries  int            `json:"queries"`
	PerSec   float64        `json:"per_sec"`
	Latency  report.Latency `json:"latency"`
	Failures int            `json:"failures"`
}

// The kinds of query.
const (
	QueryCluster  = "cluster name"
	QueryExternal = "cached external name"
)

// measureDNS runs a node DNS server with a zone of cfg.DNSServices
// Services and queries it from a pod, cfg.DNSClients at once.
func measureDNS(ctx context.Context, cfg Config) (res DNSResult, err error) {
	node, err := newNetNS()
	if err != nil {
		return res, err
	}
	defer node.close()
	pod, err := newNetNS()
	if err != nil {
		return res, err
	}
	defer pod.close()
	if err := node.veth("pod0", dnsNodeAddr, pod, dnsPodAddr, 24); err != nil {
		return res, err
	}
	var pc, up net.PacketConn
	var ln net.Listener
	addr := netip.AddrPortFrom(dnsNodeAddr, 53).String()
	err = node.do(func() (err error) {
		if pc, err = net.ListenPacket("udp", addr); err != nil {
			return err
		}
		ln, err = net.Listen("tcp", addr)
		return err
	})
	if err == nil {
		// The server forwards from sockets it makes itself, in this
		// process's namespace: the upstream is on its loopback.
		up, err = net.ListenPacket("udp", "127.0.0.1:0")
	}
	if err != nil {
		for _, c := range []io.Closer{pc, ln, up} {
			if c != nil {
				c.Close()
			}
		}
		return res, fmt.Errorf("listen: %w", err)
	}
	dcfg := dns.DefaultConfig()
	dcfg.Domain, dcfg.PacketConn, dcfg.Listener, dcfg.Addr = domain, pc, ln, addr
	dcfg.ClusterCIDRs, dcfg.ServiceCIDRs = []netip.Prefix{clusterCIDR}, []netip.Prefix{serviceCIDR}
	dcfg.Upstreams = []string{up.LocalAddr().String()}
	dcfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	srv, err := dns.New(dcfg)
	if err != nil {
		pc.Close()
		ln.Close()
		up.Close()
		return res, err
	}
	svcs, eps := Generate(cfg.DNSServices, 0)
	csvcs, ceps := compact(svcs, eps)
	zone := dns.NewZone(domain, csvcs, ceps)
	if err := srv.SetZone(zone); err != nil {
		return res, err
	}
	res.Services, res.Names, res.Clients = cfg.DNSServices, zone.Len(), cfg.DNSClients

	sctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	errc := make(chan error, 1)
	wg.Go(func() { errc <- srv.Run(sctx) })
	wg.Go(func() { fakeUpstream(up) })
	defer func() {
		stop()
		up.Close()
		wg.Wait()
		if rerr := <-errc; rerr != nil {
			err = errors.Join(err, fmt.Errorf("dns server: %w", rerr))
		}
	}()

	for _, kind := range []string{QueryCluster, QueryExternal} {
		q, err := queryKind(ctx, cfg, pod, kind)
		if err != nil {
			return res, fmt.Errorf("%s: %w", kind, err)
		}
		res.Kinds = append(res.Kinds, q)
	}
	return res, nil
}

// fakeUpstream answers every query on pc with externalAddr, until pc is
// closed.
func fakeUpstream(pc net.PacketConn) {
	buf := make([]byte, 1500)
	for {
		n, from, err := pc.ReadFrom(buf)
		if err != nil {
			return
		}
		var q miekg.Msg
		if q.Unpack(buf[:n]) != nil || len(q.Question) != 1 {
			continue
		}
		m := new(miekg.Msg)
		m.SetReply(&q)
		m.Answer = []miekg.RR{&miekg.A{
			Hdr: miekg.RR_Header{Name: q.Question[0].Name, Rrtype: miekg.TypeA, Class: miekg.ClassINET, Ttl: 3600},
			A:   externalAddr.AsSlice(),
		}}
		if out, err := m.Pack(); err == nil {
			pc.WriteTo(out, from)
		}
	}
}

// queryKind sends queries of kind from the pod, cfg.DNSClients at once,
// for cfg.DNSDuration (after one query that fills the cache).
func queryKind(ctx context.Context, cfg Config, pod *netNS, kind string) (DNSQuery, error) {
	server := netip.AddrPortFrom(dnsNodeAddr, 53)
	conns := make([]*net.UDPConn, cfg.DNSClients)
	defer func() {
		for _, c := range conns {
			if c != nil {
				c.Close()
			}
		}
	}()
	if err := pod.do(func() error {
		for i := range conns {
			c, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(server))
			if err != nil {
				return err
			}
			conns[i] = c
		}
		return nil
	}); err != nil {
		return DNSQuery{}, fmt.Errorf("client sockets in the pod: %w", err)
	}
	name := func(r *rand.Rand) string {
		if kind == QueryExternal {
			return externalName
		}
		return dnsName(r.IntN(cfg.DNSServices))
	}
	// One query first: a wrong answer fails the run rather than being
	// counted, and the external name is in the cache after it.
	if _, err := query(conns[0], name(rand.New(rand.NewPCG(0, 0))), 1); err != nil {
		return DNSQuery{}, err
	}
	type tally struct {
		lat   []time.Duration
		fails int
	}
	tallies := make([]tally, len(conns))
	deadline := time.Now().Add(cfg.DNSDuration)
	start := time.Now()
	var wg sync.WaitGroup
	for i, c := range conns {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(i), 1))
			t := &tallies[i]
			for id := uint16(2); time.Now().Before(deadline) && ctx.Err() == nil; id++ {
				d, err := query(c, name(r), id)
				if err != nil {
					t.fails++
					continue
				}
				t.lat = append(t.lat, d)
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	if err := ctx.Err(); err != nil {
		return DNSQuery{}, err
	}
	var all []time.Duration
	q := DNSQuery{Kind: kind}
	for _, t := range tallies {
		all = append(all, t.lat...)
		q.Failures += t.fails
	}
	q.Queries = len(all)
	q.PerSec = float64(len(all)) / elapsed.Seconds()
	q.Latency = report.Summarize(all)
	return q, nil
}

// query asks c's server for name's A record and returns how long the
// answer took; an answer without the record is an error.
func query(c *net.UDPConn, name string, id uint16) (time.Duration, error) {
	m := new(miekg.Msg)
	m.SetQuestion(name, miekg.TypeA)
	m.Id = id
	raw, err := m.Pack()
	if err != nil {
		return 0, err
	}
	buf := make([]byte, 1500)
	start := time.Now()
	c.SetDeadline(start.Add(dnsQueryTimeout))
	if _, err := c.Write(raw); err != nil {
		return 0, err
	}
	for {
		n, err := c.Read(buf)
		if err != nil {
			return 0, fmt.Errorf("query %s: %w", name, err)
		}
		d := time.Since(start)
		var a miekg.Msg
		if a.Unpack(buf[:n]) != nil || a.Id != id {
			continue // a late answer to an earlier query
		}
		if a.Rcode != miekg.RcodeSuccess || len(a.Answer) == 0 {
			return 0, fmt.Errorf("query %s: %s, %d answers", name, miekg.RcodeToString[a.Rcode], len(a.Answer))
		}
		return d, nil
	}
}
