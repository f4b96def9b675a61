package ebpflb

import (
	"net/netip"

	"github.com/cilium/ebpf"

	"github.com/outpost-mesh/outpost/netd/internal/bpfpin"
	"github.com/outpost-mesh/outpost/netd/services"
)

// The layouts below are shared by the programs (prog.go, which reads them
// at fixed offsets) and by Sync. Addresses are 16 bytes, an IPv4 address
// in its 4-in-6 mapped form, so that one map serves both families and a
// v4-mapped destination on an IPv6 socket finds its IPv4 service. Ports
// are in network byte order, as the kernel hands them to the programs.

// svcKey is a frontend: the services map's key and the revnat map's
// value.
type svcKey struct {
	Addr  [16]byte
	Port  [2]byte
	Proto uint8
	_     uint8
}

// inlineSlots is how many of a frontend's backends its services entry
// holds itself: a frontend with no more backends than that is one map
// entry, and Sync writes it, count and backends together, in one update
// that a program sees whole (see svcVal.Lock). Slots from inlineSlots up
// are the backends map's entries {ID, slot}. Four covers most Services
// and keeps the entry at 120 bytes; eight (216 bytes) measured no faster
// for Services of four backends.
const inlineSlots = 4

// svcVal is a frontend's entry in the services map. Its backends are
// Inline[0] .. Inline[min(Count, inlineSlots)-1], then the backends
// map's entries {ID, inlineSlots} .. {ID, Count-1}.
type svcVal struct {
	ID    uint32
	Count uint32
	// Affinity is the ClientIP affinity timeout in seconds; 0 is none.
	Affinity uint32
	// Lock is the entry's bpf_spin_lock. Sync rewrites an entry that
	// exists in place, holding it (BPF_F_LOCK), and the programs copy
	// the entry out holding it: a connect sees the old entry or the new
	// one, never a mix, and the entry's element is never swapped for
	// another while its frontend exists, which a lookup racing a plain
	// update can miss (see bpfpin.PutLocked). Sync leaves it zero.
	Lock   uint32
	Inline [inlineSlots]inlineBe
	// Tag is ID again, written last: a program that finds Tag and ID
	// differ in its copy of the entry read an element the kernel was
	// reusing for another frontend, a removed one's element (hash map
	// elements are recycled without waiting for readers since Linux
	// 6.1, and a new element is filled without its lock), and reads
	// again.
	Tag uint32
	_   uint32
}

// inlineBe is a backend held in a services entry: a beVal padded to 8
// bytes, so that the programs copy it with aligned 8-byte loads.
type inlineBe struct {
	Addr [16]byte
	Port [2]byte
	_    [6]byte
}

// slotKey is the backends map's key.
type slotKey struct {
	ID   uint32
	Slot uint32
}

// beVal is a backend: the backends map's value.
type beVal struct {
	Addr [16]byte
	Port [2]byte
	_    [2]byte
}

func (b beVal) inline() inlineBe { return inlineBe{Addr: b.Addr, Port: b.Port} }

func (b inlineBe) be() beVal { return beVal{Addr: b.Addr, Port: b.Port} }

// svcValOf is the services entry of a frontend with the given id,
// affinity and slots.
func svcValOf(id, aff uint32, slots []beVal) svcVal {
	v := svcVal{ID: id, Count: uint32(len(slots)), Affinity: aff, Tag: id}
	for i, b := range slots[:min(len(slots), inlineSlots)] {
		v.Inline[i] = b.inline()
	}
	return v
}

// affKey and affVal are the affinity map's entries: the client (its
// network namespace's cookie: socket LB runs before the socket has a
// source address, so, as Cilium's socket LB does, the namespace stands
// for the client) and service, and the backend it last used and when.
type affKey struct {
	Netns uint64
	ID    uint32
	_     uint32
}

type affVal struct {
	Last uint64 // bpf_ktime_get_ns
	Slot uint32
	Port [2]byte
	_    [2]byte
	Addr [16]byte
}

// revKey is the revnat map's key: a socket and the backend it was sent
// to; the value is the frontend (an svcKey) its replies and peer name are
// shown as coming from.
type revKey struct {
	Cookie uint64
	Addr   [16]byte
	Port   [2]byte
	_      [6]byte
}

