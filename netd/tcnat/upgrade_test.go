package tcnat

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"

	"github.com/outpost-mesh/outpost/internal/netnstest"
	"github.com/outpost-mesh/outpost/netd/internal/bpfasm"
	"github.com/outpost-mesh/outpost/netd/internal/bpfpin"
	"github.com/outpost-mesh/outpost/netd/internal/bpftest"
	"github.com/outpost-mesh/outpost/netd/internal/lbplan"
	"github.com/outpost-mesh/outpost/netd/services"
)

// TestAdoptLockless: New finds the pins of an agent from before the
// frontends entries' lock (a frontends map of 16-byte values without
// BTF, and links on lan0 running programs that read it): it carries the
// frontends over into the map it writes in place, replaces the programs
// in the same links, translates before the first Sync (an established
// connection goes on, new ones reach their backends), removes the old
// pin, and the first Sync changes nothing. A New that fails part way
// leaves the old pin, and the next one carries it over again.
func TestAdoptLockless(t *testing.T) {
	l := enterLab(t)
	if l == nil {
		return
	}
	tcpServer(t, l.pod, "10.1.0.2:8080")
	tcpServer(t, l.pod, "10.1.0.3:8080")
	tcpServer(t, l.pod, "[fd01::2]:8080")
	udpServer(t, l.pod, "10.1.0.2:5353")
	cfg := l.config()
	tab := bpftest.Table(
		nodePort("10.0.0.1:30080", services.TCP, "10.1.0.2:8080", "10.1.0.3:8080"),
		nodePort("[fd00::1]:30080", services.TCP, "[fd01::2]:8080"),
		nodePort("10.0.0.1:30053", services.UDP, "10.1.0.2:5353"),
	)
	oldLinks := pinLockless(t, l, cfg, tab)
	oldProgs := attached(t, l.node, "lan0")
	reachTable := func(when string) {
		t.Helper()
		if a := ask(t, l.client, "10.0.0.1:30080"); a.backend != "10.1.0.2:8080" && a.backend != "10.1.0.3:8080" {
			t.Errorf("%s: TCP to 10.0.0.1:30080 reached %s", when, a.backend)
		}
		if a := ask(t, l.client, "[fd00::1]:30080"); a.backend != "[fd01::2]:8080" {
			t.Errorf("%s: TCP to [fd00::1]:30080 reached %s", when, a.backend)
		}
		if a, _ := askUDP(t, l.client, "10.0.0.1:30053"); a.backend != "10.1.0.2:5353" {
			t.Errorf("%s: UDP to 10.0.0.1:30053 reached %s", when, a.backend)
		}
	}
	reachTable("older agent")
	_, c, err := dial(t, l.client, "10.0.0.1:30080")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	oldPin := filepath.Join(cfg.PinDir, locklessFrontends)

	// A New that fails after replacing lan0's programs: the maps it
	// made are unpinned again, the links' new programs read them as
	// carried over, and the old pin stays for the next New.
	bad := cfg
	bad.Interfaces = []string{"lan0", "nosuch"}
	if _, err := New(bad); err == nil {
		t.Fatal("New with a missing interface succeeded")
	}
	if _, err := os.Stat(oldPin); err != nil {
		t.Fatalf("older frontends pin after a failed New: %v", err)
	}
	if _, err := os.Stat(filepath.Join(cfg.PinDir, mapFrontends)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("frontends pin after a failed New: %v, want none", err)
	}
	reachTable("after a failed New")
	bpftest.Echo(t, c)

	d := open(t, cfg)
	if _, err := os.Stat(oldPin); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("older frontends pin after New: %v, want none", err)
	}
	for name, id := range oldLinks {
		info, err := d.objs.Links[name].Info()
		if err != nil {
			t.Fatal(err)
		}
		if info.ID != id {
			t.Errorf("link %s is %d, want the pinned %d", name, info.ID, id)
		}
	}
	if got := attached(t, l.node, "lan0"); len(got["ingress"]) != 1 || len(got["egress"]) != 1 || equalIDs(got, oldProgs) {
		t.Errorf("attached %v, want one new program per direction (was %v)", got, oldProgs)
	}
	bpftest.Echo(t, c)
	reachTable("before the first Sync")

	bpftest.Sync(t, d, tab)
	if d.lastOps != 0 {
		t.Errorf("first Sync after the upgrade made %d map changes, want none", d.lastOps)
	}
	// An entry rewritten in place takes effect.
	bpftest.Sync(t, d, bpftest.Table(nodePort("10.0.0.1:30080", services.TCP, "10.1.0.3:8080")))
	for range 10 {
		if a := ask(t, l.client, "10.0.0.1:30080"); a.backend != "10.1.0.3:8080" {
			t.Fatalf("after the Sync, a new connection went to %s, want 10.1.0.3:8080", a.backend)
		}
	}
	bpftest.Echo(t, c)
}

