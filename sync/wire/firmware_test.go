package wire

import (
	"bytes"
	"errors"
	"reflect"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
)

func sampleArtifactRequest() *ArtifactRequest {
	return &ArtifactRequest{
		Release:    "agent-1-4-0",
		Component:  "agent",
		SHA256:     bytes.Repeat([]byte{0xab}, SHA256Size),
		FromChunk:  12,
		BaseSHA256: bytes.Repeat([]byte{0xcd}, SHA256Size),
		Rate:       1 << 20,
	}
}

// TestArtifactFramesRoundTrip: every artifact frame reads back as written
// through a Writer and a Reader, compressed or not.
func TestArtifactFramesRoundTrip(t *testing.T) {
	for _, m := range []Message{
		sampleArtifactRequest(),
		&ArtifactRequest{Release: "r"},
		&ArtifactReply{Mode: ArtifactFull, Size: 1, ChunkSize: 4096},
		&ArtifactReply{Envelope: bytes.Repeat([]byte("e"), MaxArtifactEnvelope)},
		&ArtifactChunk{Index: MaxArtifactChunks - 1, Data: bytes.Repeat([]byte{1}, MaxArtifactChunkData)},
	} {
		var buf bytes.Buffer
		if err := NewWriter(&buf).Write(m); err != nil {
			t.Fatalf("Write(%v) = %v", m.Type(), err)
		}
		got, err := NewReader(&buf, 0).Read()
		if err != nil || !reflect.DeepEqual(got, m) {
			t.Errorf("Read(%v) = %v; want it as written", m.Type(), err)
		}
	}
}

// TestArtifactLimits: the decoders refuse what is over a limit or
// incomplete, before they copy it.
func TestArtifactLimits(t *testing.T) {
	long := strings.Repeat("a", MaxArtifactName+1)
	for _, tc := range []struct {
		name string
		m    Message
	}{
		{"no release", &ArtifactRequest{Component: "agent", SHA256: make([]byte, SHA256Size)}},
		{"long release", &ArtifactRequest{Release: long}},
		{"long component", &ArtifactRequest{Release: "r", Component: long, SHA256: make([]byte, SHA256Size)}},
		{"no sha256", &ArtifactRequest{Release: "r", Component: "agent"}},
		{"short sha256", &ArtifactRequest{Release: "r", Component: "agent", SHA256: make([]byte, 31)}},
		{"short base", &ArtifactRequest{Release: "r", Component: "agent", SHA256: make([]byte, SHA256Size), BaseSHA256: make([]byte, 33)}},
		{"manifest from chunk", &ArtifactRequest{Release: "r", FromChunk: 3}},
		{"from past the last chunk", &ArtifactRequest{Release: "r", Component: "a", SHA256: make([]byte, SHA256Size), FromChunk: MaxArtifactChunks + 1}},
		{"large chunk size", &ArtifactReply{Mode: ArtifactFull, ChunkSize: MaxArtifactChunkSize + 1}},
		{"unknown mode", &ArtifactReply{Mode: 3}},
		{"large artifact", &ArtifactReply{Mode: ArtifactFull, Size: MaxArtifactChunks*MaxArtifactChunkSize + 1}},
		{"large envelope", &ArtifactReply{Envelope: make([]byte, MaxArtifactEnvelope+1)}},
		{"chunk without data", &ArtifactChunk{Index: 1}},
		{"chunk index", &ArtifactChunk{Index: MaxArtifactChunks, Data: []byte{1}}},
		{"chunk data", &ArtifactChunk{Data: make([]byte, MaxArtifactChunkData+1)}},
	} {
		if _, err := Unmarshal(tc.m.Type(), Marshal(tc.m)); !errors.Is(err, ErrMalformed) {
			t.Errorf("Unmarshal(%s) = %v, want ErrMalformed", tc.name, err)
		}
	}
	// A field of the wrong wire type.
	var e enc
	e.uint(2, 5)
	if _, err := Unmarshal(TypeArtifactChunk, e.b); !errors.Is(err, ErrMalformed) {
		t.Errorf("Unmarshal(chunk data as a varint) = %v, want ErrMalformed", err)
	}
	// A chunk frame of the largest data fits in a default frame.
	if n := len(Marshal(&ArtifactChunk{Index: MaxArtifactChunks - 1, Data: make([]byte, MaxArtifactChunkData), Delta: true})); n > DefaultMaxFrameSize {
		t.Errorf("largest chunk frame body is %d bytes, over the frame limit %d", n, DefaultMaxFrameSize)
	}
}

// TestArtifactUnknownFieldsSkipped: a later version's fields are skipped.
func TestArtifactUnknownFieldsSkipped(t *testing.T) {
	b := Marshal(&ArtifactChunk{Index: 3, Data: []byte{9}})
	b = protowire.AppendTag(b, 15, protowire.BytesType)
	b = protowire.AppendBytes(b, []byte("later"))
	m, err := Unmarshal(TypeArtifactChunk, b)
	if err != nil || m.(*ArtifactChunk).Index != 3 {
		t.Errorf("Unmarshal(chunk with field 15) = %+v, %v", m, err)
	}
}

func fuzzArtifact(f *testing.F, typ Type, seeds ...Message) {
	for _, m := range seeds {
		f.Add(Marshal(m))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := Unmarshal(typ, b)
		if err != nil {
			return
		}
		again, err := Unmarshal(typ, Marshal(m))
		if err != nil || !reflect.DeepEqual(again, m) {
			t.Fatalf("re-decode of %+v = %+v, %v", m, again, err)
		}
	})
}

func FuzzUnmarshalArtifactRequest(f *testing.F) {
	fuzzArtifact(f, TypeArtifactRequest, sampleArtifactRequest(), &ArtifactRequest{Release: "r"})
}

func FuzzUnmarshalArtifactReply(f *testing.F) {
	fuzzArtifact(f, TypeArtifactReply, &ArtifactReply{Mode: ArtifactDelta, Size: 5 << 20, ChunkSize: 1 << 18},
		&ArtifactReply{Code: CodeNotFound, Message: "no"}, &ArtifactReply{Envelope: []byte("{}")})
}

func FuzzUnmarshalArtifactChunk(f *testing.F) {
	fuzzArtifact(f, TypeArtifactChunk, &ArtifactChunk{Index: 2, Data: []byte{1, 2, 3}, Delta: true})
}
