package mesh

import (
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
)

// The readiness of pods travels between the nodes of a site in two kinds
// of messages, both starting with a type byte and a format version:
//
//	delta: typeDelta | version | node | seq | count | entries
//	state: typeState | version | count | count × (node | seq | count | entries)
//
// where node is a uvarint length and the name's bytes, seq and count are
// uvarints, and an entry is a flags byte (entryReady, entryGone,
// entryUUID) and the pod's UID: 16 bytes when entryUUID is set (a UUID
// as the API server makes them), else a uvarint length and the bytes. A
// delta carries the changes a node made to its own pods at seq, gossiped
// at once; a state carries every node's pods as the sender knows them,
// exchanged in memberlist's periodic push-pull, which heals what a lost
// delta left behind.

const (
	typeDelta byte = 1
	typeState byte = 2

	podWireVersion byte = 1

	entryReady byte = 1 << 0
	entryGone  byte = 1 << 1 // deltas only: the pod is no longer the node's
	entryUUID  byte = 1 << 2
	entryKnown      = entryReady | entryGone | entryUUID
)

// Limits of what a message may hold; a message over any is refused
// whole. A site has a few dozen nodes of a few hundred pods at most.
const (
	maxNodeName   = 253  // a DNS subdomain, as Node names are
	maxUID        = 128  // UIDs are 36-byte UUIDs; room for others
	maxPodsOfNode = 4096 // per node in a state, per delta
	maxNodes      = 1024 // per state
	// MaxStateSize bounds a state message, and so what the node keeps
	// of others' pods.
	MaxStateSize = 4 << 20
	// maxDeltaSize bounds a delta the node sends, so that it fits in one
	// gossip packet (memberlist's 1400-byte UDP buffer less its framing,
	// the site's label and the encryption); a larger change goes in
	// several deltas of consecutive seqs.
	maxDeltaSize = 1000
)

// errPodWire matches every decoding error.
var errPodWire = errors.New("mesh: malformed pod readiness message")

// podEntry is one pod in a message.
type podEntry struct {
	uid   string
	ready bool
	gone  bool
}

// nodePods is one node's pods at seq.
type nodePods struct {
	node string
	seq  uint64
	pods []podEntry
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// uuidBytes returns uid's 16 bytes if it is a UUID in the canonical
// lowercase form (8-4-4-4-12 hex digits), which the API server's UIDs
// are; encoding those in 16 bytes rather than 37 keeps a delta of 50
// pods in one packet.
func uuidBytes(uid string) ([16]byte, bool) {
	var u [16]byte
	if len(uid) != 36 || uid[8] != '-' || uid[13] != '-' || uid[18] != '-' || uid[23] != '-' {
		return u, false
	}
	if strings.ToLower(uid) != uid {
		return u, false
	}
	h := uid[0:8] + uid[9:13] + uid[14:18] + uid[19:23] + uid[24:36]
	if _, err := hex.Decode(u[:], []byte(h)); err != nil {
		return u, false
	}
	return u, true
}

func uuidString(u []byte) string {
	h := hex.EncodeToString(u)
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
}

func appendEntry(b []byte, e podEntry) []byte {
	var flags byte
	if e.ready {
		flags |= entryReady
	}
	if e.gone {
		flags |= entryGone
	}
	if u, ok := uuidBytes(e.uid); ok {
		return append(append(b, flags|entryUUID), u[:]...)
	}
	return appendString(append(b, flags), e.uid)
}

func appendNodePods(b []byte, n nodePods) []byte {
	b = appendString(b, n.node)
	b = binary.AppendUvarint(b, n.seq)
	b = binary.AppendUvarint(b, uint64(len(n.pods)))
	for _, e := range n.pods {
		b = appendEntry(b, e)
	}
	return b
}

// encodeDelta returns the delta message of n.
func encodeDelta(n nodePods) []byte {
	return appendNodePods([]byte{typeDelta, podWireVersion}, n)
}

// encodeState returns the state message of nodes.
func encodeState(nodes []nodePods) []byte {
	b := binary.AppendUvarint([]byte{typeState, podWireVersion}, uint64(len(nodes)))
	for _, n := range nodes {
		b = appendNodePods(b, n)
	}
	return b
}

// podReader decodes a message, its first error kept.
type podReader struct {
	b   []byte
	err error
}

func (r *podReader) fail(format string, args ...any) {
	if r.err == nil {
		r.err = fmt.Errorf("%w: %s", errPodWire, fmt.Sprintf(format, args...))
	}
}

func (r *podReader) byte() byte {
	if r.err != nil || len(r.b) == 0 {
		r.fail("truncated")
		return 0
	}
	c := r.b[0]
	r.b = r.b[1:]
	return c
}

func (r *podReader) uvarint(max uint64, what string) uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.fail("bad %s", what)
		return 0
	}
	r.b = r.b[n:]
	if v > max {
		r.fail("%s %d over %d", what, v, max)
		return 0
	}
	return v
}

