package nodelifecycle

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/clock"
)

// PresenceConfig configures a Presence.
type PresenceConfig struct {
	// Client writes the Leases, each request as the node that AsNode
	// named in its context; non-nil.
	Client kubernetes.Interface
	// AsNode returns a context whose requests through Client act as
	// node (system:node:NAME in group system:nodes), so that the node
	// authorizer lets the node write its own Lease and no other; non-nil.
	AsNode func(ctx context.Context, node string) context.Context
	// LeaseDuration is the Leases' spec.leaseDurationSeconds: 40 s, as
	// kubelet's.
	LeaseDuration time.Duration
	// RenewInterval is how often a connected node's Lease is renewed:
	// 10 s, as kubelet's (a quarter of the lease).
	RenewInterval time.Duration
	// RetryInterval is how soon a renewal that failed is tried again: 1 s.
	RetryInterval time.Duration
	// RequestTimeout bounds each request: 10 s.
	RequestTimeout time.Duration
	// Clock is the Presence's time; nil for the wall clock.
	Clock clock.WithTicker
	// Logger receives the failed renewals; non-nil.
	Logger *slog.Logger
}

// DefaultPresenceConfig returns the defaults, without Client, AsNode and
// Logger.
func DefaultPresenceConfig() PresenceConfig {
	return PresenceConfig{
		LeaseDuration:  40 * time.Second,
		RenewInterval:  10 * time.Second,
		RetryInterval:  time.Second,
		RequestTimeout: 10 * time.Second,
	}
}

// Validate reports the first field of c that is missing or out of range.
func (c PresenceConfig) Validate() error {
	switch {
	case c.Client == nil:
		return errors.New("nodelifecycle: nil Client")
	case c.AsNode == nil:
		return errors.New("nodelifecycle: nil AsNode")
	case c.Logger == nil:
		return errors.New("nodelifecycle: nil Logger")
	case c.LeaseDuration < time.Second:
		return errors.New("nodelifecycle: LeaseDuration under 1s")
	case c.RenewInterval <= 0 || c.RenewInterval >= c.LeaseDuration:
		return errors.New("nodelifecycle: RenewInterval must be positive and shorter than LeaseDuration")
	case c.RetryInterval <= 0 || c.RequestTimeout <= 0:
		return errors.New("nodelifecycle: RetryInterval and RequestTimeout must be positive")
	}
	return nil
}

// Presence renews, as kubelet does, the Lease in kube-node-lease of each
// node that is connected to the hub, for as long as it is: the sync
// server tells it of sessions (Connected, Disconnected; it implements
// sync/server's Presence), and Run writes the Leases. A node's Lease is
// what the Controller watches to tell whether the node is reachable.
//
// Connected and Disconnected never block and may be called from any
// goroutine, before Run too.
type Presence struct {
	cfg   PresenceConfig
	clock clock.WithTicker
	wake  chan struct{} // a node connected; capacity 1

	mu       sync.Mutex
	sessions map[string]int      // live sessions per node
	nodes    map[string]*renewal // the connected nodes
}

// renewal is the state of one connected node's Lease.
type renewal struct {
	lease *coordinationv1.Lease // as last written, nil before
	due   time.Time             // the next renewal; zero: at once
}

// NewPresence returns a Presence of cfg; Run starts it.
func NewPresence(cfg PresenceConfig) (*Presence, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	clk := cfg.Clock
	if clk == nil {
		clk = clock.RealClock{}
	}
	return &Presence{
		cfg: cfg, clock: clk,
		wake:     make(chan struct{}, 1),
		sessions: map[string]int{},
		nodes:    map[string]*renewal{},
	}, nil
}

