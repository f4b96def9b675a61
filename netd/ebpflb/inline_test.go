package ebpflb

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"

	"github.com/outpost-mesh/outpost/netd/internal/bpftest"
	"github.com/outpost-mesh/outpost/netd/services"
)

// loopbacks returns n backend addresses 127.0.0.10:port and up.
func loopbacks(n int, port uint16) []string {
	var out []string
	for i := range n {
		out = append(out, netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 0, 0, byte(10 + i)}), port).String())
	}
	return out
}

// reachAll dials addr until every one of want has answered, and fails t
// if another answers, the peer name is not addr, or a connect fails.
func reachAll(t *testing.T, addr string, want []string) {
	t.Helper()
	seen := map[string]bool{}
	for i := 0; len(seen) < len(want); i++ {
		if i == 400 {
			t.Fatalf("%s: after %d connects reached %d of %d backends: %v", addr, i, len(seen), len(want), seen)
		}
		name, c, err := dial(addr)
		if err != nil {
			t.Fatalf("connect to %s: %v", addr, err)
		}
		if got := peerName(t, c.(*net.TCPConn)); got.String() != addr {
			t.Errorf("getpeername = %s, want %s", got, addr)
		}
		c.Close()
		if !slices.Contains(want, name) {
			t.Fatalf("%s reached %s, not one of its backends %v", addr, name, want)
		}
		seen[name] = true
	}
}

// TestInlineBoundary: frontends of exactly inlineSlots backends, one
// more, and many reach all their backends and no other; UDP replies from
// backends in the backends map are shown as the frontend; affinity holds
// for a backend beyond the inline ones.
func TestInlineBoundary(t *testing.T) {
	if !inNetns(t) {
		return
	}
	cfg := setup(t)
	all := loopbacks(3*inlineSlots+1, 8080)
	for _, b := range all {
		tcpServer(t, b)
	}
	ubs := loopbacks(inlineSlots+2, 5353)
	for _, b := range ubs {
		udpServer(t, b)
	}
	d := open(t, cfg)
	sets := map[string][]string{
		"10.96.1.1:80": all[:inlineSlots],
		"10.96.1.2:80": all[1 : inlineSlots+2],
		"10.96.1.3:80": all,
	}
	tab := bpftest.Table(frontend("10.96.1.4:53", udp, ubs...))
	for addr, bs := range sets {
		f := frontend(addr, tcp, bs...)
		tab[f.Key] = f
	}
	aff := frontend("10.96.1.5:80", tcp, all[:inlineSlots+2]...)
	aff.Affinity = time.Hour
	tab[aff.Key] = aff
	bpftest.Sync(t, d, tab)
	for addr, bs := range sets {
		reachAll(t, addr, bs)
	}

	pc, err := net.ListenUDP("udp4", &net.UDPAddr{})
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	seen := map[string]bool{}
	for i := 0; len(seen) < len(ubs); i++ {
		if i == 400 {
			t.Fatalf("UDP: after %d datagrams %d of %d backends answered", i, len(seen), len(ubs))
		}
		name, from, err := query(pc, netip.MustParseAddrPort("10.96.1.4:53"))
		if err != nil {
			t.Fatal(err)
		}
		if from.String() != "10.96.1.4:53" {
			t.Fatalf("reply from %s (backend %s), want the ClusterIP", from, name)
		}
		seen[name] = true
	}

	// Affinity: forget it until a connect picks a backend beyond the
	// inline ones, then the client stays there.
	st := d.state[keyOf(aff.Key)]
	var overflow []string
	for _, b := range st.slots[inlineSlots:] {
		overflow = append(overflow, b.addrPort().String())
	}
	for i := 0; ; i++ {
		if i == 400 {
			t.Fatalf("no connect picked one of %v", overflow)
		}
		var k affKey
		var v affVal
		for it := d.maps[mapAffinity].Iterate(); it.Next(&k, &v); {
			if err := d.maps[mapAffinity].Delete(k); err != nil {
				t.Fatal(err)
			}
		}
		name, err := dialName("10.96.1.5:80")
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Contains(overflow, name) {
			continue
		}
		for range 20 {
			if got, err := dialName("10.96.1.5:80"); err != nil || got != name {
				t.Fatalf("with affinity for %s, reached %q, %v", name, got, err)
			}
		}
		break
	}
}

