package server_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/outpost-mesh/outpost/internal/wait"
	"github.com/outpost-mesh/outpost/sync/wire"
)

// usageSink records the usage reports the hub receives, with when.
type usageSink struct {
	mu   sync.Mutex
	got  []*wire.Usage
	at   []time.Time
	node []string
}

func (s *usageSink) PutUsage(node string, u *wire.Usage) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.got, s.at, s.node = append(s.got, u), append(s.at, time.Now()), append(s.node, node)
}

func (s *usageSink) heard() ([]*wire.Usage, []time.Time, []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*wire.Usage(nil), s.got...), append([]time.Time(nil), s.at...), append([]string(nil), s.node...)
}

// TestUsage: a node's usage reports reach the hub's sink as the node's,
// at most one per interval however often the node has a new one, and
// only what the node's source offers (nil: nothing new, nothing sent).
func TestUsage(t *testing.T) {
	h := startHub(t, defaultHubOptions())
	sink := &usageSink{}
	h.stop()
	h.cfg.Usage = sink
	h.start(h.addr)

	const interval = 300 * time.Millisecond
	var mu sync.Mutex
	calls, offered := 0, 0
	cfg := h.clientConfig("edge-1", h.ca.nodeCert(t, "edge-1", time.Hour), newMemStore())
	cfg.UsageInterval = interval
	cfg.Usage = func(last *wire.Usage) *wire.Usage {
		mu.Lock()
		defer mu.Unlock()
		calls++
		if calls%2 == 0 { // every other call: nothing new
			return nil
		}
		offered++
		return &wire.Usage{Time: time.UnixMilli(int64(offered)), Window: interval,
			Node: wire.ResourceUsage{CPU: uint64(offered), Memory: 1 << 20},
			Pods: []wire.PodUsage{{Namespace: "default", Name: "web", Containers: []wire.ContainerUsage{{Name: "c", ResourceUsage: wire.ResourceUsage{CPU: 7}}}}},
		}
	}
	c, _ := runClient(t, cfg)

	wait.For(t, waitLong, "five usage reports", func() (bool, string) {
		got, _, _ := sink.heard()
		return len(got) >= 5, fmt.Sprintf("%d reports", len(got))
	})
	got, at, nodes := sink.heard()
	for i, u := range got {
		if nodes[i] != "edge-1" {
			t.Errorf("report %d put as node %q, want edge-1", i, nodes[i])
		}
		if want := uint64(i + 1); u.Node.CPU != want || len(u.Pods) != 1 || u.Pods[0].Containers[0].CPU != 7 {
			t.Errorf("report %d = %+v, want the node's report %d", i, u, want)
		}
		// The network may bring two reports closer than they were sent,
		// but not by much on loopback.
		if i > 0 && at[i].Sub(at[i-1]) < interval-100*time.Millisecond {
			t.Errorf("reports %d and %d came %v apart, under the interval %v", i-1, i, at[i].Sub(at[i-1]), interval)
		}
	}
	if n := c.Stats().UsageSent.Load(); n < int64(len(got)) {
		t.Errorf("client sent %d reports, hub got %d", n, len(got))
	}
	if n := h.srv.Stats().UsageReports.Load(); n < int64(len(got)) {
		t.Errorf("server counted %d reports, sink got %d", n, len(got))
	}
}