// pinLockless pins under cfg.PinDir the maps of an agent from before
// feVal.Lock, its frontends map (locklessFrontends) and backends map
// holding tab, and links on l's lan0 whose programs read them, and makes
// the masquerade table, as such an agent leaves them; it returns the
// links' ids by pin name.
func pinLockless(t *testing.T, l *lab, cfg Config, tab services.Table) map[string]link.ID {
	t.Helper()
	ns, err := os.Open(l.node)
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	// Made before any flow: conntrack, which the table turns on, would
	// take a flow already going for a new one and masquerade it.
	if err := ensureNFT(int(ns.Fd()), &cfg); err != nil {
		t.Fatal(err)
	}
	if err := bpfpin.MakeDir(cfg.PinDir); err != nil {
		t.Fatal(err)
	}
	specs := mapSpecs(&cfg)
	spec := specs[mapFrontends].Copy()
	spec.ValueSize, spec.Key, spec.Value = 16, nil, nil
	specs[locklessFrontends] = spec
	delete(specs, mapFrontends)
	maps := map[string]*ebpf.Map{}
	for name, spec := range specs {
		m, err := ebpf.NewMap(spec)
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close()
		if err := m.Pin(filepath.Join(cfg.PinDir, name)); err != nil {
			t.Fatal(err)
		}
		maps[name] = m
	}
	p := makePlan(nil, tab, &lbplan.IDs{})
	if err := bpfpin.Put(maps[mapBackends], p.Slots); err != nil {
		t.Fatal(err)
	}
	var fronts bpfpin.Batch[feKey, locklessVal]
	for i, k := range p.Fronts.Keys {
		v := p.Fronts.Vals[i]
		fronts.Add(k, locklessVal{ID: v.ID, Count: v.Count, Affinity: v.Affinity, Flags: v.Flags})
	}
	if err := bpfpin.Put(maps[locklessFrontends], fronts); err != nil {
		t.Fatal(err)
	}
	// The programs read the older map where today's read mapFrontends.
	maps[mapFrontends] = maps[locklessFrontends]
	delete(maps, locklessFrontends)

	ids := map[string]link.ID{}
	if err := netnstest.In(t, l.node, func() error {
		ifi, err := net.InterfaceByName("lan0")
		if err != nil {
			return err
		}
		for _, dir := range directions {
			prog, err := bpfasm.Load(dir.name, locklessSpec(dir, cfg.MasqueradeMark), maps)
			if err != nil {
				return err
			}
			ln, err := link.AttachTCX(link.TCXOptions{Interface: ifi.Index, Program: prog, Attach: dir.attach})
			prog.Close()
			if err != nil {
				return err
			}
			name := linkPin("lan0", dir)
			err = ln.Pin(filepath.Join(cfg.PinDir, name))
			if err == nil {
				var info *link.Info
				if info, err = ln.Info(); err == nil {
					ids[name] = info.ID
				}
			}
			ln.Close()
			if err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return ids
}

// locklessSpec returns dir's program as an agent from before feVal.Lock
// ran it: of the previous version, copying the frontends entry without
// taking its lock (the calls are left out), from a map of locklessVal.
func locklessSpec(dir direction, mark uint32) *ebpf.ProgramSpec {
	progVersion--
	spec := programSpec(dir, mark)
	progVersion++
	for i, ins := range spec.Instructions {
		if ins.IsBuiltinCall() && (ins.Constant == int64(asm.FnSpinLock) || ins.Constant == int64(asm.FnSpinUnlock)) {
			spec.Instructions[i] = asm.Mov.Imm(asm.R0, 0).WithMetadata(ins.Metadata)
		}
	}
	return spec
}
