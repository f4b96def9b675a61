package ebpflb

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

	"github.com/cilium/ebpf"

	"github.com/outpost-mesh/outpost/netd/internal/lbplan"
	"github.com/outpost-mesh/outpost/netd/services"
)

// model is the services and backends maps, in memory.
type model struct {
	svcs  map[svcKey]svcVal
	slots map[slotKey]beVal
}

// slot returns slot i of the frontend whose entry is v, as the programs
// read it.
func (m *model) slot(v svcVal, i uint32) (beVal, bool) {
	if i < inlineSlots {
		return v.Inline[i].be(), true
	}
	b, ok := m.slots[slotKey{v.ID, i}]
	return b, ok
}

func newModel() *model {
	return &model{svcs: map[svcKey]svcVal{}, slots: map[slotKey]beVal{}}
}

// check is what a connect may see at any moment: every frontend's Count
// slots are there and hold backends of that frontend, as the table before
// or after the Sync has them.
func (m *model) check(prev, next services.Table) error {
	for k, v := range m.svcs {
		fk := k.key()
		var allowed []beVal
		for _, t := range []services.Table{prev, next} {
			if f := t[fk]; f != nil {
				allowed = append(allowed, desired(f)...)
			}
		}
		if v.Tag != v.ID {
			return fmt.Errorf("%s: tag %d, id %d", fk, v.Tag, v.ID)
		}
		for i := uint32(0); i < v.Count; i++ {
			b, ok := m.slot(v, i)
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
// checking what a connect may see after each, and that the backends
// map never holds more than limit entries.
func (m *model) apply(p *plan, prev, next services.Table, limit int) error {
	for i, s := range p.Steps(m.svcs, m.slots) {
		s()
		if err := m.check(prev, next); err != nil {
			return fmt.Errorf("after step %d: %w", i, err)
		}
		if len(m.slots) > limit {
			return fmt.Errorf("after step %d: %d backend entries, limit %d", i, len(m.slots), limit)
		}
	}
	return nil
}

// equal checks that m routes exactly as t says and holds nothing else.
func (m *model) equal(t services.Table) error {
	if len(m.svcs) != len(t) {
		return fmt.Errorf("%d frontends, want %d", len(m.svcs), len(t))
	}
	n := 0
	for k, f := range t {
		v, ok := m.svcs[keyOf(k)]
		if !ok {
			return fmt.Errorf("%s missing", k)
		}
		want := desired(f)
		var got []beVal
		for i := uint32(0); i < v.Count; i++ {
			b, _ := m.slot(v, i)
			got = append(got, b)
		}
		n += max(len(got)-inlineSlots, 0)
		slices.SortFunc(want, cmpBe)
		slices.SortFunc(got, cmpBe)
		if !slices.Equal(got, want) {
			return fmt.Errorf("%s: backends %v, want %v", k, got, want)
		}
		if v.Affinity != lbplan.AffinitySeconds(f.Affinity) || v.Tag != v.ID {
			return fmt.Errorf("%s: affinity %d", k, v.Affinity)
		}
	}
	if len(m.slots) != n {
		return fmt.Errorf("%d backend entries, want %d", len(m.slots), n)
	}
	return nil
}

func cmpBe(a, b beVal) int { return a.addrPort().Compare(b.addrPort()) }

// randTable returns a table of up to nf frontends drawn from a small
// space, so that consecutive tables share, change and drop frontends and
// backends.
func randTable(r *rand.Rand, nf int) services.Table {
	t := services.Table{}
	for range r.IntN(nf + 1) {
		k := services.Key{Addr: netip.AddrFrom4([4]byte{10, 96, 0, byte(r.IntN(nf))}), Port: 80, Proto: services.TCP}
		if r.IntN(4) == 0 {
			k.Addr = netip.AddrFrom16([16]byte{0xfd, 0x96, 15: byte(r.IntN(nf))})
		}
		f := &services.Frontend{Key: k, Kind: services.ClusterIP}
		if r.IntN(3) == 0 {
			f.Affinity = time.Duration(r.IntN(3)) * time.Hour
		}
		for range r.IntN(3 * inlineSlots) {
			a := netip.AddrFrom4([4]byte{10, 42, 0, byte(r.IntN(3 * inlineSlots))})
			if k.Addr.Is6() {
				a = netip.AddrFrom16([16]byte{0xfd, 0x42, 15: byte(r.IntN(3 * inlineSlots))})
			}
			f.Backends = append(f.Backends, services.Backend{Addr: netip.AddrPortFrom(a, 8080)})
		}
		t[k] = f
	}
	return t
}

// syncModel plans the move from state to t and carries it out on m,
// checking it as it goes, as Sync does.
func syncModel(m *model, state map[svcKey]*svcState, orphans []slotKey, a *lbplan.IDs, prev, t services.Table) (map[svcKey]*svcState, error) {
	limit := len(m.slots)
	n := 0
	for _, f := range t {
		n += max(len(desired(f))-inlineSlots, 0)
	}
	limit = max(limit, n)
	p := makePlan(state, t, a)
	p.SlotDel = append(p.SlotDel, orphans...)
	if err := m.apply(p, prev, t, limit); err != nil {
		return nil, err
	}
	a.Free = append(a.Free, p.Freed...)
	return p.Next, m.equal(t)
}

// TestPlanSequence moves the maps through random tables, checking after
// every single map operation that no connect could see a missing slot or
// another frontend's backend, and at the end of each Sync that the maps
// hold exactly the table; and that reading the maps back gives a state
// whose next plan is empty.
func TestPlanSequence(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	m := newModel()
	state, a := map[svcKey]*svcState{}, &lbplan.IDs{}
	prev := services.Table{}
	for i := range 500 {
		next := randTable(r, 12)
		var err error
		if state, err = syncModel(m, state, nil, a, prev, next); err != nil {
			t.Fatalf("sync %d: %v", i, err)
		}
		prev = next
		st, orphans, _ := stateFrom(m.svcs, m.slots)
		if p := makePlan(st, next, &lbplan.IDs{Last: 1 << 20}); p.Ops() != 0 || len(orphans) != 0 {
			t.Fatalf("sync %d: read back, the same table needs %d operations, %d orphans", i, p.Ops(), len(orphans))
		}
	}
}

func TestValidate(t *testing.T) {
	f := func(fe *services.Frontend) services.Table { return services.Table{fe.Key: fe} }
	big := func(nf, nb int) services.Table {
		t := services.Table{}
		for i := range nf {
			k := services.Key{Addr: netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)}), Port: 80, Proto: services.TCP}
			fe := &services.Frontend{Key: k}
			for j := range nb {
				fe.Backends = append(fe.Backends, services.Backend{Addr: netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 42, byte(j >> 8), byte(j)}), 80)})
			}
			t[k] = fe
		}
		return t
	}
	mapped := frontend("10.96.0.1:80", services.TCP)
	mapped.Key.Addr = netip.AddrFrom16(mapped.Key.Addr.As16())
	for _, tc := range []struct {
		name string
		t    services.Table
		want error
	}{
		{"ok", f(frontend("10.96.0.1:80", services.TCP, "10.42.0.1:80")), nil},
		{"too many frontends", big(services.MaxFrontends+1, 0), ErrTooLarge},
		{"too many backends", big(1, services.MaxBackends+1), ErrTooLarge},
		{"too many in all", big(services.MaxBackendsTotal/1000+1, 1000), ErrTooLarge},
		{"other family", f(frontend("10.96.0.1:80", services.TCP, "[fd00::1]:80")), ErrInvalid},
		{"mapped", f(mapped), ErrInvalid},
		{"key", services.Table{{}: frontend("10.96.0.1:80", services.TCP)}, ErrInvalid},
	} {
		if err := validate(tc.t); !errors.Is(err, tc.want) || (tc.want == nil) != (err == nil) {
			t.Errorf("%s: validate = %v, want %v", tc.name, err, tc.want)
		}
	}
}

