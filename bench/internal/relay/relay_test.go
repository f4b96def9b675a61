package relay

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/outpost-mesh/outpost/internal/wait"
)

func TestMain(m *testing.M) {
	code := m.Run()
	if code == 0 {
		// Close must have ended every goroutine a relay started.
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "leaked goroutines: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

// udpEcho is a stand-in hub: it answers every datagram with its payload
// reversed in size: n bytes in, n/2 bytes out.
func udpEcho(t *testing.T, addr string) net.PacketConn {
	t.Helper()
	pc, err := net.ListenPacket("udp", addr)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 64<<10)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			pc.WriteTo(buf[:n/2], from)
		}
	}()
	t.Cleanup(func() { pc.Close(); <-done })
	return pc
}

// roundTrip sends n bytes through c and waits for the answer.
func roundTrip(t *testing.T, c *net.UDPConn, n int) (int, error) {
	t.Helper()
	if _, err := c.Write(make([]byte, n)); err != nil {
		return 0, err
	}
	c.SetReadDeadline(time.Now().Add(2 * time.Second))
	buf := make([]byte, 64<<10)
	return c.Read(buf)
}

// dial returns a client socket toward r.
func dial(t *testing.T, r *Relay) *net.UDPConn {
	t.Helper()
	c, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(netip.MustParseAddrPort(r.Addr())))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func TestRelay(t *testing.T) {
	hub := udpEcho(t, "127.0.0.1:0")
	target := hub.LocalAddr().(*net.UDPAddr)
	r, err := Listen(target)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	c := dial(t, r)

	if got, err := roundTrip(t, c, 40); err != nil || got != 20 {
		t.Fatalf("round trip of 40 bytes = %d, %v; want 20 back", got, err)
	}
	if got, err := roundTrip(t, c, 1000); err != nil || got != 500 {
		t.Fatalf("round trip of 1000 bytes = %d, %v; want 500 back", got, err)
	}
	want := Counts{Up: 1040, Down: 520, Packets: 4, Small: 2, SmallBytes: 60}
	if got := r.Counts(); got != want {
		t.Errorf("Counts() = %+v, want %+v", got, want)
	}
	if w := want.Wire(); w != 1040+520+4*IPUDPHeaders {
		t.Errorf("Wire() = %d", w)
	}
	if s := want.SmallWire(); s != 60+2*IPUDPHeaders {
		t.Errorf("SmallWire() = %d", s)
	}
	if d := want.Add(want).Sub(want); d != want {
		t.Errorf("Add then Sub = %+v, want %+v", d, want)
	}

	// The hub goes away and comes back on the same port, as a restarted
	// hub does: the relay keeps forwarding on the same client socket. On
	// loopback the refusal is queued on the relay's socket toward the hub
	// by the time its write returns.
	p := onlyPeer(t, r)
	hub.Close()
	c.Write(make([]byte, 10))
	wait.For(t, 2*time.Second, "the datagram sent while the hub was down forwarded", func() (bool, string) {
		return r.Counts().Up == 1050, fmt.Sprintf("%+v", r.Counts())
	})
	udpEcho(t, target.String())
	if got, err := roundTrip(t, c, 100); err != nil || got != 50 {
		t.Fatalf("round trip after the hub came back = %d, %v; want 50", got, err)
	}
	if onlyPeer(t, r) != p {
		t.Errorf("the relay replaced its socket toward the hub after the refusal, want it kept")
	}

	// Too large for the relay: dropped and counted.
	c.Write(make([]byte, MaxDatagram+1))
	if _, err := roundTrip(t, c, 100); err != nil {
		t.Fatal(err)
	}
	if tr := r.Truncated(); tr != 1 {
		t.Errorf("Truncated() = %d, want 1", tr)
	}
	r.Close()
	r.Close() // twice is fine
}

// onlyPeer returns the relay's one client.
func onlyPeer(t *testing.T, r *Relay) *peer {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.peers) != 1 {
		t.Fatalf("relay has %d clients, want 1", len(r.peers))
	}
	for _, p := range r.peers {
		return p
	}
	return nil
}

// TestArmCut checks that a relay drops everything both ways once its armed
// cut comes, and counts none of it.
func TestArmCut(t *testing.T) {
	hub, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer hub.Close()
	r, err := Listen(hub.LocalAddr().(*net.UDPAddr))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	c := dial(t, r)
	r.ArmCut(10, time.Hour)
	buf := make([]byte, 64)
	c.Write([]byte("ping"))
	hub.SetReadDeadline(time.Now().Add(2 * time.Second))
	n, from, err := hub.ReadFromUDP(buf)
	if err != nil {
		t.Fatalf("hub read: %v", err)
	}
	hub.WriteToUDP(buf[:n], from)
	hub.WriteToUDP([]byte("0123456789"), from)
	c.SetReadDeadline(time.Now().Add(2 * time.Second))
	if _, err := c.Read(buf); err != nil {
		t.Fatalf("no reply through the relay: %v", err)
	}
	// The second reply crosses the armed count: the link is cut then.
	wait.For(t, 2*time.Second, "the armed cut", func() (bool, string) {
		return r.CutDown() != 0, fmt.Sprintf("%+v", r.Counts())
	})
	if d := r.CutDown(); d != 14 {
		t.Errorf("CutDown() = %d, want 14", d)
	}
	c.Write([]byte("lost"))
	hub.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	if _, _, err := hub.ReadFromUDP(buf); err == nil {
		t.Fatal("a datagram crossed a cut link")
	}
	if got, want := r.Counts(), (Counts{Up: 4, Down: 14, Packets: 3, Small: 3, SmallBytes: 18}); got != want {
		t.Fatalf("Counts() = %+v, want %+v", got, want)
	}
}

// TestDisarm checks that a disarmed cut never comes.
func TestDisarm(t *testing.T) {
	hub := udpEcho(t, "127.0.0.1:0")
	r, err := Listen(hub.LocalAddr().(*net.UDPAddr))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	c := dial(t, r)
	r.ArmCut(10, time.Hour)
	r.Disarm()
	for range 3 {
		if got, err := roundTrip(t, c, 100); err != nil || got != 50 {
			t.Fatalf("round trip = %d, %v; want 50", got, err)
		}
	}
	if d := r.CutDown(); d != 0 {
		t.Errorf("CutDown() = %d after Disarm, want 0", d)
	}
}
