package netd

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"strings"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// The nf_tables layout netd owns, one table per bridge in the node netns:
//
//	table ip netd-<bridge>
//	  chain prerouting   nat dstnat:  fib daddr type local jump hostports
//	  chain output       nat dstnat:  fib daddr type local jump hostports
//	  chain hostports:                one dnat rule per pod hostPort, commented
//	                                  "<uid> <proto> <hostIP>:<hostPort> <containerPort>"
//	  chain postrouting  nat srcnat:  pods to outside the cluster: masquerade;
//	                                  dnat'ed from a pod or from loopback into the
//	                                  bridge: masquerade, so replies come back
//	                                  through the node (hairpin, localhost)
//	  chain input        filter:      to 127/8 from the bridge unless dnat'ed: drop
//	                                  (route_localnet's hole, CVE-2020-8558)
//
// Setup rewrites the base chains in one transaction and never touches
// hostports, which AddPod and RemovePod edit a pod at a time.
const (
	chainPrerouting  = "prerouting"
	chainOutput      = "output"
	chainPostrouting = "postrouting"
	chainInput       = "input"
	chainHostPorts   = "hostports"

	tablePrefix = "netd-"
)

var loopbackNet = netip.MustParsePrefix("127.0.0.0/8")

// ipsDstNAT is conntrack's IPS_DST_NAT status bit (linux/netfilter/nf_conntrack_common.h).
const ipsDstNAT = 1 << 5

func (n *Network) table() *nftables.Table {
	return &nftables.Table{Name: tablePrefix + n.cfg.Bridge, Family: nftables.TableFamilyIPv4}
}

func (n *Network) chains(t *nftables.Table) (pre, out, post, in, hp *nftables.Chain) {
	accept := nftables.ChainPolicyAccept
	pre = &nftables.Chain{Name: chainPrerouting, Table: t, Type: nftables.ChainTypeNAT, Hooknum: nftables.ChainHookPrerouting, Priority: nftables.ChainPriorityNATDest}
	out = &nftables.Chain{Name: chainOutput, Table: t, Type: nftables.ChainTypeNAT, Hooknum: nftables.ChainHookOutput, Priority: nftables.ChainPriorityNATDest}
	post = &nftables.Chain{Name: chainPostrouting, Table: t, Type: nftables.ChainTypeNAT, Hooknum: nftables.ChainHookPostrouting, Priority: nftables.ChainPriorityNATSource}
	in = &nftables.Chain{Name: chainInput, Table: t, Type: nftables.ChainTypeFilter, Hooknum: nftables.ChainHookInput, Priority: nftables.ChainPriorityFilter, Policy: &accept}
	hp = &nftables.Chain{Name: chainHostPorts, Table: t}
	return
}

// setupRules creates or repairs the table in one transaction.
func (n *Network) setupRules(c *nftables.Conn) error {
	t := c.AddTable(n.table())
	pre, out, post, in, hp := n.chains(t)
	c.AddChain(hp)
	for _, ch := range []*nftables.Chain{pre, out, post, in} {
		c.AddChain(ch)
		c.FlushChain(ch)
	}
	jump := []expr.Any{
		&expr.Fib{Register: 1, FlagDADDR: true, ResultADDRTYPE: true},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binaryutil.NativeEndian.PutUint32(unix.RTN_LOCAL)},
		&expr.Verdict{Kind: expr.VerdictJump, Chain: chainHostPorts},
	}
	c.AddRule(&nftables.Rule{Table: t, Chain: pre, Exprs: jump})
	c.AddRule(&nftables.Rule{Table: t, Chain: out, Exprs: jump})

	// Pods to anything outside the cluster leave as the node.
	c.AddRule(&nftables.Rule{Table: t, Chain: post, Exprs: concat(
		matchPrefix(12, n.cfg.PodCIDR, true),
		matchPrefix(16, n.cfg.ClusterCIDR, false),
		[]expr.Any{&expr.Masq{}},
	)})
	// A hostPort reached from a pod (its own, hairpin, or another's on this
	// bridge, which would answer it directly) or from the node's loopback.
	for _, src := range []netip.Prefix{n.cfg.PodCIDR, loopbackNet} {
		c.AddRule(&nftables.Rule{Table: t, Chain: post, Exprs: concat(
			matchIfname(unix.NFT_META_OIFNAME, n.cfg.Bridge),
			matchDNAT(true),
			matchPrefix(12, src, true),
			[]expr.Any{&expr.Masq{}},
		)})
	}
	c.AddRule(&nftables.Rule{Table: t, Chain: in, Exprs: concat(
		matchIfname(unix.NFT_META_IIFNAME, n.cfg.Bridge),
		matchPrefix(16, loopbackNet, true),
		matchDNAT(false),
		[]expr.Any{&expr.Verdict{Kind: expr.VerdictDrop}},
	)})
	if err := c.Flush(); err != nil {
		return fmt.Errorf("install nftables rules: %w", err)
	}
	return nil
}

// deleteTable removes the table, and with it every rule netd made.
func (n *Network) deleteTable(c *nftables.Conn) error {
	c.DelTable(n.table())
	if err := c.Flush(); err != nil && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("delete nftables table: %w", err)
	}
	return nil
}

