package checkpoint

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"strconv"
	"strings"

	"github.com/outpost-mesh/outpost/sync/wire"
)

// On-disk layout, one badger keyspace; a key's first byte says what it
// holds:
//
//	'o' resource 0x00 namespace 0x00 name               -> object record: uvarint revision | raw object
//	'q' seq(8, BE) kind(1) resource 0x00 ns 0x00 name   -> status record: the entry's object
//	'l' key                                             -> local record: the value
//	"m/format"                                          -> uint record: the layout version (1)
//	"m/rev"                                             -> uint record: LastRevision
//	"m/seq"                                             -> uint record: the last outbox seq handed out
//
// Every value is a record:
//
//	version(1) | type(1) | payload | crc32c(4, BE)
//
// (a uint record's payload is 8 bytes, big endian), where the checksum
// covers the badger key and then everything before it, so a value read
// under another key is caught as well as one damaged in place. Key parts never hold 0x00 (validKey), so byte order is the order
// of (resource, namespace, name), a prefix scan of one resource meets only
// its objects, and outbox entries sort by seq. The kind and key of an
// outbox entry are in its badger key so that Open rebuilds the outbox index
// from keys alone.

const (
	// MaxValueSize bounds an object's bytes, an outbox entry's object and
	// a local value: 2 MiB, above the largest object the hub stores.
	MaxValueSize = 2 << 20
	// MaxLocalKeySize bounds the key of a local record.
	MaxLocalKeySize = maxKeySize - 1

	// maxKeySize bounds every badger key this package writes or decodes.
	maxKeySize = 1 << 10
	// recordOverhead is the most a record adds to its value: version,
	// type, a uvarint revision and the checksum.
	recordOverhead = 1 + 1 + binary.MaxVarintLen64 + 4
	// maxRecordSize bounds a stored record.
	maxRecordSize = MaxValueSize + recordOverhead
	// maxRevision bounds revisions, as the sync protocol does.
	maxRevision = 1 << 62

	// layoutVersion is the version of the key layout, kept under
	// metaFormat; recordVersion the first byte of every record.
	layoutVersion = 1
	recordVersion = 1

	prefixObject byte = 'o'
	prefixOutbox byte = 'q'
	prefixLocal  byte = 'l'

	typeObject byte = 1
	typeUint   byte = 2
	typeStatus byte = 3
	typeLocal  byte = 4
)

