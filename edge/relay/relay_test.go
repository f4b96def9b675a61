package relay_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outpost-mesh/outpost/edge/relay"
	"github.com/outpost-mesh/outpost/internal/wait"
)

// echoHub is a UDP server on loopback that sends every datagram back,
// standing in for the hub.
func echoHub(t *testing.T) netip.AddrPort {
	t.Helper()
	c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		buf := make([]byte, 65536)
		for {
			n, from, err := c.ReadFromUDPAddrPort(buf)
			if err != nil {
				return
			}
			_, _ = c.WriteToUDPAddrPort(buf[:n], from)
		}
	})
	t.Cleanup(func() { c.Close(); wg.Wait() })
	return c.LocalAddr().(*net.UDPAddr).AddrPort()
}

// start runs a relay toward hub with cfg's limits, admitting only
// 127.0.0.1, until the test ends.
func start(t *testing.T, hub netip.AddrPort, tune func(*relay.Config)) *relay.Relay {
	t.Helper()
	cfg := relay.DefaultConfig()
	cfg.Bind = netip.MustParseAddrPort("127.0.0.1:0")
	cfg.Target = func() (netip.AddrPort, error) { return hub, nil }
	cfg.Allowed = func(ip netip.Addr) bool { return ip == netip.MustParseAddr("127.0.0.1") }
	if tune != nil {
		tune(&cfg)
	}
	r, err := relay.Listen(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = r.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return r
}

// peerConn returns a UDP socket of a peer on ip, sending to the relay.
func peerConn(t *testing.T, ip string, r *relay.Relay) *net.UDPConn {
	t.Helper()
	c, err := net.DialUDP("udp", &net.UDPAddr{IP: net.ParseIP(ip)}, net.UDPAddrFromAddrPort(r.Addr()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// roundTrip sends p and returns what comes back within a second, nil if
// nothing does.
func roundTrip(t *testing.T, c *net.UDPConn, p []byte) []byte {
	t.Helper()
	if _, err := c.Write(p); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(time.Second))
	buf := make([]byte, 4096)
	n, err := c.Read(buf)
	if err != nil {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			return nil
		}
		t.Fatal(err)
	}
	return buf[:n]
}

func TestRelayForwardsBothWays(t *testing.T) {
	r := start(t, echoHub(t), nil)
	c := peerConn(t, "127.0.0.1", r)
	for i := range 3 {
		p := bytes.Repeat([]byte{byte(i)}, 1200)
		if got := roundTrip(t, c, p); !bytes.Equal(got, p) {
			t.Fatalf("round trip %d: got %d bytes, want the 1200 sent", i, len(got))
		}
	}
	s := r.Stats().Peers[netip.MustParseAddr("127.0.0.1")]
	if s.Up != 3600 || s.Down != 3600 || s.Dropped != 0 {
		t.Errorf("stats %+v, want 3600 up and down, none dropped", s)
	}
}

func TestRelayDropsOversizedAndRefusesStrangers(t *testing.T) {
	r := start(t, echoHub(t), nil)
	c := peerConn(t, "127.0.0.1", r)
	if got := roundTrip(t, c, make([]byte, 1501)); got != nil {
		t.Fatalf("a 1501-byte datagram came back: %d bytes", len(got))
	}
	stranger := peerConn(t, "127.0.0.2", r)
	if got := roundTrip(t, stranger, []byte("garbage from outside the site")); got != nil {
		t.Fatalf("a stranger's datagram came back: %q", got)
	}
	s := r.Stats()
	if p := s.Peers[netip.MustParseAddr("127.0.0.1")]; p.Dropped != 1 || p.Up != 0 {
		t.Errorf("peer stats %+v, want the oversized one dropped", p)
	}
	if s.Refused != 1 {
		t.Errorf("refused %d, want 1", s.Refused)
	}
	if _, ok := s.Peers[netip.MustParseAddr("127.0.0.2")]; ok {
		t.Errorf("a refused stranger has peer stats: %+v", s.Peers)
	}
}

func TestRelayCapsAPeer(t *testing.T) {
	var now atomic.Int64 // nanoseconds past the epoch below
	epoch := time.Unix(1e9, 0)
	r := start(t, echoHub(t), func(c *relay.Config) {
		c.BytesPerMinute = 5000
		c.Now = func() time.Time { return epoch.Add(time.Duration(now.Load())) }
	})
	c := peerConn(t, "127.0.0.1", r)
	p := make([]byte, 1200)
	// 5000 bytes a minute: two round trips (4800 bytes) fit, the third
	// does not.
	for i := range 2 {
		if got := roundTrip(t, c, p); len(got) != 1200 {
			t.Fatalf("round trip %d under the cap: %d bytes back", i, len(got))
		}
	}
	if got := roundTrip(t, c, p); got != nil {
		t.Fatalf("round trip over the cap: %d bytes back", len(got))
	}
	if s := r.Stats().Peers[netip.MustParseAddr("127.0.0.1")]; s.Capped != 1 || s.Dropped != 1 {
		t.Errorf("stats %+v, want one datagram capped", s)
	}
	now.Store(int64(time.Minute)) // the bucket refills
	if got := roundTrip(t, c, p); len(got) != 1200 {
		t.Fatalf("round trip a minute later: %d bytes back", len(got))
	}
}

func TestRelayEndsIdleClients(t *testing.T) {
	var now atomic.Int64
	epoch := time.Unix(1e9, 0)
	var targets atomic.Int64
	hub := echoHub(t)
	r := start(t, hub, func(c *relay.Config) {
		c.IdleTimeout = 40 * time.Millisecond
		c.Now = func() time.Time { return epoch.Add(time.Duration(now.Load())) }
		c.Target = func() (netip.AddrPort, error) { targets.Add(1); return hub, nil }
	})
	c := peerConn(t, "127.0.0.1", r)
	if got := roundTrip(t, c, []byte("one")); string(got) != "one" {
		t.Fatalf("first round trip: %q", got)
	}
	now.Store(int64(time.Second))
	wait.For(t, 5*time.Second, "the idle client ended", func() (bool, string) {
		n := r.Stats().Clients
		return n == 0, fmt.Sprintf("%d clients", n)
	})
	// The next datagram opens another socket toward the hub, asking for
	// its address again.
	if got := roundTrip(t, c, []byte("two")); string(got) != "two" || targets.Load() != 2 {
		t.Fatalf("round trip after idling: %q, %d targets asked, want 2", got, targets.Load())
	}
}
