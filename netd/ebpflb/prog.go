package ebpflb

import (
	"fmt"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"

	"github.com/outpost-mesh/outpost/netd/internal/bpfasm"
)

// progVersion is mixed into every program: bump it whenever the programs
// change, so that New replaces them in the pinned links of a node that
// runs the previous version (a changed program changes the tag anyway;
// the version only makes a change explicit). Tests change it to exercise
// the upgrade.
var progVersion int32 = 3

// hook is one cgroup sock_addr attach point.
type hook struct {
	name   string // the pin's name, link_<name>
	attach ebpf.AttachType
	v6     bool
	// forward hooks (connect, sendmsg) pick a backend and rewrite the
	// destination; the others (recvmsg, getpeername) show the frontend
	// in place of the backend.
	forward bool
}

var hooks = []hook{
	{"connect4", ebpf.AttachCGroupInet4Connect, false, true},
	{"sendmsg4", ebpf.AttachCGroupUDP4Sendmsg, false, true},
	{"recvmsg4", ebpf.AttachCGroupUDP4Recvmsg, false, false},
	{"getpeername4", ebpf.AttachCgroupInet4GetPeername, false, false},
	{"connect6", ebpf.AttachCGroupInet6Connect, true, true},
	{"sendmsg6", ebpf.AttachCGroupUDP6Sendmsg, true, true},
	{"recvmsg6", ebpf.AttachCGroupUDP6Recvmsg, true, false},
	{"getpeername6", ebpf.AttachCgroupInet6GetPeername, true, false},
}

// Offsets in struct bpf_sock_addr (include/uapi/linux/bpf.h).
const (
	ctxUserIP4  = 4
	ctxUserIP6  = 8 // [4]u32
	ctxUserPort = 24
	ctxProtocol = 36
)

// The programs' stack, as offsets from the frame pointer (R10).
const (
	stNetns    = -8   // u64 netns cookie: scope map key, affinity key part
	stSvcKey   = -32  // svcKey, 20 bytes (24 zeroed); the revnat value
	stNow      = -40  // u64 bpf_ktime_get_ns
	stSlotKey  = -48  // slotKey
	stAffKey   = -64  // affKey
	stAffVal   = -96  // affVal
	stRevKey   = -128 // revKey
	stID       = -136 // u32 service id
	stCount    = -132 // u32 backend count
	stAffinity = -144 // u32 affinity seconds
	stSlot     = -140 // u32 chosen slot
	// stRetried, a u64 whether the services entry was read again, is
	// spilled from a register as a whole 8-byte slot, so that the
	// verifier knows its value and that the retry loop ends.
	stRetried = -152
	// stSvcVal is the copy of the services entry (svcVal).
	stSvcVal = stRetried - svcValSize
)

// Offsets in the map values (maps.go).
const (
	svcID       = 0
	svcCount    = 4
	svcAffinity = 8
	svcLock     = 12
	svcInline   = 16
	inlineSize  = 24 // an inlineBe
	svcTag      = svcInline + inlineSize*inlineSlots
	svcValSize  = svcTag + 8
	beAddr      = 0
	bePort      = 16
	affLast     = 0
	affSlot     = 8
	affPort     = 12
	affAddr     = 16
)

