package wire

import (
	"bytes"
	"errors"
	"io"
	"net/netip"
	"reflect"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

// samples has one message of each type with every field set.
func samples() []Message {
	k := Key{Resource: ResourcePods, Namespace: "default", Name: "web-1"}
	return []Message{
		&Error{Code: CodeForbidden, Message: "node edge-1 may not write pod default/web-2"},
		&Error{Code: CodeUnavailable, Message: "too many failed joins from 10.0.0.7; retry after 8s", RetryAfter: 7500 * time.Millisecond},
		&JoinRequest{CapabilityVersion: 1, Token: "abcdef.0123456789abcdef", NodeName: "edge-1", Site: "store-7", CSR: []byte{0x30, 0x82, 1, 2}},
		&JoinResponse{Certificate: []byte{1, 2, 3}, CA: []byte{4, 5, 6}},
		&Hello{CapabilityVersion: 1, NodeName: "edge-1", LastRevision: 12345, AgentVersion: "v0.1.0"},
		&Hello{CapabilityVersion: 3, NodeName: "edge-1", LastRevision: 12345, AgentVersion: "v0.3.0", Tokens: []InventoryEntry{{Key: PodTokensKey("default", "8f9e2c1a-uid"), Revision: 1796169600}}},
		&Welcome{CapabilityVersion: 1, HubRevision: 99999, SendInventory: true},
		&Inventory{Entries: []InventoryEntry{{Key: k, Revision: 7}, {Key: Key{Resource: ResourceNodes, Name: "edge-1"}, Revision: 8}}, More: true},
		&Batch{Changes: []Change{
			{Op: OpPut, Key: k, Revision: 10, Object: []byte("k8s\x00pod")},
			{Op: OpDelete, Key: Key{Resource: ResourceSecrets, Namespace: "default", Name: "s"}, Revision: 11},
		}, Revision: 12},
		&Ack{Revision: 12},
		&StatusPush{Items: []StatusItem{{Seq: 1, Kind: KindPodStatus, Key: k, Object: []byte("status")}, {Seq: 2, Kind: KindEvent, Key: Key{Resource: ResourceEvents, Namespace: "default", Name: "e"}}}},
		&StatusAck{Results: []StatusResult{{Seq: 1}, {Seq: 2, Code: CodeForbidden, Message: "no"}}},
		&RenewRequest{CSR: []byte{9, 9}},
		&RenewResponse{Certificate: []byte{8, 8}},
		&TunnelOpen{Kind: "logs", Params: []Param{{Name: "pod", Value: "default/web-1"}, {Name: "container", Value: "main"}}},
		&TunnelReply{},
		sampleUsage(),
		sampleRelayUsage(),
	}
}

// sampleRelayUsage is a Usage with the counters of the node's relay, for
// an IPv4 and an IPv6 peer (field 6, added within version 5).
func sampleRelayUsage() *Usage {
	return &Usage{
		Time: time.UnixMilli(1796428860123), Window: 15 * time.Second,
		Node: ResourceUsage{CPU: 250_000_000, Memory: 512 << 20},
		Relay: []RelayUsage{
			{Peer: netip.MustParseAddr("192.168.7.12"), Up: 1 << 20, Down: 3 << 20, Dropped: 40, Capped: 32},
			{Peer: netip.MustParseAddr("fd00:7::c"), Up: 4096},
		},
	}
}

func sampleUsage() *Usage {
	return &Usage{
		Time: time.UnixMilli(1796256000123), Window: 15 * time.Second,
		Node: ResourceUsage{CPU: 250_000_000, Memory: 512 << 20},
		Pods: []PodUsage{
			{Namespace: "default", Name: "web-1", Containers: []ContainerUsage{
				{Name: "web", ResourceUsage: ResourceUsage{CPU: 1_500_000, Memory: 12 << 20}},
				{Name: "idle"},
			}},
			{Namespace: "kube-system", Name: "dns", Containers: []ContainerUsage{{Name: "dns", ResourceUsage: ResourceUsage{CPU: 800_000, Memory: 9 << 20}}}},
		},
	}
}

func TestRoundTrip(t *testing.T) {
	var buf bytes.Buffer
	w := NewWriter(&buf)
	for _, m := range samples() {
		if err := w.Write(m); err != nil {
			t.Fatalf("Write(%v) = %v", m.Type(), err)
		}
	}
	r := NewReader(&buf, 0)
	for _, want := range samples() {
		got, err := r.Read()
		if err != nil {
			t.Fatalf("Read() = %v, want %v", err, want.Type())
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("Read() = %#v, want %#v", got, want)
		}
	}
	if _, err := r.Read(); err != io.EOF {
		t.Fatalf("Read() at the end = %v, want io.EOF", err)
	}
	if r.BytesRead() != w.BytesWritten() {
		t.Errorf("BytesRead() = %d, BytesWritten() = %d", r.BytesRead(), w.BytesWritten())
	}
}

func TestCompression(t *testing.T) {
	obj := []byte(strings.Repeat("apiVersion: v1 kind: Pod metadata: name: web ", 100))
	var changes []Change
	for i := range 50 {
		changes = append(changes, Change{Op: OpPut, Key: Key{Resource: ResourcePods, Namespace: "default", Name: "web"}, Revision: int64(i + 1), Object: obj})
	}
	m := &Batch{Changes: changes, Revision: 50}
	plain := len(Marshal(m))

	for _, lean := range []bool{false, true} {
		var buf bytes.Buffer
		w := NewWriter(&buf)
		if lean {
			w.SetLean()
		}
		if err := w.Write(m); err != nil {
			t.Fatal(err)
		}
		if got := buf.Len(); got > plain/10 {
			t.Errorf("lean %v: compressed frame is %d bytes of %d plain, want under a tenth", lean, got, plain)
		}
		got, err := NewReader(&buf, 0).Read()
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, m) {
			t.Errorf("lean %v: compressed batch did not round-trip", lean)
		}

		// Small messages are not compressed: the flag byte stays 0.
		buf.Reset()
		w.Write(&Ack{Revision: 5})
		if b := buf.Bytes(); b[2] != 0 {
			t.Errorf("lean %v: Ack frame flags = %#x, want 0", lean, b[2])
		}
	}
}