// Connected starts renewing node's Lease, at once if it is not yet.
// Sessions are counted: a node stays connected until as many
// Disconnected calls as Connected ones.
func (p *Presence) Connected(node string) {
	p.mu.Lock()
	p.sessions[node]++
	if p.nodes[node] == nil {
		p.nodes[node] = &renewal{}
	}
	p.mu.Unlock()
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// Disconnected stops renewing node's Lease once its last session ended.
// The Lease is left to expire.
func (p *Presence) Disconnected(node string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.sessions[node]--; p.sessions[node] > 0 {
		return
	}
	delete(p.sessions, node)
	delete(p.nodes, node)
}

// Run renews the connected nodes' Leases when they are due until ctx
// ends, then returns nil. A renewal that fails is logged and tried again
// after RetryInterval.
func (p *Presence) Run(ctx context.Context) error {
	for {
		now := p.clock.Now()
		for _, node := range p.due(now) {
			now := p.clock.Now()
			l, err := p.renew(ctx, node, now)
			if ctx.Err() != nil {
				return nil
			}
			if err != nil {
				p.cfg.Logger.Warn("renew node lease", "node", node, "err", err)
			}
			p.mu.Lock()
			if r := p.nodes[node]; r != nil {
				if err != nil {
					r.due = p.clock.Now().Add(p.cfg.RetryInterval)
				} else {
					r.lease, r.due = l, now.Add(p.cfg.RenewInterval)
				}
			}
			p.mu.Unlock()
		}
		var timer clock.Timer
		var fire <-chan time.Time
		if next, ok := p.next(); ok {
			timer = p.clock.NewTimer(next.Sub(p.clock.Now()))
			fire = timer.C()
		}
		select {
		case <-ctx.Done():
		case <-p.wake:
		case <-fire:
		}
		if timer != nil {
			timer.Stop()
		}
		if ctx.Err() != nil {
			return nil
		}
	}
}

// due returns the nodes whose renewal is due at now.
func (p *Presence) due(now time.Time) []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var due []string
	for node, r := range p.nodes {
		if !now.Before(r.due) {
			due = append(due, node)
		}
	}
	return due
}

// next returns the time of the next renewal, false if no node is
// connected.
func (p *Presence) next() (time.Time, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var next time.Time
	ok := false
	for _, r := range p.nodes {
		if !ok || r.due.Before(next) {
			next, ok = r.due, true
		}
	}
	return next, ok
}

// renew writes node's Lease with the renew time now, creating it if it is
// not there yet, owned by the node's Node as kubelet makes it.
func (p *Presence) renew(ctx context.Context, node string, now time.Time) (*coordinationv1.Lease, error) {
	ctx, cancel := context.WithTimeout(p.cfg.AsNode(ctx, node), p.cfg.RequestTimeout)
	defer cancel()
	leases := p.cfg.Client.CoordinationV1().Leases(corev1.NamespaceNodeLease)
	p.mu.Lock()
	var l *coordinationv1.Lease
	if r := p.nodes[node]; r != nil {
		l = r.lease
	}
	p.mu.Unlock()
	renew := metav1.NewMicroTime(now)
	if l != nil {
		// The last one written is most likely still the current one:
		// write over it without reading it first.
		l = l.DeepCopy()
		l.Spec.RenewTime = &renew
		out, err := leases.Update(ctx, l, metav1.UpdateOptions{})
		if err == nil || !apierrors.IsConflict(err) && !apierrors.IsNotFound(err) {
			return out, err
		}
	}
	cur, err := leases.Get(ctx, node, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		holder, dur := node, int32(p.cfg.LeaseDuration/time.Second)
		lease := &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: node, Namespace: corev1.NamespaceNodeLease},
			Spec:       coordinationv1.LeaseSpec{HolderIdentity: &holder, LeaseDurationSeconds: &dur, RenewTime: &renew},
		}
		if n, err := p.cfg.Client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{}); err == nil {
			lease.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: node, UID: n.UID}}
		}
		return leases.Create(ctx, lease, metav1.CreateOptions{})
	}
	if err != nil {
		return nil, err
	}
	cur.Spec.RenewTime = &renew
	return leases.Update(ctx, cur, metav1.UpdateOptions{})
}
