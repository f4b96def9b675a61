package dns

import (
	"container/list"
	"strings"
	"sync"
	"time"

	miekg "github.com/miekg/dns"
)

// cacheKey is a question, its name lowercase.
type cacheKey struct {
	name   string
	qtype  uint16
	qclass uint16
}

func keyOf(q miekg.Question) cacheKey {
	return cacheKey{strings.ToLower(q.Name), q.Qtype, q.Qclass}
}

// cacheEntry is an upstream answer kept in wire form, which is compact and
// immutable: each hit unpacks its own copy.
type cacheEntry struct {
	key    cacheKey
	wire   []byte
	stored time.Time
	expiry time.Time // stored plus the answer's smallest TTL
	// failed is when every upstream last failed to refresh the expired
	// entry; zero when none has.
	failed time.Time
}

// failureRecheck is how long after every upstream failed to refresh an
// expired answer that answer is served stale without asking again: RFC
// 8767's failure recheck timer, so that a node whose uplink is down does
// not make each query wait out the upstream timeouts.
const failureRecheck = 30 * time.Second

// entryOverhead is what an entry costs beyond its wire bytes, roughly: the
// map slot, the list element and the entry.
const entryOverhead = 160

// cache is a least-recently-used cache of upstream answers bounded by
// bytes. Expired entries stay until evicted or past maxStale, for serving
// stale. All its methods are safe for concurrent use.
type cache struct {
	maxBytes int
	maxStale time.Duration

	mu    sync.Mutex
	bytes int
	lru   *list.List // of *cacheEntry, most recent first
	m     map[cacheKey]*list.Element
}

func newCache(maxBytes int, maxStale time.Duration) *cache {
	return &cache{maxBytes: maxBytes, maxStale: maxStale, lru: list.New(), m: make(map[cacheKey]*list.Element)}
}

// put stores m as the answer to k for ttl. An answer larger than the
// cache's share for one entry (an eighth) is not stored.
func (c *cache) put(k cacheKey, m *miekg.Msg, ttl time.Duration, now time.Time) {
	if ttl <= 0 || c.maxBytes <= 0 {
		return
	}
	wire, err := m.Pack()
	if err != nil {
		return
	}
	cost := len(wire) + len(k.name) + entryOverhead
	if cost > c.maxBytes/8 {
		return
	}
	e := &cacheEntry{key: k, wire: wire, stored: now, expiry: now.Add(ttl)}
	c.mu.Lock()
	defer c.mu.Unlock()
	if old, ok := c.m[k]; ok {
		c.removeLocked(old)
	}
	c.m[k] = c.lru.PushFront(e)
	c.bytes += cost
	for c.bytes > c.maxBytes {
		c.removeLocked(c.lru.Back())
	}
}

func (c *cache) removeLocked(el *list.Element) {
	e := c.lru.Remove(el).(*cacheEntry)
	delete(c.m, e.key)
	c.bytes -= len(e.wire) + len(e.key.name) + entryOverhead
}

// get returns the answer to k with its TTLs lowered by the time it has
// been cached, or with stale true and every TTL set to staleTTL once it
// has expired (no later than maxStale after); recheck says the upstreams
// failed to refresh it less than failureRecheck ago. The caller owns the
// message.
func (c *cache) get(k cacheKey, now time.Time, staleTTL uint32) (m *miekg.Msg, stale, recheck, ok bool) {
	c.mu.Lock()
	el, ok := c.m[k]
	if !ok {
		c.mu.Unlock()
		return nil, false, false, false
	}
	e := el.Value.(*cacheEntry)
	if now.After(e.expiry.Add(c.maxStale)) {
		c.removeLocked(el)
		c.mu.Unlock()
		return nil, false, false, false
	}
	c.lru.MoveToFront(el)
	recheck = !e.failed.IsZero() && now.Sub(e.failed) < failureRecheck
	c.mu.Unlock()

	m = new(miekg.Msg)
	if err := m.Unpack(e.wire); err != nil {
		return nil, false, false, false
	}
	if !now.Before(e.expiry) {
		setTTLs(m, func(uint32) uint32 { return staleTTL })
		return m, true, recheck, true
	}
	age := uint32(now.Sub(e.stored) / time.Second)
	setTTLs(m, func(t uint32) uint32 {
		if t > age {
			return t - age
		}
		return 0
	})
	return m, false, false, true
}

// failed records that every upstream failed to refresh k's answer.
func (c *cache) failed(k cacheKey, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.m[k]; ok {
		el.Value.(*cacheEntry).failed = now
	}
}

// len returns the number of entries and their cost in bytes.
func (c *cache) len() (int, int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lru.Len(), c.bytes
}

// setTTLs sets the TTL of every record of m but OPT to f of it.
func setTTLs(m *miekg.Msg, f func(uint32) uint32) {
	for _, sec := range [][]miekg.RR{m.Answer, m.Ns, m.Extra} {
		for _, rr := range sec {
			h := rr.Header()
			if h.Rrtype == miekg.TypeOPT {
				continue
			}
			h.Ttl = f(h.Ttl)
		}
	}
}

// cacheTTL returns how long the upstream answer m may be cached, by RFC
// 2308 for negative answers (the SOA's TTL or minimum, whichever is
// smaller; not at all without a SOA), capped at maxTTL. Only NOERROR and
// NXDOMAIN answers that are not truncated are cached.
func cacheTTL(m *miekg.Msg, maxTTL time.Duration) time.Duration {
	if m.Truncated || (m.Rcode != miekg.RcodeSuccess && m.Rcode != miekg.RcodeNameError) {
		return 0
	}
	var ttl uint32
	found := false
	lower := func(t uint32) {
		if !found || t < ttl {
			ttl, found = t, true
		}
	}
	if m.Rcode == miekg.RcodeSuccess && len(m.Answer) > 0 {
		for _, rr := range m.Answer {
			lower(rr.Header().Ttl)
		}
	} else {
		for _, rr := range m.Ns {
			if soa, ok := rr.(*miekg.SOA); ok {
				lower(min(soa.Hdr.Ttl, soa.Minttl))
			}
		}
	}
	if !found {
		return 0
	}
	return min(time.Duration(ttl)*time.Second, maxTTL)
}
