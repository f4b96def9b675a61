package dns

import (
	"net/netip"
	"strconv"
	"strings"
)

const (
	v4Reverse = "in-addr.arpa."
	v6Reverse = "ip6.arpa."
)

// parseReverse returns the prefix a reverse name (lowercase, fully
// qualified) stands for: a.b.in-addr.arpa. is b.a.0.0/16, a full name a
// host prefix. It reports false for a name outside in-addr.arpa and
// ip6.arpa or one whose labels are not octets or nibbles.
func parseReverse(name string) (netip.Prefix, bool) {
	if rest, ok := strings.CutSuffix(name, v4Reverse); ok {
		var b [4]byte
		labels := splitLabels(rest)
		if len(labels) > 4 {
			return netip.Prefix{}, false
		}
		for i, l := range labels {
			if len(l) == 0 || len(l) > 3 || (len(l) > 1 && l[0] == '0') {
				return netip.Prefix{}, false
			}
			v, err := strconv.ParseUint(l, 10, 8)
			if err != nil {
				return netip.Prefix{}, false
			}
			b[len(labels)-1-i] = byte(v)
		}
		return netip.PrefixFrom(netip.AddrFrom4(b), 8*len(labels)), true
	}
	if rest, ok := strings.CutSuffix(name, v6Reverse); ok {
		var b [16]byte
		labels := splitLabels(rest)
		if len(labels) > 32 {
			return netip.Prefix{}, false
		}
		for i, l := range labels {
			if len(l) != 1 {
				return netip.Prefix{}, false
			}
			v, err := strconv.ParseUint(l, 16, 4)
			if err != nil {
				return netip.Prefix{}, false
			}
			n := len(labels) - 1 - i // nibble index from the left
			if n%2 == 0 {
				b[n/2] |= byte(v) << 4
			} else {
				b[n/2] |= byte(v)
			}
		}
		return netip.PrefixFrom(netip.AddrFrom16(b), 4*len(labels)), true
	}
	return netip.Prefix{}, false
}

// splitLabels splits the labels of a name that had its suffix cut (so it
// ends in a dot, or is empty).
func splitLabels(s string) []string {
	s = strings.TrimSuffix(s, ".")
	if s == "" {
		return nil
	}
	return strings.Split(s, ".")
}

// reverseName returns the reverse name of p's first p.Bits() bits, which
// must be a multiple of 8 (IPv4) or 4 (IPv6).
func reverseName(p netip.Prefix) string {
	var b strings.Builder
	a := p.Addr().AsSlice()
	if p.Addr().Is4() {
		for i := p.Bits()/8 - 1; i >= 0; i-- {
			b.WriteString(strconv.Itoa(int(a[i])))
			b.WriteByte('.')
		}
		b.WriteString(v4Reverse)
		return b.String()
	}
	const hex = "0123456789abcdef"
	for n := p.Bits()/4 - 1; n >= 0; n-- {
		v := a[n/2]
		if n%2 == 0 {
			v >>= 4
		}
		b.WriteByte(hex[v&0xf])
		b.WriteByte('.')
	}
	b.WriteString(v6Reverse)
	return b.String()
}

// reverseZone returns the apex of the reverse zone of cidr that holds p,
// when p is inside cidr: the name of cidr's bits rounded up to a whole
// label, so 10.42.0.0/16 is 42.10.in-addr.arpa. and a /12 is split into
// sixteen /16 zones.
func reverseZone(cidrs []netip.Prefix, p netip.Prefix) (string, bool) {
	for _, c := range cidrs {
		if c.Addr().Is4() != p.Addr().Is4() || p.Bits() < c.Bits() || !c.Contains(p.Addr()) {
			continue
		}
		step := 8
		if !c.Addr().Is4() {
			step = 4
		}
		bits := (c.Bits() + step - 1) / step * step
		if p.Bits() < bits {
			// A name between the CIDR's bits and the next label
			// boundary: only part of it is the CIDR's.
			continue
		}
		apex, _ := p.Addr().Prefix(bits)
		return reverseName(apex), true
	}
	return "", false
}
