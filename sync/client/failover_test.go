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
	}
	tests := []struct {
		name      string
		failAfter int
		steps     []step
	}{
		{"direct while it works", 1, []step{
			{[]netip.AddrPort{b, c}, direct, Ended},
			{[]netip.AddrPort{b, c}, direct, Ended},
		}},
		{"no relays: direct however often it fails", 1, []step{
			{nil, direct, Failed},
			{nil, direct, Failed},
			{nil, direct, Failed},
		}},
		{"one failure moves to the first relay, which sticks", 1, []step{
			{[]netip.AddrPort{b, c}, direct, Failed},
			{[]netip.AddrPort{b, c}, Route{b}, Ended},
			{[]netip.AddrPort{c, b}, Route{b}, Ended},
		}},
		{"failAfter 2 waits for a second failure", 2, []step{
			{[]netip.AddrPort{b}, direct, Failed},
			{[]netip.AddrPort{b}, direct, Failed},
			{[]netip.AddrPort{b}, Route{b}, Ended},
		}},
		{"a success in between starts the count over", 2, []step{
			{[]netip.AddrPort{b}, direct, Failed},
			{[]netip.AddrPort{b}, direct, Ended},
			{[]netip.AddrPort{b}, direct, Failed},
			{[]netip.AddrPort{b}, direct, Failed},
			{[]netip.AddrPort{b}, Route{b}, Ended},
		}},
		{"each relay once, then direct once, then the relays again", 1, []step{
			{[]netip.AddrPort{b, c}, direct, Failed},
			{[]netip.AddrPort{b, c}, Route{b}, Failed},
			{[]netip.AddrPort{b, c}, Route{c}, Failed},
			{[]netip.AddrPort{b, c}, direct, Failed},
			{[]netip.AddrPort{b, c}, Route{b}, Failed},
		}},
		{"a relay that dies moves to the next", 1, []step{
			{[]netip.AddrPort{b, c}, direct, Failed},
			{[]netip.AddrPort{b, c}, Route{b}, Ended},
			{[]netip.AddrPort{b, c}, Route{b}, Failed},
			{[]netip.AddrPort{b, c}, Route{c}, Ended},
		}},
		{"a sticky relay no longer offered is left", 1, []step{
			{[]netip.AddrPort{b, c}, direct, Failed},
			{[]netip.AddrPort{b, c}, Route{b}, Ended},
			{[]netip.AddrPort{c}, Route{c}, Ended},
		}},
		{"the direct path back moves the node back", 1, []step{
			{[]netip.AddrPort{b}, direct, Failed},
			{[]netip.AddrPort{b}, Route{b}, DirectBack},
			{[]netip.AddrPort{b}, direct, Ended},
			{[]netip.AddrPort{b}, direct, Ended},
		}},
		{"relays gone: direct", 1, []step{
			{[]netip.AddrPort{b}, direct, Failed},
			{nil, direct, Failed},
			{[]netip.AddrPort{b}, Route{b}, Ended},
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
				f.Done(got, s.then)
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
		{true, errDirectBack, DirectBack},
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
	rc := &relayedConn{uc: own, relay: relay.LocalAddr().(*net.UDPAddr).AddrPort(), hub: hub}

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
