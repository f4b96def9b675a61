package servicesbench

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/outpost-mesh/outpost/bench/report"
	"github.com/outpost-mesh/outpost/netd/services"
)

// ConnectResult is connect latency at one table size: through Service
// 0's ClusterIP with each dataplane, and straight to one of its backends.
type ConnectResult struct {
	Services int `json:"services"`
	// Paths are direct, ebpf and nftables, in that order.
	Paths []PathLatency `json:"paths"`
}

// PathLatency is one path's connect latency.
type PathLatency struct {
	Path    string         `json:"path"`
	Connect report.Latency `json:"connect"`
	// Backends counts the connections each of the 4 backends accepted.
	Backends [backends]int `json:"backends"`
}

// path returns the result of mode, or nil.
func (c *ConnectResult) path(mode string) *PathLatency {
	for i := range c.Paths {
		if c.Paths[i].Path == mode {
			return &c.Paths[i]
		}
	}
	return nil
}

// nodeAddr is the node's own address in the connect namespaces, the
// source of its connections to ClusterIPs (routed to the loopback, which
// holds the backends' addresses, so that a connect finds a route before
// nftables translates it).
var nodeAddr = netip.MustParseAddr("192.168.77.1")

// connectNode is one path's node namespace: 4 servers on Service 0's
// backend addresses and, but for the direct path, a dataplane.
type connectNode struct {
	mode    string
	ns      *netNS
	dp      removable
	servers *servers
}

// newConnectNode makes mode's namespace and servers and opens its
// dataplane (eBPF attached to cgroup, this process's, so that its
// connects pass through the programs).
func (p *programmer) newConnectNode(mode, cgroup string) (*connectNode, error) {
	n := &connectNode{mode: mode}
	if err := p.setupConnectNode(n, cgroup); err != nil {
		n.close(context.Background())
		return nil, err
	}
	return n, nil
}

func (p *programmer) setupConnectNode(n *connectNode, cgroup string) (err error) {
	if n.ns, err = newNetNS(); err != nil {
		return err
	}
	addrs := []netip.Addr{nodeAddr}
	for j := range backends {
		addrs = append(addrs, backend(0, j))
	}
	if err := n.ns.addLoopback(addrs...); err != nil {
		return err
	}
	if err := n.ns.link(func(h *netlink.Handle) error {
		lo, err := h.LinkByName("lo")
		if err != nil {
			return err
		}
		return h.RouteAdd(&netlink.Route{LinkIndex: lo.Attrs().Index, Dst: ipNet(serviceCIDR), Src: nodeAddr.AsSlice()})
	}); err != nil {
		return fmt.Errorf("route to the service CIDR: %w", err)
	}
	if n.servers, err = startServers(n.ns); err != nil {
		return err
	}
	switch n.mode {
	case ModeEBPF:
		n.dp, _, err = p.newEBPF(n.ns, cgroup)
	case ModeNftables:
		n.dp, _, err = newNft(n.ns)
	}
	return err
}

func (n *connectNode) close(ctx context.Context) error {
	var errs []error
	if n.dp != nil {
		if err := n.dp.Remove(ctx); err != nil {
			errs = append(errs, fmt.Errorf("%s: remove: %w", n.mode, err))
		}
		n.dp.Close()
	}
	if n.servers != nil {
		n.servers.close()
	}
	n.ns.close()
	return errors.Join(errs...)
}

// servers accept on Service 0's backends, port 8080, write their index
// as one byte and close.
type servers struct {
	lns      []net.Listener
	wg       sync.WaitGroup
	accepted [backends]atomic.Int64
}

func startServers(ns *netNS) (*servers, error) {
	s := &servers{}
	err := ns.do(func() error {
		for j := range backends {
			ln, err := net.Listen("tcp", netip.AddrPortFrom(backend(0, j), backendPort).String())
			if err != nil {
				return err
			}
			s.lns = append(s.lns, ln)
		}
		return nil
	})
	if err != nil {
		s.close()
		return nil, fmt.Errorf("backend servers: %w", err)
	}
	for j, ln := range s.lns {
		s.wg.Go(func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				s.accepted[j].Add(1)
				c.Write([]byte{byte(j)})
				c.Close()
			}
		})
	}
	return s, nil
}

func (s *servers) close() {
	for _, ln := range s.lns {
		ln.Close()
	}
	s.wg.Wait()
}

// connectOnce connects to to from this thread's namespace and returns how
// long socket and connect took, and the index of the backend that
// answered (its byte, read after the timing).
func connectOnce(to netip.AddrPort) (time.Duration, int, error) {
	sa := &unix.SockaddrInet4{Addr: to.Addr().As4(), Port: int(to.Port())}
	start := time.Now()
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return 0, 0, fmt.Errorf("socket: %w", err)
	}
	defer func() {
		// Reset rather than close: no TIME_WAIT to run out of ports.
		unix.SetsockoptLinger(fd, unix.SOL_SOCKET, unix.SO_LINGER, &unix.Linger{Onoff: 1, Linger: 0})
		unix.Close(fd)
	}()
	if err := unix.Connect(fd, sa); err != nil {
		return 0, 0, fmt.Errorf("connect %s: %w", to, err)
	}
	d := time.Since(start)
	tv := unix.NsecToTimeval(int64(5 * time.Second))
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		return 0, 0, err
	}
	var b [1]byte
	n, err := unix.Read(fd, b[:])
	if err != nil || n != 1 || int(b[0]) >= backends {
		return 0, 0, fmt.Errorf("read the backend's byte from %s: %d bytes, %v", to, n, err)
	}
	return d, int(b[0]), nil
}

