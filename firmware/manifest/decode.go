package manifest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// shape is the JSON schema of record for what this package decodes: which
// keys an object has (exact spelling), how long an array may be and what
// its elements are. checkShape walks the input's tokens against it before
// encoding/json sees the input, which closes the gaps where encoding/json
// reads differently from a strict reader: case-insensitive keys, duplicate
// keys (last wins), null for a list, and lists longer than any limit
// (refused before their elements are allocated).
type shape struct {
	fields map[string]*shape // object: its keys
	elem   *shape            // array: its elements
	max    int               // array: the most elements
}

// scalar is the shape of a string, number, boolean or null.
var scalar = &shape{}

// isObject and isArray tell the kind of a shape.
func (s *shape) isObject() bool { return s.fields != nil }
func (s *shape) isArray() bool  { return s.elem != nil }

var (
	// componentShape is a Component's JSON.
	componentShape = &shape{fields: map[string]*shape{
		"name": scalar, "kind": scalar, "os": scalar, "arch": scalar, "variant": scalar,
		"size": scalar, "sha256": scalar, "chunkSize": scalar,
		"chunks": {elem: scalar, max: MaxChunks},
	}}
	// healthCheckShape is a HealthCheck's JSON.
	healthCheckShape = &shape{fields: map[string]*shape{
		"name": scalar, "namespace": scalar, "pod": scalar, "container": scalar,
		"exec":           {elem: scalar, max: MaxExecArgs},
		"http":           {fields: map[string]*shape{"port": scalar, "path": scalar, "scheme": scalar}},
		"timeoutSeconds": scalar,
	}}
	// manifestShape is a Manifest's JSON.
	manifestShape = &shape{fields: map[string]*shape{
		"name": scalar, "version": scalar, "created": scalar, "expires": scalar,
		"allowDowngradeFrom": scalar,
		"components":         {elem: componentShape, max: MaxComponents},
		"healthChecks":       {elem: healthCheckShape, max: MaxHealthChecks},
	}}
	// envelopeShape is an Envelope's JSON.
	envelopeShape = &shape{fields: map[string]*shape{
		"payloadType": scalar, "payload": scalar,
		"signatures": {elem: &shape{fields: map[string]*shape{"keyid": scalar, "sig": scalar}}, max: MaxSignatures},
	}}
)

// errTooMany marks a list over its limit, which is TooLarge rather than
// Malformed.
var errTooMany = errors.New("too many elements")

// checkShape reports whether data is exactly one JSON value of shape s.
func checkShape(data []byte, s *shape) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber() // numbers stay strings; encoding/json types them later
	if err := walk(dec, s); err != nil {
		return err
	}
	if _, err := dec.Token(); err != io.EOF {
		return fmt.Errorf("data after the JSON value")
	}
	return nil
}

// walk consumes one value of shape s from dec.
func walk(dec *json.Decoder, s *shape) error {
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	d, isDelim := tok.(json.Delim)
	switch {
	case s.isObject():
		if !isDelim || d != '{' {
			return fmt.Errorf("want an object, got %v", tok)
		}
		return walkObject(dec, s)
	case s.isArray():
		if !isDelim || d != '[' {
			return fmt.Errorf("want a list, got %v", tok)
		}
		return walkArray(dec, s)
	case isDelim:
		return fmt.Errorf("want a string, number or boolean, got %v", d)
	}
	return nil
}

// walkObject consumes the rest of an object after its '{'.
func walkObject(dec *json.Decoder, s *shape) error {
	seen := make(map[string]bool, len(s.fields))
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		key, _ := tok.(string)
		field, ok := s.fields[key]
		if !ok {
			return fmt.Errorf("unknown field %q", key)
		}
		if seen[key] {
			return fmt.Errorf("field %q appears twice", key)
		}
		seen[key] = true
		if err := walk(dec, field); err != nil {
			return fmt.Errorf("%s: %w", key, err)
		}
	}
	_, err := dec.Token() // '}'
	return err
}

// walkArray consumes the rest of an array after its '['.
func walkArray(dec *json.Decoder, s *shape) error {
	for n := 0; dec.More(); n++ {
		if n == s.max {
			return fmt.Errorf("%w: more than %d", errTooMany, s.max)
		}
		if err := walk(dec, s.elem); err != nil {
			return fmt.Errorf("[%d]: %w", n, err)
		}
	}
	_, err := dec.Token() // ']'
	return err
}

// decodeStrict decodes data, one JSON value of shape s, into v, refusing
// unknown fields and trailing data. Errors are *Error: TooLarge for a list
// over its limit, Malformed for anything else.
func decodeStrict(data []byte, s *shape, v any, what string) error {
	if err := checkShape(data, s); err != nil {
		if errors.Is(err, errTooMany) {
			return refuse(TooLarge, "%s: %v", what, err)
		}
		return refuse(Malformed, "%s: %v", what, err)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return refuse(Malformed, "%s: %v", what, err)
	}
	return nil
}

// DecodeManifest decodes and validates a manifest's JSON. It checks no
// signature: use it only on a payload Verify returned or to show a release
// to a human. Errors are *Error (Malformed, TooLarge, Invalid).
func DecodeManifest(data []byte) (*Manifest, error) {
	if len(data) > MaxEnvelopeBytes {
		return nil, refuse(TooLarge, "manifest is %d bytes, over %d", len(data), MaxEnvelopeBytes)
	}
	var m Manifest
	if err := decodeStrict(data, manifestShape, &m, "manifest"); err != nil {
		return nil, err
	}
	if err := m.Validate(); err != nil {
		return nil, err
	}
	return &m, nil
}
