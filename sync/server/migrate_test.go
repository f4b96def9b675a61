package server_test

import (
	"fmt"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/outpost-mesh/outpost/internal/netem"
	"github.com/outpost-mesh/outpost/internal/wait"
	"github.com/outpost-mesh/outpost/sync/client"
	"github.com/outpost-mesh/outpost/sync/server"
	"github.com/outpost-mesh/outpost/sync/wire"
)

// moveTimeout bounds how long after its uplink is cut a node's session
// must be through a site peer's relay: the 10 s for the status
// to reach the hub, of which the move takes about five.
const moveTimeout = 10 * time.Second

// TestSessionMovesThroughRelay: a node's uplink and a site peer's relay
// are UDP relays (internal/netem) toward a real hub on loopback, with the
// client's and the hub's default timeouts. The uplink is cut: the
// session moves through the peer within moveTimeout, by QUIC connection
// migration, and both ways still work through it (a pod the hub sends,
// a status the node sends). The uplink returns: the session moves back
// and the relay carries nothing more. Throughout the hub holds one
// session for the node, and the client dialed once.
func TestSessionMovesThroughRelay(t *testing.T) {
	opts := defaultHubOptions()
	h := startHub(t, opts)
	h.cfg.IdleTimeout, h.cfg.KeepAlive = server.DefaultConfig().IdleTimeout, server.DefaultConfig().KeepAlive
	h.stop()
	h.start("127.0.0.1:0")

	uplink, err := netem.Listen(h.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer uplink.Close()
	peer, err := netem.Listen(h.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer peer.Close()
	relayAddr := netip.MustParseAddrPort(peer.Addr())

	h.feed.put(nodeKey("edge-1"), testNode("edge-1"))
	rev := h.feed.put(podKey("web"), testPod("web", "edge-1"))
	st := newMemStore()
	cfg := h.clientConfig("edge-1", h.ca.nodeCert(t, "edge-1", time.Hour), st)
	cfg.HubAddr = uplink.Addr()
	def := client.DefaultConfig()
	cfg.IdleTimeout, cfg.KeepAlive = def.IdleTimeout, def.KeepAlive
	cfg.DirectProbe = time.Second
	cfg.Relays = func() (netip.Addr, []netip.AddrPort) {
		return netip.MustParseAddr("127.0.0.1"), []netip.AddrPort{relayAddr}
	}
	c, _ := runClient(t, cfg)
	wait.For(t, waitLong, "initial view", synced(h, st, "edge-1", rev))
	if c.Relayed() {
		t.Fatal("the session began on the relay, with the uplink up")
	}

	uplink.Set(netem.Conditions{Blackhole: true})
	cut := time.Now()
	wait.For(t, moveTimeout, "the session through the peer's relay", func() (bool, string) {
		return c.Relayed(), fmt.Sprintf("relayed %v, moves %d, connects %d", c.Relayed(), c.Stats().Moves.Load(), c.Stats().Connects.Load())
	})
	t.Logf("the session moved through the relay %v after the cut", time.Since(cut).Round(time.Millisecond))

	// Both ways work through the relay.
	rev = h.feed.put(podKey("api"), testPod("api", "edge-1"))
	wait.For(t, waitLong, "a pod sent through the relay", synced(h, st, "edge-1", rev))
	seq := st.enqueue(wire.KindPodStatus, podKey("web"), encode(t, testPod("web", "edge-1")))
	c.NotifyOutbox()
	wait.For(t, waitLong, "a status sent through the relay", func() (bool, string) {
		p := st.pendingSeqs()
		return !slices.Contains(p, seq), fmt.Sprintf("pending %v", p)
	})
	t.Logf("the hub heard the node's status %v after the cut", time.Since(cut).Round(time.Millisecond))
	if up, _ := peer.Bytes(); up == 0 {
		t.Error("the peer's relay carried nothing")
	}

	uplink.Set(netem.Conditions{})
	wait.For(t, waitLong, "the session back on the uplink", func() (bool, string) {
		return !c.Relayed(), fmt.Sprintf("relayed %v, moves %d", c.Relayed(), c.Stats().Moves.Load())
	})
	rev = h.feed.put(podKey("db"), testPod("db", "edge-1"))
	wait.For(t, waitLong, "a pod sent over the uplink again", synced(h, st, "edge-1", rev))
	// The relay carries nothing more of the session.
	relayedUp, relayedDown := peer.Bytes()
	upBefore, downBefore := uplink.Bytes()
	rev = h.feed.put(podKey("cache"), testPod("cache", "edge-1"))
	wait.For(t, waitLong, "another pod sent over the uplink", synced(h, st, "edge-1", rev))
	if up, down := uplink.Bytes(); up == upBefore || down == downBefore {
		t.Errorf("the uplink carried %d bytes up and %d down for a pod sent, want some each way", up-upBefore, down-downBefore)
	}
	if up, down := peer.Bytes(); up != relayedUp || down != relayedDown {
		t.Errorf("the relay forwarded %d bytes up and %d down after the session moved back, want none", up-relayedUp, down-relayedDown)
	}

	if n := c.Stats().Connects.Load(); n != 1 {
		t.Errorf("the client connected %d times, want 1: the session moved, it did not reconnect", n)
	}
	if n := c.Stats().Moves.Load(); n != 2 {
		t.Errorf("the session moved %d times, want 2: to the relay and back", n)
	}
	if ev, _ := h.presence.state(); !slices.Equal(ev, []string{"+edge-1"}) {
		t.Errorf("presence heard %v, want [+edge-1]: one session throughout", ev)
	}
}
