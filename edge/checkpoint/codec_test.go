package checkpoint

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/outpost-mesh/outpost/sync/wire"
)

func TestCodecRoundTrip(t *testing.T) {
	k := podKey("default", "web-1")
	for _, tc := range []struct {
		rev int64
		raw []byte
	}{
		{0, []byte{0}},
		{1, []byte("k8s\x00pod")},
		{maxRevision, bytes.Repeat([]byte{0xff}, MaxValueSize)},
	} {
		rev, raw, err := decodeObject(objectKey(k), encodeObject(objectKey(k), tc.rev, tc.raw))
		if err != nil || rev != tc.rev || !bytes.Equal(raw, tc.raw) {
			t.Errorf("decodeObject(encodeObject(%d, %d bytes)) = %d, %d bytes, %v", tc.rev, len(tc.raw), rev, len(raw), err)
		}
	}
	for _, v := range [][]byte{nil, []byte("v"), make([]byte, MaxValueSize)} {
		got, err := decodeBytes(localKey("a"), encodeBytes(localKey("a"), typeLocal, v), typeLocal)
		if err != nil || !bytes.Equal(got, v) {
			t.Errorf("decodeBytes(encodeBytes(%d bytes)) = %d bytes, %v", len(v), len(got), err)
		}
	}
	if v, err := decodeUint(metaRev, encodeUint(metaRev, 1<<40)); err != nil || v != 1<<40 {
		t.Errorf("decodeUint(encodeUint(1<<40)) = %d, %v", v, err)
	}
	cluster := wire.Key{Resource: wire.ResourceNodes, Name: "edge-1"}
	if got, err := parseObjectKey(objectKey(cluster)); err != nil || got != cluster {
		t.Errorf("parseObjectKey(objectKey(%v)) = %v, %v", cluster, got, err)
	}
	want := outboxRef{seq: 1 << 33, kind: wire.KindEvent, key: k}
	if got, err := parseOutboxKey(outboxKey(want.seq, want.kind, want.key)); err != nil || got != want {
		t.Errorf("parseOutboxKey(outboxKey(%v)) = %v, %v", want, got, err)
	}
	// The longest keys fit the decoders' limit.
	long := wire.Key{Resource: strings.Repeat("r", 253), Namespace: strings.Repeat("n", 253), Name: strings.Repeat("m", 253)}
	if _, err := parseOutboxKey(outboxKey(1, 1, long)); err != nil {
		t.Errorf("parseOutboxKey(longest key) = %v", err)
	}
	if got, err := parseLocalKey(localKey(strings.Repeat("l", MaxLocalKeySize))); err != nil || len(got) != MaxLocalKeySize {
		t.Errorf("parseLocalKey(longest key) = %d bytes, %v", len(got), err)
	}
}

func TestDecodeCorrupt(t *testing.T) {
	key := objectKey(podKey("ns", "a"))
	good := encodeObject(key, 5, []byte("value"))
	flipped := bytes.Clone(good)
	flipped[4] ^= 1
	for name, b := range map[string][]byte{
		"empty":           nil,
		"short":           {1, 1, 0, 0},
		"bit flip":        flipped,
		"truncated":       good[:len(good)-1],
		"too large":       make([]byte, maxRecordSize+1),
		"other key":       encodeObject(objectKey(podKey("ns", "b")), 5, []byte("value")),
		"other type":      encodeBytes(key, typeLocal, []byte("value")),
		"newer version":   seal(key, []byte{recordVersion + 1, typeObject, 5, 'v'}),
		"no object":       seal(key, []byte{recordVersion, typeObject, 5}),
		"long varint":     seal(key, []byte{recordVersion, typeObject, 0x85, 0x00, 'v'}),
		"revision > 2^62": seal(key, append([]byte{recordVersion, typeObject}, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f, 'v')),
	} {
		if _, _, err := decodeObject(key, b); !errors.Is(err, ErrCorrupt) {
			t.Errorf("decodeObject(%s) = %v, want ErrCorrupt", name, err)
		}
	}
	for name, b := range map[string][]byte{
		"NUL part":      append(objectKey(podKey("ns", "a")), 0),
		"two parts":     []byte("opods\x00a"),
		"slash":         []byte("opods\x00n/s\x00a"),
		"no name":       []byte("opods\x00ns\x00"),
		"wrong prefix":  []byte("xpods\x00ns\x00a"),
		"too long":      objectKey(podKey("ns", strings.Repeat("a", maxKeySize))),
		"outbox seq 0":  outboxKey(0, 1, podKey("ns", "a")),
		"outbox kind 0": outboxKey(1, 0, podKey("ns", "a")),
	} {
		if _, err := parseObjectKey(b); !errors.Is(err, ErrCorrupt) {
			t.Errorf("parseObjectKey(%s) = %v, want ErrCorrupt", name, err)
		}
		if _, err := parseOutboxKey(b); !errors.Is(err, ErrCorrupt) {
			t.Errorf("parseOutboxKey(%s) = %v, want ErrCorrupt", name, err)
		}
	}
	for name, b := range map[string][]byte{"empty": nil, "prefix only": {prefixLocal}, "too long": localKey(strings.Repeat("l", maxKeySize))} {
		if _, err := parseLocalKey(b); !errors.Is(err, ErrCorrupt) {
			t.Errorf("parseLocalKey(%s) = %v, want ErrCorrupt", name, err)
		}
	}
}

