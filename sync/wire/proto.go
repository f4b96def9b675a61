package wire

import (
	"errors"
	"fmt"
	"math"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
)

// Messages are encoded in the protobuf wire format, written by hand with
// protowire: fields are numbered, zero values are left out, and fields a
// reader does not know are skipped, so that a later capability version can
// add fields that an older peer ignores.

// ErrMalformed is returned (wrapped) for a frame or message that cannot be
// decoded.
var ErrMalformed = errors.New("malformed sync message")

// enc appends fields to b.
type enc struct{ b []byte }

func (e *enc) uint(n protowire.Number, v uint64) {
	if v == 0 {
		return
	}
	e.b = protowire.AppendTag(e.b, n, protowire.VarintType)
	e.b = protowire.AppendVarint(e.b, v)
}

// int encodes a non-negative int64 (revisions); callers validate sign.
func (e *enc) int(n protowire.Number, v int64) { e.uint(n, uint64(v)) }

func (e *enc) bool(n protowire.Number, v bool) {
	if v {
		e.uint(n, 1)
	}
}

func (e *enc) bytes(n protowire.Number, v []byte) {
	if len(v) == 0 {
		return
	}
	e.b = protowire.AppendTag(e.b, n, protowire.BytesType)
	e.b = protowire.AppendBytes(e.b, v)
}

func (e *enc) string(n protowire.Number, v string) {
	if v == "" {
		return
	}
	e.b = protowire.AppendTag(e.b, n, protowire.BytesType)
	e.b = protowire.AppendString(e.b, v)
}

// message encodes a nested message, even when it is empty: an empty entry
// of a repeated field still counts.
func (e *enc) message(n protowire.Number, fn func(*enc)) {
	e.b = protowire.AppendTag(e.b, n, protowire.BytesType)
	// Reserve one length byte, the usual case, and move the body if the
	// length takes more.
	at := len(e.b)
	e.b = append(e.b, 0)
	fn(e)
	size := len(e.b) - at - 1
	if size < 0x80 {
		e.b[at] = byte(size)
		return
	}
	body := append([]byte(nil), e.b[at+1:]...)
	e.b = protowire.AppendVarint(e.b[:at], uint64(size))
	e.b = append(e.b, body...)
}

// field is one decoded field: a varint or a length-delimited value. Other
// wire types are skipped before they reach a decoder.
type field struct {
	num protowire.Number
	typ protowire.Type
	u   uint64
	b   []byte // aliases the decoded buffer
}

// eachField calls fn for every varint and length-delimited field of b.
func eachField(b []byte, fn func(f field) error) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return fmt.Errorf("%w: %v", ErrMalformed, protowire.ParseError(n))
		}
		b = b[n:]
		f := field{num: num, typ: typ}
		switch typ {
		case protowire.VarintType:
			f.u, n = protowire.ConsumeVarint(b)
		case protowire.BytesType:
			f.b, n = protowire.ConsumeBytes(b)
		default:
			n = protowire.ConsumeFieldValue(num, typ, b)
		}
		if n < 0 {
			return fmt.Errorf("%w: field %d: %v", ErrMalformed, num, protowire.ParseError(n))
		}
		b = b[n:]
		if typ != protowire.VarintType && typ != protowire.BytesType {
			continue
		}
		if err := fn(f); err != nil {
			return err
		}
	}
	return nil
}

func (f field) varint() (uint64, error) {
	if f.typ != protowire.VarintType {
		return 0, fmt.Errorf("%w: field %d is not a varint", ErrMalformed, f.num)
	}
	return f.u, nil
}

// revision decodes a non-negative int64.
func (f field) revision() (int64, error) {
	v, err := f.varint()
	if err != nil {
		return 0, err
	}
	if v > 1<<62 {
		return 0, fmt.Errorf("%w: field %d: revision %d out of range", ErrMalformed, f.num, v)
	}
	return int64(v), nil
}

func (f field) uint32() (uint32, error) {
	v, err := f.varint()
	if err != nil {
		return 0, err
	}
	if v > 1<<32-1 {
		return 0, fmt.Errorf("%w: field %d: %d out of range", ErrMalformed, f.num, v)
	}
	return uint32(v), nil
}

// millis decodes a duration in whole milliseconds.
func (f field) millis() (time.Duration, error) {
	v, err := f.varint()
	if err != nil {
		return 0, err
	}
	if v > math.MaxInt64/uint64(time.Millisecond) {
		return 0, fmt.Errorf("%w: field %d: %d ms out of range", ErrMalformed, f.num, v)
	}
	return time.Duration(v) * time.Millisecond, nil
}

func (f field) boolean() (bool, error) {
	v, err := f.varint()
	return v != 0, err
}

// bytes returns a copy of a length-delimited field, so that decoded
// messages do not hold on to the frame buffer.
func (f field) bytes() ([]byte, error) {
	if f.typ != protowire.BytesType {
		return nil, fmt.Errorf("%w: field %d is not length-delimited", ErrMalformed, f.num)
	}
	return append([]byte(nil), f.b...), nil
}

func (f field) str() (string, error) {
	if f.typ != protowire.BytesType {
		return "", fmt.Errorf("%w: field %d is not length-delimited", ErrMalformed, f.num)
	}
	return string(f.b), nil
}

// sub returns the body of a nested message without copying it.
func (f field) sub() ([]byte, error) {
	if f.typ != protowire.BytesType {
		return nil, fmt.Errorf("%w: field %d is not a message", ErrMalformed, f.num)
	}
	return f.b, nil
}

// encodeKey and decodeKey carry a Key as a nested message.
func encodeKey(e *enc, k Key) {
	e.string(1, k.Resource)
	e.string(2, k.Namespace)
	e.string(3, k.Name)
}

func decodeKey(b []byte) (Key, error) {
	var k Key
	err := eachField(b, func(f field) (err error) {
		switch f.num {
		case 1:
			k.Resource, err = f.str()
		case 2:
			k.Namespace, err = f.str()
		case 3:
			k.Name, err = f.str()
		}
		return err
	})
	if err != nil {
		return Key{}, err
	}
	if err := k.Validate(); err != nil {
		return Key{}, fmt.Errorf("%w: %w", ErrMalformed, err)
	}
	return k, nil
}
