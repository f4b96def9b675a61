package dns

import (
	"context"
	"encoding/binary"
	"net/netip"
	"strings"

	miekg "github.com/miekg/dns"
)

// answer returns the response to the raw query that came over UDP (udp)
// or TCP, or nil when it is to be dropped. It blocks while asking
// upstream. It counts the query when it came over UDP (serveConn counts
// TCP queries as it reads their length).
func (s *Server) answer(ctx context.Context, raw []byte, udp bool) []byte {
	out, j := s.begin(raw, udp)
	if j == nil {
		return out
	}
	return s.finish(ctx, j)
}

// job is a query that waits on an upstream: a name outside the cluster's
// zones, or the target of an ExternalName's CNAME.
type job struct {
	req  *miekg.Msg
	size int // the largest response the client takes
	// q is asked upstream. When prefix is set (a CNAME), the answer
	// follows it; else it is the answer.
	q      miekg.Question
	prefix *miekg.Msg
}

const headerLen = 12

// flagQR is the header's response bit, read before a message unpacks.
const flagQR = 1 << 15

// begin decodes raw and answers it when it can without an upstream: it
// returns the response (nil to drop) or a job for finish.
func (s *Server) begin(raw []byte, udp bool) ([]byte, *job) {
	if udp {
		s.stats.queries.Add(1)
	}
	if len(raw) < headerLen {
		s.stats.dropped.Add(1)
		s.logBad(&s.badLog, "dns query dropped", "reason", "shorter than a header", "length", len(raw))
		return nil, nil
	}
	if udp && len(raw) > s.cfg.MaxUDPSize {
		s.stats.dropped.Add(1)
		s.logBad(&s.badLog, "dns query dropped", "reason", "UDP message over the size limit", "limit", s.cfg.MaxUDPSize)
		return nil, nil
	}
	flags := binary.BigEndian.Uint16(raw[2:])
	if flags&flagQR != 0 {
		// A response: answering it could start a loop between servers.
		s.stats.dropped.Add(1)
		s.logBad(&s.badLog, "dns query dropped", "reason", "a response, not a query")
		return nil, nil
	}
	req := new(miekg.Msg)
	if err := req.Unpack(raw); err != nil {
		s.logBad(&s.badLog, "dns query malformed", "err", err)
		m := &miekg.Msg{MsgHdr: miekg.MsgHdr{
			Id:               binary.BigEndian.Uint16(raw),
			Response:         true,
			Opcode:           int(flags>>11) & 0xf,
			RecursionDesired: flags&(1<<8) != 0,
			Rcode:            miekg.RcodeFormatError,
		}}
		return s.pack(nil, m, miekg.MinMsgSize), nil
	}
	size := miekg.MaxMsgSize
	opt, nopt := findOPT(req)
	if udp {
		size = miekg.MinMsgSize
		if opt != nil {
			size = max(miekg.MinMsgSize, min(int(opt.UDPSize()), s.cfg.MaxUDPSize))
		}
	}
	fail := func(rcode int) ([]byte, *job) {
		m := new(miekg.Msg)
		m.SetRcode(req, rcode)
		m.RecursionAvailable = true
		return s.pack(req, m, size), nil
	}
	// reject answers a query the server does not take.
	reject := func(rcode int, reason string) ([]byte, *job) {
		s.logBad(&s.badLog, "dns query rejected", "reason", reason, "rcode", miekg.RcodeToString[rcode])
		return fail(rcode)
	}
	switch {
	case req.Opcode != miekg.OpcodeQuery:
		return reject(miekg.RcodeNotImplemented, "opcode "+miekg.OpcodeToString[req.Opcode])
	case len(req.Question) != 1:
		return reject(miekg.RcodeFormatError, "not one question")
	case nopt > 1:
		return reject(miekg.RcodeFormatError, "more than one OPT record")
	case opt != nil && opt.Version() != 0:
		return reject(miekg.RcodeBadVers, "EDNS version above 0")
	case udp && opt == nil && len(raw) > miekg.MinMsgSize:
		return reject(miekg.RcodeFormatError, "UDP query over 512 bytes without EDNS0")
	}
	q := req.Question[0]
	switch {
	case q.Qclass != miekg.ClassINET:
		return reject(miekg.RcodeNotImplemented, "class "+miekg.ClassToString[q.Qclass])
	case q.Qtype == miekg.TypeOPT:
		return reject(miekg.RcodeFormatError, "question of type OPT")
	case q.Qtype == miekg.TypeAXFR || q.Qtype == miekg.TypeIXFR:
		return reject(miekg.RcodeRefused, "zone transfer")
	}

	st := s.zone.Load()
	lname := strings.ToLower(q.Name)
	if miekg.IsSubDomain(s.domain, lname) {
		if !st.synced {
			return fail(miekg.RcodeServerFailure)
		}
		m, chase := s.answerZone(st, req, q, lname)
		if chase == "" {
			return s.pack(req, m, size), nil
		}
		return nil, &job{req: req, size: size, q: miekg.Question{Name: chase, Qtype: q.Qtype, Qclass: q.Qclass}, prefix: m}
	}
	if p, ok := parseReverse(lname); ok {
		if apex, ok := reverseZone(s.reverseCIDRs, p); ok {
			if !st.synced {
				return fail(miekg.RcodeServerFailure)
			}
			return s.pack(req, s.answerReverse(st, req, q, lname, p, apex), size), nil
		}
		if p.IsSingleIP() && (q.Qtype == miekg.TypePTR || q.Qtype == miekg.TypeANY) {
			if targets := st.z.ptr(p.Addr()); len(targets) > 0 {
				m := s.reply(req)
				m.Answer = ptrRecords(q.Name, targets, s.ttl)
				return s.pack(req, m, size), nil
			}
		}
	}
	return nil, &job{req: req, size: size, q: q}
}

