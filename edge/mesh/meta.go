package mesh

import (
	"encoding/binary"
	"fmt"
)

// Meta is what a node tells its site of itself besides its liveness. It
// travels as memberlist's node metadata (at most 512 bytes), with the
// node's membership: a peer that joins learns it at once, and a change
// reaches every peer within a few gossip rounds.
type Meta struct {
	// ImagePort is the port, on the node's mesh address, of the image
	// service through which it shares its images with the site; 0 for
	// none.
	ImagePort uint16
	// RelayPort is the port, on the node's mesh address, of the relay
	// through which a peer whose uplink failed reaches the hub; 0 for
	// none. Uplink says whether the node's own session with the hub is
	// up now: a peer relays only through a node whose uplink works.
	RelayPort uint16
	Uplink    bool
	// Pulling are the blobs, by sha256 digest, that the node is fetching
	// from outside the site now, at most MaxPulling: a peer that needs
	// one waits for the node to have it rather than fetch it again over
	// its own uplink.
	Pulling [][32]byte
}

// MaxPulling bounds Meta.Pulling.
const MaxPulling = 8

// Validate reports whether m can be said: an error if it holds more than
// MaxPulling digests.
func (m Meta) Validate() error {
	if len(m.Pulling) > MaxPulling {
		return fmt.Errorf("mesh: meta: %d blobs pulling, at most %d", len(m.Pulling), MaxPulling)
	}
	return nil
}

// The encoding of a Meta:
//
//	version | flags | uvarint ImagePort | uvarint RelayPort | count | count × 32 bytes
//
// with metaUplink in flags. A node that says nothing sends no metadata.
const (
	metaVersion byte = 1
	metaUplink  byte = 1 << 0
	metaKnown        = metaUplink
	// maxMetaSize is the largest encoding: within memberlist's 512.
	maxMetaSize = 2 + 2*binary.MaxVarintLen16 + 1 + MaxPulling*32
)

// encodeMeta returns the encoding of m, nil for a zero Meta; an error if
// m holds more than MaxPulling digests.
func encodeMeta(m Meta) ([]byte, error) {
	if err := m.Validate(); err != nil {
		return nil, err
	}
	if m.ImagePort == 0 && m.RelayPort == 0 && !m.Uplink && len(m.Pulling) == 0 {
		return nil, nil
	}
	b := make([]byte, 0, maxMetaSize)
	var flags byte
	if m.Uplink {
		flags |= metaUplink
	}
	b = append(b, metaVersion, flags)
	b = binary.AppendUvarint(b, uint64(m.ImagePort))
	b = binary.AppendUvarint(b, uint64(m.RelayPort))
	b = append(b, byte(len(m.Pulling)))
	for _, d := range m.Pulling {
		b = append(b, d[:]...)
	}
	return b, nil
}

// decodeMeta returns the Meta that b encodes; empty b is a zero Meta.
// Anything malformed, of another version, or with bytes left over is an
// error matching errPodWire's kind of refusal (a peer's garbage).
func decodeMeta(b []byte) (Meta, error) {
	var m Meta
	if len(b) == 0 {
		return m, nil
	}
	bad := func(what string) (Meta, error) { return Meta{}, fmt.Errorf("mesh: malformed node meta: %s", what) }
	if len(b) > maxMetaSize {
		return bad("too long")
	}
	if b[0] != metaVersion {
		return bad(fmt.Sprintf("version %d", b[0]))
	}
	if len(b) < 2 || b[1]&^metaKnown != 0 {
		return bad("flags")
	}
	m.Uplink = b[1]&metaUplink != 0
	b = b[2:]
	port := func() (uint16, bool) {
		v, n := binary.Uvarint(b)
		if n <= 0 || v > 0xffff {
			return 0, false
		}
		b = b[n:]
		return uint16(v), true
	}
	var ok bool
	if m.ImagePort, ok = port(); !ok {
		return bad("image port")
	}
	if m.RelayPort, ok = port(); !ok {
		return bad("relay port")
	}
	if len(b) < 1 || int(b[0]) > MaxPulling || len(b) != 1+int(b[0])*32 {
		return bad("pulling")
	}
	n := int(b[0])
	b = b[1:]
	if n > 0 {
		m.Pulling = make([][32]byte, n)
		for i := range m.Pulling {
			copy(m.Pulling[i][:], b[i*32:])
		}
	}
	return m, nil
}
