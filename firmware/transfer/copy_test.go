package transfer

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// memCopy is a copy of an artifact in memory; bad, if not negative, is
// a byte it serves flipped, and cut, if positive, where its body ends
// early; stall blocks reads after cut instead of ending.
type memCopy struct {
	data   []byte
	bad    int
	cut    int
	stall  bool
	opened []int64
}

func (m *memCopy) open(ctx context.Context, off int64) (io.ReadCloser, int64, error) {
	m.opened = append(m.opened, off)
	b := bytes.Clone(m.data)
	if m.bad >= 0 {
		b[m.bad] ^= 0x01
	}
	end := len(b)
	if m.cut > 0 {
		end = m.cut
	}
	r := io.Reader(bytes.NewReader(b[off:end]))
	if m.stall {
		r = io.MultiReader(r, ctxReader{ctx})
	}
	return io.NopCloser(r), int64(len(m.data)), nil
}

// ctxReader blocks until its context ends.
type ctxReader struct{ ctx context.Context }

func (r ctxReader) Read([]byte) (int, error) {
	<-r.ctx.Done()
	return 0, r.ctx.Err()
}

// A good copy is fetched whole; a later FetchCopy finds it done.
func TestFetchCopy(t *testing.T) {
	h := newTestHub(t, DefaultConfig())
	_, target := artifacts(1 << 20)
	c := h.release(t, "r1", target, 64<<10)
	dst := filepath.Join(t.TempDir(), "artifact")
	src := &memCopy{data: target, bad: -1}
	st, err := FetchCopy(t.Context(), src.open, time.Second, dst, c)
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(dst); !bytes.Equal(got, target) {
		t.Fatalf("fetched artifact differs")
	}
	if st.Received != int64(len(target)) {
		t.Errorf("received %d bytes, want %d", st.Received, len(target))
	}
	if _, err := FetchCopy(t.Context(), src.open, time.Second, dst, c); err != nil || len(src.opened) != 1 {
		t.Errorf("second FetchCopy: %v, opened %d times; want the artifact found done", err, len(src.opened))
	}
}

// A copy with a bad chunk: the chunks before it are kept, the bad one
// is not written, and the hub's Fetch resumes after the good ones.
func TestFetchCopyBadChunk(t *testing.T) {
	h := newTestHub(t, DefaultConfig())
	_, target := artifacts(1 << 20)
	const cs = 64 << 10
	c := h.release(t, "r1", target, cs)
	dst := filepath.Join(t.TempDir(), "artifact")
	src := &memCopy{data: target, bad: 5*cs + 10}
	st, err := FetchCopy(t.Context(), src.open, time.Second, dst, c)
	if !errors.Is(err, ErrBadCopy) {
		t.Fatalf("FetchCopy of a bad copy = %v, want ErrBadCopy", err)
	}
	if st.Refused != 1 {
		t.Errorf("refused %d chunks, want 1", st.Refused)
	}
	if fi, err := os.Stat(dst + ".part"); err != nil || fi.Size() != 5*cs {
		t.Fatalf("partial file: %v, %v; want the 5 good chunks", fi, err)
	}
	hst, err := Fetch(t.Context(), h.open(nil), fastConfig("r1"), dst, c, "")
	if err != nil {
		t.Fatal(err)
	}
	if hst.Reused != 5*cs || hst.Received != int64(len(target))-5*cs {
		t.Errorf("hub fetch reused %d and received %d bytes; want %d and the rest", hst.Reused, hst.Received, 5*cs)
	}
	if got, _ := os.ReadFile(dst); !bytes.Equal(got, target) {
		t.Fatalf("fetched artifact differs")
	}
}

// A copy cut short, or one that stalls, leaves its good chunks; the next
// copy resumes from them.
func TestFetchCopyResume(t *testing.T) {
	for _, stall := range []bool{false, true} {
		t.Run(map[bool]string{false: "cut", true: "stall"}[stall], func(t *testing.T) {
			h := newTestHub(t, DefaultConfig())
			_, target := artifacts(1 << 20)
			const cs = 64 << 10
			c := h.release(t, "r1", target, cs)
			dst := filepath.Join(t.TempDir(), "artifact")
			first := &memCopy{data: target, bad: -1, cut: 3*cs + 100, stall: stall}
			_, err := FetchCopy(t.Context(), first.open, 50*time.Millisecond, dst, c)
			switch {
			case err == nil:
				t.Fatal("FetchCopy of a copy cut short succeeded")
			case stall && !errors.Is(err, errStalled):
				t.Fatalf("FetchCopy of a stalled copy = %v, want a stall", err)
			case !stall && !errors.Is(err, ErrBadCopy):
				t.Fatalf("FetchCopy of a short copy = %v, want ErrBadCopy", err)
			}
			second := &memCopy{data: target, bad: -1}
			st, err := FetchCopy(t.Context(), second.open, time.Second, dst, c)
			if err != nil {
				t.Fatal(err)
			}
			if len(second.opened) != 1 || second.opened[0] != 3*cs || st.Reused != 3*cs {
				t.Errorf("resumed at %v, reused %d; want at %d", second.opened, st.Reused, 3*cs)
			}
			if got, _ := os.ReadFile(dst); !bytes.Equal(got, target) {
				t.Fatalf("fetched artifact differs")
			}
		})
	}
}

// A copy of another size is bad before a byte is read.
func TestFetchCopyWrongSize(t *testing.T) {
	h := newTestHub(t, DefaultConfig())
	_, target := artifacts(256 << 10)
	c := h.release(t, "r1", target, 64<<10)
	src := &memCopy{data: append(bytes.Clone(target), 0), bad: -1}
	if _, err := FetchCopy(t.Context(), src.open, time.Second, filepath.Join(t.TempDir(), "a"), c); !errors.Is(err, ErrBadCopy) {
		t.Fatalf("FetchCopy of a copy one byte long = %v, want ErrBadCopy", err)
	}
}
