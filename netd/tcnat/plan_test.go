package tcnat

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"testing"
	"time"
	"unsafe"

	"github.com/outpost-mesh/outpost/netd/internal/lbplan"
	"github.com/outpost-mesh/outpost/netd/services"
)

// model is the frontends and backends maps, in memory.
type model struct {
	fes   map[feKey]feVal
	slots map[slotKey]beVal
}

func newModel() *model {
	return &model{fes: map[feKey]feVal{}, slots: map[slotKey]beVal{}}
}

// check is what a new flow may see at any moment: every frontend's Count
// slots are there and hold backends of that frontend, as the table before
// or after the Sync has them.
func (m *model) check(prev, next services.Table) error {
	for k, v := range m.fes {
		fk := k.key()
		var allowed []beVal
		for _, t := range []services.Table{prev, next} {
			if f := t[fk]; f != nil {
				allowed = append(allowed, desired(f)...)
			}
		}
		for i := uint32(0); i < v.Count; i++ {
			b, ok := m.slots[slotKey{v.ID, i}]
			if !ok {
				return fmt.Errorf("%s: count %d, slot %d empty", fk, v.Count, i)
			}
			if !slices.Contains(allowed, b) {
				return fmt.Errorf("%s: slot %d holds %s, not one of its backends", fk, i, b.addrPort())
			}
		}
	}
	return nil
}

// apply carries p out one entry at a time, as the kernel does a batch,
// checking (when check) what a new flow may see after each, and that the
// backends map never holds more than limit entries.
func (m *model) apply(p *plan, prev, next services.Table, limit int, check bool) error {
	for i, s := range p.Steps(m.fes, m.slots) {
		s()
		if check {
			if err := m.check(prev, next); err != nil {
				return fmt.Errorf("after step %d: %w", i, err)
			}
		}
		if len(m.slots) > limit {
			return fmt.Errorf("after step %d: %d backend entries, limit %d", i, len(m.slots), limit)
		}
	}
	return nil
}

// equal checks that m routes exactly the frontends of t the dataplane
// routes, as t says, and holds nothing else.
func (m *model) equal(t services.Table) error {
	nf, n := 0, 0
	for k, f := range t {
		if !routed(f) {
			if _, ok := m.fes[keyOf(k)]; ok {
				return fmt.Errorf("%s (%v %v) is in the map", k, f.Kind, k.Proto)
			}
			continue
		}
		nf++
		v, ok := m.fes[keyOf(k)]
		if !ok {
			return fmt.Errorf("%s missing", k)
		}
		want := desired(f)
		var got []beVal
		for i := uint32(0); i < v.Count; i++ {
			got = append(got, m.slots[slotKey{v.ID, i}])
		}
		n += len(got)
		slices.SortFunc(want, cmpBe)
		slices.SortFunc(got, cmpBe)
		if !slices.Equal(got, want) {
			return fmt.Errorf("%s: backends %v, want %v", k, got, want)
		}
		if v.Affinity != lbplan.AffinitySeconds(f.Affinity) || v.Flags != flagsOf(f) {
			return fmt.Errorf("%s: affinity %d flags %d", k, v.Affinity, v.Flags)
		}
	}
	if len(m.fes) != nf {
		return fmt.Errorf("%d frontends, want %d", len(m.fes), nf)
	}
	if len(m.slots) != n {
		return fmt.Errorf("%d backend entries, want %d", len(m.slots), n)
	}
	return nil
}

func cmpBe(a, b beVal) int { return a.addrPort().Compare(b.addrPort()) }