// program returns the instructions of h. Each program first checks the
// socket's network namespace against the scope map and leaves sockets of
// other namespaces alone: cgroup hooks see every socket of the cgroup's
// processes, whatever their namespace, and other nodes may share the
// machine.
func program(h hook) asm.Instructions {
	insns := asm.Instructions{
		asm.Mov.Imm(asm.R0, progVersion), // the version, see progVersion
		asm.Mov.Reg(asm.R6, asm.R1),
		asm.FnGetNetnsCookie.Call(),
		asm.StoreMem(asm.RFP, stNetns, asm.R0, asm.DWord),
	}
	insns = append(insns, bpfasm.Lookup(mapScope, stNetns)...)
	insns = append(insns, asm.JEq.Imm(asm.R0, 0, "allow"))
	if h.forward {
		insns = append(insns, forward(h)...)
	} else {
		insns = append(insns, reverse(h)...)
	}
	insns = append(insns,
		asm.Mov.Imm(asm.R0, 1).WithSymbol("allow"),
		asm.Return(),
	)
	if !h.forward {
		return insns
	}
	return append(insns,
		// refuse makes connect and sendmsg fail with EPERM. A Service
		// with no endpoints is refused at once, as Cilium's socket LB
		// does: a socket-level hook cannot answer with the TCP RST or
		// ICMP unreachable that kube-proxy sends, and letting the
		// connect go to the ClusterIP, which no host owns, would leave
		// the client waiting for a SYN-ACK until its timeout.
		asm.Mov.Imm(asm.R0, 0).WithSymbol("refuse"),
		asm.Return(),
	)
}

// userAddr stores the context's user address, 16 bytes with IPv4 mapped,
// and port at off and off+16 on the stack, which must be zeroed.
func userAddr(h hook, off int16) asm.Instructions {
	var insns asm.Instructions
	if h.v6 {
		insns = bpfasm.CopyMem(asm.RFP, off, asm.R6, ctxUserIP6, 16, asm.Word)
	} else {
		insns = asm.Instructions{
			// 0xffff0000 stored little-endian is 00 00 ff ff: bytes
			// 8..11 of ::ffff:a.b.c.d. The address itself is in network
			// order in the context and copied as it is.
			asm.StoreImm(asm.RFP, off+8, int64(int32(-65536)), asm.Word),
			asm.LoadMem(asm.R1, asm.R6, ctxUserIP4, asm.Word),
			asm.StoreMem(asm.RFP, off+12, asm.R1, asm.Word),
		}
	}
	return append(insns,
		asm.LoadMem(asm.R1, asm.R6, ctxUserPort, asm.Word),
		asm.StoreMem(asm.RFP, off+16, asm.R1, asm.Half))
}

// setUser writes the address and port at src+off (16 bytes, then 2) into
// the context's user address.
func setUser(h hook, src asm.Register, off int16) asm.Instructions {
	var insns asm.Instructions
	if h.v6 {
		insns = bpfasm.CopyMem(asm.R6, ctxUserIP6, src, off, 16, asm.Word)
	} else {
		insns = asm.Instructions{
			asm.LoadMem(asm.R1, src, off+12, asm.Word),
			asm.StoreMem(asm.R6, ctxUserIP4, asm.R1, asm.Word),
		}
	}
	return append(insns,
		asm.LoadMem(asm.R1, src, off+16, asm.Half),
		asm.StoreMem(asm.R6, ctxUserPort, asm.R1, asm.Word))
}

