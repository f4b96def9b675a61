package services

import (
	"net/netip"
	"testing"
)

func TestDiff(t *testing.T) {
	key := func(s string) Key { return Key{Addr: netip.MustParseAddr(s), Port: 80, Proto: TCP} }
	be := func(s string) Backend { return Backend{Addr: netip.MustParseAddrPort(s)} }
	a := &Frontend{Key: key("10.43.0.1"), Kind: ClusterIP, Service: "default/a", Backends: []Backend{be("10.42.0.2:80")}}
	b := &Frontend{Key: key("10.43.0.2"), Kind: ClusterIP, Service: "default/b", Backends: []Backend{be("10.42.0.3:80")}}
	b2 := &Frontend{Key: key("10.43.0.2"), Kind: ClusterIP, Service: "default/b", Backends: []Backend{be("10.42.0.3:80"), be("10.42.0.4:80")}}
	c := &Frontend{Key: key("10.43.0.3"), Kind: ClusterIP, Service: "default/c"}

	changed, removed := Diff(Table{a.Key: a, b.Key: b}, Table{a.Key: a, b.Key: b2, c.Key: c})
	if len(removed) != 0 {
		t.Errorf("removed %v, want none", removed)
	}
	got := map[Key]bool{}
	for _, f := range changed {
		got[f.Key] = true
	}
	if len(changed) != 2 || !got[b.Key] || !got[c.Key] {
		t.Errorf("changed %v, want b and c", got)
	}

	changed, removed = Diff(Table{a.Key: a, b.Key: b}, Table{b.Key: b})
	if len(changed) != 0 || len(removed) != 1 || removed[0] != a.Key {
		t.Errorf("Diff = %v, %v; want nothing changed and a removed", changed, removed)
	}
	if !a.Equal(a) || a.Equal(b) || a.Equal(nil) || !(*Frontend)(nil).Equal(nil) {
		t.Error("Equal is wrong")
	}
}