var (
	metaFormat = []byte("m/format")
	metaRev    = []byte("m/rev")
	metaSeq    = []byte("m/seq")
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// CorruptError reports a record of the checkpoint that does not decode:
// damaged on disk, or not written by this package. It matches ErrCorrupt.
// The store stays usable; DropCorrupt removes such records.
type CorruptError struct {
	// Key names the record: `object pods/default/web`, `outbox 17`,
	// `local "restarts/web"`, `m/rev`, or the quoted badger key.
	Key string
	// Reason says what is wrong with it.
	Reason string
}

// Error says which record is corrupt and how.
func (e *CorruptError) Error() string {
	return "checkpoint: corrupt record " + e.Key + ": " + e.Reason
}

// Is reports whether target is ErrCorrupt.
func (e *CorruptError) Is(target error) bool { return target == ErrCorrupt }

func corrupt(key []byte, format string, args ...any) error {
	return &CorruptError{Key: describeKey(key), Reason: fmt.Sprintf(format, args...)}
}

// describeKey names a badger key for an error message.
func describeKey(b []byte) string {
	if len(b) > 0 {
		switch b[0] {
		case prefixObject:
			if k, why := splitObjectKey(b); why == "" {
				return "object " + k.String()
			}
		case prefixOutbox:
			if r, why := splitOutboxKey(b); why == "" {
				return "outbox " + strconv.FormatUint(r.seq, 10)
			}
		case prefixLocal:
			if len(b) >= 2 && len(b) <= maxKeySize {
				return "local " + quote(b[1:])
			}
		}
		for _, m := range [][]byte{metaFormat, metaRev, metaSeq} {
			if bytes.Equal(b, m) {
				return string(b)
			}
		}
	}
	return quote(b)
}

// quote quotes b, or its first 64 bytes and "...".
func quote(b []byte) string {
	if len(b) > 64 {
		return strconv.Quote(string(b[:64])) + "..."
	}
	return strconv.Quote(string(b))
}

// validKey reports whether k can be stored: wire.Key.Validate, and no NUL
// in a part, as NUL separates the parts on disk.
func validKey(k wire.Key) error {
	if err := k.Validate(); err != nil {
		return err
	}
	if strings.IndexByte(k.Resource, 0) >= 0 || strings.IndexByte(k.Namespace, 0) >= 0 || strings.IndexByte(k.Name, 0) >= 0 {
		return fmt.Errorf("%w %q: a part holds a NUL byte", wire.ErrInvalidKey, k.String())
	}
	return nil
}

// validResource reports whether r can name a resource in a key.
func validResource(r string) error {
	return validKey(wire.Key{Resource: r, Name: "x"})
}

func appendKeyParts(b []byte, k wire.Key) []byte {
	b = append(b, k.Resource...)
	b = append(b, 0)
	b = append(b, k.Namespace...)
	b = append(b, 0)
	return append(b, k.Name...)
}

// splitKeyParts parses what appendKeyParts appends; on failure it returns
// why.
func splitKeyParts(b []byte) (wire.Key, string) {
	if n := bytes.Count(b, []byte{0}); n != 2 {
		return wire.Key{}, fmt.Sprintf("key has %d parts, want 3", n+1)
	}
	i := bytes.IndexByte(b, 0)
	j := i + 1 + bytes.IndexByte(b[i+1:], 0)
	k := wire.Key{Resource: resourceName(b[:i]), Namespace: string(b[i+1 : j]), Name: string(b[j+1:])}
	if err := k.Validate(); err != nil {
		return wire.Key{}, err.Error()
	}
	return k, ""
}

// resourceName returns b as a string, the constant for the resources the
// hub sends: a scan of the view parses every key, and need not allocate
// the same few names each time.
func resourceName(b []byte) string {
	switch string(b) { // compiled without a copy
	case wire.ResourcePods:
		return wire.ResourcePods
	case wire.ResourceServices:
		return wire.ResourceServices
	case wire.ResourceEndpointSlices:
		return wire.ResourceEndpointSlices
	case wire.ResourceConfigMaps:
		return wire.ResourceConfigMaps
	case wire.ResourceSecrets:
		return wire.ResourceSecrets
	case wire.ResourceNodes:
		return wire.ResourceNodes
	}
	return string(b)
}

// objectKey returns the badger key of the object k (valid by validKey).
func objectKey(k wire.Key) []byte {
	b := make([]byte, 0, 1+len(k.Resource)+len(k.Namespace)+len(k.Name)+2)
	return appendKeyParts(append(b, prefixObject), k)
}

// resourcePrefix returns the prefix of the badger keys of resource's
// objects.
func resourcePrefix(resource string) []byte {
	b := make([]byte, 0, 1+len(resource)+1)
	b = append(b, prefixObject)
	b = append(b, resource...)
	return append(b, 0)
}

// parseObjectKey parses an object's badger key. Errors match ErrCorrupt.
func parseObjectKey(b []byte) (wire.Key, error) {
	k, why := splitObjectKey(b)
	if why != "" {
		return wire.Key{}, corrupt(b, "%s", why)
	}
	return k, nil
}

func splitObjectKey(b []byte) (wire.Key, string) {
	if len(b) > maxKeySize || len(b) < 1 || b[0] != prefixObject {
		return wire.Key{}, "not an object key"
	}
	return splitKeyParts(b[1:])
}

// outboxKey returns the badger key of an outbox entry.
func outboxKey(seq uint64, kind wire.StatusKind, k wire.Key) []byte {
	b := make([]byte, 0, 1+8+1+len(k.Resource)+len(k.Namespace)+len(k.Name)+2)
	b = append(b, prefixOutbox)
	b = binary.BigEndian.AppendUint64(b, seq)
	b = append(b, byte(kind))
	return appendKeyParts(b, k)
}

// outboxRef is what an outbox entry's badger key holds.
type outboxRef struct {
	seq  uint64
	kind wire.StatusKind
	key  wire.Key
}

// parseOutboxKey parses an outbox entry's badger key. Errors match
// ErrCorrupt.
func parseOutboxKey(b []byte) (outboxRef, error) {
	r, why := splitOutboxKey(b)
	if why != "" {
		return outboxRef{}, corrupt(b, "%s", why)
	}
	return r, nil
}

func splitOutboxKey(b []byte) (outboxRef, string) {
	if len(b) > maxKeySize || len(b) < 1+8+1 || b[0] != prefixOutbox {
		return outboxRef{}, "not an outbox key"
	}
	r := outboxRef{seq: binary.BigEndian.Uint64(b[1:9]), kind: wire.StatusKind(b[9])}
	if r.seq == 0 || r.kind == 0 {
		return outboxRef{}, fmt.Sprintf("outbox key with seq %d, kind %d", r.seq, r.kind)
	}
	var why string
	if r.key, why = splitKeyParts(b[10:]); why != "" {
		return outboxRef{}, why
	}
	return r, ""
}

// localKey returns the badger key of a local record.
func localKey(key string) []byte {
	b := make([]byte, 0, 1+len(key))
	return append(append(b, prefixLocal), key...)
}

// parseLocalKey parses a local record's badger key. Errors match
// ErrCorrupt.
func parseLocalKey(b []byte) (string, error) {
	if len(b) > maxKeySize || len(b) < 2 || b[0] != prefixLocal {
		return "", corrupt(b, "not a local key")
	}
	return string(b[1:]), nil
}

// seal appends the checksum of key and body to body.
func seal(key, body []byte) []byte {
	sum := crc32.Update(crc32.Checksum(key, castagnoli), castagnoli, body)
	return binary.BigEndian.AppendUint32(body, sum)
}

// openRecord checks the size, checksum, version and type of the record b
// stored under key and returns its payload, which aliases b. Errors match
// ErrCorrupt.
func openRecord(key, b []byte, typ byte) ([]byte, error) {
	if len(b) > maxRecordSize {
		return nil, corrupt(key, "record of %d bytes exceeds %d", len(b), maxRecordSize)
	}
	if len(b) < 2+4 {
		return nil, corrupt(key, "record of %d bytes is too short", len(b))
	}
	body, sum := b[:len(b)-4], binary.BigEndian.Uint32(b[len(b)-4:])
	if crc32.Update(crc32.Checksum(key, castagnoli), castagnoli, body) != sum {
		return nil, corrupt(key, "checksum mismatch")
	}
	if body[0] != recordVersion {
		return nil, corrupt(key, "record version %d, this build reads %d", body[0], recordVersion)
	}
	if body[1] != typ {
		return nil, corrupt(key, "record type %d, want %d", body[1], typ)
	}
	return body[2:], nil
}

// encodeObject returns the record of an object stored under key.
func encodeObject(key []byte, rev int64, raw []byte) []byte {
	b := make([]byte, 0, recordOverhead+len(raw))
	b = append(b, recordVersion, typeObject)
	b = binary.AppendUvarint(b, uint64(rev))
	b = append(b, raw...)
	return seal(key, b)
}

// decodeObject parses an object record; raw aliases b. Errors match
// ErrCorrupt.
func decodeObject(key, b []byte) (rev int64, raw []byte, err error) {
	body, err := openRecord(key, b, typeObject)
	if err != nil {
		return 0, nil, err
	}
	r, n := binary.Uvarint(body)
	if n <= 0 || r > maxRevision || n != uvarintLen(r) {
		return 0, nil, corrupt(key, "object revision")
	}
	raw = body[n:]
	if len(raw) == 0 || len(raw) > MaxValueSize {
		return 0, nil, corrupt(key, "object of %d bytes", len(raw))
	}
	return int64(r), raw, nil
}

// encodeBytes returns a record of type typ (typeStatus or typeLocal)
// holding v, stored under key.
func encodeBytes(key []byte, typ byte, v []byte) []byte {
	b := make([]byte, 0, 2+len(v)+4)
	b = append(b, recordVersion, typ)
	b = append(b, v...)
	return seal(key, b)
}

// decodeBytes parses a record of type typ; the value aliases b. Errors
// match ErrCorrupt.
func decodeBytes(key, b []byte, typ byte) ([]byte, error) {
	v, err := openRecord(key, b, typ)
	if err != nil {
		return nil, err
	}
	if len(v) > MaxValueSize {
		return nil, corrupt(key, "value of %d bytes exceeds %d", len(v), MaxValueSize)
	}
	return v, nil
}

// encodeUint returns a record holding v, stored under key.
func encodeUint(key []byte, v uint64) []byte {
	b := make([]byte, 0, 2+8+4)
	b = append(b, recordVersion, typeUint)
	b = binary.BigEndian.AppendUint64(b, v)
	return seal(key, b)
}

// decodeUint parses a record of encodeUint. Errors match ErrCorrupt.
func decodeUint(key, b []byte) (uint64, error) {
	v, err := openRecord(key, b, typeUint)
	if err != nil {
		return 0, err
	}
	if len(v) != 8 {
		return 0, corrupt(key, "number of %d bytes", len(v))
	}
	return binary.BigEndian.Uint64(v), nil
}

func uvarintLen(v uint64) int {
	n := 1
	for ; v >= 0x80; v >>= 7 {
		n++
	}
	return n
}