// forward is connect and sendmsg: find the frontend, pick a backend
// (the client's affine one while it is fresh, else a random one), point
// the socket at it, and remember the frontend for the socket's replies
// and peer name.
func forward(h hook) asm.Instructions {
	insns := asm.Instructions{
		bpfasm.Zero64(stSvcKey),
		bpfasm.Zero64(stSvcKey + 8),
		bpfasm.Zero64(stSvcKey + 16),
	}
	insns = append(insns, userAddr(h, stSvcKey)...)
	insns = append(insns,
		asm.LoadMem(asm.R1, asm.R6, ctxProtocol, asm.Word),
		asm.StoreMem(asm.RFP, stSvcKey+18, asm.R1, asm.Byte),
		asm.Mov.Imm(asm.R1, 0),
		asm.StoreMem(asm.RFP, stRetried, asm.R1, asm.DWord),
	)
	svc := bpfasm.Lookup(mapServices, stSvcKey)
	svc[0] = svc[0].WithSymbol("service")
	insns = append(insns, svc...)
	insns = append(insns, asm.JEq.Imm(asm.R0, 0, "allow"))
	// Copy the entry out at once, holding its lock, so that a Sync
	// rewriting it in place is seen whole or not at all (the verifier
	// allows no load of the lock itself, nor any call but the unlock,
	// while it is held). The Tag is copied last: the element of a
	// frontend removed meanwhile may be reused for another's, and
	// then the copy's ID and Tag differ (see svcVal.Tag).
	insns = append(insns,
		asm.Mov.Reg(asm.R8, asm.R0),
		asm.Mov.Reg(asm.R1, asm.R8),
		asm.Add.Imm(asm.R1, svcLock),
		asm.FnSpinLock.Call(),
		asm.LoadMem(asm.R1, asm.R8, svcID, asm.DWord), // ID and Count
		asm.StoreMem(asm.RFP, stSvcVal+svcID, asm.R1, asm.DWord),
		asm.LoadMem(asm.R1, asm.R8, svcAffinity, asm.Word),
		asm.StoreMem(asm.RFP, stSvcVal+svcAffinity, asm.R1, asm.Word),
	)
	insns = append(insns, bpfasm.CopyMem(asm.RFP, stSvcVal+svcInline, asm.R8, svcInline, svcValSize-svcInline, asm.DWord)...)
	insns = append(insns,
		asm.Mov.Reg(asm.R1, asm.R8),
		asm.Add.Imm(asm.R1, svcLock),
		asm.FnSpinUnlock.Call(),
		asm.LoadMem(asm.R1, asm.RFP, stSvcVal+svcID, asm.Word),
		asm.LoadMem(asm.R2, asm.RFP, stSvcVal+svcTag, asm.Word),
		asm.JNE.Reg(asm.R1, asm.R2, "retry"),
		asm.StoreMem(asm.RFP, stID, asm.R1, asm.Word),
		asm.LoadMem(asm.R1, asm.RFP, stSvcVal+svcAffinity, asm.Word),
		asm.StoreMem(asm.RFP, stAffinity, asm.R1, asm.Word),
		asm.LoadMem(asm.R1, asm.RFP, stSvcVal+svcCount, asm.Word),
		asm.StoreMem(asm.RFP, stCount, asm.R1, asm.Word),
		asm.JEq.Imm(asm.R1, 0, "refuse"),

		// ClientIP affinity. Its key and time are set on every path, so
		// that the verifier sees them written wherever they are read.
		asm.LoadMem(asm.R1, asm.RFP, stNetns, asm.DWord),
		asm.StoreMem(asm.RFP, stAffKey, asm.R1, asm.DWord),
		asm.LoadMem(asm.R1, asm.RFP, stID, asm.Word),
		asm.StoreMem(asm.RFP, stAffKey+8, asm.R1, asm.Word),
		asm.StoreImm(asm.RFP, stAffKey+12, 0, asm.Word),
		bpfasm.Zero64(stNow),
		asm.LoadMem(asm.R1, asm.RFP, stAffinity, asm.Word),
		asm.JEq.Imm(asm.R1, 0, "pick"),
		asm.FnKtimeGetNs.Call(),
		asm.StoreMem(asm.RFP, stNow, asm.R0, asm.DWord),
	)
	insns = append(insns, bpfasm.Lookup(mapAffinity, stAffKey)...)
	insns = append(insns,
		asm.JEq.Imm(asm.R0, 0, "pick"),
		// Honoured while younger than the timeout.
		asm.LoadMem(asm.R1, asm.R0, affLast, asm.DWord),
		asm.LoadMem(asm.R2, asm.RFP, stNow, asm.DWord),
		asm.Sub.Reg(asm.R2, asm.R1),
		asm.LoadMem(asm.R3, asm.RFP, stAffinity, asm.Word),
		asm.Mul.Imm(asm.R3, 1000000000),
		asm.JGE.Reg(asm.R2, asm.R3, "pick"),
		// And while its slot still holds the same backend.
		asm.LoadMem(asm.R1, asm.R0, affSlot, asm.Word),
		asm.LoadMem(asm.R2, asm.RFP, stCount, asm.Word),
		asm.JGE.Reg(asm.R1, asm.R2, "pick"),
		asm.StoreMem(asm.RFP, stSlot, asm.R1, asm.Word),
	)
	insns = append(insns, bpfasm.CopyMem(asm.RFP, stAffVal, asm.R0, 0, 32, asm.DWord)...)
	insns = append(insns, backend("aff")...)
	insns = append(insns,
		asm.JEq.Imm(asm.R0, 0, "pick"),
		asm.LoadMem(asm.R1, asm.R0, beAddr, asm.DWord),
		asm.LoadMem(asm.R2, asm.RFP, stAffVal+affAddr, asm.DWord),
		asm.JNE.Reg(asm.R1, asm.R2, "pick"),
		asm.LoadMem(asm.R1, asm.R0, beAddr+8, asm.DWord),
		asm.LoadMem(asm.R2, asm.RFP, stAffVal+affAddr+8, asm.DWord),
		asm.JNE.Reg(asm.R1, asm.R2, "pick"),
		asm.LoadMem(asm.R1, asm.R0, bePort, asm.Half),
		asm.LoadMem(asm.R2, asm.RFP, stAffVal+affPort, asm.Half),
		asm.JNE.Reg(asm.R1, asm.R2, "pick"),
		asm.Mov.Reg(asm.R7, asm.R0),
		asm.Ja.Label("remember"),

		// A random backend. Sync keeps Count no greater than the
		// slots filled, so the slot exists but for the race below; if
		// it still does not, refuse rather than send the connect to
		// the ClusterIP.
		asm.FnGetPrandomU32.Call().WithSymbol("pick"),
		asm.LoadMem(asm.R1, asm.RFP, stCount, asm.Word),
		asm.Mod.Reg32(asm.R0, asm.R1),
		asm.StoreMem(asm.RFP, stSlot, asm.R0, asm.Word),
	)
	insns = append(insns, backend("pick")...)
	insns = append(insns,
		asm.JNE.Imm(asm.R0, 0, "picked"),
		// The slot is gone: Sync lowered Count and deleted the slots
		// above it between our reading Count and the slot. Or the copy
		// of the services entry was torn. Read the services entry
		// again, once; the verifier sees the loop end.
		asm.LoadMem(asm.R1, asm.RFP, stRetried, asm.DWord).WithSymbol("retry"),
		asm.JNE.Imm(asm.R1, 0, "refuse"),
		asm.Mov.Imm(asm.R1, 1),
		asm.StoreMem(asm.RFP, stRetried, asm.R1, asm.DWord),
		asm.Ja.Label("service"),
		asm.Mov.Reg(asm.R7, asm.R0).WithSymbol("picked"),

		// Record (or refresh) the client's affinity.
		asm.LoadMem(asm.R1, asm.RFP, stAffinity, asm.Word).WithSymbol("remember"),
		asm.JEq.Imm(asm.R1, 0, "rewrite"),
		asm.LoadMem(asm.R1, asm.RFP, stNow, asm.DWord),
		asm.StoreMem(asm.RFP, stAffVal+affLast, asm.R1, asm.DWord),
		asm.LoadMem(asm.R1, asm.RFP, stSlot, asm.Word),
		asm.StoreMem(asm.RFP, stAffVal+affSlot, asm.R1, asm.Word),
		asm.LoadMem(asm.R1, asm.R7, bePort, asm.Half),
		asm.StoreMem(asm.RFP, stAffVal+affPort, asm.R1, asm.Half),
		asm.StoreImm(asm.RFP, stAffVal+affPort+2, 0, asm.Half),
	)
	insns = append(insns, bpfasm.CopyMem(asm.RFP, stAffVal+affAddr, asm.R7, beAddr, 16, asm.DWord)...)
	insns = append(insns, bpfasm.Update(mapAffinity, stAffKey, stAffVal)...)

	// Point the socket at the backend.
	rewrite := setUser(h, asm.R7, beAddr)
	rewrite[0] = rewrite[0].WithSymbol("rewrite")
	insns = append(insns, rewrite...)

	// Remember the frontend for this socket and backend.
	insns = append(insns,
		asm.Mov.Reg(asm.R1, asm.R6),
		asm.FnGetSocketCookie.Call(),
		asm.StoreMem(asm.RFP, stRevKey, asm.R0, asm.DWord),
	)
	insns = append(insns, bpfasm.CopyMem(asm.RFP, stRevKey+8, asm.R7, beAddr, 16, asm.DWord)...)
	insns = append(insns,
		bpfasm.Zero64(stRevKey+24),
		asm.LoadMem(asm.R1, asm.R7, bePort, asm.Half),
		asm.StoreMem(asm.RFP, stRevKey+24, asm.R1, asm.Half),
	)
	insns = append(insns, bpfasm.Update(mapRevNAT, stRevKey, stSvcKey)...)
	return append(insns, asm.Ja.Label("allow"))
}

