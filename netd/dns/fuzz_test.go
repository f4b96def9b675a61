package dns

import (
	"context"
	"encoding/binary"
	"testing"

	miekg "github.com/miekg/dns"
)

// FuzzHandle feeds raw packets to the handler, over the UDP path and the
// TCP path: it must never panic, and whatever it answers must be a
// response to the query's ID that fits the transport's limit.
func FuzzHandle(f *testing.F) {
	for _, q := range []struct {
		name  string
		qtype uint16
		edns  bool
	}{
		{"kubernetes.default.svc.cluster.local.", miekg.TypeA, false},
		{"_postgres._tcp.db.prod.svc.cluster.local.", miekg.TypeSRV, true},
		{"db.prod.svc.cluster.local.", miekg.TypeANY, true},
		{"ext.prod.svc.cluster.local.", miekg.TypeA, false},
		{"1-2-3-4.prod.pod.cluster.local.", miekg.TypeA, false},
		{"1.0.43.10.in-addr.arpa.", miekg.TypePTR, false},
		{"5.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.2.4.0.0.0.0.d.f.ip6.arpa.", miekg.TypePTR, true},
		{"example.com.", miekg.TypeA, true},
	} {
		m := new(miekg.Msg)
		m.SetQuestion(q.name, q.qtype)
		if q.edns {
			m.SetEdns0(4096, true)
		}
		raw, err := m.Pack()
		if err != nil {
			f.Fatal(err)
		}
		f.Add(raw)
	}
	f.Add([]byte{})
	f.Add([]byte{0, 1, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0xc0, 0x0c})
	f.Add(make([]byte, 12))

	s := testServer(f, func(c *Config) { c.MaxUDPSize = 1232 })
	s.SetZone(testZone())
	ctx := context.Background()
	f.Fuzz(func(t *testing.T, raw []byte) {
		for _, udp := range []bool{true, false} {
			out := s.answer(ctx, raw, udp)
			if out == nil {
				continue
			}
			limit := miekg.MaxMsgSize
			if udp {
				limit = s.cfg.MaxUDPSize
			}
			if len(out) > limit {
				t.Fatalf("udp %v: response of %d bytes, over %d", udp, len(out), limit)
			}
			if len(raw) < headerLen {
				t.Fatalf("udp %v: answered a %d-byte packet", udp, len(raw))
			}
			m := new(miekg.Msg)
			if err := m.Unpack(out); err != nil {
				t.Fatalf("udp %v: response does not unpack: %v", udp, err)
			}
			if !m.Response || m.Id != binary.BigEndian.Uint16(raw) {
				t.Fatalf("udp %v: response %v id %d, want a response to %d", udp, m.Response, m.Id, binary.BigEndian.Uint16(raw))
			}
		}
	})
}
