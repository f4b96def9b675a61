package apiserver

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
)

// The store keeps an object as Kubernetes protobuf without its
// resourceVersion: the magic "k8s\x00", then a runtime.Unknown whose field
// 2 is the object's message, whose field 1 is its ObjectMeta, whose field
// 6 is resourceVersion. A protobuf list response holds each object's
// message with resourceVersion set, which protoItem makes from the stored
// bytes by replacing that one field: the same bytes the encoder would write
// for the decoded object (its fields are written in field order, and empty
// strings too), without decoding it.

var protoMagic = []byte("k8s\x00")

// Protobuf wire types and the tags of the fields protoItem reads.
const (
	wireVarint  = 0
	wireFixed64 = 1
	wireBytes   = 2
	wireFixed32 = 5

	tagMetadata        = 1<<3 | wireBytes // of an object, and of a list
	tagUnknownRaw      = 2<<3 | wireBytes // runtime.Unknown.Raw
	tagListItems       = 2<<3 | wireBytes // a list's items
	tagResourceVersion = 6<<3 | wireBytes // ObjectMeta.ResourceVersion
)

// errProtoItem is returned for stored bytes that are not what protoItem
// expects.
var errProtoItem = errors.New("stored object is not Kubernetes protobuf with metadata first")

// protoItem is an object's message with resourceVersion rv, described by
// the parts of its stored form it is made of.
type protoItem struct {
	msg        []byte // the object's message as stored
	metaStart  int    // where the ObjectMeta's bytes start in msg
	metaEnd    int    // and end
	cut, cutTo int    // the stored resourceVersion field, within the ObjectMeta
	rv         string
}

// newProtoItem parses value, an object as the store keeps it.
func newProtoItem(value []byte, rv string) (protoItem, error) {
	if !bytes.HasPrefix(value, protoMagic) {
		return protoItem{}, errProtoItem
	}
	msg, err := protoField(value[len(protoMagic):], tagUnknownRaw)
	if err != nil {
		return protoItem{}, err
	}
	tag, n := binary.Uvarint(msg)
	if n <= 0 || tag != tagMetadata {
		return protoItem{}, errProtoItem
	}
	l, m := binary.Uvarint(msg[n:])
	if m <= 0 || l > uint64(len(msg)-n-m) {
		return protoItem{}, errProtoItem
	}
	p := protoItem{msg: msg, metaStart: n + m, metaEnd: n + m + int(l), rv: rv}
	meta := msg[p.metaStart:p.metaEnd]
	p.cut, p.cutTo = len(meta), len(meta)
	for off := 0; off < len(meta); {
		tag, n := binary.Uvarint(meta[off:])
		if n <= 0 {
			return protoItem{}, errProtoItem
		}
		if tag>>3 >= 6 {
			p.cut, p.cutTo = off, off
			if tag == tagResourceVersion {
				end, err := skipField(meta, off)
				if err != nil {
					return protoItem{}, err
				}
				p.cutTo = end
			}
			break
		}
		end, err := skipField(meta, off)
		if err != nil {
			return protoItem{}, err
		}
		off = end
	}
	return p, nil
}

// metaLen returns the length of the ObjectMeta with rv in it.
func (p protoItem) metaLen() int {
	return p.metaEnd - p.metaStart - (p.cutTo - p.cut) + 1 + uvarintLen(uint64(len(p.rv))) + len(p.rv)
}

// metaField returns the length of the ObjectMeta field with its tag.
func (p protoItem) metaField() int {
	l := p.metaLen()
	return 1 + uvarintLen(uint64(l)) + l
}

// size returns the length of the object's message with rv.
func (p protoItem) size() int { return p.metaField() + len(p.msg) - p.metaEnd }

// appendMeta appends the ObjectMeta field (tag, length, bytes) with rv:
// the message of the object's PartialObjectMetadata.
func (p protoItem) appendMeta(b []byte) []byte {
	meta := p.msg[p.metaStart:p.metaEnd]
	b = append(b, tagMetadata)
	b = binary.AppendUvarint(b, uint64(p.metaLen()))
	b = append(b, meta[:p.cut]...)
	b = append(b, tagResourceVersion)
	b = binary.AppendUvarint(b, uint64(len(p.rv)))
	b = append(b, p.rv...)
	return append(b, meta[p.cutTo:]...)
}

// appendTo appends the object's message with rv.
func (p protoItem) appendTo(b []byte) []byte {
	return append(p.appendMeta(b), p.msg[p.metaEnd:]...)
}

// protoField returns the bytes of the first length-delimited field with
// tag in msg.
func protoField(msg []byte, tag uint64) ([]byte, error) {
	for off := 0; off < len(msg); {
		t, n := binary.Uvarint(msg[off:])
		if n <= 0 {
			return nil, errProtoItem
		}
		end, err := skipField(msg, off)
		if err != nil {
			return nil, err
		}
		if t == tag {
			l, m := binary.Uvarint(msg[off+n:])
			return msg[off+n+m : off+n+m+int(l)], nil
		}
		off = end
	}
	return nil, fmt.Errorf("%w: no field %d", errProtoItem, tag>>3)
}

// skipField returns the offset after the field that starts at off in b.
func skipField(b []byte, off int) (int, error) {
	tag, n := binary.Uvarint(b[off:])
	if n <= 0 {
		return 0, errProtoItem
	}
	off += n
	switch tag & 7 {
	case wireVarint:
		_, m := binary.Uvarint(b[off:])
		if m <= 0 {
			return 0, errProtoItem
		}
		return off + m, nil
	case wireFixed64:
		off += 8
	case wireFixed32:
		off += 4
	case wireBytes:
		l, m := binary.Uvarint(b[off:])
		if m <= 0 || l > uint64(len(b)-off-m) {
			return 0, errProtoItem
		}
		off += m + int(l)
	default:
		return 0, fmt.Errorf("%w: wire type %d", errProtoItem, tag&7)
	}
	if off > len(b) {
		return 0, errProtoItem
	}
	return off, nil
}

// uvarintLen returns the length of v as a protobuf varint.
func uvarintLen(v uint64) int {
	var b [binary.MaxVarintLen64]byte
	return binary.PutUvarint(b[:], v)
}