// backend sets R0 to the backend in slot stSlot of the frontend whose
// entry is copied at stSvcVal: its inline one (a pointer into the copy),
// or the backends map's entry {stID, stSlot}, or NULL if that is
// missing. Labels are prefixed with p.
func backend(p string) asm.Instructions {
	insns := asm.Instructions{
		asm.LoadMem(asm.R1, asm.RFP, stSlot, asm.Word),
	}
	// One branch per inline slot: the verifier then knows each
	// pointer's offset into the stack exactly.
	for i := range inlineSlots {
		next := fmt.Sprintf("%s_inline%d", p, i+1)
		if i == inlineSlots-1 {
			next = p + "_map"
		}
		insns = append(insns,
			asm.JNE.Imm(asm.R1, int32(i), next),
			asm.Mov.Reg(asm.R0, asm.RFP),
			asm.Add.Imm(asm.R0, int32(stSvcVal+svcInline+i*inlineSize)),
			asm.Ja.Label(p+"_found"),
		)
		if i > 0 {
			insns[len(insns)-4] = insns[len(insns)-4].WithSymbol(fmt.Sprintf("%s_inline%d", p, i))
		}
	}
	insns = append(insns,
		asm.LoadMem(asm.R2, asm.RFP, stID, asm.Word).WithSymbol(p+"_map"),
		asm.StoreMem(asm.RFP, stSlotKey, asm.R2, asm.Word),
		asm.StoreMem(asm.RFP, stSlotKey+4, asm.R1, asm.Word),
	)
	insns = append(insns, bpfasm.Lookup(mapBackends, stSlotKey)...)
	return append(insns, asm.Mov.Reg(asm.R0, asm.R0).WithSymbol(p+"_found"))
}