func TestFrameTooLarge(t *testing.T) {
	big := &Batch{Changes: []Change{{Op: OpPut, Key: Key{Resource: ResourcePods, Namespace: "a", Name: "b"}, Revision: 1, Object: make([]byte, 2000)}}, Revision: 1}

	// The writer refuses a body over its limit.
	w := NewWriter(io.Discard)
	w.max = 1000
	if err := w.Write(big); !errors.Is(err, ErrFrameTooLarge) {
		t.Fatalf("Write over the limit = %v, want ErrFrameTooLarge", err)
	}

	// The reader refuses an announced size over its limit without reading
	// the body, and a compressed body that inflates past it.
	var buf bytes.Buffer
	NewWriter(&buf).Write(big)
	_, err := NewReader(bytes.NewReader(buf.Bytes()), 1000).Read()
	var tl *FrameTooLargeError
	if !errors.As(err, &tl) || tl.Limit != 1000 {
		t.Fatalf("Read over the limit = %v, want FrameTooLargeError with limit 1000", err)
	}
	buf.Reset()
	NewWriter(&buf).Write(big) // 2000 zero bytes compress to a few
	if buf.Len() >= 1000 {
		t.Fatalf("test frame of %d bytes does not compress", buf.Len())
	}
	if _, err := NewReader(&buf, 1000).Read(); !errors.Is(err, ErrFrameTooLarge) {
		t.Fatalf("Read of a frame inflating past the limit = %v, want ErrFrameTooLarge", err)
	}
}

func TestMalformed(t *testing.T) {
	for _, tc := range []struct {
		name  string
		frame []byte
	}{
		{"truncated length", []byte{0x80}},
		{"overlong length", bytes.Repeat([]byte{0xff}, 11)},
		{"truncated header", []byte{3, byte(TypeAck)}},
		{"truncated body", []byte{3, byte(TypeAck), 0, 0x08}},
		{"unknown type", []byte{0, 200, 0}},
		{"unknown flags", []byte{0, byte(TypeAck), 0x80}},
		{"bad zstd", []byte{3, byte(TypeAck), flagZstd, 1, 2, 3}},
		{"varint where bytes", []byte{2, byte(TypeHello), 0, 0x10, 0x01}},
		{"bad key", append([]byte{8, byte(TypeInventory), 0}, 0x0a, 6, 0x0a, 4, 0x0a, 2, 'x', 'y')},
		{"put without object", []byte{8, byte(TypeBatch), 0, 0x0a, 6, 0x08, 1, 0x12, 2, 0x1a, 0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := NewReader(bytes.NewReader(tc.frame), 0).Read()
			if err == nil || err == io.EOF {
				t.Fatalf("Read(%x) = %v, want an error", tc.frame, err)
			}
		})
	}
}

// TestUnknownFields: fields a later version adds are skipped.
func TestUnknownFields(t *testing.T) {
	var e enc
	(&Hello{NodeName: "n", LastRevision: 3}).appendTo(&e)
	e.string(99, "from the future")
	e.uint(98, 7)
	m, err := Unmarshal(TypeHello, e.b)
	if err != nil {
		t.Fatal(err)
	}
	if h := m.(*Hello); h.NodeName != "n" || h.LastRevision != 3 {
		t.Fatalf("Unmarshal = %+v", h)
	}
}

