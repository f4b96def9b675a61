package tcnat

import (
	"net/netip"

	"github.com/cilium/ebpf"

	"github.com/outpost-mesh/outpost/netd/internal/bpfpin"
	"github.com/outpost-mesh/outpost/netd/services"
)

// The layouts below are shared by the programs (prog.go, which reads them
// at fixed offsets) and by Sync. Addresses are 16 bytes, an IPv4 address
// in its 4-in-6 mapped form, so that one map serves both families. Ports
// are in network byte order, as they are in the packet.

// feKey is a frontend: the frontends map's key, and the reverse map's
// value (the address and port replies are shown as coming from; the
// programs copy its first 18 bytes).
type feKey struct {
	Addr  [16]byte
	Port  [2]byte
	Proto uint8
	_     uint8
}

// feVal is a frontend's entry in the frontends map. Its backends are the
// backends map's entries {ID, 0} .. {ID, Count-1}; Count 0 drops.
type feVal struct {
	ID    uint32
	Count uint32
	// Affinity is the ClientIP affinity timeout in seconds; 0 is none.
	Affinity uint32
	Flags    uint32
	// Lock is the entry's bpf_spin_lock. Sync rewrites an entry that
	// exists in place, holding it (BPF_F_LOCK), and the ingress program
	// copies the entry out holding it: a packet sees the old entry or
	// the new one, never a mix, and the entry's element is never
	// swapped for another while its frontend exists (a lookup racing
	// such a swap can miss the frontend; see noPrealloc and
	// bpfpin.PutLocked). Sync leaves it zero.
	Lock uint32
	_    uint32
}

// locklessVal is a frontend's entry in locklessFrontends, the frontends
// map of agents before feVal.Lock: feVal's first 16 bytes.
type locklessVal struct {
	ID       uint32
	Count    uint32
	Affinity uint32
	Flags    uint32
}

// flagLocal in feVal.Flags says externalTrafficPolicy Local: the
// client's address is kept (no masquerade mark).
const flagLocal = 1

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

// ctVal is the conntrack map's value: the backend a flow was sent to,
// the frontend's flags, and the slot it was picked from (a UDP flow
// picks again once the slot holds another backend or none).
type ctVal struct {
	Addr  [16]byte
	Port  [2]byte
	Flags uint8
	_     uint8
	ID    uint32
	Slot  uint32
}

// ctKey is a flow as the client sent it: the conntrack map's key.
type ctKey struct {
	Client [16]byte
	Front  [16]byte
	CPort  [2]byte
	FPort  [2]byte
	Proto  uint8
	_      [3]byte
}

// revKey is a reply as the backend sends it: the reverse map's key, whose
// value is the feKey the client connected to.
type revKey struct {
	Backend [16]byte
	Client  [16]byte
	BPort   [2]byte
	CPort   [2]byte
	Proto   uint8
	_       [3]byte
}

// affKey and affVal are the affinity map's entries: a client and a
// frontend, and the slot it last used and when.
type affKey struct {
	Client [16]byte
	ID     uint32
	_      uint32
}

type affVal struct {
	Last uint64 // bpf_ktime_get_ns
	Slot uint32
	_    uint32
}

// The names of the maps, their pins under Config.PinDir. A map whose
// layout changes takes a new name, so that New finds the old one beside
// it and carries its entries over (see Dataplane.migrate).
const (
	mapFrontends = "frontends_v2"
	mapBackends  = "backends"
	mapConntrack = "conntrack"
	mapReverse   = "reverse"
	mapAffinity  = "affinity"
)

// locklessFrontends is the frontends map of agents before feVal.Lock:
// the same keys, values of locklessVal's layout, and no BTF, so that its
// entries cannot be rewritten in place.
const locklessFrontends = "frontends"

// noPrealloc is BPF_F_NO_PREALLOC: the frontend and backend maps hold
// memory for the entries in use, not for their limits. A plain update
// replaces an entry by linking a new element in place of the old, but
// since Linux 6.1 (bpf_mem_alloc) the old element is freed at once, not
// after the programs that may be reading it have finished, and may be
// handed to the next update while a program still reads it: the program
// can copy a value half rewritten, or, following the reused element's
// next pointer, miss a key that is there all along. Frontends entries
// are therefore rewritten in place under their lock (feVal.Lock); a
// backends map slot is still replaced, and a packet that finds its slot
// missing picks again or, a new flow's, is dropped, which the client's
// retransmission gets over (see ingress).
const noPrealloc = 1

func mapSpecs(cfg *Config) map[string]*ebpf.MapSpec {
	return map[string]*ebpf.MapSpec{
		mapFrontends: {Name: "tcnat_fe", Type: ebpf.Hash, KeySize: 20, ValueSize: feValSize,
			MaxEntries: services.MaxFrontends, Flags: noPrealloc, Key: feKeyType, Value: feValType},
		mapBackends: {Name: "tcnat_be", Type: ebpf.Hash, KeySize: 8, ValueSize: 20,
			MaxEntries: services.MaxBackendsTotal, Flags: noPrealloc},
		mapConntrack: {Name: "tcnat_ct", Type: ebpf.LRUHash, KeySize: 40, ValueSize: 28,
			MaxEntries: uint32(cfg.FlowEntries)},
		mapReverse: {Name: "tcnat_rev", Type: ebpf.LRUHash, KeySize: 40, ValueSize: 20,
			MaxEntries: uint32(cfg.FlowEntries)},
		mapAffinity: {Name: "tcnat_aff", Type: ebpf.LRUHash, KeySize: 24, ValueSize: 16,
			MaxEntries: uint32(cfg.AffinityEntries)},
	}
}

// The BTF of the frontends map's key and value, which the kernel needs to
// find the value's bpf_spin_lock.
var feKeyType, feValType = bpfpin.LockedKV("tcnat_frontend", 20, feValSize, feLock)

func port2(p uint16) [2]byte { return [2]byte{byte(p >> 8), byte(p)} }

func keyOf(k services.Key) feKey {
	return feKey{Addr: k.Addr.As16(), Port: port2(k.Port), Proto: uint8(k.Proto)}
}

func (k feKey) key() services.Key {
	return services.Key{Addr: netip.AddrFrom16(k.Addr).Unmap(), Port: uint16(k.Port[0])<<8 | uint16(k.Port[1]), Proto: services.Proto(k.Proto)}
}

func beOf(b services.Backend) beVal {
	return beVal{Addr: b.Addr.Addr().As16(), Port: port2(b.Addr.Port())}
}

func (b beVal) addrPort() netip.AddrPort {
	return netip.AddrPortFrom(netip.AddrFrom16(b.Addr).Unmap(), uint16(b.Port[0])<<8|uint16(b.Port[1]))
}