// FuzzStateFrom reads arbitrary map contents, as a dataplane adopting
// pinned maps left by a crashed or older agent might find them, and
// checks that one Sync brings them to exactly the table without a
// connect ever seeing an empty slot.
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
				k := keyOf(services.Key{Addr: netip.AddrFrom4([4]byte{10, 96, 0, a % 16}), Port: 80, Proto: services.TCP})
				v := svcVal{ID: uint32(b % 8), Count: uint32(a>>4) % (2*inlineSlots + 1), Affinity: uint32(b >> 6), Tag: uint32(a % 8)}
				for j := range min(v.Count, inlineSlots) {
					v.Inline[j] = beVal{Addr: addr16(netip.AddrFrom4([4]byte{10, 42, 0, b + byte(j)})), Port: port2(8080)}.inline()
				}
				m.svcs[k] = v
			} else {
				m.slots[slotKey{uint32(a % 8), uint32(b % (2*inlineSlots + 2))}] = beVal{Addr: addr16(netip.AddrFrom4([4]byte{10, 42, 0, b})), Port: port2(8080)}
			}
		}
		state, orphans, a := stateFrom(m.svcs, m.slots)
		next := randTable(rand.New(rand.NewPCG(seed, 0)), 16)
		for k := range next {
			if k.Addr.Is6() {
				delete(next, k)
			}
		}
		// What a connect sees during this Sync is not checked: the
		// maps may have been inconsistent before it.
		p := makePlan(state, next, a)
		p.SlotDel = append(p.SlotDel, orphans...)
		limit := max(len(m.slots), 16*3*inlineSlots)
		if err := m.applyUnchecked(p, limit); err != nil {
			t.Fatal(err)
		}
		if err := m.equal(next); err != nil {
			t.Fatalf("after one Sync: %v", err)
		}
	})
}

