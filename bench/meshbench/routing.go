package meshbench

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/outpost-mesh/outpost/edge/checkpoint"
	"github.com/outpost-mesh/outpost/edge/mesh"
	"github.com/outpost-mesh/outpost/edge/objects"
	"github.com/outpost-mesh/outpost/edge/proxy"
	"github.com/outpost-mesh/outpost/netd/services"
	"github.com/outpost-mesh/outpost/sync/wire"
)

// Service routing. For the crash, every node but the one to crash runs
// the agent's service proxy (edge/proxy) with proxy.DefaultConfig's
// timings, narrowed by its own mesh as the agent wires it: the proxy is
// kicked on every change the mesh signals, and reads the peers gone and
// the pods said not ready from it. Each proxy routes one Service with
// one endpoint on each node of the site, into a dataplane that records
// when it first got a table without the crashed node's endpoint.

// The Service routed, and its addresses: from 198.18.0.0/15, the range
// set aside for benchmarks (RFC 2544). Nothing is sent to them.
var (
	routedKey   = services.Key{Addr: netip.MustParseAddr("198.19.0.10"), Port: 80, Proto: services.TCP}
	backendPort = uint16(8080)
)

const (
	routedNamespace = "default"
	routedService   = "web"
)

// backendAddr is the address of the endpoint on the i-th node of the
// site, from 0.
func backendAddr(i int) netip.AddrPort {
	return netip.AddrPortFrom(netip.AddrFrom4([4]byte{198, 18, byte((i + 1) >> 8), byte(i + 1)}), backendPort)
}

// podUID is the UID of the pod behind the i-th endpoint.
func podUID(i int) string {
	return fmt.Sprintf("00000000-0000-4000-8000-%012x", i+1)
}

// routingView is the checkpoint as the proxies read it (proxy.View): the
// Service and its one EndpointSlice, which never change. It is safe for
// concurrent use: Scan hands out the same bytes, which no one modifies.
type routingView struct {
	svc, slice checkpoint.Object
}

var _ proxy.View = (*routingView)(nil)

// newRoutingView returns the view of the Service with one ready endpoint
// on each of nodes, in order, each referring to its pod, encoded as the
// hub sends them.
func newRoutingView(nodes []string) (*routingView, error) {
	svc := &corev1.Service{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Service"},
		ObjectMeta: metav1.ObjectMeta{Namespace: routedNamespace, Name: routedService},
		Spec: corev1.ServiceSpec{ClusterIP: routedKey.Addr.String(), ClusterIPs: []string{routedKey.Addr.String()},
			Ports: []corev1.ServicePort{{Name: "http", Port: int32(routedKey.Port), Protocol: corev1.ProtocolTCP}}},
	}
	portName, port, proto := "http", int32(backendPort), corev1.ProtocolTCP
	slice := &discoveryv1.EndpointSlice{
		TypeMeta: metav1.TypeMeta{APIVersion: "discovery.k8s.io/v1", Kind: "EndpointSlice"},
		ObjectMeta: metav1.ObjectMeta{Namespace: routedNamespace, Name: routedService + "-1",
			Labels: map[string]string{discoveryv1.LabelServiceName: routedService}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: &portName, Port: &port, Protocol: &proto}},
	}
	for i, n := range nodes {
		ready := true
		slice.Endpoints = append(slice.Endpoints, discoveryv1.Endpoint{
			Addresses:  []string{backendAddr(i).Addr().String()},
			NodeName:   &n,
			Conditions: discoveryv1.EndpointConditions{Ready: &ready},
			TargetRef: &corev1.ObjectReference{Kind: "Pod", Namespace: routedNamespace, Name: "web-" + n,
				UID: types.UID(podUID(i))},
		})
	}
	v := &routingView{
		svc:   checkpoint.Object{Key: wire.Key{Resource: wire.ResourceServices, Namespace: routedNamespace, Name: routedService}, Revision: 1},
		slice: checkpoint.Object{Key: wire.Key{Resource: wire.ResourceEndpointSlices, Namespace: routedNamespace, Name: slice.Name}, Revision: 1},
	}
	var err error
	if v.svc.Raw, err = objects.Encode(svc); err != nil {
		return nil, err
	}
	if v.slice.Raw, err = objects.Encode(slice); err != nil {
		return nil, err
	}
	return v, nil
}

// ResourceGeneration is always the same: the objects never change.
func (v *routingView) ResourceGeneration(...string) uint64 { return 1 }

// Scan calls fn with the object of resource, if it is one of the two.
func (v *routingView) Scan(resource string, fn func(o checkpoint.Object)) error {
	switch resource {
	case wire.ResourceServices:
		fn(v.svc)
	case wire.ResourceEndpointSlices:
		fn(v.slice)
	}
	return nil
}