// reverse is recvmsg and getpeername: a peer that is a backend this
// socket was sent to through a frontend is shown as the frontend.
func reverse(h hook) asm.Instructions {
	insns := asm.Instructions{
		asm.Mov.Reg(asm.R1, asm.R6),
		asm.FnGetSocketCookie.Call(),
		asm.StoreMem(asm.RFP, stRevKey, asm.R0, asm.DWord),
		bpfasm.Zero64(stRevKey + 8),
		bpfasm.Zero64(stRevKey + 16),
		bpfasm.Zero64(stRevKey + 24),
	}
	insns = append(insns, userAddr(h, stRevKey+8)...)
	insns = append(insns, bpfasm.Lookup(mapRevNAT, stRevKey)...)
	insns = append(insns, asm.JEq.Imm(asm.R0, 0, "allow"))
	insns = append(insns, setUser(h, asm.R0, 0)...)
	return append(insns, asm.Ja.Label("allow"))
}

// programSpec returns h's program, its map references still to be
// resolved (load does).
func programSpec(h hook) *ebpf.ProgramSpec {
	return &ebpf.ProgramSpec{
		Name:         "olb_" + h.name,
		Type:         ebpf.CGroupSockAddr,
		AttachType:   h.attach,
		Instructions: program(h),
		License:      "Dual BSD/GPL",
	}
}

// load loads h's program against maps.
func load(h hook, maps map[string]*ebpf.Map) (*ebpf.Program, error) {
	return bpfasm.Load(h.name, programSpec(h), maps)
}