func (r *podReader) bytes(n int) []byte {
	if r.err != nil {
		return nil
	}
	if len(r.b) < n {
		r.fail("truncated")
		return nil
	}
	v := r.b[:n]
	r.b = r.b[n:]
	return v
}

func (r *podReader) string(max int, what string) string {
	n := r.uvarint(uint64(max), what+" length")
	return string(r.bytes(int(n)))
}

func (r *podReader) entry(delta bool) podEntry {
	flags := r.byte()
	if r.err != nil {
		return podEntry{}
	}
	switch {
	case flags&^entryKnown != 0:
		r.fail("unknown pod flags %#x", flags)
	case !delta && flags&entryGone != 0:
		r.fail("a gone pod in a state")
	}
	e := podEntry{ready: flags&entryReady != 0, gone: flags&entryGone != 0}
	if flags&entryUUID != 0 {
		if u := r.bytes(16); u != nil {
			e.uid = uuidString(u)
		}
	} else {
		e.uid = r.string(maxUID, "pod UID")
		if r.err == nil && e.uid == "" {
			r.fail("an empty pod UID")
		}
	}
	return e
}

func (r *podReader) nodePods(delta bool) nodePods {
	n := nodePods{node: r.string(maxNodeName, "node name")}
	if r.err == nil && n.node == "" {
		r.fail("an empty node name")
	}
	n.seq = r.uvarint(^uint64(0), "seq")
	count := r.uvarint(maxPodsOfNode, "pod count")
	// Every entry takes 2 bytes at least: a count beyond what is left is
	// refused before anything is allocated for it.
	if r.err == nil && count > uint64(len(r.b)/2) {
		r.fail("%d pods in %d bytes", count, len(r.b))
	}
	if r.err != nil {
		return nodePods{}
	}
	n.pods = make([]podEntry, 0, count)
	for range count {
		e := r.entry(delta)
		if r.err != nil {
			return nodePods{}
		}
		n.pods = append(n.pods, e)
	}
	// A pod once per node: the sender sorts them, so each UID is above
	// the one before.
	for i := 1; i < len(n.pods); i++ {
		if n.pods[i-1].uid >= n.pods[i].uid {
			r.fail("pods of %s not sorted by UID or repeated", n.node)
			return nodePods{}
		}
	}
	return n
}

func (r *podReader) header(want byte) {
	if typ := r.byte(); r.err == nil && typ != want {
		r.fail("message type %d, want %d", typ, want)
	}
	if v := r.byte(); r.err == nil && v != podWireVersion {
		r.fail("format version %d, want %d", v, podWireVersion)
	}
}

func (r *podReader) end() {
	if r.err == nil && len(r.b) != 0 {
		r.fail("%d bytes after the message", len(r.b))
	}
}

// decodeDelta decodes a delta message.
func decodeDelta(b []byte) (nodePods, error) {
	if len(b) > MaxStateSize {
		return nodePods{}, fmt.Errorf("%w: %d bytes", errPodWire, len(b))
	}
	r := &podReader{b: b}
	r.header(typeDelta)
	n := r.nodePods(true)
	r.end()
	return n, r.err
}

// decodeState decodes a state message; a node named twice is refused.
func decodeState(b []byte) ([]nodePods, error) {
	if len(b) > MaxStateSize {
		return nil, fmt.Errorf("%w: %d bytes", errPodWire, len(b))
	}
	r := &podReader{b: b}
	r.header(typeState)
	count := r.uvarint(maxNodes, "node count")
	if r.err == nil && count > uint64(len(r.b)/3) { // name, seq and count take a byte each
		r.fail("%d nodes in %d bytes", count, len(r.b))
	}
	if r.err != nil {
		return nil, r.err
	}
	nodes := make([]nodePods, 0, count)
	seen := make(map[string]bool, count)
	for range count {
		n := r.nodePods(false)
		if r.err != nil {
			return nil, r.err
		}
		if seen[n.node] {
			r.fail("node %s twice", n.node)
			return nil, r.err
		}
		seen[n.node] = true
		nodes = append(nodes, n)
	}
	r.end()
	return nodes, r.err
}
