package tcnat

import (
	"encoding/binary"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"

	"github.com/outpost-mesh/outpost/netd/internal/bpfasm"
)

// progVersion is mixed into every program: bump it whenever the programs
// change, so that New replaces them in the pinned links of a node that
// runs the previous version (a changed program changes the tag anyway;
// the version only makes a change explicit). Tests change it to exercise
// the upgrade.
var progVersion int32 = 2

// direction is one of the two programs.
type direction struct {
	name   string // in the pins' names, link_<interface>_<name>
	attach ebpf.AttachType
	// ingress translates a client's packets to a frontend into packets
	// to a backend; egress translates a backend's replies back.
	ingress bool
}

var directions = []direction{
	{"ingress", ebpf.AttachTCXIngress, true},
	{"egress", ebpf.AttachTCXEgress, false},
}

// Offsets in struct __sk_buff (include/uapi/linux/bpf.h).
const (
	skbMark     = 8
	skbProtocol = 16
)

// Return codes of tcx programs.
const (
	tcxNext = -1 // TCX_NEXT: go on to the next program, or pass
	tcxDrop = 2  // TCX_DROP
)

// Flags of bpf_l4_csum_replace.
const (
	fPseudoHdr  = 1 << 4 // BPF_F_PSEUDO_HDR
	fMangled0   = 1 << 5 // BPF_F_MARK_MANGLED_0
	ethHdrLen   = 14
	ipv6HdrLen  = 40
	tcpCsumOff  = 16
	udpCsumOff  = 6
	tcpFlagsOff = 13
)

// The programs' stack, as offsets from the frame pointer (R10). Every
// field is aligned to its widest load.
const (
	stIP      = -48  // the IP header, 20 or 40 bytes
	stL4      = -8   // source and destination ports
	stFlags   = -4   // TCP flags byte
	stFeKey   = -72  // feKey (24 bytes zeroed); the reverse map's value
	stFeVal   = -88  // feVal up to Lock, copied out of the map
	stCtKey   = -128 // ctKey
	stRevKey  = -168 // revKey
	stBe      = -200 // ctVal: the backend (ingress) or frontend (egress) to write
	stAffKey  = -224 // affKey
	stAffVal  = -240 // affVal
	stSlotKey = -248 // slotKey
	stNow     = -256 // u64 bpf_ktime_get_ns
	stDiff    = -264 // u64 the checksum difference of an address
	stSyn     = -272 // u64 whether the packet is a TCP SYN without ACK
	stFePtr   = -280 // the frontends entry's pointer, while its lock is held
)

// Offsets in the map values (maps.go).
const (
	feID       = 0
	feCount    = 4
	feAffinity = 8
	feFlags    = 12
	feLock     = 16
	feValSize  = 24
	bePort     = 16
	beFlags    = 18
	ctID       = 20
	ctSlot     = 24
	affLast    = 0
	affSlot    = 8
)

// family is IPv4 or IPv6 as the programs see them.
type family struct {
	v6  bool
	sfx string // of the family's labels
}

var families = []family{{false, "4"}, {true, "6"}}

func (f family) l(name string) string { return name + f.sfx }

// hdrLen is how much of the IP header the programs read.
func (f family) hdrLen() int32 {
	if f.v6 {
		return ipv6HdrLen
	}
	return 20
}

// addrLen is the length of an address in the packet.
func (f family) addrLen() int32 {
	if f.v6 {
		return 16
	}
	return 4
}

// saddr and daddr are the addresses' offsets in the IP header.
func (f family) saddr() int16 {
	if f.v6 {
		return 8
	}
	return 12
}

func (f family) daddr() int16 {
	if f.v6 {
		return 24
	}
	return 16
}

// ethertype returns the __sk_buff protocol field's value for ethertype:
// a big-endian 16-bit value read as a native word.
func ethertype(t uint16) int32 {
	var b [2]byte
	binary.BigEndian.PutUint16(b[:], t)
	return int32(binary.NativeEndian.Uint16(b[:]))
}

