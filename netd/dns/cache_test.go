package dns

import (
	"fmt"
	"testing"
	"time"

	miekg "github.com/miekg/dns"
)

func answerMsg(t *testing.T, name string, ttl uint32) *miekg.Msg {
	t.Helper()
	m := new(miekg.Msg)
	m.SetQuestion(name, miekg.TypeA)
	m.Response = true
	rr, err := miekg.NewRR(fmt.Sprintf("%s %d IN A 192.0.2.1", name, ttl))
	if err != nil {
		t.Fatal(err)
	}
	m.Answer = []miekg.RR{rr}
	return m
}

func TestCacheLRUBytes(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	one := answerMsg(t, "a0.example.", 60)
	wire, _ := one.Pack()
	cost := len(wire) + len("a0.example.") + entryOverhead
	c := newCache(8*cost, time.Hour) // room for eight
	key := func(i int) cacheKey {
		return keyOf(miekg.Question{Name: fmt.Sprintf("a%d.example.", i), Qtype: miekg.TypeA, Qclass: miekg.ClassINET})
	}
	for i := range 8 {
		c.put(key(i), answerMsg(t, fmt.Sprintf("a%d.example.", i), 60), time.Minute, now)
	}
	// Touch the first so the second is the least recently used.
	if _, _, _, ok := c.get(key(0), now, StaleTTL); !ok {
		t.Fatal("get(a0) missed")
	}
	c.put(key(8), answerMsg(t, "a8.example.", 60), time.Minute, now)
	if n, b := c.len(); n != 8 || b > 8*cost {
		t.Errorf("len() = %d entries, %d bytes; want 8, at most %d", n, b, 8*cost)
	}
	if _, _, _, ok := c.get(key(1), now, StaleTTL); ok {
		t.Errorf("get(a1) hit, want it evicted as least recently used")
	}
	for _, i := range []int{0, 2, 8} {
		if _, _, _, ok := c.get(key(i), now, StaleTTL); !ok {
			t.Errorf("get(a%d) missed", i)
		}
	}
	// Replacing an entry does not count it twice.
	c.put(key(8), answerMsg(t, "a8.example.", 60), time.Minute, now)
	if n, _ := c.len(); n != 8 {
		t.Errorf("len() after a replace = %d, want 8", n)
	}
}

func TestCacheExpiry(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	c := newCache(1<<20, time.Hour)
	k := keyOf(miekg.Question{Name: "A.Example.", Qtype: miekg.TypeA, Qclass: miekg.ClassINET})
	c.put(k, answerMsg(t, "a.example.", 100), 100*time.Second, now)
	for _, tc := range []struct {
		after time.Duration
		ttl   uint32
		stale bool
		ok    bool
	}{
		{0, 100, false, true},
		{99 * time.Second, 1, false, true},
		{100 * time.Second, StaleTTL, true, true},
		{100*time.Second + time.Hour, StaleTTL, true, true},
		{101*time.Second + time.Hour, 0, false, false},
	} {
		m, stale, _, ok := c.get(keyOf(miekg.Question{Name: "a.example.", Qtype: miekg.TypeA, Qclass: miekg.ClassINET}), now.Add(tc.after), StaleTTL)
		if ok != tc.ok || stale != tc.stale || (ok && m.Answer[0].Header().Ttl != tc.ttl) {
			t.Errorf("get after %v = stale %v ok %v (%v), want TTL %d stale %v ok %v", tc.after, stale, ok, m, tc.ttl, tc.stale, tc.ok)
		}
	}
}

func TestCacheTTL(t *testing.T) {
	rr := func(s string) miekg.RR {
		x, err := miekg.NewRR(s)
		if err != nil {
			t.Fatal(err)
		}
		return x
	}
	soa := rr("example. 300 IN SOA ns.example. h.example. 1 2 3 4 60")
	for _, tc := range []struct {
		name string
		m    *miekg.Msg
		want time.Duration
	}{
		{"smallest answer TTL", &miekg.Msg{Answer: []miekg.RR{rr("a. 30 IN A 192.0.2.1"), rr("a. 20 IN A 192.0.2.2")}}, 20 * time.Second},
		{"capped", &miekg.Msg{Answer: []miekg.RR{rr("a. 86400 IN A 192.0.2.1")}}, time.Hour},
		{"NXDOMAIN: SOA minimum", &miekg.Msg{MsgHdr: miekg.MsgHdr{Rcode: miekg.RcodeNameError}, Ns: []miekg.RR{soa}}, 60 * time.Second},
		{"NODATA: SOA minimum", &miekg.Msg{Ns: []miekg.RR{soa}}, 60 * time.Second},
		{"NXDOMAIN without SOA", &miekg.Msg{MsgHdr: miekg.MsgHdr{Rcode: miekg.RcodeNameError}}, 0},
		{"SERVFAIL", &miekg.Msg{MsgHdr: miekg.MsgHdr{Rcode: miekg.RcodeServerFailure}, Ns: []miekg.RR{soa}}, 0},
		{"truncated", &miekg.Msg{MsgHdr: miekg.MsgHdr{Truncated: true}, Answer: []miekg.RR{rr("a. 30 IN A 192.0.2.1")}}, 0},
	} {
		if got := cacheTTL(tc.m, time.Hour); got != tc.want {
			t.Errorf("cacheTTL(%s) = %v, want %v", tc.name, got, tc.want)
		}
	}
}
