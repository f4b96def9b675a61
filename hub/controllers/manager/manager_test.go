package manager_test

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/outpost-mesh/outpost/hub/controllers"
	"github.com/outpost-mesh/outpost/hub/controllers/manager"
	"github.com/outpost-mesh/outpost/hub/hubd"
	"github.com/outpost-mesh/outpost/internal/testlog"
	"github.com/outpost-mesh/outpost/internal/wait"
	"github.com/outpost-mesh/outpost/test/hubtest"
)

// probe is a controller that counts how many of it run at once.
type probe struct{ running *atomic.Int32 }

func (p probe) Run(ctx context.Context) error {
	p.running.Add(1)
	defer p.running.Add(-1)
	<-ctx.Done()
	return nil
}

// TestLeaderElection: of two managers on one hub only one runs its
// controllers; when it stops, it releases the Lease and the other takes
// over.
func TestLeaderElection(t *testing.T) {
	h := hubtest.Start(t, func(c *hubd.Config) { c.Controllers = false }) // only the two managers below
	var running [2]atomic.Int32
	var bgs [2]*wait.Background
	for i := range 2 {
		cfg := manager.DefaultConfig()
		cfg.LeaseDuration, cfg.RenewDeadline, cfg.RetryPeriod = 3*time.Second, 2*time.Second, 200*time.Millisecond
		cfg.Holder = []string{"hub-a", "hub-b"}[i]
		cfg.LeaseIdentity = "test"
		cfg.Clients = func(string) (manager.Clients, error) {
			return manager.Clients{Client: h.Client, Metadata: h.Metadata}, nil
		}
		cfg.Logger = testlog.New(t, slog.LevelInfo).With("hub", cfg.Holder)
		n := &running[i]
		cfg.Controllers = []manager.Controller{{Name: "probe", Identity: "test", New: func(c controllers.Context) (manager.Runner, error) {
			if err := c.Validate(); err != nil {
				return nil, err
			}
			return probe{running: n}, nil
		}}}
		m, err := manager.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		bgs[i] = wait.Start(t, 30*time.Second, cfg.Holder, m.Run)
	}
	var leader int
	wait.For(t, 30*time.Second, "one manager to lead", func() (bool, string) {
		a, b := running[0].Load(), running[1].Load()
		if a+b == 1 {
			leader = int(b)
			return true, ""
		}
		return false, fmt.Sprintf("running controllers: %d and %d", a, b)
	})
	for range 5 { // a few renewals: still one leader
		if a, b := running[0].Load(), running[1].Load(); a+b != 1 {
			t.Fatalf("controllers running on both or neither hub: %d and %d", a, b)
		}
		l, err := h.Client.CoordinationV1().Leases("kube-system").Get(context.Background(), "kube-controller-manager", metav1.GetOptions{})
		if err != nil || l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity != []string{"hub-a", "hub-b"}[leader] {
			t.Fatalf("leader Lease = %v, %v; want held by the running hub", l, err)
		}
	}
	if err := bgs[leader].Stop(); err != nil {
		t.Fatalf("leader's Run = %v, want nil", err)
	}
	if n := running[leader].Load(); n != 0 {
		t.Fatalf("%d controllers still run after the leader's Run returned", n)
	}
	// Released on the way out, so the other takes over well before the
	// lease would have expired.
	wait.For(t, 30*time.Second, "the other manager to take over", func() (bool, string) {
		return running[1-leader].Load() == 1, "not yet"
	})
}