// FuzzDecodeRecord: any value under any key decodes, as each kind of
// record, to a result or an ErrCorrupt error, never a panic; what decodes
// re-encodes to the same bytes.
func FuzzDecodeRecord(f *testing.F) {
	ok, pk := objectKey(podKey("default", "web-1")), outboxKey(3, wire.KindPodStatus, podKey("default", "web-1"))
	f.Add(ok, encodeObject(ok, 42, []byte("k8s\x00\x0a\x04pod")))
	f.Add(pk, encodeBytes(pk, typeStatus, []byte("status")))
	f.Add(pk, encodeBytes(pk, typeStatus, nil))
	f.Add(localKey("restarts/web-1"), encodeBytes(localKey("restarts/web-1"), typeLocal, []byte("3")))
	f.Add(metaRev, encodeUint(metaRev, 12345))
	f.Add(metaSeq, encodeUint(metaSeq, 1))
	f.Add([]byte{}, []byte{})
	f.Fuzz(func(t *testing.T, key, b []byte) {
		check := func(what string, err error, reencoded func() []byte) {
			if err != nil {
				if !errors.Is(err, ErrCorrupt) {
					t.Fatalf("%s error %v does not match ErrCorrupt", what, err)
				}
				return
			}
			if again := reencoded(); !bytes.Equal(again, b) {
				t.Fatalf("%s: re-encoding %x gave %x", what, b, again)
			}
		}
		rev, raw, err := decodeObject(key, b)
		check("decodeObject", err, func() []byte { return encodeObject(key, rev, raw) })
		for _, typ := range []byte{typeStatus, typeLocal} {
			v, err := decodeBytes(key, b, typ)
			check("decodeBytes", err, func() []byte { return encodeBytes(key, typ, v) })
		}
		u, err := decodeUint(key, b)
		check("decodeUint", err, func() []byte { return encodeUint(key, u) })
	})
}

// FuzzParseKeys: any badger key parses, as each kind of key, or fails with
// ErrCorrupt; what parses re-encodes to the same bytes.
func FuzzParseKeys(f *testing.F) {
	f.Add(objectKey(podKey("default", "web-1")))
	f.Add(objectKey(wire.Key{Resource: wire.ResourceNodes, Name: "edge-1"}))
	f.Add(outboxKey(7, wire.KindEvent, wire.Key{Resource: wire.ResourceEvents, Namespace: "default", Name: "web-1.17"}))
	f.Add(localKey("mirror/default/web-1"))
	f.Add(metaRev)
	f.Add([]byte("o\x00\x00"))
	f.Fuzz(func(t *testing.T, b []byte) {
		if k, err := parseObjectKey(b); err == nil {
			if !bytes.Equal(objectKey(k), b) {
				t.Fatalf("object key %q does not round-trip", b)
			}
		} else if !errors.Is(err, ErrCorrupt) {
			t.Fatalf("parseObjectKey error %v does not match ErrCorrupt", err)
		}
		if r, err := parseOutboxKey(b); err == nil {
			if !bytes.Equal(outboxKey(r.seq, r.kind, r.key), b) {
				t.Fatalf("outbox key %q does not round-trip", b)
			}
		} else if !errors.Is(err, ErrCorrupt) {
			t.Fatalf("parseOutboxKey error %v does not match ErrCorrupt", err)
		}
		if k, err := parseLocalKey(b); err == nil {
			if !bytes.Equal(localKey(k), b) {
				t.Fatalf("local key %q does not round-trip", b)
			}
		} else if !errors.Is(err, ErrCorrupt) {
			t.Fatalf("parseLocalKey error %v does not match ErrCorrupt", err)
		}
		if len(describeKey(b)) > maxKeySize {
			t.Fatalf("describeKey(%q) is %d bytes", b, len(describeKey(b)))
		}
	})
}