// applyUnchecked carries p out, checking only the map limit.
func (m *model) applyUnchecked(p *plan, limit int) error {
	for i, s := range p.Steps(m.svcs, m.slots) {
		s()
		if len(m.slots) > limit {
			return fmt.Errorf("after step %d: %d backend entries, limit %d", i, len(m.slots), limit)
		}
	}
	return nil
}

// TestLayout: the Go types are the sizes the map specs say, and their
// fields where the programs read them.
func TestLayout(t *testing.T) {
	cfg := DefaultConfig()
	specs := mapSpecs(&cfg)
	specs[legacyServices] = &ebpf.MapSpec{KeySize: 20, ValueSize: 16}
	if binary.Size(svcVal{}) != int(unsafe.Sizeof(svcVal{})) || binary.Size([]svcVal{{}}) != svcValSize {
		t.Errorf("svcVal has padding: BatchUpdate would copy it field by field")
	}
	for _, tc := range []struct {
		name       string
		key, value any
	}{
		{mapServices, svcKey{}, svcVal{}},
		{legacyServices, svcKey{}, legacyVal{}},
		{mapBackends, slotKey{}, beVal{}},
		{mapAffinity, affKey{}, affVal{}},
		{mapRevNAT, revKey{}, svcKey{}},
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
		{"svcVal.ID", unsafe.Offsetof(svcVal{}.ID), svcID},
		{"svcVal.Count", unsafe.Offsetof(svcVal{}.Count), svcCount},
		{"svcVal.Affinity", unsafe.Offsetof(svcVal{}.Affinity), svcAffinity},
		{"svcVal.Lock", unsafe.Offsetof(svcVal{}.Lock), svcLock},
		{"svcVal.Inline", unsafe.Offsetof(svcVal{}.Inline), svcInline},
		{"svcVal.Tag", unsafe.Offsetof(svcVal{}.Tag), svcTag},
		{"inlineBe", unsafe.Sizeof(inlineBe{}), inlineSize},
		{"inlineBe.Port", unsafe.Offsetof(inlineBe{}.Port), bePort},
		{"beVal.Addr", unsafe.Offsetof(beVal{}.Addr), beAddr},
		{"beVal.Port", unsafe.Offsetof(beVal{}.Port), bePort},
		{"affVal.Last", unsafe.Offsetof(affVal{}.Last), affLast},
		{"affVal.Slot", unsafe.Offsetof(affVal{}.Slot), affSlot},
		{"affVal.Port", unsafe.Offsetof(affVal{}.Port), affPort},
		{"affVal.Addr", unsafe.Offsetof(affVal{}.Addr), affAddr},
		{"svcKey.Port", unsafe.Offsetof(svcKey{}.Port), 16},
		{"svcKey.Proto", unsafe.Offsetof(svcKey{}.Proto), 18},
		{"revKey.Addr", unsafe.Offsetof(revKey{}.Addr), 8},
		{"revKey.Port", unsafe.Offsetof(revKey{}.Port), 24},
	} {
		if tc.got != tc.want {
			t.Errorf("%s at %d, programs read it at %d", tc.name, tc.got, tc.want)
		}
	}
}

