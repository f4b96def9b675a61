package ebpflb

import (
	"net/netip"

	"github.com/cilium/ebpf"

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

// svcVal is a frontend's entry in the services map. Its backends are the
// backends map's entries {ID, 0} .. {ID, Count-1}.
type svcVal struct {
	ID    uint32
	Count uint32
	// Affinity is the ClientIP affinity timeout in seconds; 0 is none.
	Affinity uint32
	_        uint32
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

// The names of the maps, their pins under Config.PinDir.
const (
	mapScope    = "scope"
	mapServices = "services"
	mapBackends = "backends"
	mapRevNAT   = "revnat"
	mapAffinity = "affinity"
)

// noPrealloc is BPF_F_NO_PREALLOC: the service and backend maps hold
// memory for the entries in use, not for their limits, and an entry
// replaced by an update is freed only after the programs that may be
// reading it have finished (RCU), so a program never sees a value half
// rewritten.
const noPrealloc = 1

// scopeEntries is the most network namespaces (the node's and pods')
// whose sockets are load-balanced.
const scopeEntries = 4096

func mapSpecs(cfg *Config) map[string]*ebpf.MapSpec {
	return map[string]*ebpf.MapSpec{
		mapScope: {Name: "olb_scope", Type: ebpf.Hash, KeySize: 8, ValueSize: 4,
			MaxEntries: scopeEntries, Flags: noPrealloc},
		mapServices: {Name: "olb_services", Type: ebpf.Hash, KeySize: 20, ValueSize: 16,
			MaxEntries: services.MaxFrontends, Flags: noPrealloc},
		mapBackends: {Name: "olb_backends", Type: ebpf.Hash, KeySize: 8, ValueSize: 20,
			MaxEntries: services.MaxBackendsTotal, Flags: noPrealloc},
		mapRevNAT: {Name: "olb_revnat", Type: ebpf.LRUHash, KeySize: 32, ValueSize: 20,
			MaxEntries: uint32(cfg.RevNATEntries)},
		mapAffinity: {Name: "olb_affinity", Type: ebpf.LRUHash, KeySize: 16, ValueSize: 32,
			MaxEntries: uint32(cfg.AffinityEntries)},
	}
}

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
