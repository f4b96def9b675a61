package mesh

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// A Site runs the node's membership of its site's mesh from what the hub
// last said of the site, as the node's checkpoint keeps it, so that it
// runs the same while the hub is away and after a reboot without it: it
// starts the mesh once it holds the site's keys and follows their
// rotation, joins the site's other nodes where they said their mesh
// listens, asks those it does not hold alive to join again now and then
// (a partition heals, a peer restarts), and tells the site its own pods'
// readiness.

// Source is the node's knowledge of its site, as the hub last sent it.
type Source interface {
	// Site returns the node's site as of now.
	Site(now time.Time) (SiteView, error)
}

// SiteView is what the hub last said of the node's site.
type SiteView struct {
	// Name is the site's name, "" for none.
	Name string
	// Keys are the site's keys to use now, primary first; none while the
	// node has not been sent them.
	Keys [][]byte
	// Peers are the site's other nodes.
	Peers []SitePeer
}

// SitePeer is another node of the site.
type SitePeer struct {
	Name string
	// Addr is where its mesh listens, as it said; not valid when it
	// said nothing yet.
	Addr netip.AddrPort
}

// SiteConfig configures a Site.
type SiteConfig struct {
	// Mesh configures the membership; its Site and Keys are left empty,
	// for they are the Source's.
	Mesh Config
	// Source says the site's keys and peers; required.
	Source Source
	// Pods, if not nil, returns the node's own pods and whether each is
	// ready now, ok false while the node does not know yet; the site is
	// told what changed at each Look.
	Pods func() (pods []PodReady, ok bool)
	// Look is how often the Source and the pods are read: 250ms, so
	// that a pod of the node that stops being ready leaves its peers'
	// routing within 2 s (its probe, this, the gossip, and their
	// proxies' rebuild, each a fraction of a second).
	Look time.Duration
	// Rejoin is how often the node asks the site's nodes it does not
	// hold alive to join it: 10s. A node of the site that appears in
	// the Source is asked at once.
	Rejoin time.Duration
	// Changed, if not nil, is called when what Alive or Health returns
	// may have changed. It runs on Run's goroutine and must not block.
	Changed func()
	// Logger is non-nil.
	Logger *slog.Logger
	// Clock is the time; nil for the wall clock.
	Clock func() time.Time
}

// DefaultSiteConfig returns the defaults above, with DefaultConfig's for
// the membership; the rest is the caller's.
func DefaultSiteConfig() SiteConfig {
	return SiteConfig{Mesh: DefaultConfig(), Look: 250 * time.Millisecond, Rejoin: 10 * time.Second}
}

// Site is the node's membership of its site, kept by Run. Its methods may
// be called from any goroutine.
type Site struct {
	cfg SiteConfig
	gen atomic.Uint64

	mu   sync.Mutex
	m    *Mesh // nil while the mesh is not up
	meta Meta  // what the node says of itself, told each mesh it starts
	// setMu orders the telling of meta, which waits on the network.
	setMu sync.Mutex

	// Owned by Run.
	site    string
	keys    [][]byte
	peers   []SitePeer
	joinAt  time.Time
	joining atomic.Int32
	// launched says the mesh's first joins were started; settled, that
	// they are over, so that Alive speaks: until then a node that just
	// started holds none of its peers alive, and would say so.
	launched bool
	settled  atomic.Bool
	failing  string // the last failure logged, so that it is logged once
}

// NewSite returns a Site of cfg; Run starts it.
func NewSite(cfg SiteConfig) (*Site, error) {
	switch {
	case cfg.Source == nil:
		return nil, fmt.Errorf("mesh: site: no source")
	case cfg.Logger == nil:
		return nil, fmt.Errorf("mesh: site: no logger")
	case cfg.Look <= 0 || cfg.Rejoin <= 0:
		return nil, fmt.Errorf("mesh: site: look and rejoin intervals must be positive")
	}
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	return &Site{cfg: cfg}, nil
}

// Run keeps the node's membership until ctx ends, then stops it without
// leaving: the node's pods go on running when the agent stops, so its
// peers find it dead only if it does not come back within their
// suspicion timeout, and alive again when it does.
func (s *Site) Run(ctx context.Context) error {
	var joins sync.WaitGroup
	defer joins.Wait()
	defer s.stop()
	t := time.NewTicker(s.cfg.Look)
	defer t.Stop()
	for {
		s.step(&joins)
		var changes <-chan struct{}
		if m := s.mesh(); m != nil {
			changes = m.Changes()
		}
		select {
		case <-ctx.Done():
			return nil
		case <-changes:
			s.changed()
		case <-t.C:
		}
	}
}

