package manifest

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash"
	"io"
	"os"
)

// ChunkCount returns how many chunks c has: Size/ChunkSize rounded up, 0
// for a component without a positive size and chunk size. A count over
// MaxChunks, which no valid component has, is returned as MaxChunks+1, so
// the int never overflows on 32-bit nodes.
func (c *Component) ChunkCount() int {
	if c.Size <= 0 || c.ChunkSize <= 0 {
		return 0
	}
	return int(min((c.Size-1)/c.ChunkSize+1, MaxChunks+1))
}

// ChunkBounds returns the offset and length of chunk i in the artifact; all
// chunks are ChunkSize long but the last. It panics if i is not in
// [0, ChunkCount()), like an index out of range.
func (c *Component) ChunkBounds(i int) (off, n int64) {
	if i < 0 || i >= c.ChunkCount() {
		panic(fmt.Sprintf("manifest: chunk %d of %d", i, c.ChunkCount()))
	}
	off = int64(i) * c.ChunkSize
	return off, min(c.ChunkSize, c.Size-off)
}

// VerifyChunk checks that data is chunk i of c: its length and its sha256.
// A chunk index c does not have, or a component whose chunk list does not
// match its size, is Malformed; wrong bytes are DigestMismatch.
func (c *Component) VerifyChunk(i int, data []byte) error {
	if i < 0 || i >= c.ChunkCount() || len(c.Chunks) != c.ChunkCount() {
		return refuse(Malformed, "component %s has no chunk %d", c.Name, i)
	}
	_, n := c.ChunkBounds(i)
	if int64(len(data)) != n {
		return refuse(DigestMismatch, "component %s chunk %d is %d bytes, want %d", c.Name, i, len(data), n)
	}
	sum := sha256.Sum256(data)
	if hex.EncodeToString(sum[:]) != c.Chunks[i] {
		return refuse(DigestMismatch, "component %s chunk %d: sha256 %x, want %s", c.Name, i, sum, c.Chunks[i])
	}
	return nil
}

// Verifier checks an artifact as it is written to it, chunk by chunk, so a
// download can stop at the first bad chunk and resume after the last good
// one.
//
// How resume works: the per-chunk digests are authoritative (they are
// signed, and together they pin every byte). A Verifier made by NewVerifier
// sees the artifact from byte 0 and also checks the whole-file SHA256 at
// Close. One made by NewVerifierAt(c, k) after a cut sees only chunks k and
// later, so it checks those chunks and the total length but cannot check
// the whole-file digest; after a resumed download, run VerifyFile on the
// assembled file before installing it.
//
// A Verifier is not safe for concurrent use.
type Verifier struct {
	c      *Component
	chunk  int       // index of the chunk being written
	filled int64     // bytes of that chunk written so far
	ch     hash.Hash // sha256 of those bytes
	whole  hash.Hash // sha256 of everything, nil when resumed mid-way
	err    error     // the first refusal; sticky
}

// NewVerifier returns a Verifier of c's artifact from its first byte.
func NewVerifier(c *Component) *Verifier {
	return &Verifier{c: c, ch: sha256.New(), whole: sha256.New()}
}

// NewVerifierAt returns a Verifier of c's artifact from the start of chunk
// k, for a download resumed after chunks 0..k-1 were verified. k may be
// ChunkCount(), for a download that only needs its Close. It returns an
// error if k is out of range or c's chunk list does not match its size.
func NewVerifierAt(c *Component, k int) (*Verifier, error) {
	if k < 0 || k > c.ChunkCount() || len(c.Chunks) != c.ChunkCount() {
		return nil, fmt.Errorf("verifier of %s: chunk %d of %d", c.Name, k, c.ChunkCount())
	}
	v := &Verifier{c: c, chunk: k, ch: sha256.New()}
	if k == 0 {
		v.whole = sha256.New()
	}
	return v, nil
}

// Write checks p as the next bytes of the artifact. It returns the first
// refusal (DigestMismatch: a chunk that does not match, or bytes past the
// artifact's end) and keeps returning it; n counts the bytes consumed
// before it.
func (v *Verifier) Write(p []byte) (n int, err error) {
	if v.err != nil {
		return 0, v.err
	}
	if len(v.c.Chunks) != v.c.ChunkCount() {
		v.err = refuse(Malformed, "component %s: %d chunk digests for %d chunks", v.c.Name, len(v.c.Chunks), v.c.ChunkCount())
		return 0, v.err
	}
	for len(p) > 0 {
		if v.chunk >= v.c.ChunkCount() {
			v.err = refuse(DigestMismatch, "component %s: more than its %d bytes", v.c.Name, v.c.Size)
			return n, v.err
		}
		_, size := v.c.ChunkBounds(v.chunk)
		take := min(int64(len(p)), size-v.filled)
		v.ch.Write(p[:take])
		if v.whole != nil {
			v.whole.Write(p[:take])
		}
		v.filled += take
		n += int(take)
		p = p[take:]
		if v.filled == size {
			if err := v.endChunk(); err != nil {
				return n, err
			}
		}
	}
	return n, nil
}

// endChunk compares the finished chunk's digest and moves to the next.
func (v *Verifier) endChunk() error {
	sum := v.ch.Sum(nil)
	if hex.EncodeToString(sum) != v.c.Chunks[v.chunk] {
		v.err = refuse(DigestMismatch, "component %s chunk %d: sha256 %x, want %s", v.c.Name, v.chunk, sum, v.c.Chunks[v.chunk])
		return v.err
	}
	v.chunk++
	v.filled = 0
	v.ch.Reset()
	return nil
}

// Verified returns how many chunks from the start of the artifact are known
// good (including those before a resume point): a download cut now resumes
// with NewVerifierAt(c, v.Verified()) from offset ChunkBounds of it.
func (v *Verifier) Verified() int {
	return v.chunk
}

// Close checks that the whole artifact was written and, for a Verifier that
// saw it from byte 0, its whole-file SHA256. A short stream is
// DigestMismatch. Close returns the first refusal seen, if any.
func (v *Verifier) Close() error {
	if v.err != nil {
		return v.err
	}
	if v.chunk < v.c.ChunkCount() {
		off, _ := v.c.ChunkBounds(v.chunk)
		v.err = refuse(DigestMismatch, "component %s: %d of %d bytes", v.c.Name, off+v.filled, v.c.Size)
		return v.err
	}
	if v.whole != nil {
		if sum := v.whole.Sum(nil); hex.EncodeToString(sum) != v.c.SHA256 {
			v.err = refuse(DigestMismatch, "component %s: sha256 %x, want %s", v.c.Name, sum, v.c.SHA256)
			return v.err
		}
	}
	return nil
}

// CheckedWhole reports whether Close can check the whole-file SHA256, that
// is, whether this Verifier sees the artifact from byte 0.
func (v *Verifier) CheckedWhole() bool {
	return v.whole != nil
}

// VerifyFile checks the file at path against c completely: its size, every
// chunk and the whole-file SHA256. Refusals are *Error (DigestMismatch);
// I/O failures are plain errors.
func (c *Component) VerifyFile(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("verify %s: %w", c.Name, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return fmt.Errorf("verify %s: %w", c.Name, err)
	}
	if fi.Size() != c.Size {
		return refuse(DigestMismatch, "component %s: file %s is %d bytes, want %d", c.Name, path, fi.Size(), c.Size)
	}
	v := NewVerifier(c)
	if _, err := io.Copy(v, f); err != nil {
		if ReasonOf(err) != "" {
			return err
		}
		return fmt.Errorf("verify %s: %w", c.Name, err)
	}
	return v.Close()
}
