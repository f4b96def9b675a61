package proxy

import (
	"context"
	"errors"
	"log/slog"
	"net/netip"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/outpost-mesh/outpost/edge/checkpoint/checkpointtest"
	"github.com/outpost-mesh/outpost/internal/testlog"
	"github.com/outpost-mesh/outpost/netd/dns"
	"github.com/outpost-mesh/outpost/netd/services"
	"github.com/outpost-mesh/outpost/sync/wire"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// recorder is a dataplane that keeps the tables it is given.
type recorder struct {
	mu     sync.Mutex
	tables []services.Table
	fail   error
}

func (r *recorder) Sync(_ context.Context, t services.Table) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.fail != nil {
		return r.fail
	}
	c := make(services.Table, len(t))
	for k, f := range t {
		c[k] = f
	}
	r.tables = append(r.tables, c)
	return nil
}

func (r *recorder) Close() error { return nil }

func (r *recorder) last() (services.Table, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.tables) == 0 {
		return nil, 0
	}
	return r.tables[len(r.tables)-1], len(r.tables)
}

// zones keeps the last zone.
type zones struct{ z *dns.Zone }

func (z *zones) SetZone(zone *dns.Zone) { z.z = zone }

// pods is LocalPods from a map.
type pods struct {
	mu    sync.Mutex
	ready map[netip.Addr]bool
}

func (p *pods) PodAddrs() (map[netip.Addr]bool, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ready == nil {
		return nil, false
	}
	out := make(map[netip.Addr]bool, len(p.ready))
	for k, v := range p.ready {
		out[k] = v
	}
	return out, true
}

func (p *pods) set(addr string, ready bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ready == nil {
		p.ready = map[netip.Addr]bool{}
	}
	p.ready[netip.MustParseAddr(addr)] = ready
}

func service(name, ip string) *corev1.Service {
	return &corev1.Service{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Service"},
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
		Spec: corev1.ServiceSpec{ClusterIP: ip, ClusterIPs: []string{ip},
			Ports: []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP}}},
	}
}

// slice returns the service's slice with one ready endpoint per address,
// on node.
func slice(svc, node string, addrs ...string) *discoveryv1.EndpointSlice {
	name, port, proto := "http", int32(8080), corev1.ProtocolTCP
	s := &discoveryv1.EndpointSlice{
		TypeMeta:    metav1.TypeMeta{APIVersion: "discovery.k8s.io/v1", Kind: "EndpointSlice"},
		ObjectMeta:  metav1.ObjectMeta{Namespace: "default", Name: svc + "-1", Labels: map[string]string{discoveryv1.LabelServiceName: svc}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: &name, Port: &port, Protocol: &proto}},
	}
	for _, a := range addrs {
		ready := true
		s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{Addresses: []string{a}, NodeName: &node, Conditions: discoveryv1.EndpointConditions{Ready: &ready}})
	}
	return s
}

// newProxy returns a proxy of view, local and dp that rebuilds at each
// step that finds a change (MinSync 0).
func newProxy(t *testing.T, view View, local LocalPods, dp ...services.Dataplane) (*Proxy, *zones) {
	t.Helper()
	return newProxyConfig(t, view, local, func(c *Config) { c.MinSync = 0 }, dp...)
}

func newProxyConfig(t *testing.T, view View, local LocalPods, set func(*Config), dp ...services.Dataplane) (*Proxy, *zones) {
	t.Helper()
	z := &zones{}
	cfg := DefaultConfig()
	cfg.NodeName, cfg.View, cfg.Dataplanes, cfg.DNS = "n1", view, dp, z
	if local != nil {
		cfg.Local = local
	}
	cfg.ClusterDNS, cfg.DNSAddr = netip.MustParseAddr("10.43.0.10"), netip.MustParseAddr("10.42.0.1")
	cfg.Logger = testlog.New(t, slog.LevelDebug)
	set(&cfg)
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return p, z
}

func backends(f *services.Frontend) []string {
	if f == nil {
		return nil
	}
	var out []string
	for _, b := range f.Backends {
		out = append(out, b.Addr.String())
	}
	return out
}

var web = services.Key{Addr: netip.MustParseAddr("10.43.0.20"), Port: 80, Proto: services.TCP}