// step reads the Source, starts, rekeys or stops the mesh to match, tells
// the site the node's pods, and starts the joins due.
func (s *Site) step(joins *sync.WaitGroup) {
	now := s.cfg.Clock()
	v, err := s.cfg.Source.Site(now)
	if err != nil {
		s.fail("site mesh: the site's keys and peers not read", err)
		return
	}
	keys, peers := v.Keys, v.Peers
	m := s.mesh()
	if m != nil && v.Name != s.site {
		s.cfg.Logger.Info("site mesh stopped: the node moved to another site", "site", s.site, "now", v.Name)
		s.stop()
		m = nil
	}
	switch {
	case v.Name == "" || len(keys) == 0:
		if m != nil {
			s.cfg.Logger.Info("site mesh stopped: the node holds no key of its site")
			s.stop()
		}
		return
	case m == nil:
		cfg := s.cfg.Mesh
		cfg.Site, cfg.Keys = v.Name, keys
		var err error
		if m, err = New(cfg); err != nil {
			s.fail("site mesh not started; trying again", err)
			return
		}
		s.setMu.Lock()
		s.mu.Lock()
		s.m = m
		meta := s.meta
		s.mu.Unlock()
		err = m.SetMeta(meta)
		s.setMu.Unlock()
		if err != nil {
			s.fail("site mesh: the node's meta not said", err)
		}
		s.site, s.keys, s.peers, s.joinAt = v.Name, keys, nil, time.Time{}
		s.launched = false
		s.settled.Store(false)
		s.failing = ""
		s.cfg.Logger.Info("site mesh up", "site", cfg.Site, "address", m.Addr(), "peers", len(peers))
		s.changed()
	case !slices.EqualFunc(keys, s.keys, func(a, b []byte) bool { return string(a) == string(b) }):
		if err := m.SetKeys(keys); err != nil {
			s.fail("site mesh keys not changed", err)
			return
		}
		s.keys = keys
		s.cfg.Logger.Info("site mesh keys changed", "keys", len(keys))
	}
	if !slices.Equal(peers, s.peers) {
		s.peers, s.joinAt = peers, time.Time{} // new peers are asked at once
		m.ForgetGone(func(name string) bool {
			return slices.ContainsFunc(peers, func(p SitePeer) bool { return p.Name == name })
		})
	}
	if s.cfg.Pods != nil {
		if pods, ok := s.cfg.Pods(); ok {
			m.SetPods(pods)
		}
	}
	if s.launched && !s.settled.Load() && s.joining.Load() == 0 {
		s.settled.Store(true)
		s.changed()
	}
	if now.Before(s.joinAt) || s.joining.Load() > 0 {
		return
	}
	s.joinAt = now.Add(s.cfg.Rejoin)
	s.launched = true
	for _, p := range s.peers {
		if !p.Addr.IsValid() || p.Name == s.cfg.Mesh.NodeName || m.isMember(p.Name) {
			continue
		}
		// One join a peer, at once: a dial to a dead peer waits for its
		// timeout, and must not hold back the others.
		s.joining.Add(1)
		joins.Go(func() {
			defer s.joining.Add(-1)
			if _, err := m.Join([]netip.AddrPort{p.Addr}); err != nil {
				s.cfg.Logger.Debug("site peer not joined", "peer", p.Name, "address", p.Addr, "err", err)
			}
		})
	}
}

// fail logs err once, until another failure or a success.
func (s *Site) fail(msg string, err error) {
	if e := msg + ": " + err.Error(); e != s.failing {
		s.cfg.Logger.Warn(msg, "err", err)
		s.failing = e
	}
}

func (s *Site) changed() {
	s.gen.Add(1)
	if s.cfg.Changed != nil {
		s.cfg.Changed()
	}
}

func (s *Site) mesh() *Mesh {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.m
}

// stop closes the mesh, if up.
func (s *Site) stop() {
	s.mu.Lock()
	m := s.m
	s.m = nil
	s.mu.Unlock()
	if m != nil {
		_ = m.Close()
		s.changed()
	}
}

// Addr returns the address the node's mesh advertises, and false while
// the mesh is not up.
func (s *Site) Addr() (netip.AddrPort, bool) {
	m := s.mesh()
	if m == nil {
		return netip.AddrPort{}, false
	}
	return m.Addr(), true
}

// SetMeta has the node say meta of itself to its site, now and in every
// mesh the Site starts from now on.
func (s *Site) SetMeta(meta Meta) error {
	if err := meta.Validate(); err != nil {
		return err
	}
	s.setMu.Lock()
	defer s.setMu.Unlock()
	s.mu.Lock()
	s.meta = meta
	m := s.m
	s.mu.Unlock()
	if m == nil {
		return nil
	}
	return m.SetMeta(meta)
}

// Peers returns the site peers the node holds alive, with what each said
// of itself, by name; none while the mesh is not up.
func (s *Site) Peers() []Peer {
	m := s.mesh()
	if m == nil {
		return nil
	}
	return m.Peers()
}

// Alive returns the site peers the node holds alive, by name, and false
// while the mesh is not up, or its first joins are not over.
func (s *Site) Alive() ([]string, bool) {
	m := s.mesh()
	if m == nil || !s.settled.Load() {
		return nil, false
	}
	return m.Alive(), true
}

// Generation changes whenever what Health returns may have. Read it
// before Health: what Health returns is then at least as new.
func (s *Site) Generation() uint64 { return s.gen.Load() }

// Health is the Mesh's Health, nil and nil while the mesh is not up.
func (s *Site) Health() (gone map[string]bool, unready map[string]string) {
	m := s.mesh()
	if m == nil {
		return nil, nil
	}
	return m.Health()
}
