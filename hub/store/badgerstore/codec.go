package badgerstore

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"

	"github.com/outpost-mesh/outpost/hub/store"
)

// On-disk layout (all in one badger keyspace):
//
//	'k' key 0x00 ^rev(8, big endian)  -> record: one version of key
//	'l' rev(8, big endian)            -> logEntry: what revision rev wrote
//	"m/rev"                           -> current revision (8, big endian)
//	"m/compact"                       -> compacted revision (8, big endian)
//	"m/compacted"                     -> revision physically compacted up to
//	"m/format"                        -> layout version
//
// Versions of a key sort newest first because the revision is inverted, so a
// forward scan meets the version visible at a revision first. Keys never hold
// control characters (store.ValidateKey), so 0x00 ends the user key.

const (
	formatVersion byte = 1

	prefixVersion byte = 'k'
	prefixLog     byte = 'l'

	opPut    byte = 1
	opDelete byte = 2

	// maxRecordSize bounds a stored record: the largest value plus the header.
	maxRecordSize = store.MaxValueSize + 32
	// maxLogEntrySize bounds a stored log entry.
	maxLogEntrySize = store.MaxKeySize + 16
)

var (
	metaRev       = []byte("m/rev")
	metaCompact   = []byte("m/compact")
	metaCompacted = []byte("m/compacted")
	metaFormat    = []byte("m/format")
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// record is one stored version of a key.
type record struct {
	op        byte
	createRev int64
	value     []byte // aliases the decoded buffer
}

// encodeRecord returns format | op | uvarint createRev | value | crc32c.
func encodeRecord(op byte, createRev int64, value []byte) []byte {
	b := make([]byte, 0, 2+binary.MaxVarintLen64+len(value)+4)
	b = append(b, formatVersion, op)
	b = binary.AppendUvarint(b, uint64(createRev))
	b = append(b, value...)
	return binary.BigEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
}

// decodeRecord parses a record. The result aliases b. Errors match
// store.ErrCorrupt.
func decodeRecord(b []byte) (record, error) {
	if len(b) > maxRecordSize {
		return record{}, corruptf("record of %d bytes exceeds %d", len(b), maxRecordSize)
	}
	body, err := checkCRC(b)
	if err != nil {
		return record{}, fmt.Errorf("record: %w", err)
	}
	if len(body) < 3 {
		return record{}, corruptf("record of %d bytes is too short", len(b))
	}
	if body[0] != formatVersion {
		return record{}, corruptf("record format %d, want %d", body[0], formatVersion)
	}
	r := record{op: body[1]}
	if r.op != opPut && r.op != opDelete {
		return record{}, corruptf("record op %d", r.op)
	}
	cr, n := binary.Uvarint(body[2:])
	if n <= 0 || cr == 0 || cr > 1<<62 || n != len(binary.AppendUvarint(nil, cr)) {
		return record{}, corruptf("record create revision")
	}
	r.createRev = int64(cr)
	r.value = body[2+n:]
	if r.op == opDelete && len(r.value) != 0 {
		return record{}, corruptf("delete record carries %d value bytes", len(r.value))
	}
	return r, nil
}

// encodeLogEntry returns format | op | key | crc32c.
func encodeLogEntry(op byte, key string) []byte {
	b := make([]byte, 0, 2+len(key)+4)
	b = append(b, formatVersion, op)
	b = append(b, key...)
	return binary.BigEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
}

// decodeLogEntry parses a log entry. Errors match store.ErrCorrupt.
func decodeLogEntry(b []byte) (op byte, key string, err error) {
	if len(b) > maxLogEntrySize {
		return 0, "", corruptf("log entry of %d bytes exceeds %d", len(b), maxLogEntrySize)
	}
	body, err := checkCRC(b)
	if err != nil {
		return 0, "", fmt.Errorf("log entry: %w", err)
	}
	if len(body) < 3 || body[0] != formatVersion {
		return 0, "", corruptf("log entry header")
	}
	op = body[1]
	if op != opPut && op != opDelete {
		return 0, "", corruptf("log entry op %d", op)
	}
	key = string(body[2:])
	if err := store.ValidateKey(key); err != nil {
		return 0, "", corruptf("log entry key: %v", err)
	}
	return op, key, nil
}

func checkCRC(b []byte) ([]byte, error) {
	if len(b) < 4 {
		return nil, corruptf("%d bytes is too short for a checksum", len(b))
	}
	body, sum := b[:len(b)-4], binary.BigEndian.Uint32(b[len(b)-4:])
	if crc32.Checksum(body, castagnoli) != sum {
		return nil, corruptf("checksum mismatch")
	}
	return body, nil
}

// versionKey returns the badger key of key at rev.
func versionKey(key string, rev int64) []byte {
	b := make([]byte, 0, 1+len(key)+1+8)
	b = append(b, prefixVersion)
	b = append(b, key...)
	b = append(b, 0)
	return binary.BigEndian.AppendUint64(b, ^uint64(rev))
}

// versionPrefix returns the prefix shared by every version of key.
func versionPrefix(key string) []byte {
	b := make([]byte, 0, 1+len(key)+1)
	b = append(b, prefixVersion)
	b = append(b, key...)
	return append(b, 0)
}

// parseVersionKey splits a badger version key. Errors match store.ErrCorrupt.
func parseVersionKey(b []byte) (key string, rev int64, err error) {
	if len(b) < 1+1+1+8 || b[0] != prefixVersion || b[len(b)-9] != 0 {
		return "", 0, corruptf("version key %q", b)
	}
	key = string(b[1 : len(b)-9])
	r := ^binary.BigEndian.Uint64(b[len(b)-8:])
	if r == 0 || r > 1<<62 {
		return "", 0, corruptf("version key revision %d", r)
	}
	return key, int64(r), nil
}

func logKey(rev int64) []byte {
	return binary.BigEndian.AppendUint64([]byte{prefixLog}, uint64(rev))
}

func parseLogKey(b []byte) (int64, error) {
	if len(b) != 9 || b[0] != prefixLog {
		return 0, corruptf("log key %q", b)
	}
	r := binary.BigEndian.Uint64(b[1:])
	if r == 0 || r > 1<<62 {
		return 0, corruptf("log key revision %d", r)
	}
	return int64(r), nil
}

func encodeRev(rev int64) []byte { return binary.BigEndian.AppendUint64(nil, uint64(rev)) }

func decodeRev(b []byte) (int64, error) {
	if len(b) != 8 {
		return 0, corruptf("revision of %d bytes", len(b))
	}
	r := binary.BigEndian.Uint64(b)
	if r > 1<<62 {
		return 0, corruptf("revision %d out of range", r)
	}
	return int64(r), nil
}

func corruptf(format string, args ...any) error {
	return fmt.Errorf("%w: %s", store.ErrCorrupt, fmt.Sprintf(format, args...))
}
