package tcnat

import (
	"errors"
	"fmt"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// The dataplane's nftables table, in the ip and the ip6 family:
//
//	table ip <Table> {
//	  chain postrouting { type nat hook postrouting priority srcnat;
//	    meta mark & M == M meta mark set meta mark & ~M masquerade to :P-Q
//	  }
//	}
//
// The ingress program marks the packets of flows to masquerade; nat
// masquerades a flow's first packet and conntrack the rest, and
// un-masquerades the replies before they are routed back out through the
// LAN interface, where the egress program shows them as the frontend.
const chainPost = "postrouting"

var nftFamilies = []nftables.TableFamily{nftables.TableFamilyIPv4, nftables.TableFamilyIPv6}

// ensureNFT makes the tables, or makes an existing one's chain hold just
// the masquerade rule, in one transaction.
func ensureNFT(nsfd int, cfg *Config) error {
	c, err := nftables.New(nftables.WithNetNSFd(nsfd))
	if err != nil {
		return fmt.Errorf("nftables: %w", err)
	}
	defer c.CloseLasting()
	prio := nftables.ChainPriorityNATSource
	for _, tf := range nftFamilies {
		t := c.AddTable(&nftables.Table{Name: cfg.Table, Family: tf})
		ch := c.AddChain(&nftables.Chain{Name: chainPost, Table: t, Type: nftables.ChainTypeNAT,
			Hooknum: nftables.ChainHookPostrouting, Priority: prio})
		c.FlushChain(ch)
		c.AddRule(&nftables.Rule{Table: t, Chain: ch, Exprs: masquerade(cfg)})
	}
	if err := c.Flush(); err != nil {
		return fmt.Errorf("nftables table %s: %w", cfg.Table, err)
	}
	return nil
}

// masquerade is `meta mark & m == m meta mark set meta mark & ~m
// masquerade to :min-max`: the mark is the program's request, and
// cleared so that it does not leak into whatever else reads marks.
func masquerade(cfg *Config) []expr.Any {
	m := cfg.MasqueradeMark
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyMARK, Register: 1},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: binaryutil.NativeEndian.PutUint32(m), Xor: make([]byte, 4)},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binaryutil.NativeEndian.PutUint32(m)},
		&expr.Meta{Key: expr.MetaKeyMARK, Register: 1},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: binaryutil.NativeEndian.PutUint32(^m), Xor: make([]byte, 4)},
		&expr.Meta{Key: expr.MetaKeyMARK, SourceRegister: true, Register: 1},
		&expr.Immediate{Register: 1, Data: binaryutil.BigEndian.PutUint16(cfg.MasqueradePortMin)},
		&expr.Immediate{Register: 2, Data: binaryutil.BigEndian.PutUint16(cfg.MasqueradePortMax)},
		&expr.Masq{ToPorts: true, RegProtoMin: 1, RegProtoMax: 2},
	}
}

// removeNFT deletes the tables; tables already gone are not an error.
func removeNFT(nsfd int, table string) error {
	var errs []error
	for _, tf := range nftFamilies {
		c, err := nftables.New(nftables.WithNetNSFd(nsfd))
		if err != nil {
			return fmt.Errorf("nftables: %w", err)
		}
		c.DelTable(&nftables.Table{Name: table, Family: tf})
		if err := c.Flush(); err != nil && !errors.Is(err, unix.ENOENT) {
			errs = append(errs, fmt.Errorf("delete nftables table %s: %w", table, err))
		}
		c.CloseLasting()
	}
	return errors.Join(errs...)
}