// program returns the instructions of the program of dir. mark is the
// masquerade mark bit ingress sets.
//
// Registers kept across helper calls: R6 the context, R7 the offset of
// the layer 4 header, R8 the layer 4 protocol, R9 the offset of its
// checksum.
func program(dir direction, mark uint32) asm.Instructions {
	insns := asm.Instructions{
		asm.Mov.Imm(asm.R0, progVersion), // the version, see progVersion
		asm.Mov.Reg(asm.R6, asm.R1),
		asm.LoadMem(asm.R1, asm.R6, skbProtocol, asm.Word),
		asm.JEq.Imm(asm.R1, ethertype(0x0800), "ipv4"),
		asm.JEq.Imm(asm.R1, ethertype(0x86dd), "ipv6"),
		asm.Ja.Label("next"),
	}
	for _, f := range families {
		body := parse(f)
		body[0] = body[0].WithSymbol("ipv" + f.sfx)
		insns = append(insns, body...)
		if dir.ingress {
			insns = append(insns, ingress(f, mark)...)
		} else {
			insns = append(insns, egress(f)...)
		}
	}
	return append(insns,
		asm.Mov.Imm(asm.R0, tcxNext).WithSymbol("next"),
		asm.Return(),
		asm.Mov.Imm(asm.R0, tcxDrop).WithSymbol("drop"),
		asm.Return(),
	)
}

// loadBytes loads n bytes of the packet at offset off onto the stack at
// to, going to next if the packet is shorter.
func loadBytes(off asm.Register, to int16, n int32) asm.Instructions {
	return asm.Instructions{
		asm.Mov.Reg(asm.R1, asm.R6),
		asm.Mov.Reg(asm.R2, off),
		asm.Mov.Reg(asm.R3, asm.RFP),
		asm.Add.Imm(asm.R3, int32(to)),
		asm.Mov.Imm(asm.R4, n),
		asm.FnSkbLoadBytes.Call(),
		asm.JNE.Imm(asm.R0, 0, "next"),
	}
}

// parse reads the IP header and the ports of a TCP or UDP packet of f
// that is not a fragment and has no extension header onto the stack,
// and sets R7, R8 and R9; other packets go to next.
func parse(f family) asm.Instructions {
	insns := asm.Instructions{asm.Mov.Imm(asm.R7, ethHdrLen)}
	insns = append(insns, loadBytes(asm.R7, stIP, f.hdrLen())...)
	if f.v6 {
		insns = append(insns,
			asm.Mov.Imm(asm.R7, ethHdrLen+ipv6HdrLen),
			// The next header: an extension header or a fragment
			// header is neither TCP nor UDP, and passes.
			asm.LoadMem(asm.R8, asm.RFP, stIP+6, asm.Byte),
		)
	} else {
		insns = append(insns,
			asm.LoadMem(asm.R7, asm.RFP, stIP, asm.Byte),
			asm.And.Imm(asm.R7, 0x0f),
			asm.JLT.Imm(asm.R7, 5, "next"),
			asm.LSh.Imm(asm.R7, 2),
			asm.Add.Imm(asm.R7, ethHdrLen),
			// More fragments, or a fragment offset: a fragment passes.
			asm.LoadMem(asm.R1, asm.RFP, stIP+6, asm.Byte),
			asm.And.Imm(asm.R1, 0x3f),
			asm.JNE.Imm(asm.R1, 0, "next"),
			asm.LoadMem(asm.R1, asm.RFP, stIP+7, asm.Byte),
			asm.JNE.Imm(asm.R1, 0, "next"),
			asm.LoadMem(asm.R8, asm.RFP, stIP+9, asm.Byte),
		)
	}
	insns = append(insns,
		asm.Mov.Reg(asm.R9, asm.R7),
		asm.Add.Imm(asm.R9, tcpCsumOff),
		asm.JEq.Imm(asm.R8, 6, f.l("ports")),
		asm.JNE.Imm(asm.R8, 17, "next"),
		asm.Mov.Reg(asm.R9, asm.R7),
		asm.Add.Imm(asm.R9, udpCsumOff),
	)
	ports := loadBytes(asm.R7, stL4, 4)
	ports[0] = ports[0].WithSymbol(f.l("ports"))
	return append(insns, ports...)
}

