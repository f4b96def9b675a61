package badgerstore

import (
	"bytes"
	"errors"
	"testing"

	"github.com/outpost-mesh/outpost/hub/store"
)

func TestRecordRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		op     byte
		create int64
		value  []byte
	}{
		{opPut, 1, nil},
		{opPut, 1 << 40, []byte("hello")},
		{opDelete, 7, nil},
		{opPut, 3, bytes.Repeat([]byte{0xff}, store.MaxValueSize)},
	} {
		r, err := decodeRecord(encodeRecord(tc.op, tc.create, tc.value))
		if err != nil || r.op != tc.op || r.createRev != tc.create || !bytes.Equal(r.value, tc.value) {
			t.Errorf("decodeRecord(encodeRecord(%d, %d, %d bytes)) = %d, %d, %d bytes, %v", tc.op, tc.create, len(tc.value), r.op, r.createRev, len(r.value), err)
		}
	}
	op, key, err := decodeLogEntry(encodeLogEntry(opDelete, "/registry/pods/a/b"))
	if err != nil || op != opDelete || key != "/registry/pods/a/b" {
		t.Errorf("decodeLogEntry = %d, %q, %v", op, key, err)
	}
	k, rev, err := parseVersionKey(versionKey("/a/b", 42))
	if err != nil || k != "/a/b" || rev != 42 {
		t.Errorf("parseVersionKey = %q, %d, %v", k, rev, err)
	}
}

func TestDecodeCorrupt(t *testing.T) {
	good := encodeRecord(opPut, 5, []byte("value"))
	flipped := bytes.Clone(good)
	flipped[3] ^= 1
	for name, b := range map[string][]byte{
		"empty":     nil,
		"short":     {1, 2, 3},
		"bit flip":  flipped,
		"truncated": good[:len(good)-1],
		"too large": make([]byte, maxRecordSize+1),
	} {
		if _, err := decodeRecord(b); !errors.Is(err, store.ErrCorrupt) {
			t.Errorf("decodeRecord(%s) = %v, want ErrCorrupt", name, err)
		}
	}
	if _, _, err := decodeLogEntry(encodeLogEntry(opPut, "not/a/key")); !errors.Is(err, store.ErrCorrupt) {
		t.Errorf("decodeLogEntry(bad key) = %v, want ErrCorrupt", err)
	}
	if _, _, err := parseVersionKey([]byte("k/a")); !errors.Is(err, store.ErrCorrupt) {
		t.Errorf("parseVersionKey(short) = %v, want ErrCorrupt", err)
	}
}

// FuzzDecodeRecord: any bytes decode to a record or an ErrCorrupt error,
// never a panic; what decodes re-encodes to the same bytes.
func FuzzDecodeRecord(f *testing.F) {
	f.Add(encodeRecord(opPut, 1, []byte("v")))
	f.Add(encodeRecord(opDelete, 9, nil))
	f.Add([]byte{})
	f.Add([]byte{1, 1, 0, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := decodeRecord(b)
		if err != nil {
			if !errors.Is(err, store.ErrCorrupt) {
				t.Fatalf("decodeRecord error %v does not match ErrCorrupt", err)
			}
			return
		}
		if again := encodeRecord(r.op, r.createRev, r.value); !bytes.Equal(again, b) {
			t.Fatalf("re-encoding %x gave %x", b, again)
		}
	})
}

// FuzzDecodeLogEntry: as FuzzDecodeRecord, for log entries.
func FuzzDecodeLogEntry(f *testing.F) {
	f.Add(encodeLogEntry(opPut, "/registry/pods/default/web"))
	f.Add([]byte{1, 2, '/', 'a', 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		op, key, err := decodeLogEntry(b)
		if err != nil {
			if !errors.Is(err, store.ErrCorrupt) {
				t.Fatalf("decodeLogEntry error %v does not match ErrCorrupt", err)
			}
			return
		}
		if again := encodeLogEntry(op, key); !bytes.Equal(again, b) {
			t.Fatalf("re-encoding %x gave %x", b, again)
		}
	})
}

// FuzzParseKeys: badger keys of either kind parse or fail with ErrCorrupt.
func FuzzParseKeys(f *testing.F) {
	f.Add(versionKey("/a/b", 3))
	f.Add(logKey(77))
	f.Add([]byte("k\x00\x00\x00\x00\x00\x00\x00\x00\x00"))
	f.Fuzz(func(t *testing.T, b []byte) {
		if key, rev, err := parseVersionKey(b); err == nil {
			if !bytes.Equal(versionKey(key, rev), b) {
				t.Fatalf("version key %x does not round-trip", b)
			}
		} else if !errors.Is(err, store.ErrCorrupt) {
			t.Fatalf("parseVersionKey error %v does not match ErrCorrupt", err)
		}
		if rev, err := parseLogKey(b); err == nil {
			if !bytes.Equal(logKey(rev), b) {
				t.Fatalf("log key %x does not round-trip", b)
			}
		} else if !errors.Is(err, store.ErrCorrupt) {
			t.Fatalf("parseLogKey error %v does not match ErrCorrupt", err)
		}
		if _, err := decodeRev(b); err != nil && !errors.Is(err, store.ErrCorrupt) {
			t.Fatalf("decodeRev error %v does not match ErrCorrupt", err)
		}
	})
}
