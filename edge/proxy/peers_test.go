package proxy

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"log/slog"

	miekg "github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/outpost-mesh/outpost/edge/checkpoint/checkpointtest"
	"github.com/outpost-mesh/outpost/internal/testlog"
	"github.com/outpost-mesh/outpost/netd/dns"
	"github.com/outpost-mesh/outpost/netd/services"
)

// peers is Peers whose answer the test sets; each set is a new
// generation.
type peers struct {
	mu      sync.Mutex
	gen     uint64
	gone    map[string]bool
	unready map[string]string
}

func (p *peers) PeerGeneration() uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.gen
}

func (p *peers) PeerHealth() (map[string]bool, map[string]string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.gone, p.unready
}

// set gives the mesh's new view; the maps are not modified afterwards,
// as PeerHealth's contract asks.
func (p *peers) set(gone map[string]bool, unready map[string]string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.gen++
	p.gone, p.unready = gone, unready
}

// podUID is the UID the tests give the pod of addr, as text.
func podUID(addr string) string {
	a := netip.MustParseAddr(addr).As4()
	return fmt.Sprintf("00000000-0000-4000-8000-0000%02x%02x%02x%02x", a[0], a[1], a[2], a[3])
}

// spread puts the endpoints of s on nodes, one each in order, each
// referring to its pod.
func spread(s *discoveryv1.EndpointSlice, nodes ...string) *discoveryv1.EndpointSlice {
	for i := range s.Endpoints {
		e := &s.Endpoints[i]
		e.NodeName = &nodes[i]
		e.TargetRef = &corev1.ObjectReference{Kind: "Pod", Namespace: "default", Name: "pod-" + nodes[i], UID: types.UID(podUID(e.Addresses[0]))}
	}
	return s
}

// dnsServer is a real DNS server on loopback that takes the proxy's
// zones.
type dnsServer struct {
	t    *testing.T
	s    *dns.Server
	addr string
}

func (d *dnsServer) SetZone(z *dns.Zone) {
	if err := d.s.SetZone(z); err != nil {
		d.t.Errorf("SetZone: %v", err)
	}
}

func startDNS(t *testing.T) *dnsServer {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		pc.Close()
		t.Fatal(err)
	}
	cfg := dns.DefaultConfig()
	cfg.PacketConn, cfg.Listener, cfg.Logger = pc, ln, testlog.New(t, slog.LevelInfo)
	s, err := dns.New(cfg)
	if err != nil {
		pc.Close()
		ln.Close()
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("dns Run: %v", err)
		}
	})
	return &dnsServer{t: t, s: s, addr: pc.LocalAddr().String()}
}

// lookup returns the sorted A records of name.
func (d *dnsServer) lookup(name string) []string {
	d.t.Helper()
	req := new(miekg.Msg)
	req.SetQuestion(name, miekg.TypeA)
	c := &miekg.Client{Net: "udp", Timeout: 10 * time.Second}
	m, _, err := c.Exchange(req, d.addr)
	if err != nil {
		d.t.Fatalf("query %s: %v", name, err)
	}
	var out []string
	for _, rr := range m.Answer {
		if a, ok := rr.(*miekg.A); ok {
			out = append(out, a.A.String())
		}
	}
	slices.Sort(out)
	return out
}

