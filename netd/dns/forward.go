package dns

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	miekg "github.com/miekg/dns"
)

// ErrNoUpstream is returned by a forward when there is no upstream to ask.
var ErrNoUpstream = errors.New("no upstream")

// upstreamUDPSize is the EDNS0 buffer size offered to upstreams, the DNS
// flag day 2020 value that avoids IP fragmentation.
const upstreamUDPSize = 1232

// forwarder asks the node's upstream resolvers. It is safe for
// concurrent use.
type forwarder struct {
	upstreams []string
	timeout   time.Duration // of one exchange with one upstream
	udp, tcp  *miekg.Client
	// first is the index of the upstream to ask first: the last one that
	// answered, so a dead first upstream costs one timeout, not one per
	// query.
	first atomic.Uint32
}

func newForwarder(upstreams []string, timeout time.Duration) *forwarder {
	return &forwarder{
		upstreams: upstreams,
		timeout:   timeout,
		udp:       &miekg.Client{Net: "udp", Timeout: timeout, UDPSize: upstreamUDPSize},
		tcp:       &miekg.Client{Net: "tcp", Timeout: timeout},
	}
}

// exchange asks the upstreams for q, one after the other, and returns the
// first answer that is not a failure (SERVFAIL, REFUSED, NOTIMP, FORMERR).
// A truncated UDP answer is asked again over TCP. The answer has no OPT
// record; the caller owns it.
func (f *forwarder) exchange(ctx context.Context, q miekg.Question) (*miekg.Msg, error) {
	if len(f.upstreams) == 0 {
		return nil, ErrNoUpstream
	}
	first := int(f.first.Load()) % len(f.upstreams)
	var errs []error
	for i := range f.upstreams {
		if ctx.Err() != nil {
			errs = append(errs, ctx.Err())
			break
		}
		idx := (first + i) % len(f.upstreams)
		up := f.upstreams[idx]
		r, err := f.exchangeOne(ctx, q, up)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", up, err))
			continue
		}
		f.first.Store(uint32(idx))
		return r, nil
	}
	return nil, fmt.Errorf("forward %s %s: %w", q.Name, miekg.TypeToString[q.Qtype], errors.Join(errs...))
}

func (f *forwarder) exchangeOne(ctx context.Context, q miekg.Question, upstream string) (*miekg.Msg, error) {
	req := new(miekg.Msg)
	req.Id = miekg.Id()
	req.RecursionDesired = true
	req.Question = []miekg.Question{q}
	req.SetEdns0(upstreamUDPSize, false)

	r, err := exchangeCtx(ctx, f.udp, req, upstream, f.timeout)
	if err == nil && r.Truncated {
		r, err = exchangeCtx(ctx, f.tcp, req, upstream, f.timeout)
	}
	if err != nil {
		return nil, err
	}
	if len(r.Question) != 1 || !strings.EqualFold(r.Question[0].Name, q.Name) ||
		r.Question[0].Qtype != q.Qtype || r.Question[0].Qclass != q.Qclass {
		return nil, errors.New("answer to another question")
	}
	switch r.Rcode {
	case miekg.RcodeServerFailure, miekg.RcodeRefused, miekg.RcodeNotImplemented, miekg.RcodeFormatError:
		return nil, fmt.Errorf("rcode %s", miekg.RcodeToString[r.Rcode])
	}
	r.Extra = dropOPT(r.Extra)
	return r, nil
}

// dropOPT returns rrs without OPT records, in place.
func dropOPT(rrs []miekg.RR) []miekg.RR {
	out := rrs[:0]
	for _, rr := range rrs {
		if rr.Header().Rrtype != miekg.TypeOPT {
			out = append(out, rr)
		}
	}
	return out
}

// exchangeCtx is one exchange of c with upstream, within timeout, cut
// short when ctx ends: miekg's client only takes the context's deadline.
func exchangeCtx(ctx context.Context, c *miekg.Client, req *miekg.Msg, upstream string, timeout time.Duration) (*miekg.Msg, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	co, err := c.DialContext(ctx, upstream)
	if err != nil {
		return nil, err
	}
	defer co.Close()
	cut := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		co.SetDeadline(time.Now())
		close(cut)
	})
	defer func() {
		if !stop() {
			<-cut // so that no goroutine outlives the exchange
		}
	}()
	r, _, err := c.ExchangeWithConnContext(ctx, req, co)
	if err != nil && ctx.Err() != nil {
		err = fmt.Errorf("%w (%w)", ctx.Err(), err)
	}
	return r, err
}

// resolve returns the answer to q from the cache or upstream, a stale
// answer when every upstream fails (or failed less than failureRecheck
// ago), or nil. The caller owns the answer.
// With a nil ctx it does not ask upstream.
func (s *Server) resolve(ctx context.Context, q miekg.Question) *miekg.Msg {
	k := keyOf(q)
	cached, stale, recheck, ok := s.cache.get(k, s.now(), StaleTTL)
	if ok && !stale {
		s.stats.cacheHits.Add(1)
		return cached
	}
	if ok && recheck {
		s.stats.staleServed.Add(1)
		return cached
	}
	s.stats.cacheMisses.Add(1)
	if ctx != nil {
		r, err := s.forwardShared(ctx, k, q)
		if err == nil {
			return r
		}
		if ok && ctx.Err() == nil {
			s.cache.failed(k, s.now())
		}
	}
	if ok {
		s.stats.staleServed.Add(1)
		return cached
	}
	return nil
}

// flight is one question on its way upstream, which the queries asking
// the same question meanwhile wait for instead of asking again.
type flight struct {
	done chan struct{}
	r    *miekg.Msg // read-only once done is closed
	err  error
}

// forwardShared asks upstream for q, or waits for the same question
// already asked, and caches the answer. The caller owns the answer.
func (s *Server) forwardShared(ctx context.Context, k cacheKey, q miekg.Question) (*miekg.Msg, error) {
	s.flightMu.Lock()
	if f, ok := s.flights[k]; ok {
		s.flightMu.Unlock()
		select {
		case <-f.done:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		if f.err != nil {
			return nil, f.err
		}
		return f.r.Copy(), nil
	}
	f := &flight{done: make(chan struct{})}
	s.flights[k] = f
	s.flightMu.Unlock()

	r, err := s.fwd.exchange(ctx, q)
	if err == nil {
		s.stats.forwarded.Add(1)
		s.cache.put(k, r, cacheTTL(r, s.cfg.MaxCacheTTL), s.now())
		f.r = r.Copy()
	} else {
		s.stats.forwardErrors.Add(1)
		s.logBad(&s.ioLog, "dns forward failed", "err", err)
	}
	f.err = err
	s.flightMu.Lock()
	delete(s.flights, k)
	s.flightMu.Unlock()
	close(f.done)
	return r, err
}