// otherNetworks reports whether the node netns holds the table of another
// Network (another bridge).
func (n *Network) otherNetworks(c *nftables.Conn) (bool, error) {
	tables, err := c.ListTablesOfFamily(nftables.TableFamilyIPv4)
	if err != nil {
		return false, fmt.Errorf("list nftables tables: %w", err)
	}
	for _, t := range tables {
		if strings.HasPrefix(t.Name, tablePrefix) && t.Name != n.table().Name {
			return true, nil
		}
	}
	return false, nil
}

// hostPortRule is one rule of the hostports chain that carries a pod's
// hostPort.
type hostPortRule struct {
	uid    string
	hp     HostPort
	handle uint64
}

// listHostPorts returns the pods' rules of the hostports chain; rules it
// cannot read as netd's are left out.
func (n *Network) listHostPorts(c *nftables.Conn) ([]hostPortRule, error) {
	t := n.table()
	_, _, _, _, hp := n.chains(t)
	rules, err := c.GetRules(t, hp)
	if err != nil {
		return nil, fmt.Errorf("list hostPort rules: %w", err)
	}
	var out []hostPortRule
	for _, r := range rules {
		comment, ok := ruleUserComment(r.UserData)
		if !ok {
			continue
		}
		if uid, h, ok := parseRuleComment(comment); ok {
			out = append(out, hostPortRule{uid: uid, hp: h, handle: r.Handle})
		}
	}
	return out, nil
}

// setHostPorts replaces uid's hostPort rules with ones for hps to ip, in
// one transaction. existing is what listHostPorts returned.
func (n *Network) setHostPorts(c *nftables.Conn, existing []hostPortRule, uid string, ip netip.Addr, hps []HostPort) error {
	t := n.table()
	_, _, _, _, hpChain := n.chains(t)
	for _, r := range existing {
		if r.uid == uid {
			if err := c.DelRule(&nftables.Rule{Table: t, Chain: hpChain, Handle: r.handle}); err != nil {
				return fmt.Errorf("delete hostPort rule: %w", err)
			}
		}
	}
	for _, h := range hps {
		k := h.key()
		proto, _ := k.Protocol.ipProto()
		var exprs []expr.Any
		if !h.allIPs() {
			exprs = append(exprs,
				&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 16, Len: 4},
				&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: k.HostIP.AsSlice()},
			)
		}
		exprs = append(exprs,
			&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{proto}},
			&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binaryutil.BigEndian.PutUint16(k.HostPort)},
			&expr.Immediate{Register: 1, Data: ip.AsSlice()},
			&expr.Immediate{Register: 2, Data: binaryutil.BigEndian.PutUint16(k.ContainerPort)},
			&expr.NAT{Type: expr.NATTypeDestNAT, Family: unix.NFPROTO_IPV4, RegAddrMin: 1, RegProtoMin: 2, Specified: true},
		)
		c.AddRule(&nftables.Rule{Table: t, Chain: hpChain, Exprs: exprs, UserData: userComment(ruleComment(uid, h))})
	}
	if err := c.Flush(); err != nil {
		return fmt.Errorf("set hostPort rules: %w", err)
	}
	return nil
}

// matchPrefix matches the IPv4 address at offset (12 source, 16
// destination) of the network header being in p, or not in it.
func matchPrefix(offset uint32, p netip.Prefix, in bool) []expr.Any {
	mask := make([]byte, 4)
	binary.BigEndian.PutUint32(mask, ^uint32(0)<<(32-p.Bits()))
	op := expr.CmpOpEq
	if !in {
		op = expr.CmpOpNeq
	}
	return []expr.Any{
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: offset, Len: 4},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: mask, Xor: make([]byte, 4)},
		&expr.Cmp{Op: op, Register: 1, Data: p.Masked().Addr().AsSlice()},
	}
}

// matchIfname matches the input or output interface name exactly.
func matchIfname(key expr.MetaKey, name string) []expr.Any {
	b := make([]byte, unix.IFNAMSIZ)
	copy(b, name)
	return []expr.Any{
		&expr.Meta{Key: key, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: b},
	}
}

// matchDNAT matches a connection that was, or was not, destination-NATed.
func matchDNAT(dnat bool) []expr.Any {
	op := expr.CmpOpNeq
	if !dnat {
		op = expr.CmpOpEq
	}
	return []expr.Any{
		&expr.Ct{Register: 1, Key: expr.CtKeySTATUS},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: binaryutil.NativeEndian.PutUint32(ipsDstNAT), Xor: make([]byte, 4)},
		&expr.Cmp{Op: op, Register: 1, Data: make([]byte, 4)},
	}
}

func concat(parts ...[]expr.Any) []expr.Any {
	var out []expr.Any
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

// udataComment is the type of a comment in a rule's user data, a list of
// type-length-value records, as the nft tool writes it.
const udataComment = 0

// userComment encodes s as a rule's user data, NUL-terminated as nft does.
func userComment(s string) []byte {
	b := []byte{udataComment, byte(len(s) + 1)}
	b = append(b, s...)
	return append(b, 0)
}

// ruleUserComment returns the comment in a rule's user data, if it holds
// one; it reads the records with bounds checks, as user data may come from
// any program that added a rule.
func ruleUserComment(udata []byte) (string, bool) {
	for len(udata) >= 2 {
		typ, n := udata[0], int(udata[1])
		if len(udata) < 2+n {
			return "", false
		}
		if typ == udataComment {
			v := udata[2 : 2+n]
			if len(v) > 0 && v[len(v)-1] == 0 {
				v = v[:len(v)-1]
			}
			return string(v), true
		}
		udata = udata[2+n:]
	}
	return "", false
}