// The names of the maps, their pins under Config.PinDir. A map whose
// layout changes takes a new name, so that New finds the old one beside
// it and carries its entries over (see Dataplane.migrate).
const (
	mapScope    = "scope"
	mapServices = "services_v3"
	mapBackends = "backends"
	mapRevNAT   = "revnat"
	mapAffinity = "affinity"
)

// The services maps of older agents. legacyServices is the map of agents
// before inline backends: svcVal was its first 16 bytes, ID, Count and
// Affinity, and all of a frontend's backends were in the backends map.
// lockless is the map of agents before svcVal.Lock: the layout of today,
// with no BTF, so that it cannot be written in place.
const (
	legacyServices = "services"
	lockless       = "services_v2"
)

type legacyVal struct {
	ID       uint32
	Count    uint32
	Affinity uint32
	_        uint32
}

// noPrealloc is BPF_F_NO_PREALLOC: the service and backend maps hold
// memory for the entries in use, not for their limits. A plain update
// replaces an entry by linking a new element in place of the old, so a
// lookup finds the whole old value or the whole new one; but since Linux
// 6.1 (bpf_mem_alloc) the old element may be handed to the next update
// while a program still reads it. Services entries are therefore
// rewritten in place under their lock (svcVal.Lock); a backends map slot
// is still replaced, and a connect that finds its slot missing reads the
// services entry again once (see forward).
const noPrealloc = 1

// scopeEntries is the most network namespaces (the node's and pods')
// whose sockets are load-balanced.
const scopeEntries = 4096

func mapSpecs(cfg *Config) map[string]*ebpf.MapSpec {
	return map[string]*ebpf.MapSpec{
		mapScope: {Name: "olb_scope", Type: ebpf.Hash, KeySize: 8, ValueSize: 4,
			MaxEntries: scopeEntries, Flags: noPrealloc},
		mapServices: {Name: "olb_services", Type: ebpf.Hash, KeySize: 20, ValueSize: svcValSize,
			MaxEntries: services.MaxFrontends, Flags: noPrealloc, Key: svcKeyType, Value: svcValType},
		mapBackends: {Name: "olb_backends", Type: ebpf.Hash, KeySize: 8, ValueSize: 20,
			MaxEntries: services.MaxBackendsTotal, Flags: noPrealloc},
		mapRevNAT: {Name: "olb_revnat", Type: ebpf.LRUHash, KeySize: 32, ValueSize: 20,
			MaxEntries: uint32(cfg.RevNATEntries)},
		mapAffinity: {Name: "olb_affinity", Type: ebpf.LRUHash, KeySize: 16, ValueSize: 32,
			MaxEntries: uint32(cfg.AffinityEntries)},
	}
}

// The BTF of the services map's key and value, which the kernel needs to
// find the value's bpf_spin_lock.
var svcKeyType, svcValType = bpfpin.LockedKV("olb_service", 20, svcValSize, svcLock)

// addr16 returns a's 16-byte form, an IPv4 address 4-in-6 mapped.
func addr16(a netip.Addr) [16]byte {
	return a.As16()
}

func port2(p uint16) [2]byte { return [2]byte{byte(p >> 8), byte(p)} }

func keyOf(k services.Key) svcKey {
	return svcKey{Addr: addr16(k.Addr), Port: port2(k.Port), Proto: uint8(k.Proto)}
}

func (k svcKey) key() services.Key {
	return services.Key{Addr: netip.AddrFrom16(k.Addr).Unmap(), Port: uint16(k.Port[0])<<8 | uint16(k.Port[1]), Proto: services.Proto(k.Proto)}
}

func beOf(b services.Backend) beVal {
	return beVal{Addr: addr16(b.Addr.Addr()), Port: port2(b.Addr.Port())}
}

func (b beVal) addrPort() netip.AddrPort {
	return netip.AddrPortFrom(netip.AddrFrom16(b.Addr).Unmap(), uint16(b.Port[0])<<8|uint16(b.Port[1]))
}
