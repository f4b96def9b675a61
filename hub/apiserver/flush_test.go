package apiserver

import (
	"bytes"
	"net/http"
	"testing"
	"time"
)

// countingWriter is a ResponseWriter that counts flushes and keeps what
// reached it.
type countingWriter struct {
	header  http.Header
	body    bytes.Buffer
	writes  int
	flushes int
}

func (c *countingWriter) Header() http.Header {
	if c.header == nil {
		c.header = http.Header{}
	}
	return c.header
}
func (c *countingWriter) Write(b []byte) (int, error) { c.writes++; return c.body.Write(b) }
func (c *countingWriter) WriteHeader(int)             {}
func (c *countingWriter) Flush()                      { c.flushes++ }

func TestFlushPacer(t *testing.T) {
	cw := &countingWriter{}
	ww := &watchWriter{w: cw, flusher: http.NewResponseController(cw)}
	f := newFlushPacer(ww, time.Hour)
	defer f.stop()

	// The first batch after a quiet spell goes out at once.
	ww.write([]byte("a"))
	if err := f.written(); err != nil {
		t.Fatal(err)
	}
	if cw.flushes != 1 || cw.body.String() != "a" || f.due() != nil {
		t.Fatalf("after the first batch: %d flushes, body %q, due %v; want 1, \"a\", nil", cw.flushes, cw.body.String(), f.due())
	}
	// Those within the interval wait for the timer, together.
	ww.write([]byte("b"))
	f.written()
	ww.write([]byte("c"))
	f.written()
	if cw.flushes != 1 || cw.body.String() != "a" || f.due() == nil {
		t.Fatalf("within the interval: %d flushes, body %q, due %v; want 1, \"a\", armed", cw.flushes, cw.body.String(), f.due())
	}
	if err := f.flushNow(); err != nil {
		t.Fatal(err)
	}
	if cw.flushes != 2 || cw.writes != 2 || cw.body.String() != "abc" || f.due() != nil {
		t.Fatalf("after the timer: %d flushes, %d writes, body %q; want 2, 2, \"abc\"", cw.flushes, cw.writes, cw.body.String())
	}

	// A negative interval flushes every batch.
	cw2 := &countingWriter{}
	ww2 := &watchWriter{w: cw2, flusher: http.NewResponseController(cw2)}
	f2 := newFlushPacer(ww2, -1)
	for _, s := range []string{"x", "y", "z"} {
		ww2.write([]byte(s))
		f2.written()
	}
	if cw2.flushes != 3 || cw2.body.String() != "xyz" {
		t.Fatalf("unpaced: %d flushes, body %q; want 3, \"xyz\"", cw2.flushes, cw2.body.String())
	}
}

// TestWatchBufferBounded: a batch larger than maxWatchBuf is handed to the
// connection before its flush.
func TestWatchBufferBounded(t *testing.T) {
	cw := &countingWriter{}
	ww := &watchWriter{w: cw, flusher: http.NewResponseController(cw)}
	chunk := bytes.Repeat([]byte("e"), 1000)
	for range maxWatchBuf/len(chunk) + 1 {
		if err := ww.write(chunk); err != nil {
			t.Fatal(err)
		}
	}
	if cw.writes != 1 || cw.flushes != 0 {
		t.Fatalf("%d writes and %d flushes before the flush, want 1 and 0", cw.writes, cw.flushes)
	}
	if err := ww.flush(); err != nil {
		t.Fatal(err)
	}
	if cw.body.Len() != (maxWatchBuf/len(chunk)+1)*len(chunk) {
		t.Fatalf("%d bytes reached the client, want %d", cw.body.Len(), (maxWatchBuf/len(chunk)+1)*len(chunk))
	}
}
