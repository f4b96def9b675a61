package artifacts

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

func digest(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

func TestPutOpenListRemove(t *testing.T) {
	ctx := context.Background()
	s, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	data := bytes.Repeat([]byte("firmware "), 10000)
	d := digest(data)
	if _, ok := s.Stat(d); ok {
		t.Fatal("Stat of an empty store found the blob")
	}
	if _, err := s.Open(d); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Open before Put: %v, want ErrNotFound", err)
	}
	if err := s.Put(ctx, bytes.NewReader(data), d, int64(len(data))); err != nil {
		t.Fatal(err)
	}
	if size, ok := s.Stat(d); !ok || size != int64(len(data)) {
		t.Fatalf("Stat = %d, %v; want %d, true", size, ok, len(data))
	}
	// Idempotent: a second Put of a held blob reads nothing.
	if err := s.Put(ctx, iotestErrReader{}, d, int64(len(data))); err != nil {
		t.Fatalf("second Put: %v", err)
	}
	b, err := s.Open(d)
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(io.NewSectionReader(b, 0, b.Size()))
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read back %d bytes, %v; want the %d stored", len(got), err, len(data))
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	list, err := s.List()
	if err != nil || len(list) != 1 || list[0].SHA256 != d || list[0].Size != int64(len(data)) || time.Since(list[0].ModTime) > time.Hour {
		t.Fatalf("List = %v, %v", list, err)
	}
	if err := s.Remove(d); err != nil {
		t.Fatal(err)
	}
	if err := s.Remove(d); err != nil {
		t.Fatalf("second Remove: %v", err)
	}
	if _, ok := s.Stat(d); ok {
		t.Fatal("Stat after Remove found the blob")
	}
}

type iotestErrReader struct{}

func (iotestErrReader) Read([]byte) (int, error) { return 0, errors.New("read when nothing should be") }

func TestPutRefuses(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	data := []byte("the right bytes")
	d := digest(data)
	tests := []struct {
		name   string
		body   []byte
		digest string
		size   int64
		want   error
	}{
		{"short", data[:5], d, int64(len(data)), ErrMismatch},
		{"long", append(append([]byte{}, data...), 'x'), d, int64(len(data)), ErrMismatch},
		{"other bytes", []byte("the wrong bytes"), d, int64(len(data)), ErrMismatch},
		{"upper case", data, strings.ToUpper(d), int64(len(data)), ErrInvalidDigest},
		{"path", data, "../../../../etc/passwd", int64(len(data)), ErrInvalidDigest},
		{"short digest", data, d[:63], int64(len(data)), ErrInvalidDigest},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := s.Put(ctx, bytes.NewReader(tt.body), tt.digest, tt.size)
			if !errors.Is(err, tt.want) {
				t.Fatalf("Put = %v, want %v", err, tt.want)
			}
			var me *MismatchError
			if tt.want == ErrMismatch && (!errors.As(err, &me) || me.WantSHA256 != d) {
				t.Fatalf("Put = %#v, want a *MismatchError for %s", err, d)
			}
		})
	}
	entries, err := os.ReadDir(filepath.Join(dir, "blobs", "sha256"))
	if err != nil || len(entries) != 0 {
		t.Fatalf("after refused Puts the store holds %v, %v; want nothing", entries, err)
	}
}

func TestPutCanceled(t *testing.T) {
	s, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	data := []byte("x")
	if err := s.Put(ctx, bytes.NewReader(data), digest(data), 1); !errors.Is(err, context.Canceled) {
		t.Fatalf("Put with a canceled context = %v", err)
	}
}

// TestOpenRemovesTemporaryFiles: what a crash mid-Put left is gone at
// Open; blobs stay.
func TestOpenRemovesTemporaryFiles(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	data := []byte("kept")
	if err := s.Put(context.Background(), bytes.NewReader(data), digest(data), 4); err != nil {
		t.Fatal(err)
	}
	tmp := filepath.Join(dir, "blobs", "sha256", tmpPrefix+"0123456789abcdef-42")
	if err := os.WriteFile(tmp, []byte("partial"), 0o600); err != nil {
		t.Fatal(err)
	}
	if list, _ := s.List(); len(list) != 1 {
		t.Fatalf("List shows a temporary file: %v", list)
	}
	s, err = Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(tmp); !os.IsNotExist(err) {
		t.Fatalf("temporary file after Open: %v", err)
	}
	if _, ok := s.Stat(digest(data)); !ok {
		t.Fatal("Open removed a blob")
	}
}

func TestConcurrentPuts(t *testing.T) {
	s, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	data := bytes.Repeat([]byte{1, 2, 3}, 1<<16)
	d := digest(data)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- s.Put(context.Background(), bytes.NewReader(data), d, int64(len(data)))
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	b, err := s.Open(d)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	got, _ := io.ReadAll(io.NewSectionReader(b, 0, b.Size()))
	if digest(got) != d {
		t.Fatal("the blob after concurrent Puts does not match")
	}
	if list, _ := s.List(); len(list) != 1 {
		t.Fatalf("List after concurrent Puts = %v", list)
	}
}

func FuzzValidDigest(f *testing.F) {
	f.Add(strings.Repeat("a", 64))
	f.Add("../" + strings.Repeat("a", 61))
	f.Add(strings.Repeat("A", 64))
	f.Fuzz(func(t *testing.T, s string) {
		if !ValidDigest(s) {
			return
		}
		if len(s) != 64 || strings.ContainsAny(s, "/\\.") || filepath.Base(s) != s {
			t.Fatalf("ValidDigest(%q) = true", s)
		}
	})
}
