// Package artifacts keeps firmware artifacts on local disk, addressed by
// their sha256: the hub's store of uploaded release artifacts (under its
// data dir, firmware/artifacts) and, on an edge node, the artifacts it
// downloaded. A blob is written to a temporary file in the store's own
// directory while it is hashed, synced, and renamed into place only when
// its size and digest are the ones asked for, so a crash or power cut
// leaves either no blob or a whole, verified one.
//
// It imports the standard library and internal/atomicfile only, so both
// the hub and the edge agent may use it.
package artifacts

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/outpost-mesh/outpost/internal/atomicfile"
)

// DigestLen is the length of a digest as this package takes it: the
// lowercase hex of a sha256.
const DigestLen = 2 * sha256.Size

// tmpPrefix starts the names of the temporary files of Puts in progress,
// which Open removes: they are what a crash left.
const tmpPrefix = ".tmp-"

// ErrInvalidDigest is returned (wrapped) for a digest that is not 64
// lowercase hex digits; nothing is read or written for it.
var ErrInvalidDigest = errors.New("invalid sha256 digest: want 64 lowercase hex digits")

// ErrNotFound is returned (wrapped) by Store.Open for a blob the store
// does not hold.
var ErrNotFound = errors.New("artifact not found")

// ErrMismatch is what a *MismatchError is (errors.Is).
var ErrMismatch = errors.New("artifact does not match its digest or size")

// MismatchError is returned by Put when the bytes read are not the size or
// the digest asked for; nothing is stored.
type MismatchError struct {
	// WantSHA256 and WantSize are what Put was asked to store.
	WantSHA256 string
	WantSize   int64
	// GotSHA256 is the digest of what was read, empty when the size was
	// already wrong; GotSize is how many bytes were read, at most
	// WantSize+1 (Put stops reading one byte past the size).
	GotSHA256 string
	GotSize   int64
}

func (e *MismatchError) Error() string {
	if e.GotSize != e.WantSize {
		more := ""
		if e.GotSize > e.WantSize {
			more = " or more"
		}
		return fmt.Sprintf("artifact %s: read %d bytes%s, want %d", e.WantSHA256, e.GotSize, more, e.WantSize)
	}
	return fmt.Sprintf("artifact %s: the bytes read have sha256 %s", e.WantSHA256, e.GotSHA256)
}

// Is reports whether target is ErrMismatch.
func (e *MismatchError) Is(target error) bool { return target == ErrMismatch }

// ValidDigest reports whether s is a digest this package takes: exactly
// 64 lowercase hex digits. Only such strings become file names, so none
// can name a path outside the store.
func ValidDigest(s string) bool {
	if len(s) != DigestLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

func checkDigest(s string) error {
	if !ValidDigest(s) {
		return fmt.Errorf("%q: %w", truncate(s, 80), ErrInvalidDigest)
	}
	return nil
}

// truncate bounds what an error message repeats of untrusted input.
func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}

// Store is a directory of blobs, each at blobs/sha256/<hex>. All its
// methods may be called concurrently, also by several Stores of one
// directory in one process after Open; a second process opening the
// directory while another writes may remove the other's Put in progress
// (Open clears temporary files), so one process owns a directory.
type Store struct {
	dir   string // the store's root, as given to Open
	blobs string // dir/blobs/sha256
}

// Open returns the store in dir, creating the directory if needed (mode
// 0700), and removes the temporary files of Puts a crash interrupted.
func Open(dir string) (*Store, error) {
	blobs := filepath.Join(dir, "blobs", "sha256")
	if err := os.MkdirAll(blobs, 0o700); err != nil {
		return nil, fmt.Errorf("open artifact store: %w", err)
	}
	entries, err := os.ReadDir(blobs)
	if err != nil {
		return nil, fmt.Errorf("open artifact store: %w", err)
	}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), tmpPrefix) {
			if err := os.Remove(filepath.Join(blobs, e.Name())); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return nil, fmt.Errorf("open artifact store: remove an interrupted upload: %w", err)
			}
		}
	}
	return &Store{dir: dir, blobs: blobs}, nil
}

// Dir returns the directory the store was opened in.
func (s *Store) Dir() string { return s.dir }

func (s *Store) path(sha256hex string) string { return filepath.Join(s.blobs, sha256hex) }

