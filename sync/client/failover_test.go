package client

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"testing"
	"time"
)

// TestFailover replays attempts and their outcomes, checking the route
// each attempt takes.
func TestFailover(t *testing.T) {
	b := netip.MustParseAddrPort("10.0.0.2:7947")
	c := netip.MustParseAddrPort("10.0.0.3:7947")
	direct := Route{}
	type step struct {
		relays []netip.AddrPort
		want   Route
		then   Outcome
		// The session moved to this route and ended there, if moved.
		endedOn *Route
	}
	onB, onDirect := &Route{b}, &Route{}
	tests := []struct {
		name      string
		failAfter int
		steps     []step
	}{
		{"direct while it works", 1, []step{
			{[]netip.AddrPort{b, c}, direct, Ended, nil},
			{[]netip.AddrPort{b, c}, direct, Ended, nil},
		}},
		{"no relays: direct however often it fails", 1, []step{
			{nil, direct, Failed, nil},
			{nil, direct, Failed, nil},
			{nil, direct, Failed, nil},
		}},
		{"one failure moves to the first relay, which sticks", 1, []step{
			{[]netip.AddrPort{b, c}, direct, Failed, nil},
			{[]netip.AddrPort{b, c}, Route{b}, Ended, nil},
			{[]netip.AddrPort{c, b}, Route{b}, Ended, nil},
		}},
		{"failAfter 2 waits for a second failure", 2, []step{
			{[]netip.AddrPort{b}, direct, Failed, nil},
			{[]netip.AddrPort{b}, direct, Failed, nil},
			{[]netip.AddrPort{b}, Route{b}, Ended, nil},
		}},
		{"a success in between starts the count over", 2, []step{
			{[]netip.AddrPort{b}, direct, Failed, nil},
			{[]netip.AddrPort{b}, direct, Ended, nil},
			{[]netip.AddrPort{b}, direct, Failed, nil},
			{[]netip.AddrPort{b}, direct, Failed, nil},
			{[]netip.AddrPort{b}, Route{b}, Ended, nil},
		}},
		{"each relay once, then direct once, then the relays again", 1, []step{
			{[]netip.AddrPort{b, c}, direct, Failed, nil},
			{[]netip.AddrPort{b, c}, Route{b}, Failed, nil},
			{[]netip.AddrPort{b, c}, Route{c}, Failed, nil},
			{[]netip.AddrPort{b, c}, direct, Failed, nil},
			{[]netip.AddrPort{b, c}, Route{b}, Failed, nil},
		}},
		{"a relay that dies moves to the next", 1, []step{
			{[]netip.AddrPort{b, c}, direct, Failed, nil},
			{[]netip.AddrPort{b, c}, Route{b}, Ended, nil},
			{[]netip.AddrPort{b, c}, Route{b}, Failed, nil},
			{[]netip.AddrPort{b, c}, Route{c}, Ended, nil},
		}},
		{"a sticky relay no longer offered is left", 1, []step{
			{[]netip.AddrPort{b, c}, direct, Failed, nil},
			{[]netip.AddrPort{b, c}, Route{b}, Ended, nil},
			{[]netip.AddrPort{c}, Route{c}, Ended, nil},
		}},
		{"a session that moved to a relay and ended there goes through the relay next", 1, []step{
			{[]netip.AddrPort{b, c}, direct, Ended, onB},
			{[]netip.AddrPort{b, c}, Route{b}, Ended, nil},
		}},
		{"a session that moved to a relay and died there tries the next relay", 1, []step{
			{[]netip.AddrPort{b, c}, direct, Failed, onB},
			{[]netip.AddrPort{b, c}, Route{c}, Ended, nil},
		}},
		{"a session that moved back direct and ended starts over direct", 1, []step{
			{[]netip.AddrPort{b}, direct, Failed, nil},
			{[]netip.AddrPort{b}, Route{b}, Ended, onDirect},
			{[]netip.AddrPort{b}, direct, Ended, nil},
		}},
		{"relays gone: direct", 1, []step{
			{[]netip.AddrPort{b}, direct, Failed, nil},
			{nil, direct, Failed, nil},
			{[]netip.AddrPort{b}, Route{b}, Ended, nil},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := Failover{FailAfter: tt.failAfter}
			for i, s := range tt.steps {
				got := f.Next(s.relays)
				if got != s.want {
					t.Fatalf("step %d: Next(%v) = %v, want %v", i, s.relays, got, s.want)
				}
				on := got
				if s.endedOn != nil {
					on = *s.endedOn
				}
				f.Done(on, s.then)
			}
		})
	}
}

func TestOutcome(t *testing.T) {
	tests := []struct {
		reached bool
		err     error
		want    Outcome
	}{
		{false, errors.New("dial: timeout"), Failed},
		{true, fmt.Errorf("liveness: %w", ErrLinkDead), Failed},
		{true, errors.New("session: stateless reset"), Ended},
		{true, nil, Ended},
	}
	for _, tt := range tests {
		if got := outcome(tt.reached, tt.err); got != tt.want {
			t.Errorf("outcome(%v, %v) = %v, want %v", tt.reached, tt.err, got, tt.want)
		}
	}
}

// TestRelayedConn: what the relay sends comes as from the hub, what
// anyone else sends is dropped, and everything goes to the relay.
func TestRelayedConn(t *testing.T) {
	listen := func() *net.UDPConn {
		c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	relay, stranger, own := listen(), listen(), listen()
	hub := &net.UDPAddr{IP: net.IPv4(192, 0, 2, 1), Port: 7443}
	rc := &relayedConn{plainConn: plainConn{own}, relay: relay.LocalAddr().(*net.UDPAddr).AddrPort(), hub: hub}

	if _, err := rc.WriteTo([]byte("to the hub"), hub); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64)
	_ = relay.SetReadDeadline(time.Now().Add(5 * time.Second))
	n, from, err := relay.ReadFromUDPAddrPort(buf)
	if err != nil || string(buf[:n]) != "to the hub" || from != own.LocalAddr().(*net.UDPAddr).AddrPort() {
		t.Fatalf("relay got %q from %v, %v; want the datagram from the node's socket", buf[:n], from, err)
	}

	to := own.LocalAddr().(*net.UDPAddr)
	if _, err := stranger.WriteToUDP([]byte("garbage"), to); err != nil {
		t.Fatal(err)
	}
	if _, err := relay.WriteToUDP([]byte("from the hub"), to); err != nil {
		t.Fatal(err)
	}
	_ = rc.SetReadDeadline(time.Now().Add(5 * time.Second))
	n, addr, err := rc.ReadFrom(buf)
	if err != nil || string(buf[:n]) != "from the hub" || addr != net.Addr(hub) {
		t.Fatalf("ReadFrom = %q from %v, %v; want the relay's datagram as the hub's", buf[:n], addr, err)
	}
}