// addr16 stores the packet's address at IP header offset hoff, 16 bytes
// with IPv4 mapped, on the stack at off, which must be zeroed.
func addr16(f family, off, hoff int16) asm.Instructions {
	if f.v6 {
		return bpfasm.CopyMem(asm.RFP, off, asm.RFP, stIP+hoff, 16, asm.Word)
	}
	return asm.Instructions{
		asm.StoreImm(asm.RFP, off+10, -1, asm.Half), // ::ffff:
		asm.LoadMem(asm.R1, asm.RFP, stIP+hoff, asm.Word),
		asm.StoreMem(asm.RFP, off+12, asm.R1, asm.Word),
	}
}

// ingress translates a packet of f to a frontend: the flow's backend if
// the conntrack map has it (and the packet is not a TCP SYN, which starts
// a flow afresh), else one picked from the frontend's backends, the
// client's affine one while it is fresh, else a random one.
func ingress(f family, mark uint32) asm.Instructions {
	var insns asm.Instructions
	add := func(is ...asm.Instruction) { insns = append(insns, is...) }
	// The frontend.
	add(bpfasm.Zero(stFeKey, 24)...)
	add(addr16(f, stFeKey, f.daddr())...)
	add(
		asm.LoadMem(asm.R1, asm.RFP, stL4+2, asm.Half),
		asm.StoreMem(asm.RFP, stFeKey+16, asm.R1, asm.Half),
		asm.StoreMem(asm.RFP, stFeKey+18, asm.R8, asm.Byte),
	)
	add(bpfasm.Lookup(mapFrontends, stFeKey)...)
	add(asm.JEq.Imm(asm.R0, 0, "next"))
	// Copy the entry out at once, holding its lock, so that a Sync
	// rewriting it in place is seen whole or not at all (see
	// feVal.Lock). The verifier allows no load of the lock itself, nor
	// any call but the unlock, while it is held. The entry's pointer
	// waits out the lock's call on the stack, R6 to R9 being taken.
	add(
		asm.StoreMem(asm.RFP, stFePtr, asm.R0, asm.DWord),
		asm.Mov.Reg(asm.R1, asm.R0),
		asm.Add.Imm(asm.R1, feLock),
		asm.FnSpinLock.Call(),
		asm.LoadMem(asm.R2, asm.RFP, stFePtr, asm.DWord),
	)
	add(bpfasm.CopyMem(asm.RFP, stFeVal, asm.R2, 0, feLock, asm.DWord)...)
	add(
		asm.Mov.Reg(asm.R1, asm.R2),
		asm.Add.Imm(asm.R1, feLock),
		asm.FnSpinUnlock.Call(),
	)

	// The flow.
	add(bpfasm.Zero(stCtKey, 40)...)
	add(addr16(f, stCtKey, f.saddr())...)
	add(bpfasm.CopyMem(asm.RFP, stCtKey+16, asm.RFP, stFeKey, 16, asm.DWord)...)
	add(
		asm.LoadMem(asm.R1, asm.RFP, stL4, asm.Half),
		asm.StoreMem(asm.RFP, stCtKey+32, asm.R1, asm.Half),
		asm.LoadMem(asm.R1, asm.RFP, stL4+2, asm.Half),
		asm.StoreMem(asm.RFP, stCtKey+34, asm.R1, asm.Half),
		asm.StoreMem(asm.RFP, stCtKey+36, asm.R8, asm.Byte),
	)
	add(bpfasm.Zero(stSyn, 8)...)
	add(
		asm.JNE.Imm(asm.R8, 6, f.l("flow")),
		asm.Mov.Reg(asm.R2, asm.R7),
		asm.Add.Imm(asm.R2, tcpFlagsOff),
	)
	add(loadBytes(asm.R2, stFlags, 1)...)
	add(
		asm.LoadMem(asm.R1, asm.RFP, stFlags, asm.Byte),
		asm.And.Imm(asm.R1, 0x12), // SYN|ACK
		asm.JNE.Imm(asm.R1, 0x02, f.l("flow")),
		asm.Mov.Imm(asm.R1, 1),
		asm.StoreMem(asm.RFP, stSyn, asm.R1, asm.DWord),
	)
	flow := bpfasm.Lookup(mapConntrack, stCtKey)
	flow[0] = flow[0].WithSymbol(f.l("flow"))
	add(flow...)
	add(asm.JEq.Imm(asm.R0, 0, f.l("pick")))
	add(bpfasm.CopyMem(asm.RFP, stBe, asm.R0, 0, 28, asm.Word)...)
	// A TCP connection keeps its backend to the end, removed or not, as
	// kube-proxy leaves its conntrack entries. A SYN (a retransmitted
	// one, or a new connection from the same port) and a UDP packet,
	// whose flow has no end, keep it only while it is still in its
	// slot, else pick again: as kube-proxy clears the conntrack entries
	// of UDP flows to endpoints that went, and a connection after a
	// removal must not go to the removed backend.
	add(
		asm.JNE.Imm(asm.R8, 6, f.l("check")),
		asm.LoadMem(asm.R1, asm.RFP, stSyn, asm.DWord),
		asm.JEq.Imm(asm.R1, 0, f.l("rewrite")),
		asm.LoadMem(asm.R1, asm.RFP, stBe+ctID, asm.Word).WithSymbol(f.l("check")),
		asm.StoreMem(asm.RFP, stSlotKey, asm.R1, asm.Word),
		asm.LoadMem(asm.R1, asm.RFP, stBe+ctSlot, asm.Word),
		asm.StoreMem(asm.RFP, stSlotKey+4, asm.R1, asm.Word),
	)
	add(bpfasm.Lookup(mapBackends, stSlotKey)...)
	add(asm.JEq.Imm(asm.R0, 0, f.l("pick")))
	for _, w := range []struct {
		off  int16
		size asm.Size
	}{{0, asm.Word}, {4, asm.Word}, {8, asm.Word}, {12, asm.Word}, {bePort, asm.Half}} {
		add(
			asm.LoadMem(asm.R1, asm.R0, w.off, w.size),
			asm.LoadMem(asm.R2, asm.RFP, stBe+w.off, w.size),
			asm.JNE.Reg(asm.R1, asm.R2, f.l("pick")),
		)
	}
	add(asm.Ja.Label(f.l("rewrite")))

	// A new flow. No backend: drop (see the package doc).
	add(
		asm.LoadMem(asm.R1, asm.RFP, stFeVal+feCount, asm.Word).WithSymbol(f.l("pick")),
		asm.JEq.Imm(asm.R1, 0, "drop"),
	)
	// ClientIP affinity. Its key and time are set on every path, so
	// that the verifier sees them written wherever they are read.
	add(bpfasm.Zero(stAffKey, 24)...)
	add(bpfasm.Zero(stNow, 8)...)
	add(bpfasm.CopyMem(asm.RFP, stAffKey, asm.RFP, stCtKey, 16, asm.DWord)...)
	add(
		asm.LoadMem(asm.R1, asm.RFP, stFeVal+feID, asm.Word),
		asm.StoreMem(asm.RFP, stAffKey+16, asm.R1, asm.Word),
		asm.LoadMem(asm.R1, asm.RFP, stFeVal+feAffinity, asm.Word),
		asm.JEq.Imm(asm.R1, 0, f.l("random")),
		asm.FnKtimeGetNs.Call(),
		asm.StoreMem(asm.RFP, stNow, asm.R0, asm.DWord),
	)
	add(bpfasm.Lookup(mapAffinity, stAffKey)...)
	add(
		asm.JEq.Imm(asm.R0, 0, f.l("random")),
		// Honoured while younger than the timeout, and while its slot
		// is still one of the frontend's.
		asm.LoadMem(asm.R1, asm.R0, affLast, asm.DWord),
		asm.LoadMem(asm.R2, asm.RFP, stNow, asm.DWord),
		asm.Sub.Reg(asm.R2, asm.R1),
		asm.LoadMem(asm.R3, asm.RFP, stFeVal+feAffinity, asm.Word),
		asm.Mul.Imm(asm.R3, 1000000000),
		asm.JGE.Reg(asm.R2, asm.R3, f.l("random")),
		asm.LoadMem(asm.R1, asm.R0, affSlot, asm.Word),
		asm.LoadMem(asm.R2, asm.RFP, stFeVal+feCount, asm.Word),
		asm.JGE.Reg(asm.R1, asm.R2, f.l("random")),
		asm.StoreMem(asm.RFP, stSlotKey+4, asm.R1, asm.Word),
		asm.Ja.Label(f.l("slot")),

		asm.FnGetPrandomU32.Call().WithSymbol(f.l("random")),
		asm.LoadMem(asm.R1, asm.RFP, stFeVal+feCount, asm.Word),
		asm.Mod.Reg32(asm.R0, asm.R1),
		asm.StoreMem(asm.RFP, stSlotKey+4, asm.R0, asm.Word),

		asm.LoadMem(asm.R1, asm.RFP, stFeVal+feID, asm.Word).WithSymbol(f.l("slot")),
		asm.StoreMem(asm.RFP, stSlotKey, asm.R1, asm.Word),
	)
	add(bpfasm.Lookup(mapBackends, stSlotKey)...)
	// Sync keeps Count no greater than the slots filled; a slot missing
	// is a Sync that shrank the frontend meanwhile: drop, and the
	// client's retransmission finds the new Count.
	add(asm.JEq.Imm(asm.R0, 0, "drop"))
	add(bpfasm.CopyMem(asm.RFP, stBe, asm.R0, 0, 20, asm.Word)...)
	add(
		asm.LoadMem(asm.R1, asm.RFP, stFeVal+feFlags, asm.Word),
		asm.StoreMem(asm.RFP, stBe+beFlags, asm.R1, asm.Byte),
		asm.LoadMem(asm.R1, asm.RFP, stSlotKey, asm.Word),
		asm.StoreMem(asm.RFP, stBe+ctID, asm.R1, asm.Word),
		asm.LoadMem(asm.R1, asm.RFP, stSlotKey+4, asm.Word),
		asm.StoreMem(asm.RFP, stBe+ctSlot, asm.R1, asm.Word),
		// Record (or refresh) the client's affinity.
		asm.LoadMem(asm.R1, asm.RFP, stFeVal+feAffinity, asm.Word),
		asm.JEq.Imm(asm.R1, 0, f.l("record")),
		asm.LoadMem(asm.R1, asm.RFP, stNow, asm.DWord),
		asm.StoreMem(asm.RFP, stAffVal+affLast, asm.R1, asm.DWord),
		asm.LoadMem(asm.R1, asm.RFP, stSlotKey+4, asm.Word),
		asm.StoreMem(asm.RFP, stAffVal+affSlot, asm.R1, asm.Word),
		asm.StoreImm(asm.RFP, stAffVal+affSlot+4, 0, asm.Word),
	)
	add(bpfasm.Update(mapAffinity, stAffKey, stAffVal)...)
	// Remember the flow, and its replies' way back.
	record := bpfasm.Update(mapConntrack, stCtKey, stBe)
	record[0] = record[0].WithSymbol(f.l("record"))
	add(record...)
	add(bpfasm.Zero(stRevKey, 40)...)
	add(bpfasm.CopyMem(asm.RFP, stRevKey, asm.RFP, stBe, 16, asm.Word)...)
	add(bpfasm.CopyMem(asm.RFP, stRevKey+16, asm.RFP, stCtKey, 16, asm.DWord)...)
	add(
		asm.LoadMem(asm.R1, asm.RFP, stBe+bePort, asm.Half),
		asm.StoreMem(asm.RFP, stRevKey+32, asm.R1, asm.Half),
		asm.LoadMem(asm.R1, asm.RFP, stL4, asm.Half),
		asm.StoreMem(asm.RFP, stRevKey+34, asm.R1, asm.Half),
		asm.StoreMem(asm.RFP, stRevKey+36, asm.R8, asm.Byte),
	)
	add(bpfasm.Update(mapReverse, stRevKey, stFeKey)...)

	// Ask postrouting to masquerade, unless the client's address is
	// to be kept.
	add(
		asm.LoadMem(asm.R1, asm.RFP, stBe+beFlags, asm.Byte).WithSymbol(f.l("rewrite")),
		asm.And.Imm(asm.R1, flagLocal),
		asm.JNE.Imm(asm.R1, 0, f.l("nomark")),
		asm.LoadMem(asm.R1, asm.R6, skbMark, asm.Word),
		asm.Or.Imm32(asm.R1, int32(mark)),
		asm.StoreMem(asm.R6, skbMark, asm.R1, asm.Word),
	)
	rw := rewrite(f, true)
	rw[0] = rw[0].WithSymbol(f.l("nomark"))
	add(rw...)
	return insns
}