// TestPeers: other nodes' endpoints leave routing and the headless
// Service's DNS answers while the mesh says their node is gone or their
// own node says their pod is not ready, and come back when it says
// otherwise; a node's word on another node's pod, and anything the mesh
// says of this node's own, changes nothing.
func TestPeers(t *testing.T) {
	v := checkpointtest.New(t)
	db := service("db", "None")
	db.Spec.ClusterIPs = nil
	api := spread(slice("api", "b", "10.42.2.7", "10.42.2.8"), "b", "b")
	no, yes := false, true
	api.Endpoints[1].Conditions = discoveryv1.EndpointConditions{Ready: &no, Serving: &yes, Terminating: &yes}
	v.Set(t, service("web", "10.43.0.20"), db, service("api", "10.43.0.21"),
		spread(slice("web", "", "10.42.0.5", "10.42.1.5", "10.42.2.5", "10.42.3.5"), "n1", "a", "b", "c"),
		spread(slice("db", "", "10.42.0.6", "10.42.1.6", "10.42.2.6", "10.42.3.6"), "n1", "a", "b", "c"),
		api)
	mesh := &peers{}
	srv := startDNS(t)
	dp := &recorder{}
	p, _ := newProxyConfig(t, v, nil, func(c *Config) { c.MinSync, c.Peers, c.DNS = 0, mesh, srv }, dp)
	apiKey := services.Key{Addr: netip.MustParseAddr("10.43.0.21"), Port: 80, Proto: services.TCP}

	check := func(when string, webAddrs, db []string) {
		t.Helper()
		p.step(t.Context())
		tb, _ := dp.last()
		var want []string
		for _, a := range webAddrs {
			want = append(want, a+":8080")
		}
		if got := backends(tb[web]); !slices.Equal(got, want) {
			t.Errorf("%s: web backends %v, want %v", when, got, want)
		}
		if got := srv.lookup("db.default.svc.cluster.local."); !slices.Equal(got, db) {
			t.Errorf("%s: db resolves to %v, want %v", when, got, db)
		}
	}
	all, allDB := []string{"10.42.0.5", "10.42.1.5", "10.42.2.5", "10.42.3.5"}, []string{"10.42.0.6", "10.42.1.6", "10.42.2.6", "10.42.3.6"}
	check("no word from the mesh", all, allDB)

	mesh.set(map[string]bool{"b": true}, nil)
	check("b gone", []string{"10.42.0.5", "10.42.1.5", "10.42.3.5"}, []string{"10.42.0.6", "10.42.1.6", "10.42.3.6"})
	if tb, _ := dp.last(); tb[apiKey] == nil || len(tb[apiKey].Backends) != 0 {
		t.Errorf("b gone: api, all of whose endpoints are on b, one terminating, has backends %v, want none", backends(tb[apiKey]))
	}

	mesh.set(map[string]bool{}, nil)
	check("b back", all, allDB)
	if tb, _ := dp.last(); len(backends(tb[apiKey])) != 1 {
		t.Errorf("b back: api backends %v, want its ready one", backends(tb[apiKey]))
	}

	mesh.set(nil, map[string]string{podUID("10.42.3.5"): "c", podUID("10.42.3.6"): "c"})
	check("c's pods not ready, says c", []string{"10.42.0.5", "10.42.1.5", "10.42.2.5"}, []string{"10.42.0.6", "10.42.1.6", "10.42.2.6"})

	mesh.set(nil, map[string]string{podUID("10.42.3.5"): "b", podUID("10.42.3.6"): "b"})
	check("c's pods not ready, says b", all, allDB)

	mesh.set(map[string]bool{"n1": true}, map[string]string{podUID("10.42.0.5"): "n1", podUID("10.42.0.6"): "n1"})
	check("the node itself gone and its pods not ready", all, allDB)

	// The mesh only narrows: an endpoint the hub says is not ready stays
	// out whatever the mesh says.
	s := spread(slice("web", "", "10.42.1.5", "10.42.2.5"), "a", "b")
	s.Endpoints[1].Conditions.Ready = &no
	v.Set(t, service("web", "10.43.0.20"), db, s, spread(slice("db", "", "10.42.1.6"), "a"))
	mesh.set(map[string]bool{"a": true}, nil)
	check("a gone, b not ready per the hub", nil, nil)
}

// TestPeersKick: Run applies a kicked change of the mesh at once, and
// one it was not kicked about within a poll and a min sync period.
func TestPeersKick(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		v := checkpointtest.New(t)
		v.Set(t, service("web", "10.43.0.20"), spread(slice("web", "", "10.42.1.5", "10.42.2.5"), "a", "b"))
		mesh := &peers{}
		dp := &recorder{}
		p, _ := newProxyConfig(t, v, nil, func(c *Config) { c.Peers = mesh }, dp)
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan struct{})
		go func() {
			defer close(done)
			_ = p.Run(ctx)
		}()
		synctest.Wait()
		if tb, n := dp.last(); n != 1 || len(backends(tb[web])) != 2 {
			t.Fatalf("first sync %d, backends %v", n, backends(tb[web]))
		}
		time.Sleep(DefaultConfig().MinSync)
		mesh.set(map[string]bool{"b": true}, nil)
		p.Kick()
		synctest.Wait()
		if tb, _ := dp.last(); !slices.Equal(backends(tb[web]), []string{"10.42.1.5:8080"}) {
			t.Errorf("b gone, kicked: backends %v, want a's only", backends(tb[web]))
		}
		mesh.set(nil, map[string]string{podUID("10.42.1.5"): "a"})
		time.Sleep(DefaultConfig().Poll + DefaultConfig().MinSync)
		synctest.Wait()
		if tb, _ := dp.last(); !slices.Equal(backends(tb[web]), []string{"10.42.2.5:8080"}) {
			t.Errorf("b back and a's pod not ready, not kicked: backends %v, want b's only", backends(tb[web]))
		}
		cancel()
		<-done
	})
}
