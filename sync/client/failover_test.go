package client

import (
	"errors"
	"fmt"
	"net/netip"
	"testing"
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
