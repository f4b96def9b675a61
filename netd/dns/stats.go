package dns

import (
	"sync/atomic"

	miekg "github.com/miekg/dns"
)

// Stats counts what a Server did since New. Counters only grow; the
// cache's size is a gauge.
type Stats struct {
	// Queries is every message received, decodable or not.
	Queries uint64
	// Dropped is the messages not answered: shorter than a header, over
	// the size limits, or responses rather than queries.
	Dropped uint64
	// The responses by rcode; OtherRcode counts any other.
	NoError, FormErr, ServFail, NXDomain, NotImp, Refused, BadVers, OtherRcode uint64
	// Truncated is the responses cut to fit the client's UDP buffer.
	Truncated uint64
	// CacheHits and CacheMisses count the questions for upstream names
	// answered fresh from the cache, or not.
	CacheHits, CacheMisses uint64
	// StaleServed counts the stale answers given as every upstream failed,
	// or had failed less than 30 s before, or without asking when
	// overloaded.
	StaleServed uint64
	// Forwarded counts the questions an upstream answered, ForwardErrors
	// those no upstream answered; queries asking a question already on
	// its way upstream wait for that answer and are not counted again.
	Forwarded, ForwardErrors uint64
	// Overloaded counts the UDP queries answered from the cache alone as
	// MaxForwards were waiting on upstreams already.
	Overloaded uint64
	// TCPRejected counts the connections closed at once as MaxTCPConns
	// were open.
	TCPRejected uint64
	// CacheEntries and CacheBytes are what the cache holds now, stale
	// answers included; CacheBytes counts toward Config.CacheBytes.
	CacheEntries, CacheBytes int
}

type counters struct {
	queries, dropped                                                      atomic.Uint64
	noError, formErr, servFail, nxDomain, notImp, refused, badVers, other atomic.Uint64
	truncated, cacheHits, cacheMisses, staleServed                        atomic.Uint64
	forwarded, forwardErrors, overloaded, tcpRejected                     atomic.Uint64
}

func (c *counters) countRcode(rcode int) {
	switch rcode {
	case miekg.RcodeSuccess:
		c.noError.Add(1)
	case miekg.RcodeFormatError:
		c.formErr.Add(1)
	case miekg.RcodeServerFailure:
		c.servFail.Add(1)
	case miekg.RcodeNameError:
		c.nxDomain.Add(1)
	case miekg.RcodeNotImplemented:
		c.notImp.Add(1)
	case miekg.RcodeRefused:
		c.refused.Add(1)
	case miekg.RcodeBadVers:
		c.badVers.Add(1)
	default:
		c.other.Add(1)
	}
}

// Stats returns the server's counters. Each is read atomically; together
// they are not one snapshot.
func (s *Server) Stats() Stats {
	c := &s.stats
	entries, bytes := s.cache.len()
	return Stats{
		CacheEntries:  entries,
		CacheBytes:    bytes,
		Queries:       c.queries.Load(),
		Dropped:       c.dropped.Load(),
		NoError:       c.noError.Load(),
		FormErr:       c.formErr.Load(),
		ServFail:      c.servFail.Load(),
		NXDomain:      c.nxDomain.Load(),
		NotImp:        c.notImp.Load(),
		Refused:       c.refused.Load(),
		BadVers:       c.badVers.Load(),
		OtherRcode:    c.other.Load(),
		Truncated:     c.truncated.Load(),
		CacheHits:     c.cacheHits.Load(),
		CacheMisses:   c.cacheMisses.Load(),
		StaleServed:   c.staleServed.Load(),
		Forwarded:     c.forwarded.Load(),
		ForwardErrors: c.forwardErrors.Load(),
		Overloaded:    c.overloaded.Load(),
		TCPRejected:   c.tcpRejected.Load(),
	}
}
