package auth

import (
	"container/list"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"time"
)

// ErrTooManyFailedJoins is returned (as a *TooManyFailedJoinsError) by
// JoinLimiter.Begin when a join is refused, before its token is looked at,
// because its address or its token id failed too often of late.
var ErrTooManyFailedJoins = errors.New("too many failed joins")

// TooManyFailedJoinsError is a join refused for the failures of its source
// or of its token id. It is ErrTooManyFailedJoins.
type TooManyFailedJoinsError struct {
	// Source is the address, or for IPv6 the /64, whose failures refused
	// the join; TokenID is set instead when it was the token id's.
	Source  netip.Prefix
	TokenID string
	// RetryAfter is when one more attempt is allowed.
	RetryAfter time.Duration
}

func (e *TooManyFailedJoinsError) Error() string {
	// Whole seconds, rounded up: "retry after 0s" would be a lie.
	wait := (e.RetryAfter + time.Second - 1).Truncate(time.Second)
	if e.TokenID != "" {
		return fmt.Sprintf("too many failed joins with token id %s; retry after %v", e.TokenID, wait)
	}
	from := e.Source.String()
	if e.Source.IsSingleIP() {
		from = e.Source.Addr().String()
	}
	return fmt.Sprintf("too many failed joins from %s; retry after %v", from, wait)
}

func (e *TooManyFailedJoinsError) Is(target error) bool { return target == ErrTooManyFailedJoins }

// Limit is a budget of failures: Burst at once, then one more Every.
type Limit struct {
	Burst int
	Every time.Duration
}

// JoinLimitConfig configures a JoinLimiter.
type JoinLimitConfig struct {
	// PerSource bounds the failed joins from one address (for IPv6, one
	// /64, what a single host is usually given): 5 at once, then one
	// every 10s. A node that mistyped its token fails once and stops;
	// five leave room for a few at one site behind one NAT address.
	PerSource Limit
	// PerTokenID bounds the failed joins with one token id from any
	// address, so that guessing one token's secret from many addresses
	// is slowed too: 10 at once, then one every 10s.
	PerTokenID Limit
	// MaxTracked bounds the sources and the token ids remembered, each:
	// 10,000 (a few hundred KiB). Past it the one heard of least
	// recently is forgotten.
	MaxTracked int
}

// DefaultJoinLimitConfig returns the defaults above.
func DefaultJoinLimitConfig() JoinLimitConfig {
	return JoinLimitConfig{
		PerSource:  Limit{Burst: 5, Every: 10 * time.Second},
		PerTokenID: Limit{Burst: 10, Every: 10 * time.Second},
		MaxTracked: 10_000,
	}
}

// Validate reports the first invalid field.
func (c *JoinLimitConfig) Validate() error {
	for _, l := range []struct {
		name string
		Limit
	}{{"per-source", c.PerSource}, {"per-token-id", c.PerTokenID}} {
		if l.Burst < 1 || l.Every <= 0 {
			return fmt.Errorf("%s join limit: burst %d and interval %v must be positive", l.name, l.Burst, l.Every)
		}
	}
	if c.MaxTracked < 1 {
		return fmt.Errorf("join limiter tracks at most %d entries; want at least 1", c.MaxTracked)
	}
	return nil
}

// JoinLimiter slows the guessing of bootstrap tokens: it budgets the
// failed joins of each source address and of each token id, and refuses a
// join at once, before its token is looked at, when either budget is
// spent. Joins that succeed cost nothing. It does no I/O and reads no
// clock: the caller passes the time. Its methods are safe for concurrent
// use.
type JoinLimiter struct {
	cfg JoinLimitConfig

	mu      sync.Mutex
	sources *budgets[netip.Prefix]
	ids     *budgets[string]
}

// NewJoinLimiter checks cfg and returns a limiter with every budget full.
func NewJoinLimiter(cfg JoinLimitConfig) (*JoinLimiter, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &JoinLimiter{
		cfg:     cfg,
		sources: newBudgets[netip.Prefix](cfg.PerSource, cfg.MaxTracked),
		ids:     newBudgets[string](cfg.PerTokenID, cfg.MaxTracked),
	}, nil
}

// source is the key of addr's budget: the address, or its /64 for IPv6.
func source(addr netip.Addr) netip.Prefix {
	addr = addr.Unmap()
	bits := addr.BitLen()
	if addr.Is6() {
		bits = 64
	}
	p, _ := addr.Prefix(bits) // the zero Addr gives the zero Prefix, one key for all unknown sources
	return p
}