// randTable returns a table of up to nf frontends drawn from a small
// space, so that consecutive tables share, change and drop frontends and
// backends; some are ClusterIPs or SCTP, which the dataplane ignores.
func randTable(r *rand.Rand, nf int) services.Table {
	t := services.Table{}
	for range r.IntN(nf + 1) {
		k := services.Key{Addr: netip.AddrFrom4([4]byte{192, 168, 0, byte(r.IntN(nf))}), Port: 30080, Proto: services.TCP}
		if r.IntN(4) == 0 {
			k.Addr = netip.AddrFrom16([16]byte{0xfd, 0x96, 15: byte(r.IntN(nf))})
		}
		switch r.IntN(4) {
		case 0:
			k.Proto = services.UDP
		case 1:
			k.Proto = services.SCTP
		}
		f := &services.Frontend{Key: k, Kind: []services.Kind{services.ClusterIP, services.NodePort, services.ExternalIP}[r.IntN(3)]}
		if r.IntN(3) == 0 {
			f.Affinity = time.Duration(r.IntN(3)) * time.Hour
		}
		f.ExternalLocal = r.IntN(2) == 0
		for range r.IntN(7) {
			a := netip.AddrFrom4([4]byte{10, 42, 0, byte(r.IntN(8))})
			if k.Addr.Is6() {
				a = netip.AddrFrom16([16]byte{0xfd, 0x42, 15: byte(r.IntN(8))})
			}
			f.ExternalBackends = append(f.ExternalBackends, services.Backend{Addr: netip.AddrPortFrom(a, 8080)})
		}
		t[k] = f
	}
	return t
}

// syncModel plans the move from state to t and carries it out on m,
// checking it as it goes, as Sync does.
func syncModel(m *model, state map[feKey]*feState, a *lbplan.IDs, prev, t services.Table) (map[feKey]*feState, error) {
	n := 0
	for _, f := range t {
		if routed(f) {
			n += len(desired(f))
		}
	}
	limit := max(len(m.slots), n)
	p := makePlan(state, t, a)
	if err := m.apply(p, prev, t, limit, true); err != nil {
		return nil, err
	}
	a.Free = append(a.Free, p.Freed...)
	return p.Next, m.equal(t)
}

// runSequence moves the maps through tables, checking after every
// single map operation that no new flow could see a missing slot or
// another frontend's backend, and at the end of each Sync that the maps
// hold exactly the table; and that reading the maps back gives a state
// whose next plan is empty.
func runSequence(t *testing.T, tables []services.Table) {
	t.Helper()
	m := newModel()
	state, a := map[feKey]*feState{}, &lbplan.IDs{}
	prev := services.Table{}
	for i, next := range tables {
		var err error
		if state, err = syncModel(m, state, a, prev, next); err != nil {
			t.Fatalf("sync %d: %v", i, err)
		}
		prev = next
		st, orphans, _ := stateFrom(m.fes, m.slots)
		if p := makePlan(st, next, &lbplan.IDs{Last: 1 << 20}); p.Ops() != 0 || len(orphans) != 0 {
			t.Fatalf("sync %d: read back, the same table needs %d operations, %d orphans", i, p.Ops(), len(orphans))
		}
	}
}

func TestPlanSequence(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	var tables []services.Table
	for range 500 {
		tables = append(tables, randTable(r, 12))
	}
	runSequence(t, tables)
}

// FuzzPlan moves the maps through random tables (from the fuzzer's
// seeds), as TestPlanSequence does.
func FuzzPlan(f *testing.F) {
	f.Add(uint64(1), uint8(3), uint8(8))
	f.Add(uint64(99), uint8(20), uint8(30))
	f.Fuzz(func(t *testing.T, seed uint64, n, size uint8) {
		r := rand.New(rand.NewPCG(seed, uint64(n)))
		var tables []services.Table
		for range int(n % 32) {
			tables = append(tables, randTable(r, 1+int(size%40)))
		}
		runSequence(t, tables)
	})
}