// egress translates a backend's reply of f back: its source becomes the
// frontend its client connected to.
func egress(f family) asm.Instructions {
	var insns asm.Instructions
	add := func(is ...asm.Instruction) { insns = append(insns, is...) }
	add(bpfasm.Zero(stRevKey, 40)...)
	add(addr16(f, stRevKey, f.saddr())...)
	add(addr16(f, stRevKey+16, f.daddr())...)
	add(
		asm.LoadMem(asm.R1, asm.RFP, stL4, asm.Half),
		asm.StoreMem(asm.RFP, stRevKey+32, asm.R1, asm.Half),
		asm.LoadMem(asm.R1, asm.RFP, stL4+2, asm.Half),
		asm.StoreMem(asm.RFP, stRevKey+34, asm.R1, asm.Half),
		asm.StoreMem(asm.RFP, stRevKey+36, asm.R8, asm.Byte),
	)
	add(bpfasm.Lookup(mapReverse, stRevKey)...)
	add(asm.JEq.Imm(asm.R0, 0, "next"))
	add(bpfasm.CopyMem(asm.RFP, stBe, asm.R0, 0, 20, asm.Word)...)
	add(rewrite(f, false)...)
	return insns
}

// rewrite writes the address and port at stBe into the packet, as its
// destination (dst) or source, with the checksums to match, and goes to
// next. The checksums are updated by difference, which is right whether
// the packet's checksum is complete (from a LAN card) or partial (from a
// local socket or a veth): the helpers leave a partial one's payload sum
// alone and fix its pseudo-header part.
func rewrite(f family, dst bool) asm.Instructions {
	hoff, poff := f.saddr(), int32(0)
	if dst {
		hoff, poff = f.daddr(), 2
	}
	n := f.addrLen()
	newAddr := int16(stBe)
	if !f.v6 {
		newAddr += 12
	}
	sfx := "s"
	if dst {
		sfx = "d"
	}
	udp := f.l("udp" + sfx)
	insns := asm.Instructions{
		asm.Mov.Reg(asm.R1, asm.RFP),
		asm.Add.Imm(asm.R1, int32(stIP+hoff)),
		asm.Mov.Imm(asm.R2, n),
		asm.Mov.Reg(asm.R3, asm.RFP),
		asm.Add.Imm(asm.R3, int32(newAddr)),
		asm.Mov.Imm(asm.R4, n),
		asm.Mov.Imm(asm.R5, 0),
		asm.FnCsumDiff.Call(),
		asm.StoreMem(asm.RFP, stDiff, asm.R0, asm.DWord),
		// The flags for the layer 4 checksum: a UDP checksum of zero
		// (none, over IPv4) stays zero.
		asm.Mov.Imm(asm.R1, 0),
		asm.JNE.Imm(asm.R8, 17, udp),
		asm.Mov.Imm(asm.R1, fMangled0),
		asm.StoreMem(asm.RFP, stFlags, asm.R1, asm.Byte).WithSymbol(udp),
	}
	if !f.v6 {
		insns = append(insns,
			asm.Mov.Reg(asm.R1, asm.R6),
			asm.Mov.Imm(asm.R2, ethHdrLen+10),
			asm.Mov.Imm(asm.R3, 0),
			asm.LoadMem(asm.R4, asm.RFP, stDiff, asm.DWord),
			asm.Mov.Imm(asm.R5, 0),
			asm.FnL3CsumReplace.Call(),
			asm.JNE.Imm(asm.R0, 0, "drop"),
		)
	}
	insns = append(insns,
		asm.Mov.Reg(asm.R1, asm.R6),
		asm.Mov.Reg(asm.R2, asm.R9),
		asm.Mov.Imm(asm.R3, 0),
		asm.LoadMem(asm.R4, asm.RFP, stDiff, asm.DWord),
		asm.LoadMem(asm.R5, asm.RFP, stFlags, asm.Byte),
		asm.Or.Imm(asm.R5, fPseudoHdr),
		asm.FnL4CsumReplace.Call(),
		asm.JNE.Imm(asm.R0, 0, "drop"),

		asm.Mov.Reg(asm.R1, asm.R6),
		asm.Mov.Imm(asm.R2, ethHdrLen+int32(hoff)),
		asm.Mov.Reg(asm.R3, asm.RFP),
		asm.Add.Imm(asm.R3, int32(newAddr)),
		asm.Mov.Imm(asm.R4, n),
		asm.Mov.Imm(asm.R5, 0),
		asm.FnSkbStoreBytes.Call(),
		asm.JNE.Imm(asm.R0, 0, "drop"),

		asm.Mov.Reg(asm.R1, asm.R6),
		asm.Mov.Reg(asm.R2, asm.R9),
		asm.LoadMem(asm.R3, asm.RFP, stL4+int16(poff), asm.Half),
		asm.LoadMem(asm.R4, asm.RFP, stBe+bePort, asm.Half),
		asm.LoadMem(asm.R5, asm.RFP, stFlags, asm.Byte),
		asm.Or.Imm(asm.R5, 2),
		asm.FnL4CsumReplace.Call(),
		asm.JNE.Imm(asm.R0, 0, "drop"),

		asm.Mov.Reg(asm.R1, asm.R6),
		asm.Mov.Reg(asm.R2, asm.R7),
		asm.Add.Imm(asm.R2, poff),
		asm.Mov.Reg(asm.R3, asm.RFP),
		asm.Add.Imm(asm.R3, stBe+bePort),
		asm.Mov.Imm(asm.R4, 2),
		asm.Mov.Imm(asm.R5, 0),
		asm.FnSkbStoreBytes.Call(),
		asm.JNE.Imm(asm.R0, 0, "drop"),
		asm.Ja.Label("next"),
	)
	return insns
}

// programSpec returns dir's program, its map references still to be
// resolved (load does).
func programSpec(dir direction, mark uint32) *ebpf.ProgramSpec {
	return &ebpf.ProgramSpec{
		Name:         "tcnat_" + dir.name,
		Type:         ebpf.SchedCLS,
		AttachType:   dir.attach,
		Instructions: program(dir, mark),
		License:      "Dual BSD/GPL",
	}
}

// load loads dir's program against maps.
func load(dir direction, mark uint32, maps map[string]*ebpf.Map) (*ebpf.Program, error) {
	return bpfasm.Load(dir.name, programSpec(dir, mark), maps)
}
