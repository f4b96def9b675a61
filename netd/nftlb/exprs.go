package nftlb

import (
	"net/netip"
	"time"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"

	"github.com/outpost-mesh/outpost/netd/services"
)

// family is what differs between the ip and the ip6 table.
type family struct {
	v4       bool
	tf       nftables.TableFamily
	nfproto  uint32
	saddrOff uint32 // of the network header
	daddrOff uint32
	addrLen  uint32
	addrType nftables.SetDatatype
	keyType  nftables.SetDatatype // address . protocol . port
	portUnr  uint8                // ICMP(v6) port unreachable code

	pod, cluster netip.Prefix // this family's CIDRs, or zero
}

func newFamily(cfg Config, v4 bool) *family {
	f := &family{v4: v4, pod: prefixOf(cfg.PodCIDRs, v4), cluster: prefixOf(cfg.ClusterCIDRs, v4)}
	if v4 {
		f.tf, f.nfproto, f.saddrOff, f.daddrOff, f.addrLen = nftables.TableFamilyIPv4, unix.NFPROTO_IPV4, 12, 16, 4
		f.addrType, f.portUnr = nftables.TypeIPAddr, 3 // ICMP_PORT_UNREACH
	} else {
		f.tf, f.nfproto, f.saddrOff, f.daddrOff, f.addrLen = nftables.TableFamilyIPv6, unix.NFPROTO_IPV6, 8, 24, 16
		f.addrType, f.portUnr = nftables.TypeIP6Addr, 4 // ICMPV6_PORT_UNREACH
	}
	f.keyType = nftables.MustConcatSetType(f.addrType, nftables.TypeInetProto, nftables.TypeInetService)
	return f
}

func (f *family) String() string {
	if f.v4 {
		return "ip"
	}
	return "ip6"
}

// The registers: concatenations fill consecutive 32-bit registers from
// NFT_REG32_00; the rest use the 128-bit NFT_REG_1 and NFT_REG_2.
const (
	reg32 = 8 // NFT_REG32_00
	reg1  = 1
	reg2  = 2
)

// keyLoad loads the destination address, layer 4 protocol and
// destination port into consecutive registers, as a frontend's key.
func (f *family) keyLoad() []expr.Any {
	words := f.addrLen / 4
	return []expr.Any{
		&expr.Payload{DestRegister: reg32, Base: expr.PayloadBaseNetworkHeader, Offset: f.daddrOff, Len: f.addrLen},
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: reg32 + words},
		&expr.Payload{DestRegister: reg32 + words + 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
	}
}

// keyBytes is k as an element of a map keyed by keyType: each field
// padded to a 32-bit word.
func keyBytes(k services.Key) []byte {
	a := k.Addr.AsSlice()
	b := make([]byte, 0, len(a)+8)
	b = append(b, a...)
	b = append(b, byte(k.Proto), 0, 0, 0)
	return append(b, byte(k.Port>>8), byte(k.Port), 0, 0)
}

// lookupVmap looks the loaded key up in the verdict map m.
func lookupVmap(m *nftables.Set) *expr.Lookup {
	return &expr.Lookup{SourceRegister: reg32, SetName: m.Name, SetID: m.ID, IsDestRegSet: true, DestRegister: 0}
}

// saddrIn matches the source address being in p, or not.
func (f *family) saddrIn(p netip.Prefix, in bool) []expr.Any {
	mask := netip.PrefixFrom(p.Addr(), p.Bits())
	m := make([]byte, f.addrLen)
	for i := 0; i < mask.Bits(); i++ {
		m[i/8] |= 0x80 >> (i % 8)
	}
	op := expr.CmpOpEq
	if !in {
		op = expr.CmpOpNeq
	}
	return []expr.Any{
		&expr.Payload{DestRegister: reg1, Base: expr.PayloadBaseNetworkHeader, Offset: f.saddrOff, Len: f.addrLen},
		&expr.Bitwise{SourceRegister: reg1, DestRegister: reg1, Len: f.addrLen, Mask: m, Xor: make([]byte, f.addrLen)},
		&expr.Cmp{Op: op, Register: reg1, Data: p.Masked().Addr().AsSlice()},
	}
}

