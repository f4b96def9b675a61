package wire

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"strings"
	"testing"
)

type chunk struct {
	ch   byte
	data string
}

func readChunks(t *testing.T, b []byte) ([]chunk, error) {
	t.Helper()
	cr := NewChunkReader(bytes.NewReader(b))
	var got []chunk
	for {
		ch, data, err := cr.Next()
		if err != nil {
			return got, err
		}
		got = append(got, chunk{ch, string(data)})
	}
}

func TestChunks(t *testing.T) {
	var buf bytes.Buffer
	cw := NewChunkWriter(&buf)
	big := strings.Repeat("x", MaxChunk+10)
	if _, err := io.WriteString(cw.ChannelWriter(ChanStdout), "hello"); err != nil {
		t.Fatal(err)
	}
	for _, err := range []error{
		cw.Write(ChanStderr, []byte(big)),
		cw.Write(ChanStdout, nil), // nothing: no chunk
		cw.End(ChanStdin),
		cw.Write(ChanResize, AppendResize(nil, 80, 24)),
		cw.Write(ChanExit, AppendExit(nil, 3, "")),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
	got, err := readChunks(t, buf.Bytes())
	if err != io.EOF {
		t.Fatalf("Next at the end = %v, want io.EOF", err)
	}
	want := []chunk{
		{ChanStdout, "hello"}, {ChanStderr, big[:MaxChunk]}, {ChanStderr, "xxxxxxxxxx"},
		{ChanStdin, ""}, {ChanResize, string(AppendResize(nil, 80, 24))}, {ChanExit, string(AppendExit(nil, 3, ""))},
	}
	if len(got) != len(want) {
		t.Fatalf("read %d chunks, want %d", len(got), len(want))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("chunk %d = channel %d, %d bytes; want channel %d, %d bytes", i, got[i].ch, len(got[i].data), want[i].ch, len(want[i].data))
		}
	}
	w, h, err := ParseResize([]byte(got[4].data))
	if err != nil || w != 80 || h != 24 {
		t.Errorf("ParseResize = %d, %d, %v; want 80, 24", w, h, err)
	}
	code, msg, err := ParseExit([]byte(got[5].data))
	if err != nil || code != 3 || msg != "" {
		t.Errorf("ParseExit = %d, %q, %v; want 3", code, msg, err)
	}
}

func TestChunkErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   []byte
		want error
	}{
		{"cut in the length", []byte{1}, io.ErrUnexpectedEOF},
		{"cut in the data", []byte{1, 5, 'a'}, io.ErrUnexpectedEOF},
		{"over the limit", binary.AppendUvarint([]byte{1}, MaxChunk+1), ErrChunkTooLarge},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := readChunks(t, tc.in)
			if !errors.Is(err, tc.want) {
				t.Errorf("Next(%x) = %v, want %v", tc.in, err, tc.want)
			}
		})
	}
	for _, bad := range [][]byte{nil, {0x80}, AppendResize(nil, 1, 2)[:1], append(AppendResize(nil, 1, 2), 0)} {
		if _, _, err := ParseResize(bad); !errors.Is(err, ErrMalformed) {
			t.Errorf("ParseResize(%x) = %v, want ErrMalformed", bad, err)
		}
	}
	if code, msg, err := ParseExit(AppendExit(nil, -1, "no such container")); err != nil || code != -1 || msg != "no such container" {
		t.Errorf("ParseExit = %d, %q, %v", code, msg, err)
	}
	if _, _, err := ParseExit(nil); !errors.Is(err, ErrMalformed) {
		t.Errorf("ParseExit(nil) = %v, want ErrMalformed", err)
	}
}

// FuzzChunkReader: any bytes from the network give chunks within the
// limit or an error, never a panic or a larger buffer.
func FuzzChunkReader(f *testing.F) {
	var buf bytes.Buffer
	cw := NewChunkWriter(&buf)
	cw.Write(ChanStdout, []byte("hello"))
	cw.End(ChanStdin)
	cw.Write(ChanExit, AppendExit(nil, 0, ""))
	f.Add(buf.Bytes())
	f.Add([]byte{1, 0xff, 0xff, 0xff, 0xff, 0x0f})
	f.Fuzz(func(t *testing.T, b []byte) {
		cr := NewChunkReader(bytes.NewReader(b))
		for {
			ch, data, err := cr.Next()
			if err != nil {
				return
			}
			if len(data) > MaxChunk {
				t.Fatalf("chunk of %d bytes", len(data))
			}
			switch ch {
			case ChanExit:
				ParseExit(data)
			case ChanResize:
				ParseResize(data)
			}
		}
	})
}