// TestPlanKinds: ClusterIP and SCTP frontends are not the dataplane's,
// and one with no external backends is written with Count 0 (dropped).
func TestPlanKinds(t *testing.T) {
	k := func(s string, p services.Proto) services.Key {
		ap := netip.MustParseAddrPort(s)
		return services.Key{Addr: ap.Addr(), Port: ap.Port(), Proto: p}
	}
	tab := services.Table{}
	for _, f := range []*services.Frontend{
		{Key: k("10.96.0.1:80", services.TCP), Kind: services.ClusterIP,
			Backends: []services.Backend{{Addr: netip.MustParseAddrPort("10.42.0.1:80")}}},
		{Key: k("192.168.0.1:30080", services.SCTP), Kind: services.NodePort,
			ExternalBackends: []services.Backend{{Addr: netip.MustParseAddrPort("10.42.0.1:80")}}},
		{Key: k("192.168.0.1:30080", services.TCP), Kind: services.NodePort, ExternalLocal: true},
		{Key: k("192.168.0.9:80", services.UDP), Kind: services.ExternalIP,
			ExternalBackends: []services.Backend{{Addr: netip.MustParseAddrPort("10.42.0.1:53")}}},
	} {
		tab[f.Key] = f
	}
	p := makePlan(nil, tab, &lbplan.IDs{})
	var got []string
	for i, fk := range p.Fronts.Keys {
		got = append(got, fmt.Sprintf("%s count=%d flags=%d", fk.key(), p.Fronts.Vals[i].Count, p.Fronts.Vals[i].Flags))
	}
	slices.Sort(got)
	want := []string{"192.168.0.1:30080/TCP count=0 flags=1", "192.168.0.9:80/UDP count=1 flags=0"}
	if !slices.Equal(got, want) {
		t.Errorf("frontends written %q, want %q", got, want)
	}
}

func TestValidate(t *testing.T) {
	fe := func(addr string, kind services.Kind, backends ...string) *services.Frontend {
		f := nodePort(addr, services.TCP, backends...)
		f.Kind = kind
		return f
	}
	one := func(f *services.Frontend) services.Table { return services.Table{f.Key: f} }
	big := func(nf, nb int, kind services.Kind) services.Table {
		t := services.Table{}
		for i := range nf {
			k := services.Key{Addr: netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)}), Port: 80, Proto: services.TCP}
			f := &services.Frontend{Key: k, Kind: kind}
			for j := range nb {
				f.ExternalBackends = append(f.ExternalBackends, services.Backend{Addr: netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 42, byte(j >> 8), byte(j)}), 80)})
			}
			t[k] = f
		}
		return t
	}
	mapped := fe("10.0.0.1:30080", services.NodePort)
	mapped.Key.Addr = netip.AddrFrom16(mapped.Key.Addr.As16())
	for _, tc := range []struct {
		name string
		t    services.Table
		want error
	}{
		{"ok", one(fe("10.0.0.1:30080", services.NodePort, "10.42.0.1:80")), nil},
		{"too many frontends", big(services.MaxFrontends+1, 0, services.NodePort), ErrTooLarge},
		{"too many ClusterIPs is not ours", big(services.MaxFrontends+1, 0, services.ClusterIP), nil},
		{"too many backends", big(1, services.MaxBackends+1, services.ExternalIP), ErrTooLarge},
		{"too many in all", big(services.MaxBackendsTotal/1000+1, 1000, services.NodePort), ErrTooLarge},
		{"other family", one(fe("10.0.0.1:30080", services.NodePort, "[fd00::1]:80")), ErrInvalid},
		{"mapped", one(mapped), ErrInvalid},
		{"key", services.Table{{}: fe("10.0.0.1:30080", services.NodePort)}, ErrInvalid},
		{"nil", services.Table{{}: nil}, ErrInvalid},
	} {
		if err := validate(tc.t); !errors.Is(err, tc.want) || (tc.want == nil) != (err == nil) {
			t.Errorf("%s: validate = %v, want %v", tc.name, err, tc.want)
		}
	}
}