// TestGrowShrinkAcrossInline: while connects run, a frontend's backends
// grow and shrink across inlineSlots and change; no connect fails, and
// none made after a Sync returned reaches a backend that Sync removed.
func TestGrowShrinkAcrossInline(t *testing.T) {
	if !inNetns(t) {
		return
	}
	cfg := setup(t)
	all := loopbacks(3*inlineSlots+2, 8080)
	for _, b := range all {
		tcpServer(t, b)
	}
	d := open(t, cfg)
	k := inlineSlots
	sizes := []int{1, k, k + 1, 3*k + 1, k + 2, k - 1, 2 * k, k + 1, k, 3 * k, 2*k + 1, 1}
	var sets [][]string
	for i := range 300 {
		n := sizes[i%len(sizes)]
		o := (i * 3) % (len(all) - n + 1)
		sets = append(sets, all[o:o+n])
	}
	tab := func(i int) services.Table { return bpftest.Table(frontend("10.96.0.10:80", tcp, sets[i]...)) }
	bpftest.Sync(t, d, tab(0))

	var gen atomic.Int64 // the last Sync that returned
	var stop atomic.Bool
	var ok, failed, stale atomic.Int64
	var firstErr atomic.Value
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			for !stop.Load() {
				g0 := int(gen.Load())
				name, err := dialName("10.96.0.10:80")
				g1 := int(gen.Load())
				if err != nil {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, err)
					continue
				}
				ok.Add(1)
				// Allowed: what the Syncs from g0 on, to one after g1
				// (maybe under way), route to.
				allowed := false
				for g := g0; g <= min(g1+1, len(sets)-1); g++ {
					allowed = allowed || slices.Contains(sets[g], name)
				}
				if !allowed {
					stale.Add(1)
					firstErr.CompareAndSwap(nil, fmt.Errorf("reached %s, removed by Sync %d", name, g0))
				}
			}
		})
	}
	deadline := time.Now().Add(30 * time.Second)
	for i := 1; i < len(sets) && time.Now().Before(deadline); i++ {
		if err := d.Sync(context.Background(), tab(i)); err != nil {
			stop.Store(true)
			wg.Wait()
			t.Fatal(err)
		}
		gen.Store(int64(i))
		// Let some connects see each table.
		for n := ok.Load() + failed.Load(); ok.Load()+failed.Load() < n+2 && time.Now().Before(deadline); {
			time.Sleep(time.Millisecond)
		}
	}
	stop.Store(true)
	wg.Wait()
	if failed.Load() != 0 || stale.Load() != 0 {
		t.Errorf("of %d connects, %d failed and %d reached a removed backend; first: %v", ok.Load()+failed.Load(), failed.Load(), stale.Load(), firstErr.Load())
	}
	if ok.Load() < 300 {
		t.Errorf("only %d connects made", ok.Load())
	}
}

