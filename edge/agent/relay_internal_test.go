package agent

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/outpost-mesh/outpost/edge/relay"
	"github.com/outpost-mesh/outpost/internal/wait"
	"github.com/outpost-mesh/outpost/sync/wire"
)

// TestRelayCounters: the relay's counters become the usage report's, by
// peer.
func TestRelayCounters(t *testing.T) {
	a, b := netip.MustParseAddr("192.168.7.12"), netip.MustParseAddr("192.168.7.9")
	got := relayCounters(relay.Stats{Peers: map[netip.Addr]relay.PeerStats{
		a: {Up: 3000, Down: 9000, Dropped: 5, Capped: 4},
		b: {Up: 1200},
	}, Refused: 7, Clients: 2})
	want := []wire.RelayUsage{{Peer: b, Up: 1200}, {Peer: a, Up: 3000, Down: 9000, Dropped: 5, Capped: 4}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("relayCounters = %+v, want %+v", got, want)
	}
}

// TestRelayUsage: while the agent's relay serves, relayUsage reads what
// it forwarded for a peer; before and after, it reads none.
func TestRelayUsage(t *testing.T) {
	hub, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	defer hub.Close()
	wg.Go(func() { // the hub echoes every datagram
		buf := make([]byte, 2048)
		for {
			n, from, err := hub.ReadFromUDPAddrPort(buf)
			if err != nil {
				return
			}
			_, _ = hub.WriteToUDPAddrPort(buf[:n], from)
		}
	})

	ag := &Agent{}
	if got := ag.relayUsage(); got != nil {
		t.Fatalf("relayUsage without a relay = %+v, want none", got)
	}
	peer := netip.MustParseAddr("127.0.0.1")
	cfg := relay.DefaultConfig()
	cfg.Bind = netip.MustParseAddrPort("127.0.0.1:0")
	cfg.Target = func() (netip.AddrPort, error) { return hub.LocalAddr().(*net.UDPAddr).AddrPort(), nil }
	cfg.Allowed = func(ip netip.Addr) bool { return ip == peer }
	r, err := relay.Listen(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = r.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	ag.relay.Store(r)

	c, err := net.DialUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)}, net.UDPAddrFromAddrPort(r.Addr()))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write(make([]byte, 1200)); err != nil {
		t.Fatal(err)
	}
	want := []wire.RelayUsage{{Peer: peer, Up: 1200, Down: 1200}}
	wait.For(t, 5*time.Second, "the relayed datagram counted both ways", func() (bool, string) {
		got := ag.relayUsage()
		return reflect.DeepEqual(got, want), fmt.Sprintf("counters %+v, want %+v", got, want)
	})
	ag.relay.Store(nil)
	if got := ag.relayUsage(); got != nil {
		t.Errorf("relayUsage once the relay stopped = %+v, want none", got)
	}
}
