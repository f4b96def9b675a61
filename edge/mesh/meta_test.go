package mesh

import (
	"fmt"
	"net/netip"
	"reflect"
	"testing"
	"time"

	"github.com/outpost-mesh/outpost/internal/wait"
)

func TestMetaRoundTrip(t *testing.T) {
	var d1, d2 [32]byte
	d1[0], d2[31] = 1, 2
	full := make([][32]byte, MaxPulling)
	for _, m := range []Meta{
		{},
		{Uplink: true},
		{ImagePort: 7947, RelayPort: 65535, Uplink: true, Pulling: [][32]byte{d1, d2}},
		{RelayPort: 1, Pulling: full},
	} {
		b, err := encodeMeta(m)
		if err != nil {
			t.Fatalf("encodeMeta(%+v) = %v", m, err)
		}
		if len(b) > maxMetaSize || len(b) > 512 {
			t.Errorf("encodeMeta(%+v) is %d bytes, over the limit", m, len(b))
		}
		got, err := decodeMeta(b)
		if err != nil || !reflect.DeepEqual(got, m) {
			t.Errorf("decodeMeta(encodeMeta(%+v)) = %+v, %v", m, got, err)
		}
	}
	if _, err := encodeMeta(Meta{Pulling: make([][32]byte, MaxPulling+1)}); err == nil {
		t.Error("encodeMeta took more than MaxPulling digests")
	}
	for _, b := range [][]byte{
		{2, 0, 0, 0, 0},                // another version
		{1, 2, 0, 0, 0},                // unknown flag
		{1, 0, 0x80},                   // truncated port
		{1, 0, 0xff, 0xff, 0x7f, 0, 0}, // port over 65535
		{1, 0, 0, 0, 1},                // a digest announced, none there
		{1, 0, 0, 0, 0, 9},             // bytes left over
		{1, 0, 0, 0, MaxPulling + 1},
	} {
		if m, err := decodeMeta(b); err == nil {
			t.Errorf("decodeMeta(%v) = %+v, want an error", b, m)
		}
	}
}

func FuzzDecodeMeta(f *testing.F) {
	b, _ := encodeMeta(Meta{ImagePort: 7947, RelayPort: 7948, Uplink: true, Pulling: [][32]byte{{1}}})
	f.Add(b)
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := decodeMeta(b)
		if err != nil {
			return
		}
		again, err := encodeMeta(m)
		if err != nil {
			t.Fatalf("encodeMeta(decodeMeta(%x)) = %v", b, err)
		}
		if back, err := decodeMeta(again); err != nil || !reflect.DeepEqual(back, m) || len(again) > len(b) {
			t.Fatalf("decodeMeta(%x) = %+v, which encodes as %x, which decodes as %+v, %v", b, m, again, back, err)
		}
	})
}

func TestSetMeta(t *testing.T) {
	ms := site(t, 2, key1)
	wait.For(t, 10*time.Second, "n0 sees n1", sees(ms[0], "n1"))
	want := Meta{ImagePort: 7947, Uplink: true, Pulling: [][32]byte{{7}}}
	if err := ms[1].SetMeta(want); err != nil {
		t.Fatal(err)
	}
	wait.For(t, 5*time.Second, "n0 hears n1's meta", func() (bool, string) {
		p := ms[0].Peers()
		return len(p) == 1 && reflect.DeepEqual(p[0].Meta, want), fmt.Sprintf("peers %+v", p)
	})
	// A third node joining later learns it at once.
	n2 := start(t, testConfig("n2", "s1", key1))
	if _, err := n2.Join([]netip.AddrPort{ms[0].Addr()}); err != nil {
		t.Fatal(err)
	}
	wait.For(t, 5*time.Second, "n2 knows n1's meta", func() (bool, string) {
		for _, p := range n2.Peers() {
			if p.Name == "n1" {
				return reflect.DeepEqual(p.Meta, want), fmt.Sprintf("n1 %+v", p)
			}
		}
		return false, "n2 does not see n1"
	})
}