// TestAdoptLegacy: New finds the pins of an agent from before inline
// backends (the services map of the old layout, links running its
// programs): it carries the frontends over before replacing the
// programs in the same links, so connects work before the first Sync,
// removes the old pin, and the first Sync only deletes the backends
// map's slots that are now inline.
func TestAdoptLegacy(t *testing.T) {
	if !inNetns(t) {
		return
	}
	cfg := setup(t)
	all := loopbacks(inlineSlots+2, 8080)
	for _, b := range all {
		tcpServer(t, b)
	}
	tab := bpftest.Table(frontend("10.96.0.10:80", tcp, all[:2]...), frontend("10.96.0.11:80", tcp, all...))

	// The old agent's pins.
	oldLinks := pinOlderAgent(t, cfg, legacyServices, &ebpf.MapSpec{Name: "olb_services", Type: ebpf.Hash, KeySize: 20, ValueSize: 16,
		MaxEntries: services.MaxFrontends, Flags: noPrealloc}, func(old map[string]*ebpf.Map) {
		id := uint32(0)
		for k, f := range tab {
			id++
			want := desired(f)
			if err := old[legacyServices].Put(keyOf(k), legacyVal{ID: id, Count: uint32(len(want))}); err != nil {
				t.Fatal(err)
			}
			for i, b := range want {
				if err := old[mapBackends].Put(slotKey{id, uint32(i)}, b); err != nil {
					t.Fatal(err)
				}
			}
		}
	})

	d := open(t, cfg)
	checkAdopted(t, cfg, d, legacyServices, oldLinks)
	// Routed before any Sync.
	reachAll(t, "10.96.0.10:80", all[:2])
	reachAll(t, "10.96.0.11:80", all)

	bpftest.Sync(t, d, tab)
	if want := 2 + inlineSlots; d.lastOps != want {
		t.Errorf("first Sync after the upgrade made %d map changes, want %d (the slots now inline)", d.lastOps, want)
	}
	var sk slotKey
	var sv beVal
	for it := d.maps[mapBackends].Iterate(); it.Next(&sk, &sv); {
		if sk.Slot < inlineSlots {
			t.Errorf("backends map still holds inline slot %v", sk)
		}
	}
	bpftest.Sync(t, d, tab)
	if d.lastOps != 0 {
		t.Errorf("second Sync made %d map changes, want none", d.lastOps)
	}
	reachAll(t, "10.96.0.11:80", all)
}

// TestAdoptLockless: New finds the pins of an agent from before the
// services entries' lock (the services map of today's layout without
// BTF, links running older programs): it carries the frontends over into
// the map it writes in place, replaces the programs in the same links,
// routes before the first Sync, removes the old pin, and the first Sync
// changes nothing.
func TestAdoptLockless(t *testing.T) {
	if !inNetns(t) {
		return
	}
	cfg := setup(t)
	all := loopbacks(inlineSlots+2, 8080)
	for _, b := range all {
		tcpServer(t, b)
	}
	tab := bpftest.Table(frontend("10.96.0.10:80", tcp, all[:2]...), frontend("10.96.0.11:80", tcp, all...))

	spec := mapSpecs(&cfg)[mapServices].Copy()
	spec.Key, spec.Value = nil, nil
	oldLinks := pinOlderAgent(t, cfg, lockless, spec, func(old map[string]*ebpf.Map) {
		id := uint32(0)
		for k, f := range tab {
			id++
			want := desired(f)
			if err := old[lockless].Put(keyOf(k), svcValOf(id, 0, want)); err != nil {
				t.Fatal(err)
			}
			for i := inlineSlots; i < len(want); i++ {
				if err := old[mapBackends].Put(slotKey{id, uint32(i)}, want[i]); err != nil {
					t.Fatal(err)
				}
			}
		}
	})

	d := open(t, cfg)
	checkAdopted(t, cfg, d, lockless, oldLinks)
	reachAll(t, "10.96.0.10:80", all[:2])
	reachAll(t, "10.96.0.11:80", all)

	bpftest.Sync(t, d, tab)
	if d.lastOps != 0 {
		t.Errorf("first Sync after the upgrade made %d map changes, want none", d.lastOps)
	}
	bpftest.Sync(t, d, bpftest.Table(frontend("10.96.0.11:80", tcp, all[1:]...)))
	reachAll(t, "10.96.0.11:80", all[1:])
}