// saddrIs matches the source address being a.
func (f *family) saddrIs(a netip.Addr) []expr.Any {
	return []expr.Any{
		&expr.Payload{DestRegister: reg1, Base: expr.PayloadBaseNetworkHeader, Offset: f.saddrOff, Len: f.addrLen},
		&expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: a.AsSlice()},
	}
}

// saddrLoad loads the source address into reg1.
func (f *family) saddrLoad() expr.Any {
	return &expr.Payload{DestRegister: reg1, Base: expr.PayloadBaseNetworkHeader, Offset: f.saddrOff, Len: f.addrLen}
}

// fromLocal matches packets from one of the node's own addresses: fib
// saddr type local.
func fromLocal() []expr.Any {
	return []expr.Any{
		&expr.Fib{Register: reg1, FlagSADDR: true, ResultADDRTYPE: true},
		&expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: binaryutil.NativeEndian.PutUint32(unix.RTN_LOCAL)},
	}
}

// ctNew matches the first packet of a connection.
func ctNew() []expr.Any {
	return []expr.Any{
		&expr.Ct{Register: reg1, Key: expr.CtKeySTATE},
		&expr.Bitwise{SourceRegister: reg1, DestRegister: reg1, Len: 4, Mask: binaryutil.NativeEndian.PutUint32(expr.CtStateBitNEW), Xor: make([]byte, 4)},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: reg1, Data: make([]byte, 4)},
	}
}

// setMark ors bit into the packet mark.
func setMark(bit uint32) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyMARK, Register: reg1},
		&expr.Bitwise{SourceRegister: reg1, DestRegister: reg1, Len: 4, Mask: binaryutil.NativeEndian.PutUint32(^bit), Xor: binaryutil.NativeEndian.PutUint32(bit)},
		&expr.Meta{Key: expr.MetaKeyMARK, SourceRegister: true, Register: reg1},
	}
}

// dnat translates the destination to b.
func (f *family) dnat(b netip.AddrPort) []expr.Any {
	return []expr.Any{
		&expr.Immediate{Register: reg1, Data: b.Addr().AsSlice()},
		&expr.Immediate{Register: reg2, Data: binaryutil.BigEndian.PutUint16(b.Port())},
		&expr.NAT{Type: expr.NATTypeDestNAT, Family: f.nfproto, RegAddrMin: reg1, RegProtoMin: reg2, Specified: true},
	}
}

// updateAffinity adds the source address to set, or renews its timeout.
func (f *family) updateAffinityByName(set string, timeout time.Duration) []expr.Any {
	return []expr.Any{
		f.saddrLoad(),
		&expr.Dynset{SrcRegKey: reg1, SetName: set, Operation: unix.NFT_DYNSET_OP_UPDATE, Timeout: timeout},
	}
}

// inAffinity jumps to chain when the source address is in set.
func (f *family) inAffinityByName(set, chain string) []expr.Any {
	return []expr.Any{
		f.saddrLoad(),
		&expr.Lookup{SourceRegister: reg1, SetName: set},
		&expr.Verdict{Kind: expr.VerdictGoto, Chain: chain},
	}
}

func goTo(chain string) *expr.Verdict          { return &expr.Verdict{Kind: expr.VerdictGoto, Chain: chain} }
func jump(chain string) *expr.Verdict          { return &expr.Verdict{Kind: expr.VerdictJump, Chain: chain} }
func verdict(k expr.VerdictKind) *expr.Verdict { return &expr.Verdict{Kind: k} }

func cat(parts ...[]expr.Any) []expr.Any {
	n := 0
	for _, p := range parts {
		n += len(p)
	}
	out := make([]expr.Any, 0, n)
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}
