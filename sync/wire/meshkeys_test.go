package wire

import (
	"bytes"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"
)

// day0 is the start of a day's epoch: epoch 20790 of a day's period.
var day0 = time.Unix(20790*86400, 0).UTC()

// testMeshKey returns a key of 32 bytes b.
func testMeshKey(b byte) []byte { return bytes.Repeat([]byte{b}, MeshKeySize) }

func sampleMeshKeys() *MeshKeys {
	k := &MeshKeys{Site: "store-7"}
	for i := range 3 {
		k.Keys = append(k.Keys, MeshKey{From: day0.Add(time.Duration(i) * 24 * time.Hour), Key: testMeshKey(byte(0x10 + i))})
	}
	return k
}

func TestMeshKeysRoundTrip(t *testing.T) {
	for _, k := range []*MeshKeys{sampleMeshKeys(), {Site: "a"}, {Site: "s", Keys: []MeshKey{{Key: testMeshKey(1)}}}} {
		got, err := UnmarshalMeshKeys(MarshalMeshKeys(k))
		if err != nil {
			t.Fatalf("UnmarshalMeshKeys(MarshalMeshKeys(%+v)) = %v", k, err)
		}
		if !reflect.DeepEqual(got, k) {
			t.Errorf("UnmarshalMeshKeys(MarshalMeshKeys(k)) = %+v, want %+v", got, k)
		}
	}
	if k := MeshKeysKey("store-7"); k.Validate() != nil || k.String() != "meshkeys//store-7" {
		t.Errorf("MeshKeysKey(store-7) = %v, want meshkeys//store-7", k)
	}
}

func TestMeshKeysMalformed(t *testing.T) {
	many := &MeshKeys{Site: "s"}
	for i := range MaxMeshKeys + 1 {
		many.Keys = append(many.Keys, MeshKey{From: day0.Add(time.Duration(i) * time.Hour), Key: testMeshKey(1)})
	}
	unsorted := sampleMeshKeys()
	unsorted.Keys[0], unsorted.Keys[1] = unsorted.Keys[1], unsorted.Keys[0]
	twice := sampleMeshKeys()
	twice.Keys[1].From = twice.Keys[0].From
	short := sampleMeshKeys()
	short.Keys[2].Key = short.Keys[2].Key[:16]
	for _, tc := range []struct {
		name string
		b    []byte
	}{
		{"too large", make([]byte, MaxMeshKeysSize+1)},
		{"too many keys", MarshalMeshKeys(many)},
		{"no site", MarshalMeshKeys(&MeshKeys{Keys: sampleMeshKeys().Keys})},
		{"site too long", MarshalMeshKeys(&MeshKeys{Site: strings.Repeat("s", 64)})},
		{"site with a slash", MarshalMeshKeys(&MeshKeys{Site: "a/b"})},
		{"site ending in a dash", MarshalMeshKeys(&MeshKeys{Site: "a-"})},
		{"unsorted keys", MarshalMeshKeys(unsorted)},
		{"two keys of one start", MarshalMeshKeys(twice)},
		{"short key", MarshalMeshKeys(short)},
		{"truncated", MarshalMeshKeys(sampleMeshKeys())[:40]},
		{"varint where a message", []byte{0x10, 0x01}},
	} {
		if _, err := UnmarshalMeshKeys(tc.b); !errors.Is(err, ErrMalformed) {
			t.Errorf("UnmarshalMeshKeys(%s) = %v, want ErrMalformed", tc.name, err)
		}
	}
	if err := (&MeshKeys{Site: strings.Repeat("s", 63), Keys: sampleMeshKeys().Keys}).Validate(); err != nil {
		t.Errorf("Validate of a 63-byte site = %v", err)
	}
}

// TestMeshKeysRing: the primary is the latest key started, then the one
// before it, then those ahead.
func TestMeshKeysRing(t *testing.T) {
	k := &MeshKeys{Site: "s"}
	for i := range 5 { // keys 0..4, key i from day0 + i days
		k.Keys = append(k.Keys, MeshKey{From: day0.Add(time.Duration(i) * 24 * time.Hour), Key: testMeshKey(byte(i))})
	}
	day := func(d float64) time.Time { return day0.Add(time.Duration(d * float64(24*time.Hour))) }
	for _, tc := range []struct {
		name string
		now  time.Time
		want []byte // the keys' numbers
	}{
		{"before all: the earliest, then all ahead", day(-3), []byte{0, 1, 2, 3, 4}},
		{"at the first's start", day(0), []byte{0, 1, 2, 3, 4}},
		{"in the second", day(1.5), []byte{1, 0, 2, 3, 4}},
		{"a second before the third", day(2).Add(-time.Second), []byte{1, 0, 2, 3, 4}},
		{"at the third's start: the first dropped", day(2), []byte{2, 1, 3, 4}},
		{"in the last", day(4.2), []byte{4, 3}},
		{"long past all: the last kept", day(400), []byte{4, 3}},
	} {
		var got []byte
		for _, key := range k.Ring(tc.now) {
			got = append(got, key[0])
		}
		if !bytes.Equal(got, tc.want) {
			t.Errorf("%s: Ring(%v) = keys %v, want %v", tc.name, tc.now, got, tc.want)
		}
	}
	one := &MeshKeys{Site: "s", Keys: k.Keys[2:3]}
	for _, now := range []time.Time{day(0), day(2), day(9)} {
		if got := one.Ring(now); len(got) != 1 || got[0][0] != 2 {
			t.Errorf("one key: Ring(%v) = %d keys, want that key", now, len(got))
		}
	}
	if got := (&MeshKeys{Site: "s"}).Ring(day0); got != nil {
		t.Errorf("no keys: Ring = %v, want nil", got)
	}
}

// FuzzUnmarshalMeshKeys feeds arbitrary bytes to the decoder of the
// objects the edge keeps on disk: it must return keys or an error, never
// panic, and what it decodes must be valid and encode back to the same.
func FuzzUnmarshalMeshKeys(f *testing.F) {
	f.Add(MarshalMeshKeys(sampleMeshKeys()))
	f.Add([]byte{})
	f.Add([]byte("\x0a\x01s" + strings.Repeat("\x12\x00", 10)))
	f.Fuzz(func(t *testing.T, b []byte) {
		k, err := UnmarshalMeshKeys(b)
		if err != nil {
			return
		}
		if err := k.Validate(); err != nil {
			t.Fatalf("decoded keys do not validate: %v", err)
		}
		again, err := UnmarshalMeshKeys(MarshalMeshKeys(k))
		if err != nil {
			t.Fatalf("re-decode: %v", err)
		}
		if !reflect.DeepEqual(again, k) {
			t.Fatalf("re-decode = %+v, want %+v", again, k)
		}
		if !bytes.Equal(MarshalMeshKeys(again), MarshalMeshKeys(k)) {
			t.Fatal("encoding is not stable")
		}
		if n := len(k.Ring(time.Now())); len(k.Keys) > 0 && (n == 0 || n > len(k.Keys)) {
			t.Fatalf("Ring of %d keys = %d keys", len(k.Keys), n)
		}
	})
}