// pinOlderAgent pins what an older agent leaves under cfg.PinDir: the
// maps of today but for the services map, which is name, made by spec,
// and filled by fill; and links of cfg's cgroup (pinStubLinks), whose ids
// it returns. The maps' handles close when t ends.
func pinOlderAgent(t *testing.T, cfg Config, name string, spec *ebpf.MapSpec, fill func(old map[string]*ebpf.Map)) map[string]link.ID {
	t.Helper()
	if err := os.MkdirAll(cfg.PinDir, 0o700); err != nil {
		t.Fatal(err)
	}
	specs := mapSpecs(&cfg)
	delete(specs, mapServices)
	specs[name] = spec
	old := map[string]*ebpf.Map{}
	for n, spec := range specs {
		m, err := ebpf.NewMap(spec)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { m.Close() })
		if err := m.Pin(filepath.Join(cfg.PinDir, n)); err != nil {
			t.Fatal(err)
		}
		old[n] = m
	}
	fill(old)
	return pinStubLinks(t, cfg)
}

// checkAdopted checks what New made of an older agent's pins: the older
// services map's pin, name, is gone, and the links are the pinned ones.
func checkAdopted(t *testing.T, cfg Config, d *Dataplane, name string, oldLinks map[string]link.ID) {
	t.Helper()
	if _, err := os.Stat(filepath.Join(cfg.PinDir, name)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("older services pin %s after New: %v", name, err)
	}
	links, _ := linkIDs(t, d)
	if !maps_equal(links, oldLinks) {
		t.Errorf("New made new links %v, want the pinned %v", links, oldLinks)
	}
}

// pinStubLinks attaches, on cfg's cgroup, a program that allows every
// connect to each hook and pins the links where New looks for them, as
// an older agent's are; it returns their ids.
func pinStubLinks(t *testing.T, cfg Config) map[string]link.ID {
	t.Helper()
	cg, err := os.Open(cfg.Cgroup)
	if err != nil {
		t.Fatal(err)
	}
	defer cg.Close()
	ids := map[string]link.ID{}
	for _, h := range hooks {
		p, err := ebpf.NewProgram(&ebpf.ProgramSpec{
			Type: ebpf.CGroupSockAddr, AttachType: h.attach, License: "Dual BSD/GPL",
			Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, 1), asm.Return()},
		})
		if err != nil {
			t.Fatal(err)
		}
		l, err := link.AttachRawLink(link.RawLinkOptions{Target: int(cg.Fd()), Program: p, Attach: h.attach})
		p.Close()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		if err := l.Pin(filepath.Join(cfg.PinDir, "link_"+h.name)); err != nil {
			t.Fatal(err)
		}
		info, err := l.Info()
		if err != nil {
			t.Fatal(err)
		}
		ids[h.name] = info.ID
	}
	return ids
}

// TestNewMapsReplacePrograms: links whose programs (of this version)
// read maps that are no longer pinned, as a New that failed part way may
// leave them, get programs that read the maps New pins, so that Sync
// routes.
func TestNewMapsReplacePrograms(t *testing.T) {
	if !inNetns(t) {
		return
	}
	cfg := setup(t)
	for _, b := range backends4 {
		tcpServer(t, b)
	}
	d1, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	_, progs1 := linkIDs(t, d1)
	bpftest.Sync(t, d1, bpftest.Table(frontend("10.96.0.10:80", tcp, backends4[0])))
	for name, m := range d1.maps {
		if err := m.Unpin(); err != nil {
			t.Fatalf("unpin %s: %v", name, err)
		}
	}
	d1.Close()

	d2 := open(t, cfg)
	_, progs2 := linkIDs(t, d2)
	for name, id := range progs2 {
		if id == progs1[name] {
			t.Errorf("hook %s kept program %d, which reads the old maps", name, id)
		}
	}
	bpftest.Sync(t, d2, bpftest.Table(frontend("10.96.0.10:80", tcp, backends4[1])))
	if name, err := dialName("10.96.0.10:80"); err != nil || name != backends4[1] {
		t.Errorf("after Sync on the new maps reached %q, %v; want %s", name, err, backends4[1])
	}
}