// measureConnects programs each table size into the eBPF and nftables
// nodes and connects cfg.Connects times on each path, in turns of
// cfg.ConnectBatch. The sizes take turns too, in cfg.ConnectRounds
// rounds, in one order and then the other (10, 10,000, 10,000, 10), so
// that the machine warming up or slowing down weighs on every size alike.
func (p *programmer) measureConnects(ctx context.Context, cfg Config, cgroup string, logf func(string, ...any)) (out []ConnectResult, err error) {
	modes := []string{ModeDirect, ModeEBPF, ModeNftables}
	nodes := make([]*connectNode, 0, len(modes))
	defer func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cfg.OpTimeout)
		defer cancel()
		for _, n := range nodes {
			if cerr := n.close(rctx); cerr != nil {
				err = errors.Join(err, cerr)
			}
		}
	}()
	for _, m := range modes {
		n, err := p.newConnectNode(m, cgroup)
		if err != nil {
			return nil, fmt.Errorf("%s node: %w", m, err)
		}
		nodes = append(nodes, n)
	}
	front := netip.AddrPortFrom(clusterIP(0), servicePort)
	tables := make(map[int]services.Table, len(cfg.ConnectSizes))
	for _, size := range cfg.ConnectSizes {
		svcs, eps := Generate(size, 0)
		if tables[size], err = buildTable(compact(svcs, eps)); err != nil {
			return nil, err
		}
	}
	acc := make(map[int]*connectSamples, len(cfg.ConnectSizes))
	warm := true
	for r := range cfg.ConnectRounds {
		sizes := slices.Clone(cfg.ConnectSizes)
		if r%2 == 1 {
			slices.Reverse(sizes)
		}
		// Round r makes its share of the connects: the rounds add up to
		// cfg.Connects.
		k := cfg.Connects*(r+1)/cfg.ConnectRounds - cfg.Connects*r/cfg.ConnectRounds
		for _, size := range sizes {
			for _, n := range nodes {
				if n.dp == nil {
					continue
				}
				sctx, cancel := context.WithTimeout(ctx, cfg.OpTimeout)
				err := n.dp.Sync(sctx, tables[size])
				cancel()
				if err != nil {
					return nil, fmt.Errorf("%s: sync %d Services: %w", n.mode, size, err)
				}
			}
			if warm {
				// Unmeasured: the first connects of a namespace pay for
				// what it sets up once.
				if _, err := connectRound(ctx, cfg.ConnectBatch, cfg.ConnectBatch, nodes, front, tables[size]); err != nil {
					return nil, fmt.Errorf("warm-up: %w", err)
				}
				warm = false
			}
			got, err := connectRound(ctx, k, cfg.ConnectBatch, nodes, front, tables[size])
			if err != nil {
				return nil, fmt.Errorf("%d Services: %w", size, err)
			}
			if acc[size] == nil {
				acc[size] = got
			} else {
				acc[size].add(got)
			}
		}
	}
	for _, size := range cfg.ConnectSizes {
		res := ConnectResult{Services: size}
		for i, n := range nodes {
			res.Paths = append(res.Paths, PathLatency{Path: n.mode, Connect: report.Summarize(acc[size].samples[i]), Backends: acc[size].counts[i]})
		}
		out = append(out, res)
		logf("connect latency at %d Services: direct %s, eBPF %s, nftables %s (p50)", size,
			report.Duration(res.Paths[0].Connect.P50), report.Duration(res.Paths[1].Connect.P50), report.Duration(res.Paths[2].Connect.P50))
	}
	return out, nil
}

// connectSamples are the connect times and the backends reached, by
// path.
type connectSamples struct {
	samples [][]time.Duration
	counts  [][backends]int
}

func (c *connectSamples) add(o *connectSamples) {
	for i := range c.samples {
		c.samples[i] = append(c.samples[i], o.samples[i]...)
		for j := range c.counts[i] {
			c.counts[i][j] += o.counts[i][j]
		}
	}
}

// connectRound connects connects times on every node's path, in turns
// of batch, and checks each connection reached one of the Service's
// backends.
func connectRound(ctx context.Context, connects, batch int, nodes []*connectNode, front netip.AddrPort, t services.Table) (*connectSamples, error) {
	f := t[services.Key{Addr: front.Addr(), Port: front.Port(), Proto: services.TCP}]
	if f == nil || len(f.Backends) != backends {
		return nil, fmt.Errorf("the table lacks the measured Service %s", front)
	}
	c := &connectSamples{samples: make([][]time.Duration, len(nodes)), counts: make([][backends]int, len(nodes))}
	for done, turn := 0, 0; done < connects; turn++ {
		k := min(batch, connects-done)
		for i := range nodes {
			idx := (i + turn) % len(nodes) // who goes first moves on each turn
			n := nodes[idx]
			to := front
			if n.mode == ModeDirect {
				to = netip.AddrPortFrom(backend(0, turn%backends), backendPort)
			}
			err := n.ns.do(func() error {
				for range k {
					d, b, err := connectOnce(to)
					if err != nil {
						return err
					}
					c.samples[idx] = append(c.samples[idx], d)
					c.counts[idx][b]++
				}
				return nil
			})
			if err != nil {
				return nil, fmt.Errorf("%s: %w", n.mode, err)
			}
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		done += k
	}
	return c, nil
}
