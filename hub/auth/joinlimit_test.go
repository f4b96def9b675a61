package auth

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"
)

// joinStep is one join attempt at start+at: Begin, then, for a join that
// did not fail (ok), Refund.
type joinStep struct {
	at   time.Duration
	from string // an IP address
	id   string
	ok   bool
	// want is the refusal, "" for none: "source" or "id", and its
	// RetryAfter.
	want  string
	retry time.Duration
}

// fails returns n failed attempts from from with id at at.
func fails(n int, at time.Duration, from, id string) []joinStep {
	out := make([]joinStep, n)
	for i := range out {
		out[i] = joinStep{at: at, from: from, id: id}
	}
	return out
}

func steps(parts ...any) []joinStep {
	var out []joinStep
	for _, p := range parts {
		switch p := p.(type) {
		case joinStep:
			out = append(out, p)
		case []joinStep:
			out = append(out, p...)
		}
	}
	return out
}

func TestJoinLimiter(t *testing.T) {
	cfg := JoinLimitConfig{
		PerSource:  Limit{Burst: 3, Every: 10 * time.Second},
		PerTokenID: Limit{Burst: 5, Every: 4 * time.Second},
		MaxTracked: 100,
	}
	const a, b = "10.0.0.1", "10.0.0.2"
	for _, tc := range []struct {
		name  string
		steps []joinStep
	}{
		{"successes are never limited", steps(
			fails(0, 0, a, ""),
			joinStep{from: a, id: "aaaaaa", ok: true},
			joinStep{from: a, id: "aaaaaa", ok: true},
			joinStep{from: a, id: "aaaaaa", ok: true},
			joinStep{from: a, id: "aaaaaa", ok: true},
			joinStep{from: a, id: "aaaaaa", ok: true},
			joinStep{from: a, id: "aaaaaa", ok: true},
			joinStep{from: a, id: "aaaaaa", ok: true},
		)},
		{"a source's burst, then one per interval", steps(
			fails(3, 0, a, ""),
			joinStep{at: 0, from: a, want: "source", retry: 10 * time.Second},
			joinStep{at: 4 * time.Second, from: a, want: "source", retry: 6 * time.Second},
			// Refused attempts cost nothing: the next is due as before.
			joinStep{at: 10 * time.Second, from: a},
			joinStep{at: 10 * time.Second, from: a, want: "source", retry: 10 * time.Second},
			// A refused source is refused even with a good token, which
			// is not looked at.
			joinStep{at: 10 * time.Second, from: a, id: "aaaaaa", want: "source", retry: 10 * time.Second},
			// After the whole window the burst is back.
			fails(3, 50*time.Second, a, ""),
			joinStep{at: 50 * time.Second, from: a, want: "source", retry: 10 * time.Second},
		)},
		{"one source does not limit another", steps(
			fails(3, 0, a, ""),
			joinStep{from: a, want: "source", retry: 10 * time.Second},
			joinStep{from: b, id: "aaaaaa", ok: true},
			fails(3, 0, b, ""),
		)},
		{"a token id is limited from any source", steps(
			joinStep{from: "10.0.1.1", id: "aaaaaa"},
			joinStep{from: "10.0.1.2", id: "aaaaaa"},
			joinStep{from: "10.0.1.3", id: "aaaaaa"},
			joinStep{from: "10.0.1.4", id: "aaaaaa"},
			joinStep{from: "10.0.1.5", id: "aaaaaa"},
			joinStep{from: "10.0.1.6", id: "aaaaaa", want: "id", retry: 4 * time.Second},
			joinStep{at: time.Second, from: "10.0.1.6", id: "aaaaaa", ok: true, want: "id", retry: 3 * time.Second},
			// Other ids from that source are not.
			joinStep{at: time.Second, from: "10.0.1.6", id: "bbbbbb"},
			joinStep{at: 4 * time.Second, from: "10.0.1.7", id: "aaaaaa", ok: true},
		)},
		{"a refusal names the longer wait", steps(
			fails(3, 0, a, ""),
			joinStep{from: "10.0.1.1", id: "aaaaaa"},
			joinStep{from: "10.0.1.2", id: "aaaaaa"},
			joinStep{from: "10.0.1.3", id: "aaaaaa"},
			joinStep{from: "10.0.1.4", id: "aaaaaa"},
			joinStep{from: "10.0.1.5", id: "aaaaaa"},
			joinStep{from: a, id: "aaaaaa", want: "source", retry: 10 * time.Second},
			joinStep{at: 9 * time.Second, from: "10.0.2.1", id: "aaaaaa"},
			joinStep{at: 9 * time.Second, from: "10.0.2.2", id: "aaaaaa"},
			joinStep{at: 9 * time.Second, from: a, id: "aaaaaa", want: "id", retry: 3 * time.Second},
		)},
		{"refunds give back what was taken", steps(
			joinStep{from: a, id: "aaaaaa", ok: true},
			fails(3, 0, a, ""),
			joinStep{from: a, want: "source", retry: 10 * time.Second},
		)},
		{"an IPv6 source is its /64", steps(
			joinStep{from: "2001:db8::1"},
			joinStep{from: "2001:db8::2"},
			joinStep{from: "2001:db8::ffff:1"},
			joinStep{from: "2001:db8::3", want: "source", retry: 10 * time.Second},
			joinStep{from: "2001:db8:0:1::1"},
		)},
		{"an IPv4-mapped address is its IPv4 address", steps(
			fails(3, 0, "::ffff:10.0.0.1", ""),
			joinStep{from: a, want: "source", retry: 10 * time.Second},
		)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, err := NewJoinLimiter(cfg)
			if err != nil {
				t.Fatal(err)
			}
			start := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
			for i, s := range tc.steps {
				now := start.Add(s.at)
				from := netip.MustParseAddr(s.from)
				err := l.Begin(from, s.id, now)
				if err == nil && s.ok {
					l.Refund(from, s.id, now)
				}
				var got string
				var tm *TooManyFailedJoinsError
				switch {
				case err == nil:
				case !errors.As(err, &tm) || !errors.Is(err, ErrTooManyFailedJoins):
					t.Fatalf("step %d: Begin(%s, %q) = %v, want a *TooManyFailedJoinsError", i, s.from, s.id, err)
				case tm.TokenID != "":
					got = fmt.Sprintf("id %v", tm.RetryAfter)
				default:
					got = fmt.Sprintf("source %v", tm.RetryAfter)
				}
				want := ""
				if s.want != "" {
					want = fmt.Sprintf("%s %v", s.want, s.retry)
				}
				if got != want {
					t.Fatalf("step %d: Begin(%s, %q) at +%v = %q (%v), want %q", i, s.from, s.id, s.at, got, err, want)
				}
			}
		})
	}
}