// meshPeers is a node's mesh as its proxy reads it (proxy.Peers), as the
// agent adapts its site mesh: what Mesh.Health says, its generation moved
// on every change the mesh signals (watch). It is safe for concurrent
// use.
type meshPeers struct {
	m   *mesh.Mesh
	gen atomic.Uint64
}

var _ proxy.Peers = (*meshPeers)(nil)

// PeerGeneration is one up from the changes seen: 0 is no mesh.
func (p *meshPeers) PeerGeneration() uint64 { return p.gen.Load() + 1 }

func (p *meshPeers) PeerHealth() (map[string]bool, map[string]string) { return p.m.Health() }

// watch moves the generation and calls kick on every change the mesh
// signals, until ctx is done.
func (p *meshPeers) watch(ctx context.Context, kick func()) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-p.m.Changes():
			p.gen.Add(1)
			kick()
		}
	}
}

// dropRecorder is a dataplane that records whether the Service's tables
// route to backend, and when it was first given one that does not
// (dropped). All its methods are safe for concurrent use.
type dropRecorder struct {
	backend netip.AddrPort
	size    int // the backends of a table with none missing

	mu      sync.Mutex
	full    bool      // it was given a table with every backend
	dropped time.Time // the first table without backend since full, or zero
}

var _ services.Dataplane = (*dropRecorder)(nil)

// Sync records what t routes to.
func (r *dropRecorder) Sync(_ context.Context, t services.Table) error {
	now := time.Now()
	var routed bool
	n := 0
	if f := t[routedKey]; f != nil {
		n = len(f.Backends)
		for _, b := range f.Backends {
			routed = routed || b.Addr == r.backend
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if n == r.size {
		r.full = true
	}
	if r.full && !routed && r.dropped.IsZero() {
		r.dropped = now
	}
	return nil
}

// Close does nothing.
func (r *dropRecorder) Close() error { return nil }

// state returns whether the recorder was given a table with every
// backend, and when it was first given one without its backend since.
func (r *dropRecorder) state() (full bool, dropped time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.full, r.dropped
}

// routing is the service proxies of a site's nodes, each narrowed by its
// node's mesh, all watching one node's endpoint.
type routing struct {
	recorders []*dropRecorder
	cancel    context.CancelFunc
	wg        sync.WaitGroup
}

// startRouting starts a proxy on each of nodes, routing the Service with
// an endpoint on each of them and on victim, whose endpoint the
// recorders watch. stop stops them.
func startRouting(ctx context.Context, nodes []*node, victim *node) (*routing, error) {
	all := append([]*node{victim}, nodes...)
	names := make([]string, len(all))
	for i, n := range all {
		names[i] = n.name
	}
	view, err := newRoutingView(names)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	r := &routing{cancel: cancel}
	logger := slog.New(slog.DiscardHandler)
	for _, n := range nodes {
		rec := &dropRecorder{backend: backendAddr(0), size: len(all)}
		peers := &meshPeers{m: n.m}
		cfg := proxy.DefaultConfig() // the agent's Poll and MinSync
		cfg.NodeName, cfg.View, cfg.Peers, cfg.Logger = n.name, view, peers, logger
		cfg.Dataplanes = []services.Dataplane{rec}
		p, err := proxy.New(cfg)
		if err != nil {
			r.stop()
			return nil, err
		}
		r.recorders = append(r.recorders, rec)
		r.wg.Add(2)
		go func() {
			defer r.wg.Done()
			peers.watch(ctx, p.Kick)
		}()
		go func() {
			defer r.wg.Done()
			_ = p.Run(ctx) // nil once ctx ends
		}()
	}
	return r, nil
}

// routed reports whether every proxy has routed to every endpoint.
func (r *routing) routed() bool {
	for _, rec := range r.recorders {
		if full, _ := rec.state(); !full {
			return false
		}
	}
	return true
}

// dropped reports whether every proxy has dropped the watched endpoint.
func (r *routing) dropped() bool {
	_, last := r.lastDrop()
	return last
}

// lastDrop returns when the last proxy to drop the watched endpoint did,
// and whether all have.
func (r *routing) lastDrop() (time.Time, bool) {
	var last time.Time
	for _, rec := range r.recorders {
		_, d := rec.state()
		if d.IsZero() {
			return time.Time{}, false
		}
		if d.After(last) {
			last = d
		}
	}
	return last, true
}

// stop stops the proxies and waits for them.
func (r *routing) stop() {
	r.cancel()
	r.wg.Wait()
}
