package meshbench

import (
	"context"
	crand "crypto/rand"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"time"

	"github.com/outpost-mesh/outpost/edge/mesh"
)

// pollEvery is how often the nodes' views are checked while a join or a
// death is timed.
const pollEvery = 5 * time.Millisecond

// siteName is every simulated site's name, of the length of a typical
// one: it labels every packet. Sites are kept apart by their keys and
// ports.
const siteName = "store-0421"

// loopback is the address every node listens on.
var loopback = netip.MustParseAddr("127.0.0.1")

// node is one node of a simulated site.
type node struct {
	name string
	m    *mesh.Mesh
	t    *countingTransport
}

// site is a simulated site: nodes of this process on loopback, gossiping
// with a key of the site's own. It is not safe for concurrent use.
type site struct {
	base mesh.Config
	// name names the site in errors; its nodes label their gossip with
	// siteName.
	name string
	key  []byte
	// nodes are the members that have not crashed or left; started all
	// those ever started, for close. named counts them, for names.
	nodes   []*node
	started []*node
	named   int
}

// newSite returns an empty site named name, with a fresh random key; its
// nodes start from base.
func newSite(base mesh.Config, name string) (*site, error) {
	key := make([]byte, 32)
	if _, err := crand.Read(key); err != nil {
		return nil, fmt.Errorf("gossip key: %w", err)
	}
	return &site{base: base, name: name, key: key}, nil
}

// start starts a node, counting what it sends, that has joined no one.
func (s *site) start() (*node, error) {
	t, err := newCountingTransport(loopback)
	if err != nil {
		return nil, err
	}
	c := s.base
	c.NodeName = fmt.Sprintf("n%02d", s.named)
	c.Site = siteName
	c.Keys = [][]byte{s.key}
	c.Bind = t.Bind(loopback)
	c.Transport = t
	m, err := mesh.New(c)
	if err != nil {
		return nil, errors.Join(err, t.Shutdown())
	}
	s.named++
	n := &node{name: c.NodeName, m: m, t: t}
	s.started = append(s.started, n)
	s.nodes = append(s.nodes, n)
	return n, nil
}

// join has n join one other member, at random.
func (s *site) join(n *node) error {
	var peers []*node
	for _, p := range s.nodes {
		if p != n {
			peers = append(peers, p)
		}
	}
	if len(peers) == 0 {
		return nil
	}
	p := peers[rand.IntN(len(peers))]
	if _, err := n.m.Join([]netip.AddrPort{p.m.Addr()}); err != nil {
		return fmt.Errorf("%s joins %s: %w", n.name, p.name, err)
	}
	return nil
}

// grow starts nodes, each joining one started before it, until the site
// has size members, then waits until all of them see each other.
func (s *site) grow(ctx context.Context, size int, timeout time.Duration) error {
	for len(s.nodes) < size {
		n, err := s.start()
		if err != nil {
			return err
		}
		if err := s.join(n); err != nil {
			return err
		}
	}
	_, err := s.waitFor(ctx, time.Now(), timeout, fmt.Sprintf("%d nodes to see each other", size), s.converged)
	return err
}

// pick returns a member at random, and takes it out of the members.
func (s *site) pick() *node {
	i := rand.IntN(len(s.nodes))
	n := s.nodes[i]
	s.nodes = slices.Delete(s.nodes, i, i+1)
	return n
}

// converged reports whether every member sees every other alive; it may
// see more (one that just crashed, not yet found dead).
func (s *site) converged() bool {
	names := make([]string, len(s.nodes))
	for i, n := range s.nodes {
		names[i] = n.name
	}
	for _, n := range s.nodes {
		alive := n.m.Alive()
		for _, want := range names {
			if want != n.name && !slices.Contains(alive, want) {
				return false
			}
		}
	}
	return true
}

// forgot returns whether no member lists gone alive.
func (s *site) forgot(gone *node) func() bool {
	return func() bool {
		for _, n := range s.nodes {
			if slices.Contains(n.m.Alive(), gone.name) {
				return false
			}
		}
		return true
	}
}

// waitFor polls cond every pollEvery until it holds, and returns the time
// since start then. It fails after timeout, or when ctx is done.
func (s *site) waitFor(ctx context.Context, start time.Time, timeout time.Duration, what string, cond func() bool) (time.Duration, error) {
	tick := time.NewTicker(pollEvery)
	defer tick.Stop()
	deadline := start.Add(timeout)
	for {
		if cond() {
			return time.Since(start), nil
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("site %s: waited %v for %s", s.name, timeout, what)
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-tick.C:
		}
	}
}

// sent returns what each member sent so far, in the members' order.
func (s *site) sent() []Sent {
	out := make([]Sent, len(s.nodes))
	for i, n := range s.nodes {
		out[i] = n.t.Sent()
	}
	return out
}

// close closes every node ever started that is still open; a Mesh closes
// its transport.
func (s *site) close() error {
	var errs []error
	for _, n := range s.started {
		if err := n.m.Close(); err != nil {
			errs = append(errs, fmt.Errorf("close %s: %w", n.name, err))
		}
	}
	s.nodes, s.started = nil, nil
	return errors.Join(errs...)
}
