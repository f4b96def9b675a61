package dns

import (
	"context"
	"fmt"
	"net"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	miekg "github.com/miekg/dns"

	"github.com/outpost-mesh/outpost/netd/services"
)

func BenchmarkNewZone10k(b *testing.B) {
	svcs, slices := agentCluster(10_000, 3)
	b.ReportAllocs()
	var z *Zone
	for b.Loop() {
		z = newZone("cluster.local", svcs, slices)
	}
	b.ReportMetric(float64(z.Len()), "names")
}

// BenchmarkRebuildZone10k rebuilds the zone of BenchmarkNewZone10k from
// objects already decoded, as a node does at each change: afresh, and
// sized after the zone it replaces.
func BenchmarkRebuildZone10k(b *testing.B) {
	svcs, slices := agentCluster(10_000, 3)
	cs, ce := services.FromServices(svcs), services.FromSlices(slices)
	for _, like := range []bool{false, true} {
		b.Run(map[bool]string{false: "NewZone", true: "NewZoneLike"}[like], func(b *testing.B) {
			z := NewZone("cluster.local", cs, ce)
			b.ReportAllocs()
			for b.Loop() {
				if like {
					z = NewZoneLike(z, "cluster.local", cs, ce)
				} else {
					z = NewZone("cluster.local", cs, ce)
				}
			}
			b.ReportMetric(float64(z.Len()), "names")
		})
	}
}

func TestNewZoneBig(t *testing.T) {
	svcs, slices := agentCluster(10_000, 3)
	z := newZone("cluster.local", svcs, slices)
	for _, name := range []string{"svc-1.ns-1.svc.cluster.local.", "svc-10.ns-10.svc.cluster.local.", "_http._tcp.svc-10.ns-10.svc.cluster.local."} {
		r, ok := z.lookup(name)
		if ans, _ := z.records(r, name, miekg.TypeANY, 5); !ok || len(ans) == 0 {
			t.Errorf("lookup(%s) = %v %v, want records", name, r, ok)
		}
	}
}

// BenchmarkAnswer is the handler alone: decode, look up, encode.
func BenchmarkAnswer(b *testing.B) {
	s := testServer(b, nil)
	svcs, slices := agentCluster(10_000, 3)
	s.SetZone(newZone("cluster.local", svcs, slices))
	req := new(miekg.Msg)
	req.SetQuestion("svc-1234.ns-34.svc.cluster.local.", miekg.TypeA)
	raw, _ := req.Pack()
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if s.answer(ctx, raw, true) == nil {
			b.Fatal("no answer")
		}
	}
	// The agent keeps the objects the zone is built from (its informers'
	// caches): live here too, they pace the collector as there.
	runtime.KeepAlive(svcs)
	runtime.KeepAlive(slices)
}

// BenchmarkServeUDP measures cluster-name queries a second over UDP on
// loopback, from several clients at once.
func BenchmarkServeUDP(b *testing.B) {
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	s := testServer(b, func(c *Config) { c.PacketConn, c.Listener = pc, ln })
	svcs, slices := agentCluster(10_000, 3)
	s.SetZone(newZone("cluster.local", svcs, slices))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			b.Error(err)
		}
	}()
	addr := pc.LocalAddr().String()
	var next atomic.Int64
	b.ReportAllocs()
	b.SetParallelism(4)
	b.ResetTimer()
	b.RunParallel(func(p *testing.PB) {
		c, err := net.Dial("udp", addr)
		if err != nil {
			b.Error(err)
			return
		}
		defer c.Close()
		co := &miekg.Conn{Conn: c}
		for p.Next() {
			i := next.Add(1) % 10_000
			req := new(miekg.Msg)
			req.SetQuestion(fmt.Sprintf("svc-%d.ns-%d.svc.cluster.local.", i, i%100), miekg.TypeA)
			if err := co.WriteMsg(req); err != nil {
				b.Error(err)
				return
			}
			c.SetReadDeadline(time.Now().Add(5 * time.Second))
			m, err := co.ReadMsg()
			if err != nil {
				b.Error(err)
				return
			}
			if len(m.Answer) == 0 {
				b.Errorf("%s: no answer", req.Question[0].Name)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "queries/s")
}

// BenchmarkLookup is the zone's share of an answer, for the compact zone
// and the map-of-names zone it replaced: find a name, make its records.
func BenchmarkLookup(b *testing.B) {
	svcs, slices := agentCluster(10_000, 3)
	names := []string{
		"svc-1234.ns-34.svc.cluster.local.",
		"10-42-14-210.svc-1234.ns-34.svc.cluster.local.",
		"_http._tcp.svc-1234.ns-34.svc.cluster.local.",
		"nothere.ns-34.svc.cluster.local.",
	}
	b.Run("compact", func(b *testing.B) {
		z := newZone("cluster.local", svcs, slices)
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			n := names[i%len(names)]
			if r, ok := z.lookup(n); ok {
				z.records(r, n, miekg.TypeA, 5)
			}
		}
	})
	b.Run("map", func(b *testing.B) {
		z := newRefZone("cluster.local", svcs, slices)
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			n := names[i%len(names)]
			if r, ok := z.lookup(n); ok {
				z.records(r, n, miekg.TypeA, 5)
			}
		}
	})
}