// TestJoinLimiterBounded: the limiter remembers at most MaxTracked sources
// and ids, forgetting the least recently heard of first, and forgets those
// whose budget is full again.
func TestJoinLimiterBounded(t *testing.T) {
	l, err := NewJoinLimiter(JoinLimitConfig{
		PerSource:  Limit{Burst: 1, Every: time.Minute},
		PerTokenID: Limit{Burst: 1, Every: time.Minute},
		MaxTracked: 3,
	})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	addr := func(i int) netip.Addr { return netip.AddrFrom4([4]byte{10, 0, 0, byte(i)}) }
	id := func(i int) string { return fmt.Sprintf("id%04d", i) }
	for i := range 3 {
		if err := l.Begin(addr(i), id(i), now); err != nil {
			t.Fatalf("Begin(%v) = %v", addr(i), err)
		}
	}
	// 0 is heard of again: 1 is now the least recent, and goes for 3.
	if err := l.Begin(addr(0), id(0), now); err == nil {
		t.Fatalf("Begin(%v) again = nil, want a refusal", addr(0))
	}
	if err := l.Begin(addr(3), id(3), now); err != nil {
		t.Fatalf("Begin(%v) = %v", addr(3), err)
	}
	if n, m := l.sources.len(), l.ids.len(); n != 3 || m != 3 {
		t.Fatalf("tracking %d sources and %d ids, want 3 of each", n, m)
	}
	for i, forgotten := range []bool{false, true, false, false} {
		if got := l.sources.wait(source(addr(i)), now) == 0; got != forgotten {
			t.Errorf("source %v forgotten: %v, want %v", addr(i), got, forgotten)
		}
		if got := l.ids.wait(id(i), now) == 0; got != forgotten {
			t.Errorf("id %v forgotten: %v, want %v", id(i), got, forgotten)
		}
	}
	// Once their budgets are full again, entries go as others come.
	later := now.Add(time.Minute)
	if err := l.Begin(addr(9), "", later); err != nil {
		t.Fatal(err)
	}
	if n := l.sources.len(); n != 1 {
		t.Errorf("tracking %d sources a minute on, want 1", n)
	}
	// A refund that brings a budget back to full forgets it.
	l.Refund(addr(9), "", later)
	if n := l.sources.len(); n != 0 {
		t.Errorf("tracking %d sources after the last refund, want 0", n)
	}
}