// TestErrorBytes pins the encoding of an Error, RetryAfter in field 3
// (since capability version 2) in whole milliseconds, rounded up.
func TestErrorBytes(t *testing.T) {
	for _, tc := range []struct {
		m    *Error
		want []byte
	}{
		{&Error{Code: CodeUnauthorized, Message: "x"}, []byte{0x08, 0x02, 0x12, 0x01, 'x'}},
		{&Error{Code: CodeUnavailable, Message: "x", RetryAfter: 1500 * time.Millisecond}, []byte{0x08, 0x06, 0x12, 0x01, 'x', 0x18, 0xdc, 0x0b}},
		{&Error{Code: CodeUnavailable, RetryAfter: time.Microsecond}, []byte{0x08, 0x06, 0x18, 0x01}},
	} {
		if got := Marshal(tc.m); !bytes.Equal(got, tc.want) {
			t.Errorf("Marshal(%+v) = %x, want %x", tc.m, got, tc.want)
		}
	}
	// A version 1 peer's Error has no RetryAfter; a wait past what a
	// Duration holds is malformed.
	if m, err := Unmarshal(TypeError, []byte{0x08, 0x06}); err != nil || m.(*Error).RetryAfter != 0 {
		t.Errorf("Unmarshal(v1 error) = %+v, %v", m, err)
	}
	var e enc
	e.uint(3, 1<<62)
	if _, err := Unmarshal(TypeError, e.b); !errors.Is(err, ErrMalformed) {
		t.Errorf("Unmarshal(RetryAfter 2^62 ms) = %v, want ErrMalformed", err)
	}
}

func TestNegotiate(t *testing.T) {
	if v, ok := Negotiate(CapabilityVersion + 5); v != CapabilityVersion || !ok {
		t.Errorf("Negotiate(newer) = %d, %v", v, ok)
	}
	if _, ok := Negotiate(0); ok {
		t.Errorf("Negotiate(0) is accepted")
	}
}

func TestKey(t *testing.T) {
	for _, s := range []string{"pods/default/web", "nodes//edge-1"} {
		k, err := ParseKey(s)
		if err != nil || k.String() != s {
			t.Errorf("ParseKey(%q) = %v, %v", s, k, err)
		}
	}
	for _, s := range []string{"", "pods/default", "pods/a/b/c", "/ns/n", "pods/ns/", strings.Repeat("x", 300) + "/a/b"} {
		if _, err := ParseKey(s); !errors.Is(err, ErrInvalidKey) {
			t.Errorf("ParseKey(%q) = %v, want ErrInvalidKey", s, err)
		}
	}
}

// FuzzReader feeds arbitrary bytes to the frame reader: it must return
// messages or errors, never panic, and what it decodes must encode back to
// something that decodes the same.
func FuzzReader(f *testing.F) {
	var buf bytes.Buffer
	w := NewWriter(&buf)
	for _, m := range samples() {
		buf.Reset()
		w.Write(m)
		f.Add(append([]byte(nil), buf.Bytes()...))
	}
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0x0f, 1, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		r := NewReader(bytes.NewReader(data), 64<<10)
		for range 100 {
			m, err := r.Read()
			if err != nil {
				return
			}
			again, err := Unmarshal(m.Type(), Marshal(m))
			if err != nil {
				t.Fatalf("re-decode of %v: %v", m.Type(), err)
			}
			if !reflect.DeepEqual(normalize(again), normalize(m)) {
				t.Fatalf("re-decode of %v = %#v, want %#v", m.Type(), again, m)
			}
		}
	})
}

// FuzzUnmarshal decodes arbitrary bodies as every message type.
func FuzzUnmarshal(f *testing.F) {
	for _, m := range samples() {
		f.Add(uint8(m.Type()), Marshal(m))
	}
	f.Fuzz(func(t *testing.T, typ uint8, body []byte) {
		m, err := Unmarshal(Type(typ), body)
		if err != nil {
			return
		}
		if _, err := Unmarshal(m.Type(), Marshal(m)); err != nil {
			t.Fatalf("re-decode of %v: %v", m.Type(), err)
		}
	})
}

// normalize maps empty byte slices to nil, which encoding does not tell
// apart.
func normalize(m Message) Message {
	switch m := m.(type) {
	case *Batch:
		for i := range m.Changes {
			if len(m.Changes[i].Object) == 0 {
				m.Changes[i].Object = nil
			}
		}
	case *StatusPush:
		for i := range m.Items {
			if len(m.Items[i].Object) == 0 {
				m.Items[i].Object = nil
			}
		}
	case *JoinRequest:
		if len(m.CSR) == 0 {
			m.CSR = nil
		}
	case *JoinResponse:
		if len(m.Certificate) == 0 {
			m.Certificate = nil
		}
		if len(m.CA) == 0 {
			m.CA = nil
		}
	case *RenewRequest:
		if len(m.CSR) == 0 {
			m.CSR = nil
		}
	case *RenewResponse:
		if len(m.Certificate) == 0 {
			m.Certificate = nil
		}
	}
	return m
}

func TestCloseReason(t *testing.T) {
	long := strings.Repeat("é", MaxCloseReason) // two bytes each
	for _, tc := range []struct{ in, want string }{
		{"", ""},
		{"disk full", "disk full"},
		{strings.Repeat("a", MaxCloseReason+10), strings.Repeat("a", MaxCloseReason)},
		{long, strings.Repeat("é", MaxCloseReason/2)},
		{"a" + long, "a" + strings.Repeat("é", (MaxCloseReason-1)/2)},
	} {
		if got := CloseReason(tc.in); got != tc.want || !utf8.ValidString(got) {
			t.Errorf("CloseReason(%d bytes) = %d bytes, want %d", len(tc.in), len(got), len(tc.want))
		}
	}
}