// finish asks upstream for j and returns the response. With a nil ctx it
// does not ask and answers from the cache alone.
func (s *Server) finish(ctx context.Context, j *job) []byte {
	r := s.resolve(ctx, j.q)
	if j.prefix != nil {
		// The ExternalName's target: the CNAME, and what the target holds.
		m := j.prefix
		if r != nil {
			m.Answer = append(m.Answer, r.Answer...)
			if r.Rcode == miekg.RcodeNameError {
				m.Rcode = miekg.RcodeNameError
			}
			if len(r.Answer) == 0 {
				m.Ns = r.Ns // the target's SOA, for a negative answer
			}
		}
		return s.pack(j.req, m, j.size)
	}
	if r == nil {
		m := new(miekg.Msg)
		m.SetRcode(j.req, miekg.RcodeServerFailure)
		m.RecursionAvailable = true
		return s.pack(j.req, m, j.size)
	}
	r.Id = j.req.Id
	r.Response = true
	r.Opcode = j.req.Opcode
	r.RecursionDesired = j.req.RecursionDesired
	r.CheckingDisabled = j.req.CheckingDisabled
	r.RecursionAvailable = true
	r.Authoritative = false
	r.Truncated = false
	r.Question = j.req.Question
	return s.pack(j.req, r, j.size)
}

// reply returns an authoritative NOERROR response to req.
func (s *Server) reply(req *miekg.Msg) *miekg.Msg {
	m := new(miekg.Msg)
	m.SetReply(req)
	m.Authoritative = true
	m.RecursionAvailable = true
	return m
}

func (s *Server) soa(st *zoneState, apex string) *miekg.SOA {
	return &miekg.SOA{
		Hdr:     miekg.RR_Header{Name: apex, Rrtype: miekg.TypeSOA, Class: miekg.ClassINET, Ttl: s.ttl},
		Ns:      "ns.dns." + s.domain,
		Mbox:    "hostmaster." + s.domain,
		Serial:  st.serial,
		Refresh: 7200,
		Retry:   1800,
		Expire:  86400,
		Minttl:  s.ttl,
	}
}

// negative sets m to NXDOMAIN (or NODATA, exists) with the SOA of apex.
func (s *Server) negative(st *zoneState, m *miekg.Msg, apex string, exists bool) *miekg.Msg {
	if !exists {
		m.Rcode = miekg.RcodeNameError
	}
	m.Answer = nil
	m.Ns = []miekg.RR{s.soa(st, apex)}
	return m
}