func TestTooManyFailedJoinsError(t *testing.T) {
	for _, tc := range []struct {
		err  *TooManyFailedJoinsError
		want string
	}{
		{&TooManyFailedJoinsError{Source: netip.MustParsePrefix("10.0.0.7/32"), RetryAfter: 7200 * time.Millisecond}, "too many failed joins from 10.0.0.7; retry after 8s"},
		{&TooManyFailedJoinsError{Source: netip.MustParsePrefix("2001:db8::/64"), RetryAfter: 10 * time.Second}, "too many failed joins from 2001:db8::/64; retry after 10s"},
		{&TooManyFailedJoinsError{TokenID: "abcdef", RetryAfter: time.Millisecond}, "too many failed joins with token id abcdef; retry after 1s"},
	} {
		if got := tc.err.Error(); got != tc.want {
			t.Errorf("Error() = %q, want %q", got, tc.want)
		}
	}
}

func TestJoinLimitConfigValidate(t *testing.T) {
	good := DefaultJoinLimitConfig()
	if err := good.Validate(); err != nil {
		t.Fatalf("DefaultJoinLimitConfig().Validate() = %v", err)
	}
	for _, bad := range []func(*JoinLimitConfig){
		func(c *JoinLimitConfig) { c.PerSource.Burst = 0 },
		func(c *JoinLimitConfig) { c.PerTokenID.Every = 0 },
		func(c *JoinLimitConfig) { c.MaxTracked = 0 },
	} {
		c := DefaultJoinLimitConfig()
		bad(&c)
		if err := c.Validate(); err == nil {
			t.Errorf("Validate(%+v) = nil, want an error", c)
		}
		if _, err := NewJoinLimiter(c); err == nil {
			t.Errorf("NewJoinLimiter(%+v) = nil error", c)
		}
	}
}

// TestPublicTokenError: a joining node cannot tell a token id that does
// not exist from one whose secret it got wrong.
func TestPublicTokenError(t *testing.T) {
	now := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	secret := NewBootstrapTokenSecret("abcdef", "0123456789abcdef", "", time.Hour, now)
	_, notFound := ValidateBootstrapToken(nil, "abcdef.0123456789abcdef", now)
	_, wrong := ValidateBootstrapToken(secret, "abcdef.0123456789abcdee", now)
	_, expired := ValidateBootstrapToken(secret, "abcdef.0123456789abcdef", now.Add(2*time.Hour))
	_, _, malformed := ParseToken("abcdef")
	if !errors.Is(notFound, ErrTokenNotFound) || !errors.Is(wrong, ErrTokenWrongSecret) {
		t.Fatalf("test tokens refused with %v and %v", notFound, wrong)
	}
	a, b := PublicTokenError(notFound), PublicTokenError(wrong)
	if a.Error() != b.Error() || !errors.Is(a, ErrTokenRefused) {
		t.Errorf("PublicTokenError(not found) = %q, PublicTokenError(wrong secret) = %q; want ErrTokenRefused for both", a, b)
	}
	if !strings.Contains(a.Error(), "outpost token create") {
		t.Errorf("PublicTokenError = %q does not say what to do", a)
	}
	for _, err := range []error{expired, malformed} {
		if got := PublicTokenError(err); got != err {
			t.Errorf("PublicTokenError(%v) = %v, want it as it is", err, got)
		}
	}
}
