package nftlb

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"

	"github.com/google/nftables"
	"github.com/google/nftables/userdata"
	"golang.org/x/sys/unix"

	"github.com/outpost-mesh/outpost/netd/services"
)

// readBack learns what st's table holds: whether it exists and was made
// under this Config, and each frontend's hash, chains, sets and
// no-endpoint elements.
func (d *Dataplane) readBack(st *tableState) error {
	*st = tableState{p: st.p}
	fam := st.p.fam
	c, err := nftables.New(nftables.WithNetNSFd(d.nsfd()))
	if err != nil {
		return fmt.Errorf("nftables: %w", err)
	}
	tables, err := c.ListTablesOfFamily(fam.tf)
	if err != nil {
		return fmt.Errorf("list nftables %s tables: %w", fam, err)
	}
	for _, t := range tables {
		if t.Name == d.cfg.Table {
			st.exists = true
		}
	}
	if !st.exists {
		st.known = true
		return nil
	}
	tbl := d.table(st)
	rules, err := c.GetRules(tbl, &nftables.Chain{Table: tbl, Name: chainServices})
	if err != nil && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("read nftables %s %s: %w", fam, tbl.Name, err)
	}
	if len(rules) == 1 {
		comment, _ := userdata.GetString(rules[0].UserData, userdata.TypeComment)
		st.baseOK = comment == basePrefix+st.p.base
	}
	if !st.baseOK {
		// Made by another version or Config: Sync rebuilds it whole.
		st.known = true
		return nil
	}

	st.fronts = map[string]*installed{}
	st.staleChains, st.staleSets = map[string]bool{}, map[string]bool{}
	st.staleNoep = map[string][]services.Key{}
	els, err := c.GetSetElements(&nftables.Set{Table: tbl, Name: mapServices})
	if err != nil {
		return fmt.Errorf("read nftables %s map %s: %w", fam, mapServices, err)
	}
	for _, e := range els {
		k, err := decodeKey(e.Key, fam.v4)
		if err != nil {
			return fmt.Errorf("nftables %s map %s: %w", fam, mapServices, err)
		}
		st.fronts[frontendID(k)] = &installed{key: k, hash: commentHash(e.Comment)}
	}
	for _, name := range []string{mapNoepInt, mapNoepExt} {
		els, err := c.GetSetElements(&nftables.Set{Table: tbl, Name: name})
		if err != nil {
			return fmt.Errorf("read nftables %s map %s: %w", fam, name, err)
		}
		for _, e := range els {
			k, err := decodeKey(e.Key, fam.v4)
			if err != nil {
				return fmt.Errorf("nftables %s map %s: %w", fam, name, err)
			}
			f := st.fronts[frontendID(k)]
			switch {
			case f == nil || f.key != k:
				st.staleNoep[name] = append(st.staleNoep[name], k)
			case name == mapNoepInt:
				f.int = true
			default:
				f.ext = true
			}
		}
	}
	chains, err := c.ListChainsOfTableFamily(fam.tf)
	if err != nil {
		return fmt.Errorf("list nftables %s chains: %w", fam, err)
	}
	for _, ch := range chains {
		if ch.Table == nil || ch.Table.Name != tbl.Name {
			continue
		}
		if id, ok := ownerID(ch.Name); ok {
			if f := st.fronts[id]; f != nil {
				f.chains = append(f.chains, ch.Name)
			} else {
				st.staleChains[ch.Name] = true
			}
		}
	}
	sets, err := c.GetSets(tbl)
	if err != nil {
		return fmt.Errorf("list nftables %s sets: %w", fam, err)
	}
	for _, s := range sets {
		if id, ok := ownerID(s.Name); ok && !s.Anonymous {
			if f := st.fronts[id]; f != nil {
				f.sets = append(f.sets, s.Name)
			} else {
				st.staleSets[s.Name] = true
			}
		}
	}
	st.known = true
	return nil
}

// maxKeyLen is the longest key of the maps: an IPv6 address, protocol
// and port, each padded to 32 bits.
const maxKeyLen = 16 + 4 + 4

// decodeKey reads a key of the service-ips or no-endpoint maps of the
// IPv4 (v4) or IPv6 table, as the kernel returns it.
func decodeKey(b []byte, v4 bool) (services.Key, error) {
	n := 16
	if v4 {
		n = 4
	}
	if len(b) != n+8 || len(b) > maxKeyLen {
		return services.Key{}, fmt.Errorf("map key of %d bytes, want %d", len(b), n+8)
	}
	addr, _ := netip.AddrFromSlice(b[:n])
	k := services.Key{Addr: addr, Proto: services.Proto(b[n]), Port: uint16(b[n+4])<<8 | uint16(b[n+5])}
	if b[n+1]|b[n+2]|b[n+3]|b[n+6]|b[n+7] != 0 {
		return services.Key{}, fmt.Errorf("map key %x: padding not zero", b)
	}
	if !v4 && k.Addr.Is4In6() {
		return services.Key{}, fmt.Errorf("map key %x: IPv4-mapped address", b)
	}
	return k, nil
}

// commentHash returns the frontend hash at the head of a service-ips
// element's comment, or "" if it holds none.
func commentHash(comment string) string {
	h, _, _ := strings.Cut(comment, " ")
	if len(h) != 24 {
		return ""
	}
	for _, c := range h {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'v') {
			return ""
		}
	}
	return h
}