// Put stores the blob of digest sha256hex and length size read from r:
// it reads at most size+1 bytes into a temporary file while hashing them,
// and refuses with a *MismatchError (nothing stored) unless exactly size
// bytes were read with that digest; the file is then synced, renamed into
// place and the directory synced. A blob already held with that size is
// not read again (r is left unread) and Put returns nil. Concurrent Puts
// of one digest each write their own temporary file; the renames replace
// one whole verified blob with an identical one. ctx stops the copy
// between reads.
func (s *Store) Put(ctx context.Context, r io.Reader, sha256hex string, size int64) (err error) {
	if err := checkDigest(sha256hex); err != nil {
		return err
	}
	if size < 0 {
		return fmt.Errorf("put artifact %s: negative size %d", sha256hex, size)
	}
	if have, ok := s.Stat(sha256hex); ok && have == size {
		return nil
	}
	f, err := os.CreateTemp(s.blobs, tmpPrefix+sha256hex[:16]+"-*")
	if err != nil {
		return fmt.Errorf("put artifact %s: %w", sha256hex, err)
	}
	tmp := f.Name()
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(tmp)
		}
	}()
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(f, h), io.LimitReader(ctxReader{ctx, r}, size+1))
	if err != nil {
		return fmt.Errorf("put artifact %s: %w", sha256hex, err)
	}
	if n != size {
		return &MismatchError{WantSHA256: sha256hex, WantSize: size, GotSize: n}
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != sha256hex {
		return &MismatchError{WantSHA256: sha256hex, WantSize: size, GotSHA256: got, GotSize: n}
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("put artifact %s: sync: %w", sha256hex, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("put artifact %s: close: %w", sha256hex, err)
	}
	if err := os.Rename(tmp, s.path(sha256hex)); err != nil {
		return fmt.Errorf("put artifact %s: %w", sha256hex, err)
	}
	if err := atomicfile.SyncDir(s.blobs); err != nil {
		return fmt.Errorf("put artifact %s: sync directory: %w", sha256hex, err)
	}
	return nil
}

// ctxReader fails reads once ctx is done.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}

// Stat returns the size of the blob of digest sha256hex, and whether the
// store holds it; an invalid digest is never held.
func (s *Store) Stat(sha256hex string) (size int64, ok bool) {
	if !ValidDigest(sha256hex) {
		return 0, false
	}
	fi, err := os.Stat(s.path(sha256hex))
	if err != nil || !fi.Mode().IsRegular() {
		return 0, false
	}
	return fi.Size(), true
}

// Blob is an open stored artifact. Its methods may be called
// concurrently; the caller closes it. A blob stays readable after Remove.
type Blob struct {
	f    *os.File
	size int64
}

var _ io.ReaderAt = (*Blob)(nil)

// ReadAt reads from the blob at offset off, as io.ReaderAt does.
func (b *Blob) ReadAt(p []byte, off int64) (int, error) { return b.f.ReadAt(p, off) }

// Size returns the blob's length in bytes.
func (b *Blob) Size() int64 { return b.size }

// Close releases the blob; it is safe to call twice.
func (b *Blob) Close() error {
	err := b.f.Close()
	if errors.Is(err, os.ErrClosed) {
		return nil
	}
	return err
}

// Open opens the blob of digest sha256hex, or returns an error wrapping
// ErrNotFound when the store does not hold it. The bytes were verified
// when they were stored; Open does not hash them again.
func (s *Store) Open(sha256hex string) (*Blob, error) {
	if err := checkDigest(sha256hex); err != nil {
		return nil, err
	}
	f, err := os.Open(s.path(sha256hex))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("open artifact %s: %w", sha256hex, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("open artifact %s: %w", sha256hex, err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("open artifact %s: %w", sha256hex, err)
	}
	return &Blob{f: f, size: fi.Size()}, nil
}

// Remove deletes the blob of digest sha256hex; removing a blob the store
// does not hold is not an error.
func (s *Store) Remove(sha256hex string) error {
	if err := checkDigest(sha256hex); err != nil {
		return err
	}
	if err := os.Remove(s.path(sha256hex)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove artifact %s: %w", sha256hex, err)
	}
	if err := atomicfile.SyncDir(s.blobs); err != nil {
		return fmt.Errorf("remove artifact %s: sync directory: %w", sha256hex, err)
	}
	return nil
}

// Entry is one blob of the store.
type Entry struct {
	SHA256 string
	Size   int64
	// ModTime is when the blob was stored.
	ModTime time.Time
}

// List returns the blobs the store holds, by digest; Puts in progress are
// not listed. The caller owns the slice.
func (s *Store) List() ([]Entry, error) {
	entries, err := os.ReadDir(s.blobs)
	if err != nil {
		return nil, fmt.Errorf("list artifacts: %w", err)
	}
	var out []Entry
	for _, e := range entries {
		if !ValidDigest(e.Name()) || !e.Type().IsRegular() {
			continue
		}
		fi, err := e.Info()
		if errors.Is(err, fs.ErrNotExist) {
			continue // removed meanwhile
		}
		if err != nil {
			return nil, fmt.Errorf("list artifacts: %w", err)
		}
		out = append(out, Entry{SHA256: e.Name(), Size: fi.Size(), ModTime: fi.ModTime()})
	}
	slices.SortFunc(out, func(a, b Entry) int { return strings.Compare(a.SHA256, b.SHA256) })
	return out, nil
}