// FuzzStateFrom reads arbitrary map contents, as a dataplane adopting
// pinned maps left by a crashed or older agent might find them, and
// checks that one Sync brings them to exactly the table.
func FuzzStateFrom(f *testing.F) {
	f.Add([]byte{1, 0, 2, 1, 1, 3, 2, 2, 0, 1}, uint64(1))
	f.Add([]byte{0, 0, 0, 5, 5, 5, 9, 9, 9}, uint64(7))
	f.Fuzz(func(t *testing.T, data []byte, seed uint64) {
		if len(data) > 3000 {
			return
		}
		m := newModel()
		// Entries from triples: kind, a, b.
		for i := 0; i+2 < len(data); i += 3 {
			a, b := data[i+1], data[i+2]
			if data[i]%2 == 0 {
				k := keyOf(services.Key{Addr: netip.AddrFrom4([4]byte{192, 168, 0, a % 16}), Port: 30080, Proto: services.TCP})
				m.fes[k] = feVal{ID: uint32(b % 8), Count: uint32(a>>4) % 5, Affinity: uint32(b >> 6), Flags: uint32(b>>5) & 1}
			} else {
				m.slots[slotKey{uint32(a % 8), uint32(b % 6)}] = beVal{Addr: netip.AddrFrom4([4]byte{10, 42, 0, b}).As16(), Port: port2(8080)}
			}
		}
		state, orphans, a := stateFrom(m.fes, m.slots)
		next := randTable(rand.New(rand.NewPCG(seed, 0)), 16)
		for k := range next {
			if k.Addr.Is6() {
				delete(next, k)
			}
		}
		// What a new flow sees during this Sync is not checked: the
		// maps may have been inconsistent before it.
		p := makePlan(state, next, a)
		p.SlotDel = append(p.SlotDel, orphans...)
		if err := m.apply(p, nil, next, max(len(m.slots), 16*6), false); err != nil {
			t.Fatal(err)
		}
		if err := m.equal(next); err != nil {
			t.Fatalf("after one Sync: %v", err)
		}
	})
}