// answerZone answers q, a name of the cluster domain (lname lowercase).
// When the name is an ExternalName's CNAME to a name outside the domain,
// it returns that name to chase upstream too.
func (s *Server) answerZone(st *zoneState, req *miekg.Msg, q miekg.Question, lname string) (*miekg.Msg, string) {
	m := s.reply(req)
	nsName := "ns.dns." + s.domain
	switch {
	case lname == s.domain:
		if q.Qtype == miekg.TypeSOA || q.Qtype == miekg.TypeANY {
			m.Answer = []miekg.RR{s.soa(st, q.Name)}
		}
		if s.self.IsValid() && (q.Qtype == miekg.TypeNS || q.Qtype == miekg.TypeANY) {
			m.Answer = append(m.Answer, &miekg.NS{
				Hdr: miekg.RR_Header{Name: q.Name, Rrtype: miekg.TypeNS, Class: miekg.ClassINET, Ttl: s.ttl},
				Ns:  nsName,
			})
			m.Extra = appendAddrs(m.Extra, []netip.Addr{s.self}, nsName, miekg.TypeANY, s.ttl)
		}
		if len(m.Answer) == 0 {
			return s.negative(st, m, s.domain, true), ""
		}
		return m, ""
	case s.self.IsValid() && (lname == nsName || lname == "dns."+s.domain):
		// The server's own name, which the SOA and NS records give, as
		// CoreDNS answers it when it is not a Service's endpoint.
		if lname == nsName {
			m.Answer = appendAddrs(nil, []netip.Addr{s.self}, q.Name, q.Qtype, s.ttl)
		}
		if len(m.Answer) == 0 {
			return s.negative(st, m, s.domain, true), ""
		}
		return m, ""
	}
	owner, qname := q.Name, lname
	// Follow CNAMEs inside the domain, a few at most; ExternalNames
	// pointing at each other cannot loop.
	for range 8 {
		r, ok := st.z.lookup(qname)
		if !ok {
			if len(m.Answer) > 0 { // a CNAME to a name that is not there
				m.Rcode = miekg.RcodeNameError
				m.Ns = []miekg.RR{s.soa(st, s.domain)}
				return m, ""
			}
			return s.negative(st, m, s.domain, false), ""
		}
		ans, extra := st.z.records(r, owner, q.Qtype, s.ttl)
		if len(ans) == 0 {
			if len(m.Answer) > 0 {
				m.Ns = []miekg.RR{s.soa(st, s.domain)}
				return m, ""
			}
			return s.negative(st, m, s.domain, true), ""
		}
		m.Answer = append(m.Answer, ans...)
		m.Extra = append(m.Extra, extra...)
		if r.cname == "" || q.Qtype == miekg.TypeCNAME {
			return m, ""
		}
		if !miekg.IsSubDomain(s.domain, r.cname) {
			return m, r.cname
		}
		owner, qname = r.cname, r.cname
	}
	return m, ""
}

// answerReverse answers q, a name of the reverse zone apex of the
// cluster's CIDRs, naming prefix p.
func (s *Server) answerReverse(st *zoneState, req *miekg.Msg, q miekg.Question, lname string, p netip.Prefix, apex string) *miekg.Msg {
	m := s.reply(req)
	if p.IsSingleIP() {
		targets := st.z.ptr(p.Addr())
		if len(targets) == 0 {
			return s.negative(st, m, apex, false)
		}
		if q.Qtype != miekg.TypePTR && q.Qtype != miekg.TypeANY {
			return s.negative(st, m, apex, true)
		}
		m.Answer = ptrRecords(q.Name, targets, s.ttl)
		return m
	}
	if lname == apex && (q.Qtype == miekg.TypeSOA || q.Qtype == miekg.TypeANY) {
		m.Answer = []miekg.RR{s.soa(st, q.Name)}
		return m
	}
	return s.negative(st, m, apex, lname == apex || st.z.hasPTRWithin(p))
}

func ptrRecords(owner string, targets []string, ttl uint32) []miekg.RR {
	rrs := make([]miekg.RR, len(targets))
	for i, t := range targets {
		rrs[i] = &miekg.PTR{Hdr: miekg.RR_Header{Name: owner, Rrtype: miekg.TypePTR, Class: miekg.ClassINET, Ttl: ttl}, Ptr: t}
	}
	return rrs
}

// findOPT returns the request's OPT record and how many it has.
func findOPT(m *miekg.Msg) (*miekg.OPT, int) {
	var opt *miekg.OPT
	n := 0
	for _, rr := range m.Extra {
		if o, ok := rr.(*miekg.OPT); ok {
			if opt == nil {
				opt = o
			}
			n++
		}
	}
	return opt, n
}

// pack returns m in wire form, cut to size with TC set when it does not
// fit, with an OPT record when req had one (req nil: a request that did
// not decode), and counts it by rcode.
func (s *Server) pack(req, m *miekg.Msg, size int) []byte {
	m.Extra = dropOPT(m.Extra)
	if req != nil {
		if opt, _ := findOPT(req); opt != nil {
			m.SetEdns0(uint16(s.cfg.MaxUDPSize), opt.Do())
		}
	}
	m.Compress = true
	m.Truncate(size)
	if m.Truncated {
		s.stats.truncated.Add(1)
	}
	out, err := m.Pack()
	if err != nil {
		// Records from an upstream that do not pack again: give the
		// client SERVFAIL rather than nothing.
		s.logBad(&s.ioLog, "dns pack response", "err", err)
		f := &miekg.Msg{MsgHdr: m.MsgHdr, Question: m.Question}
		f.Rcode = miekg.RcodeServerFailure
		f.Truncated = false
		if out, err = f.Pack(); err != nil {
			return nil
		}
		m = f
	}
	s.stats.countRcode(m.Rcode)
	return out
}