// TestMigrate: the maps of an agent before inline backends, carried over,
// route as before, and the first plan for the same table only deletes
// the backends map's slots that are now inline.
func TestMigrate(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for i := range 50 {
		tab := randTable(r, 12)
		// The legacy layout: every slot in the backends map.
		legacy, slots := map[svcKey]legacyVal{}, map[slotKey]beVal{}
		id, inline := uint32(0), 0
		for k, f := range tab {
			id++
			want := desired(f)
			legacy[keyOf(k)] = legacyVal{ID: id, Count: uint32(len(want)), Affinity: lbplan.AffinitySeconds(f.Affinity)}
			for j, b := range want {
				slots[slotKey{id, uint32(j)}] = b
			}
			inline += min(len(want), inlineSlots)
		}
		m := &model{svcs: migrate(legacy, slots), slots: slots}
		if err := m.check(nil, tab); err != nil {
			t.Fatalf("table %d: migrated: %v", i, err)
		}
		st, orphans, a := stateFrom(m.svcs, m.slots)
		p := makePlan(st, tab, a)
		if len(orphans) != 0 || p.Ops() != inline || len(p.SlotDel) != inline {
			t.Fatalf("table %d: after migrating, %d orphans and %d operations (%d deletes), want %d deletes", i, len(orphans), p.Ops(), len(p.SlotDel), inline)
		}
	}
	// A missing inline slot shortens the frontend to the slots below it.
	k := keyOf(services.Key{Addr: netip.MustParseAddr("10.96.0.1"), Port: 80, Proto: services.TCP})
	b := beVal{Addr: addr16(netip.MustParseAddr("10.42.0.1")), Port: port2(80)}
	got := migrate(map[svcKey]legacyVal{k: {ID: 3, Count: 6}}, map[slotKey]beVal{{3, 0}: b, {3, 2}: b, {3, 5}: b})
	if v := got[k]; v.Count != 1 || v.Inline[0] != b.inline() || v.Tag != 3 {
		t.Errorf("migrate with slot 1 missing = %+v, want Count 1", v)
	}
}

// FuzzMigrate carries arbitrary legacy map contents over, as New does on
// finding an older agent's pins, and checks that what a connect then
// sees is only backends the legacy maps held for the frontend, and that
// one Sync brings the maps to exactly a table.
func FuzzMigrate(f *testing.F) {
	f.Add([]byte{0, 1, 2, 1, 1, 3, 1, 1, 0, 0, 17, 9, 1, 2, 4}, uint64(1))
	f.Fuzz(func(t *testing.T, data []byte, seed uint64) {
		if len(data) > 3000 {
			return
		}
		legacy, slots := map[svcKey]legacyVal{}, map[slotKey]beVal{}
		for i := 0; i+2 < len(data); i += 3 {
			a, b := data[i+1], data[i+2]
			if data[i]%2 == 0 {
				k := keyOf(services.Key{Addr: netip.AddrFrom4([4]byte{10, 96, 0, a % 16}), Port: 80, Proto: services.TCP})
				legacy[k] = legacyVal{ID: uint32(b % 8), Count: uint32(a>>4) % (2*inlineSlots + 1), Affinity: uint32(b >> 6)}
			} else {
				slots[slotKey{uint32(a % 8), uint32(b % (2*inlineSlots + 2))}] = beVal{Addr: addr16(netip.AddrFrom4([4]byte{10, 42, 0, b})), Port: port2(8080)}
			}
		}
		m := &model{svcs: migrate(legacy, slots), slots: slots}
		if len(m.svcs) != len(legacy) {
			t.Fatalf("%d frontends carried over of %d", len(m.svcs), len(legacy))
		}
		for k, v := range m.svcs {
			o := legacy[k]
			if v.ID != o.ID || v.Tag != o.ID || v.Affinity != o.Affinity || v.Count > o.Count {
				t.Fatalf("%v: %+v carried over as %+v", k, o, v)
			}
			for i := range min(v.Count, inlineSlots) {
				if b, ok := slots[slotKey{o.ID, i}]; !ok || b != v.Inline[i].be() {
					t.Fatalf("%v: inline slot %d is %v, legacy %v", k, i, v.Inline[i], b)
				}
			}
		}
		state, orphans, a := stateFrom(m.svcs, m.slots)
		next := randTable(rand.New(rand.NewPCG(seed, 0)), 16)
		for k := range next {
			if k.Addr.Is6() {
				delete(next, k)
			}
		}
		p := makePlan(state, next, a)
		p.SlotDel = append(p.SlotDel, orphans...)
		if err := m.applyUnchecked(p, max(len(m.slots), 16*3*inlineSlots)); err != nil {
			t.Fatal(err)
		}
		if err := m.equal(next); err != nil {
			t.Fatalf("after one Sync: %v", err)
		}
	})
}