// TestLayout: the Go types are the sizes the map specs say, and their
// fields where the programs read them.
func TestLayout(t *testing.T) {
	cfg := DefaultConfig()
	specs := mapSpecs(&cfg)
	for _, tc := range []struct {
		name       string
		key, value any
	}{
		{mapFrontends, feKey{}, feVal{}},
		{mapBackends, slotKey{}, beVal{}},
		{mapConntrack, ctKey{}, ctVal{}},
		{mapReverse, revKey{}, feKey{}},
		{mapAffinity, affKey{}, affVal{}},
	} {
		s := specs[tc.name]
		if k, v := binary.Size(tc.key), binary.Size(tc.value); k != int(s.KeySize) || v != int(s.ValueSize) {
			t.Errorf("%s: Go key and value are %d and %d bytes, map's %d and %d", tc.name, k, v, s.KeySize, s.ValueSize)
		}
	}
	for _, tc := range []struct {
		name      string
		got, want uintptr
	}{
		{"feVal.ID", unsafe.Offsetof(feVal{}.ID), feID},
		{"feVal.Count", unsafe.Offsetof(feVal{}.Count), feCount},
		{"feVal.Affinity", unsafe.Offsetof(feVal{}.Affinity), feAffinity},
		{"feVal.Flags", unsafe.Offsetof(feVal{}.Flags), feFlags},
		{"feVal.Lock", unsafe.Offsetof(feVal{}.Lock), feLock},
		{"locklessVal", unsafe.Sizeof(locklessVal{}), feLock},
		{"beVal.Port", unsafe.Offsetof(beVal{}.Port), bePort},
		{"ctVal.Port", unsafe.Offsetof(ctVal{}.Port), bePort},
		{"ctVal.Flags", unsafe.Offsetof(ctVal{}.Flags), beFlags},
		{"ctVal.ID", unsafe.Offsetof(ctVal{}.ID), ctID},
		{"ctVal.Slot", unsafe.Offsetof(ctVal{}.Slot), ctSlot},
		{"feKey.Port", unsafe.Offsetof(feKey{}.Port), 16},
		{"feKey.Proto", unsafe.Offsetof(feKey{}.Proto), 18},
		{"ctKey.Front", unsafe.Offsetof(ctKey{}.Front), 16},
		{"ctKey.CPort", unsafe.Offsetof(ctKey{}.CPort), 32},
		{"ctKey.FPort", unsafe.Offsetof(ctKey{}.FPort), 34},
		{"ctKey.Proto", unsafe.Offsetof(ctKey{}.Proto), 36},
		{"revKey.Client", unsafe.Offsetof(revKey{}.Client), 16},
		{"revKey.BPort", unsafe.Offsetof(revKey{}.BPort), 32},
		{"revKey.CPort", unsafe.Offsetof(revKey{}.CPort), 34},
		{"revKey.Proto", unsafe.Offsetof(revKey{}.Proto), 36},
		{"affKey.ID", unsafe.Offsetof(affKey{}.ID), 16},
		{"affVal.Last", unsafe.Offsetof(affVal{}.Last), affLast},
		{"affVal.Slot", unsafe.Offsetof(affVal{}.Slot), affSlot},
	} {
		if tc.got != tc.want {
			t.Errorf("%s at %d, programs read it at %d", tc.name, tc.got, tc.want)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	good := DefaultConfig()
	good.PinDir, good.Interfaces = "/sys/fs/bpf/outpost/n/tcnat", []string{"eth0", "br_lan"}
	if err := good.Validate(); err != nil {
		t.Fatalf("Validate(%+v) = %v", good, err)
	}
	for _, mut := range []func(c *Config){
		func(c *Config) { c.PinDir = "rel" },
		func(c *Config) { c.HostNetNS = "rel" },
		func(c *Config) { c.Interfaces = nil },
		func(c *Config) { c.Interfaces = []string{"eth0", "eth0"} },
		func(c *Config) { c.Interfaces = []string{"a/b"} },
		func(c *Config) { c.Interfaces = []string{"sixteen-bytes-xx"} },
		func(c *Config) { c.MasqueradeMark = 3 },
		func(c *Config) { c.Table = "" },
		func(c *Config) { c.FlowEntries = -1 },
	} {
		c := good
		c.Interfaces = slices.Clone(good.Interfaces)
		mut(&c)
		if err := c.Validate(); err == nil {
			t.Errorf("Validate(%+v) = nil, want an error", c)
		}
	}
}

// FuzzTable decodes arbitrary bytes into a table, any address, kind,
// protocol and backends, as a broken Build might hand one over: validate
// never panics, and a table it accepts is planned and carried out to
// exactly itself.
func FuzzTable(f *testing.F) {
	f.Add([]byte("\x02\x06\x01\x00\x50\x0a\x00\x00\x01\x02\x0a\x2a\x00\x01"))
	f.Add([]byte("\x03\x11\x00\x75\x30\xfd\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x01\x00"))
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > 4096 {
			return
		}
		tab := services.Table{}
		for len(data) >= 5 {
			kind, proto, flags, port := data[0], data[1], data[2], binary.BigEndian.Uint16(data[3:5])
			data = data[5:]
			addr, rest, ok := takeAddr(data, flags&1 != 0)
			if !ok {
				break
			}
			data = rest
			fe := &services.Frontend{
				Key:           services.Key{Addr: addr, Port: port, Proto: services.Proto(proto)},
				Kind:          services.Kind(kind % 4),
				ExternalLocal: flags&2 != 0,
				Affinity:      time.Duration(flags>>2) * time.Minute,
			}
			n := 0
			if len(data) > 0 {
				n, data = int(data[0]%8), data[1:]
			}
			for range n {
				b, rest, ok := takeAddr(data, flags&16 != 0)
				if !ok || len(rest) < 2 {
					break
				}
				fe.ExternalBackends = append(fe.ExternalBackends, services.Backend{Addr: netip.AddrPortFrom(b, binary.BigEndian.Uint16(rest))})
				data = rest[2:]
			}
			tab[fe.Key] = fe
		}
		if validate(tab) != nil {
			return
		}
		m := newModel()
		if _, err := syncModel(m, map[feKey]*feState{}, &lbplan.IDs{}, services.Table{}, tab); err != nil {
			t.Fatal(err)
		}
	})
}

// takeAddr reads a 4- or 16-byte address off data.
func takeAddr(data []byte, v6 bool) (netip.Addr, []byte, bool) {
	if v6 {
		if len(data) < 16 {
			return netip.Addr{}, nil, false
		}
		return netip.AddrFrom16([16]byte(data[:16])), data[16:], true
	}
	if len(data) < 4 {
		return netip.Addr{}, nil, false
	}
	return netip.AddrFrom4([4]byte(data[:4])), data[4:], true
}
