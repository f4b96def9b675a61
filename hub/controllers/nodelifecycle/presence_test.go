package nodelifecycle

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/outpost-mesh/outpost/internal/testlog"
	"github.com/outpost-mesh/outpost/internal/wait"
)

// presenceRig is a Presence over a fake clientset and a fake clock,
// running until the test ends.
type presenceRig struct {
	p     *Presence
	clock *clocktesting.FakeClock
	t0    time.Time
	ctx   context.Context

	mu     sync.Mutex
	asNode []string // the nodes AsNode was asked for, in order
	client *fake.Clientset
}

func newPresenceRig(t *testing.T) *presenceRig {
	t.Helper()
	r := &presenceRig{t0: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), ctx: context.Background()}
	r.clock = clocktesting.NewFakeClock(r.t0)
	r.client = fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "edge-a", UID: "uid-a"}})
	cfg := DefaultPresenceConfig()
	cfg.Client, cfg.Clock, cfg.Logger = r.client, r.clock, testlog.New(t, slog.LevelInfo)
	cfg.AsNode = func(ctx context.Context, node string) context.Context {
		r.mu.Lock()
		r.asNode = append(r.asNode, node)
		r.mu.Unlock()
		return ctx
	}
	p, err := NewPresence(cfg)
	if err != nil {
		t.Fatal(err)
	}
	r.p = p
	wait.Start(t, 10*time.Second, "Presence Run", p.Run)
	return r
}

// renewedAt waits until node's Lease was renewed at want.
func (r *presenceRig) renewedAt(t *testing.T, node string, want time.Time) {
	t.Helper()
	wait.For(t, 10*time.Second, fmt.Sprintf("lease of %s renewed at %v", node, want), func() (bool, string) {
		l, err := r.client.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(r.ctx, node, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		if l.Spec.RenewTime == nil {
			return false, "no renew time"
		}
		return l.Spec.RenewTime.Time.Equal(want), fmt.Sprintf("renewed at %v", l.Spec.RenewTime.Time)
	})
}

// idle waits until Run waits for a timer (timer) or for nothing but a
// new node (!timer).
func (r *presenceRig) idle(t *testing.T, timer bool) {
	t.Helper()
	wait.For(t, 10*time.Second, fmt.Sprintf("Presence waiting (timer %v)", timer), func() (bool, string) {
		return r.clock.HasWaiters() == timer, fmt.Sprintf("has waiters %v", r.clock.HasWaiters())
	})
}

func TestPresenceRenews(t *testing.T) {
	r := newPresenceRig(t)
	r.p.Connected("edge-a")
	r.renewedAt(t, "edge-a", r.t0)
	l, err := r.client.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(r.ctx, "edge-a", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if *l.Spec.HolderIdentity != "edge-a" || *l.Spec.LeaseDurationSeconds != 40 {
		t.Errorf("lease spec = %+v, want holder edge-a for 40s", l.Spec)
	}
	if want := []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: "edge-a", UID: "uid-a"}}; !slices.Equal(l.OwnerReferences, want) {
		t.Errorf("lease owners = %v, want %v", l.OwnerReferences, want)
	}

	// Not before 10s.
	r.idle(t, true)
	r.clock.Step(9 * time.Second)
	r.idle(t, true)
	r.clock.Step(time.Second)
	r.renewedAt(t, "edge-a", r.t0.Add(10*time.Second))

	// A second session, and the first one ends: still connected.
	r.p.Connected("edge-a")
	r.p.Disconnected("edge-a")
	r.idle(t, true)
	r.clock.Step(10 * time.Second)
	r.renewedAt(t, "edge-a", r.t0.Add(20*time.Second))

	// Someone deleted the Lease: it is made anew.
	if err := r.client.CoordinationV1().Leases(corev1.NamespaceNodeLease).Delete(r.ctx, "edge-a", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	r.idle(t, true)
	r.clock.Step(10 * time.Second)
	r.renewedAt(t, "edge-a", r.t0.Add(30*time.Second))

	// The last session ends: no more renewals.
	r.idle(t, true)
	r.p.Disconnected("edge-a")
	r.clock.Step(10 * time.Second)
	r.idle(t, false)
	r.renewedAt(t, "edge-a", r.t0.Add(30*time.Second))

	r.mu.Lock()
	defer r.mu.Unlock()
	for _, n := range r.asNode {
		if n != "edge-a" {
			t.Errorf("AsNode asked for %q, want only edge-a", n)
		}
	}
	if len(r.asNode) != 4 {
		t.Errorf("AsNode called %d times, want once a renewal (4)", len(r.asNode))
	}
}

// A node that has no Node (an administrator deleted it) still gets its
// Lease, without an owner, and a failed write is retried.
func TestPresenceRetries(t *testing.T) {
	r := newPresenceRig(t)
	var failed atomic.Bool
	r.client.PrependReactor("create", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
		if failed.CompareAndSwap(false, true) {
			return true, nil, apierrors.NewServiceUnavailable("try later")
		}
		return false, nil, nil
	})
	r.p.Connected("edge-b")
	wait.For(t, 10*time.Second, "a failed create", func() (bool, string) { return failed.Load(), "" })
	r.idle(t, true)
	r.clock.Step(time.Second)
	r.renewedAt(t, "edge-b", r.t0.Add(time.Second))
	l, err := r.client.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(r.ctx, "edge-b", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(l.OwnerReferences) != 0 {
		t.Errorf("lease owners = %v, want none without a Node", l.OwnerReferences)
	}
}

func TestPresenceConfigValidate(t *testing.T) {
	good := DefaultPresenceConfig()
	good.Client = fake.NewClientset()
	good.AsNode = func(ctx context.Context, _ string) context.Context { return ctx }
	good.Logger = slog.New(slog.DiscardHandler)
	if err := good.Validate(); err != nil {
		t.Fatalf("Validate(defaults) = %v, want nil", err)
	}
	for name, mod := range map[string]func(*PresenceConfig){
		"no client":         func(c *PresenceConfig) { c.Client = nil },
		"no AsNode":         func(c *PresenceConfig) { c.AsNode = nil },
		"no logger":         func(c *PresenceConfig) { c.Logger = nil },
		"short lease":       func(c *PresenceConfig) { c.LeaseDuration = time.Millisecond },
		"renew after lease": func(c *PresenceConfig) { c.RenewInterval = time.Minute },
		"no retry":          func(c *PresenceConfig) { c.RetryInterval = 0 },
	} {
		c := good
		mod(&c)
		if _, err := NewPresence(c); err == nil {
			t.Errorf("NewPresence(%s) = nil error, want one", name)
		}
	}
}