// Begin takes one failure from the budgets of addr and of id (the token's
// id, or "" for a token without one) for a join attempted at now, before
// the token is checked: a join is counted as failed until the caller says
// otherwise with Refund, so that many attempts at once cannot outrun the
// budget. When either budget is spent it takes nothing and returns a
// *TooManyFailedJoinsError.
func (l *JoinLimiter) Begin(addr netip.Addr, id string, now time.Time) error {
	src := source(addr)
	l.mu.Lock()
	defer l.mu.Unlock()
	srcWait := l.sources.wait(src, now)
	var idWait time.Duration
	if id != "" {
		idWait = l.ids.wait(id, now)
	}
	switch {
	case srcWait > 0 && srcWait >= idWait:
		return &TooManyFailedJoinsError{Source: src, RetryAfter: srcWait}
	case idWait > 0:
		return &TooManyFailedJoinsError{TokenID: id, RetryAfter: idWait}
	}
	l.sources.take(src, now)
	if id != "" {
		l.ids.take(id, now)
	}
	return nil
}

// Refund gives back, at now, what Begin took for a join that did not fail
// authentication: it was admitted, or refused for something other than
// its token.
func (l *JoinLimiter) Refund(addr netip.Addr, id string, now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.sources.give(source(addr), now)
	if id != "" {
		l.ids.give(id, now)
	}
}

// budgets are the failure budgets of keys of one kind, as the generic cell
// rate algorithm keeps them: for each key only the time at which its
// budget is full again. A key with no entry has its budget full; an entry
// whose time has passed is as good as none and is dropped.
type budgets[K comparable] struct {
	limit Limit
	max   int
	byKey map[K]*list.Element
	lru   *list.List // of *budget, the one heard of most recently first
}

type budget[K comparable] struct {
	key  K
	full time.Time // when the budget is whole again
}

func newBudgets[K comparable](limit Limit, max int) *budgets[K] {
	return &budgets[K]{limit: limit, max: max, byKey: map[K]*list.Element{}, lru: list.New()}
}

// window is how far ahead of now a budget's full time may be: the whole
// burst spent.
func (b *budgets[K]) window() time.Duration { return time.Duration(b.limit.Burst) * b.limit.Every }

// wait returns how long until key may fail once more, 0 if it may now.
func (b *budgets[K]) wait(key K, now time.Time) time.Duration {
	e, ok := b.byKey[key]
	if !ok {
		return 0
	}
	b.lru.MoveToFront(e)
	full := e.Value.(*budget[K]).full
	return max(0, full.Add(b.limit.Every).Sub(now)-b.window())
}

// take spends one failure of key's budget, which wait said it had.
func (b *budgets[K]) take(key K, now time.Time) {
	b.expire(now)
	e, ok := b.byKey[key]
	if !ok {
		if len(b.byKey) >= b.max {
			b.remove(b.lru.Back())
		}
		e = b.lru.PushFront(&budget[K]{key: key, full: now})
		b.byKey[key] = e
	}
	b.lru.MoveToFront(e)
	bg := e.Value.(*budget[K])
	if bg.full.Before(now) {
		bg.full = now
	}
	bg.full = bg.full.Add(b.limit.Every)
}

// give returns one failure to key's budget.
func (b *budgets[K]) give(key K, now time.Time) {
	e, ok := b.byKey[key]
	if !ok {
		return // forgotten meanwhile: its budget is full
	}
	bg := e.Value.(*budget[K])
	if bg.full = bg.full.Add(-b.limit.Every); !bg.full.After(now) {
		b.remove(e)
	}
}

// expire drops the entries, from the least recently heard of, whose budget
// is full again; it stops at the first that is not, so that its cost is
// what it drops.
func (b *budgets[K]) expire(now time.Time) {
	for e := b.lru.Back(); e != nil && !e.Value.(*budget[K]).full.After(now); e = b.lru.Back() {
		b.remove(e)
	}
}

func (b *budgets[K]) remove(e *list.Element) {
	delete(b.byKey, e.Value.(*budget[K]).key)
	b.lru.Remove(e)
}

// len returns the number of keys remembered.
func (b *budgets[K]) len() int { return len(b.byKey) }