// TestStep: the view's services reach every dataplane and the DNS zone,
// only when something changed; the cluster DNS address goes to the
// node's own server.
func TestStep(t *testing.T) {
	v := checkpointtest.New(t)
	v.Set(t, service("web", "10.43.0.20"), slice("web", "n2", "10.42.1.5", "10.42.1.6"))
	a, b := &recorder{}, &recorder{}
	p, z := newProxy(t, v, nil, a, b)
	ctx := t.Context()

	p.step(ctx)
	ta, na := a.last()
	tb, nb := b.last()
	if na != 1 || nb != 1 {
		t.Fatalf("syncs %d, %d; want one each", na, nb)
	}
	if got := backends(ta[web]); len(got) != 2 || got[0] != "10.42.1.5:8080" || got[1] != "10.42.1.6:8080" {
		t.Errorf("web backends %v, want both endpoints", got)
	}
	if len(tb) != len(ta) {
		t.Errorf("the dataplanes got different tables")
	}
	for _, proto := range []services.Proto{services.UDP, services.TCP} {
		k := services.Key{Addr: netip.MustParseAddr("10.43.0.10"), Port: 53, Proto: proto}
		if got := backends(ta[k]); len(got) != 1 || got[0] != "10.42.0.1:53" {
			t.Errorf("cluster DNS %s goes to %v, want the node's server", k, got)
		}
	}
	if z.z == nil {
		t.Error("no DNS zone set")
	}

	p.step(ctx)
	if _, n := a.last(); n != 1 {
		t.Errorf("%d syncs with nothing changed, want still 1", n)
	}
	v.Set(t, service("web", "10.43.0.20"), slice("web", "n2", "10.42.1.5"))
	p.step(ctx)
	ta, na = a.last()
	if got := backends(ta[web]); na != 2 || len(got) != 1 {
		t.Errorf("after the change: sync %d, backends %v; want a second sync with one backend", na, got)
	}
}

// TestLocalDead: the node's own endpoint that its runtime says does not
// serve leaves routing at the next look, though the view still lists it
// ready, and comes back when it serves again; other nodes' endpoints
// stay.
func TestLocalDead(t *testing.T) {
	v := checkpointtest.New(t)
	s := slice("web", "n1", "10.42.0.5", "10.42.0.6")
	other := slice("web", "n2", "10.42.1.7")
	other.Name = "web-2"
	v.Set(t, service("web", "10.43.0.20"), s, other)
	local := &pods{}
	dp := &recorder{}
	p, _ := newProxy(t, v, local, dp)

	p.step(t.Context()) // the runtime not looked at yet: the view as it is
	tb, _ := dp.last()
	if got := backends(tb[web]); len(got) != 3 {
		t.Fatalf("backends %v before the runtime is known, want all three", got)
	}
	local.set("10.42.0.5", true)
	local.set("10.42.0.6", false)
	p.step(t.Context())
	tb, _ = dp.last()
	if got := backends(tb[web]); len(got) != 2 || got[0] != "10.42.0.5:8080" || got[1] != "10.42.1.7:8080" {
		t.Errorf("backends %v, want the dead local one gone", got)
	}
	local.set("10.42.0.6", true)
	p.step(t.Context())
	tb, _ = dp.last()
	if got := backends(tb[web]); len(got) != 3 {
		t.Errorf("backends %v, want the local one back", got)
	}
}

// TestRetry: a dataplane that fails is given the table again at the
// next look, though nothing changed.
func TestRetry(t *testing.T) {
	v := checkpointtest.New(t)
	v.Set(t, service("web", "10.43.0.20"), slice("web", "n2", "10.42.1.5"))
	dp := &recorder{fail: errors.New("map full")}
	p, _ := newProxy(t, v, nil, dp)
	p.step(t.Context())
	p.step(t.Context())
	if _, n := dp.last(); n != 0 {
		t.Fatalf("%d tables kept by a failing dataplane", n)
	}
	dp.mu.Lock()
	dp.fail = nil
	dp.mu.Unlock()
	p.step(t.Context())
	if _, n := dp.last(); n != 1 {
		t.Errorf("%d syncs after the failure ended, want 1", n)
	}
}

