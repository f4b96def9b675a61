package mesh

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"net/netip"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/outpost-mesh/outpost/internal/testlog"
	"github.com/outpost-mesh/outpost/internal/wait"
)

// fakeSite is what the hub said of a site, as every node's checkpoint
// would hold it: the keys, and each node's mesh address once it said one.
type fakeSite struct {
	mu    sync.Mutex
	name  string
	keys  [][]byte
	addrs map[string]netip.AddrPort
	names []string
}

func (f *fakeSite) Site(time.Time) (SiteView, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	v := SiteView{Name: f.name, Keys: slices.Clone(f.keys)}
	for _, n := range f.names {
		v.Peers = append(v.Peers, SitePeer{Name: n, Addr: f.addrs[n]})
	}
	return v, nil
}

func (f *fakeSite) setName(name string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.name = name
}

func (f *fakeSite) setKeys(keys ...[]byte) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.keys = keys
}

func (f *fakeSite) said(name string, a netip.AddrPort) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.addrs[name] = a
}

// ownPods is a node's own pods, as its runtime would say them.
type ownPods struct {
	mu   sync.Mutex
	pods []PodReady
}

func (p *ownPods) get() ([]PodReady, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.pods), true
}

func (p *ownPods) set(pods ...PodReady) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.pods = pods
}

// runSite runs the node name of f until the returned stop is called (or
// the test ends), and says its address to f once its mesh is up.
func runSite(t *testing.T, f *fakeSite, name string, pods *ownPods) (*Site, func()) {
	t.Helper()
	cfg := DefaultSiteConfig()
	cfg.Mesh = testConfig(name, "")
	cfg.Source, cfg.Pods = f, pods.get
	cfg.Look, cfg.Rejoin = 50*time.Millisecond, 300*time.Millisecond
	cfg.Logger = testlog.New(t, slog.LevelInfo)
	s, err := NewSite(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = s.Run(ctx)
	}()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			<-done
		})
	}
	t.Cleanup(stop)
	wait.For(t, 5*time.Second, name+"'s mesh up", func() (bool, string) {
		_, ok := s.Addr()
		return ok, "no mesh yet"
	})
	a, _ := s.Addr()
	f.said(name, a)
	return s, stop
}

func alive(s *Site, want ...string) func() (bool, string) {
	return func() (bool, string) {
		got, _ := s.Alive()
		return slices.Equal(got, want), fmt.Sprintf("alive %v, want %v", got, want)
	}
}

func TestSiteFromItsSource(t *testing.T) {
	f := &fakeSite{name: "s1", addrs: map[string]netip.AddrPort{}, names: []string{"a", "b", "c"}}

	// No keys yet: no mesh.
	cfg := DefaultSiteConfig()
	cfg.Mesh, cfg.Source, cfg.Logger = testConfig("a", ""), f, testlog.New(t, slog.LevelInfo)
	cfg.Look = 20 * time.Millisecond
	s0, err := NewSite(cfg)
	if err != nil {
		t.Fatal(err)
	}
	s0.step(&sync.WaitGroup{})
	if _, ok := s0.Alive(); ok {
		t.Fatal("a mesh runs without a key")
	}

	f.setKeys(key1)
	pa, pb, pc := &ownPods{}, &ownPods{}, &ownPods{}
	pb.set(PodReady{UID: "b-1", Ready: true}, PodReady{UID: "b-2", Ready: true})
	a, _ := runSite(t, f, "a", pa)
	b, stopB := runSite(t, f, "b", pb)
	c, _ := runSite(t, f, "c", pc)
	// Nobody was told to join anybody: each finds the others from the
	// addresses they said.
	wait.For(t, 10*time.Second, "a sees b and c", alive(a, "b", "c"))
	wait.For(t, 10*time.Second, "c sees a and b", alive(c, "a", "b"))

	// b says something of itself: the others hear it.
	said := Meta{RelayPort: 7947, Uplink: true}
	if err := b.SetMeta(said); err != nil {
		t.Fatal(err)
	}
	wait.For(t, 5*time.Second, "c hears b's meta", func() (bool, string) {
		for _, p := range c.Peers() {
			if p.Name == "b" {
				return reflect.DeepEqual(p.Meta, said), fmt.Sprintf("b %+v", p)
			}
		}
		return false, "c does not see b"
	})

	// b's pod stops being ready: a hears it from b.
	pb.set(PodReady{UID: "b-1", Ready: true}, PodReady{UID: "b-2", Ready: false})
	wait.For(t, 5*time.Second, "a hears b-2 is not ready", func() (bool, string) {
		gone, unready := a.Health()
		want := map[string]string{"b-2": "b"}
		return len(gone) == 0 && maps.Equal(unready, want), fmt.Sprintf("gone %v, unready %v; want none, %v", gone, unready, want)
	})

	// The site's key rotates: a new key first, then made primary on
	// every node, then the old one dropped. The mesh holds throughout.
	for _, keys := range [][][]byte{{key1, key2}, {key2, key1}, {key2}} {
		f.setKeys(keys...)
		wait.For(t, 5*time.Second, "every node on the site's keys", func() (bool, string) {
			for _, s := range []*Site{a, b, c} {
				m := s.mesh()
				if m == nil || len(m.keyring.GetKeys()) != len(keys) || string(m.keyring.GetPrimaryKey()) != string(keys[0]) {
					return false, "a node holds other keys"
				}
			}
			return true, ""
		})
	}
	wait.For(t, 5*time.Second, "a sees b and c on the new key", alive(a, "b", "c"))

	// b's agent stops: the others find it gone, and forget its pods.
	genBefore := a.Generation()
	stopB()
	wait.For(t, 15*time.Second, "a finds b gone", func() (bool, string) {
		gen := a.Generation()
		gone, unready := a.Health()
		return gen != genBefore && gone["b"] && len(unready) == 0, fmt.Sprintf("gone %v, unready %v", gone, unready)
	})
	wait.For(t, 5*time.Second, "c finds b gone", alive(c, "a"))

	// b comes back (a new process, a new port): the others rejoin it
	// and it is gone no more.
	b, _ = runSite(t, f, "b", pb)
	if err := b.SetMeta(said); err != nil {
		t.Fatal(err)
	}
	wait.For(t, 10*time.Second, "a sees b again", alive(a, "b", "c"))
	wait.For(t, 10*time.Second, "b sees a and c", alive(b, "a", "c"))
	wait.For(t, 5*time.Second, "b no longer gone on a", func() (bool, string) {
		gone, _ := a.Health()
		return len(gone) == 0, fmt.Sprintf("gone %v", gone)
	})

	// The site is renamed (the nodes' label changed): every node starts
	// again in the new site, labelled with its name.
	f.setName("s2")
	wait.For(t, 5*time.Second, "every node's mesh of s2", func() (bool, string) {
		for _, s := range []*Site{a, b, c} {
			if m := s.mesh(); m == nil || m.site != "s2" {
				return false, "a node's mesh is not of s2"
			}
		}
		return true, ""
	})
	// Listening on port 0, they listen on new ports: as the hub would,
	// the source tells the others.
	for name, s := range map[string]*Site{"a": a, "b": b, "c": c} {
		addr, _ := s.Addr()
		f.said(name, addr)
	}
	wait.For(t, 10*time.Second, "a sees b and c in s2", alive(a, "b", "c"))

	// The node leaves the site (no keys): its mesh stops.
	f.setKeys()
	wait.For(t, 5*time.Second, "a's mesh stopped", func() (bool, string) {
		_, ok := a.Alive()
		return !ok, "a's mesh still up"
	})
}