// TestRunPolls: Run notices a local pod's death within a poll, and a
// kicked view change at once.
func TestRunPolls(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		v := checkpointtest.New(t)
		v.Set(t, service("web", "10.43.0.20"), slice("web", "n1", "10.42.0.5"))
		local := &pods{}
		local.set("10.42.0.5", true)
		dp := &recorder{}
		p, _ := newProxyConfig(t, v, local, func(*Config) {}, dp)
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan struct{})
		go func() {
			defer close(done)
			_ = p.Run(ctx)
		}()
		synctest.Wait()
		if tb, n := dp.last(); n != 1 || len(backends(tb[web])) != 1 {
			t.Fatalf("first sync %d, %v", n, tb)
		}
		local.set("10.42.0.5", false)
		time.Sleep(DefaultConfig().Poll + DefaultConfig().MinSync)
		synctest.Wait()
		if tb, _ := dp.last(); len(backends(tb[web])) != 0 {
			t.Errorf("the dead pod is routed to a poll and a min sync period after its death: %v", backends(tb[web]))
		}
		time.Sleep(DefaultConfig().MinSync)
		v.Set(t, service("web", "10.43.0.20"), service("api", "10.43.0.21"), slice("web", "n1", "10.42.0.5"))
		p.Kick()
		synctest.Wait()
		if tb, _ := dp.last(); tb[services.Key{Addr: netip.MustParseAddr("10.43.0.21"), Port: 80, Proto: services.TCP}] == nil {
			t.Error("a kicked change not applied at once")
		}
		cancel()
		<-done
	})
}

// TestMinSync: changes that come within MinSync of the last rebuild wait
// for it to pass and are applied together; the decoded objects of the
// view are kept and only what changed is decoded again.
func TestMinSync(t *testing.T) {
	v := checkpointtest.New(t)
	v.Set(t, service("web", "10.43.0.20"), slice("web", "n2", "10.42.1.5"))
	dp := &recorder{}
	now := time.Unix(1000, 0)
	p, _ := newProxyConfig(t, v, nil, func(c *Config) { c.Clock = func() time.Time { return now } }, dp)
	p.step(t.Context())
	webKey := wire.Key{Resource: wire.ResourceServices, Namespace: "default", Name: "web"}
	first := p.objs.svcs[webKey].svc
	for i := range 3 {
		now = now.Add(100 * time.Millisecond)
		v.Set(t, service("web", "10.43.0.20"), slice("web", "n2", "10.42.1.5", "10.42.1."+string(rune('6'+i))))
		p.step(t.Context())
	}
	if _, n := dp.last(); n != 1 {
		t.Fatalf("%d rebuilds within the min sync period, want only the first", n)
	}
	now = now.Add(DefaultConfig().MinSync)
	p.step(t.Context())
	tb, n := dp.last()
	if got := backends(tb[web]); n != 2 || len(got) != 2 || got[1] != "10.42.1.8:8080" {
		t.Errorf("after the period: rebuild %d with backends %v, want the last change's two", n, got)
	}
	// Set gives every object a new revision, so the
	// Service was decoded again; one of an unchanged revision is not.
	if again := p.objs.svcs[webKey].svc; again == first {
		t.Error("a Service of a new revision kept its old decoding")
	}
	kept := p.objs.svcs[webKey].svc
	p.synced = false // a rebuild of the same objects, same revisions
	now = now.Add(2 * time.Second)
	p.step(t.Context())
	if p.objs.svcs[webKey].svc != kept {
		t.Error("a Service of the same revision decoded again")
	}
	if s := kept; s.Name != "web" || len(s.Ports) != 1 {
		t.Errorf("the kept Service %+v, want web with its port", s)
	}
	// What the view no longer holds leaves the cache.
	v.Set(t, service("web", "10.43.0.20"))
	now = now.Add(2 * time.Second)
	p.step(t.Context())
	if len(p.objs.slices) != 0 || len(p.objs.svcs) != 1 || p.objs.svcs[webKey] == nil {
		t.Errorf("after the slice's removal the cache holds %d slices and %d Services, want none and web", len(p.objs.slices), len(p.objs.svcs))
	}
}
