package manifest

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
	"testing/iotest"
)

// TestBuildComponent checks sizes around chunk boundaries, small reads and
// the digests against a direct computation.
func TestBuildComponent(t *testing.T) {
	const cs = MinChunkSize
	for _, size := range []int{1, cs - 1, cs, cs + 1, 3*cs + 5} {
		data := artifact("b", size)
		for _, r := range []io.Reader{bytes.NewReader(data), iotest.HalfReader(bytes.NewReader(data)), iotest.DataErrReader(bytes.NewReader(data))} {
			c, err := BuildComponent("a", KindFile, "linux", "arm64", "", r, cs)
			if err != nil {
				t.Fatalf("BuildComponent(size %d): %v", size, err)
			}
			whole := sha256.Sum256(data)
			if c.Size != int64(size) || c.SHA256 != hex.EncodeToString(whole[:]) || c.ChunkCount() != len(c.Chunks) {
				t.Fatalf("BuildComponent(size %d) = size %d sha %s, %d chunks", size, c.Size, c.SHA256, len(c.Chunks))
			}
			for i := range c.Chunks {
				off, n := c.ChunkBounds(i)
				sum := sha256.Sum256(data[off : off+n])
				if c.Chunks[i] != hex.EncodeToString(sum[:]) {
					t.Fatalf("BuildComponent(size %d) chunk %d digest wrong", size, i)
				}
			}
		}
	}
	if c, err := BuildComponent("a", KindFile, "", "", "", bytes.NewReader([]byte("x")), 0); err != nil || c.ChunkSize != DefaultChunkSize {
		t.Errorf("BuildComponent(chunk size 0) = %d, %v, want DefaultChunkSize", c.ChunkSize, err)
	}
	bad := []struct {
		name string
		r    io.Reader
		cs   int64
		kind string
	}{
		{"empty", bytes.NewReader(nil), cs, KindFile},
		{"read error", iotest.ErrReader(errors.New("disk gone")), cs, KindFile},
		{"chunk size too small", bytes.NewReader([]byte("x")), cs - 1, KindFile},
		{"chunk size too large", bytes.NewReader([]byte("x")), MaxChunkSize + 1, KindFile},
		{"bad kind", bytes.NewReader([]byte("x")), cs, "exe"},
	}
	if !testing.Short() { // hashes 256 MiB
		bad = append(bad, struct {
			name string
			r    io.Reader
			cs   int64
			kind string
		}{"too many chunks", io.LimitReader(zeros{}, (MaxChunks+1)*cs), cs, KindFile})
	}
	for _, b := range bad {
		if _, err := BuildComponent("a", b.kind, "linux", "arm64", "", b.r, b.cs); err == nil {
			t.Errorf("BuildComponent(%s) = nil error", b.name)
		}
	}
}

// zeros is an endless reader of zero bytes.
type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

// TestChunkBoundsAndVerifyChunk checks chunk geometry and per-chunk checks.
func TestChunkBoundsAndVerifyChunk(t *testing.T) {
	data := artifact("c", 2*MinChunkSize+7)
	c := component(t, "c", KindFile, "", "", "", data)
	if c.ChunkCount() != 3 {
		t.Fatalf("ChunkCount() = %d, want 3", c.ChunkCount())
	}
	bounds := [][2]int64{{0, MinChunkSize}, {MinChunkSize, MinChunkSize}, {2 * MinChunkSize, 7}}
	for i, want := range bounds {
		off, n := c.ChunkBounds(i)
		if off != want[0] || n != want[1] {
			t.Errorf("ChunkBounds(%d) = %d, %d, want %d, %d", i, off, n, want[0], want[1])
		}
		if err := c.VerifyChunk(i, data[off:off+n]); err != nil {
			t.Errorf("VerifyChunk(%d) = %v", i, err)
		}
	}
	corrupt := append([]byte(nil), data[:MinChunkSize]...)
	corrupt[100] ^= 0xff
	tests := []struct {
		name string
		i    int
		data []byte
		want Reason
	}{
		{"corrupted", 0, corrupt, DigestMismatch},
		{"truncated", 2, data[2*MinChunkSize : 2*MinChunkSize+6], DigestMismatch},
		{"another chunk", 1, data[:MinChunkSize], DigestMismatch},
		{"no such chunk", 3, data[:7], Malformed},
		{"negative", -1, nil, Malformed},
	}
	for _, tt := range tests {
		if err := c.VerifyChunk(tt.i, tt.data); ReasonOf(err) != tt.want {
			t.Errorf("VerifyChunk(%s) = %v, want %s", tt.name, err, tt.want)
		}
	}
	huge := Component{Size: 1 << 62, ChunkSize: MinChunkSize}
	if got := huge.ChunkCount(); got != MaxChunks+1 {
		t.Errorf("ChunkCount(huge) = %d, want MaxChunks+1", got)
	}
	func() {
		defer func() {
			if recover() == nil {
				t.Error("ChunkBounds(3) did not panic")
			}
		}()
		c.ChunkBounds(3)
	}()
}

// TestVerifier checks the streaming verifier: good streams in odd pieces,
// corruption, short and long streams, and resume from a chunk.
func TestVerifier(t *testing.T) {
	data := artifact("v", 4*MinChunkSize+123)
	c := component(t, "v", KindAgent, "linux", "arm64", "", data)
	corrupt := append([]byte(nil), data...)
	corrupt[2*MinChunkSize+5] ^= 1

	// write feeds data to v in pieces of n and returns Write's and Close's
	// errors.
	write := func(v *Verifier, data []byte, n int) (werr, cerr error) {
		for len(data) > 0 && werr == nil {
			k := min(n, len(data))
			_, werr = v.Write(data[:k])
			data = data[k:]
		}
		return werr, v.Close()
	}
	for _, n := range []int{1, 1000, MinChunkSize, MinChunkSize + 1, len(data)} {
		v := NewVerifier(&c)
		if werr, cerr := write(v, data, n); werr != nil || cerr != nil || !v.CheckedWhole() || v.Verified() != 5 {
			t.Errorf("pieces of %d: Write %v, Close %v, CheckedWhole %v, Verified %d", n, werr, cerr, v.CheckedWhole(), v.Verified())
		}
	}

	v := NewVerifier(&c)
	werr, cerr := write(v, corrupt, 3000)
	if ReasonOf(werr) != DigestMismatch || ReasonOf(cerr) != DigestMismatch || v.Verified() != 2 {
		t.Errorf("corrupt: Write %v, Close %v, Verified %d, want DigestMismatch at chunk 2", werr, cerr, v.Verified())
	}
	if _, err := v.Write(data[:1]); ReasonOf(err) != DigestMismatch {
		t.Errorf("Write after a refusal = %v, want the refusal again", err)
	}

	// Resume where the corrupt download stopped: the last good chunk.
	r, err := NewVerifierAt(&c, v.Verified())
	if err != nil {
		t.Fatal(err)
	}
	off, _ := c.ChunkBounds(v.Verified())
	if werr, cerr := write(r, data[off:], 777); werr != nil || cerr != nil || r.CheckedWhole() || r.Verified() != 5 {
		t.Errorf("resumed: Write %v, Close %v, CheckedWhole %v, Verified %d", werr, cerr, r.CheckedWhole(), r.Verified())
	}

	short := NewVerifier(&c)
	if werr, cerr := write(short, data[:len(data)-1], 4096); werr != nil || ReasonOf(cerr) != DigestMismatch {
		t.Errorf("short: Write %v, Close %v, want DigestMismatch at Close", werr, cerr)
	}
	long := NewVerifier(&c)
	if werr, _ := write(long, append(append([]byte(nil), data...), 0), len(data)+1); ReasonOf(werr) != DigestMismatch {
		t.Errorf("long: Write %v, want DigestMismatch", werr)
	}

	// Chunks that match but a whole-file digest that does not: a Verifier
	// from 0 and VerifyFile catch it; a resumed one cannot.
	wrong := c
	wrong.SHA256 = c.Chunks[0]
	if _, cerr := write(NewVerifier(&wrong), data, 5000); ReasonOf(cerr) != DigestMismatch {
		t.Errorf("wrong whole digest from 0: Close %v, want DigestMismatch", cerr)
	}
	r, _ = NewVerifierAt(&wrong, 1)
	if _, cerr := write(r, data[MinChunkSize:], 5000); cerr != nil {
		t.Errorf("wrong whole digest resumed: Close %v, want nil", cerr)
	}

	done, err := NewVerifierAt(&c, c.ChunkCount())
	if err != nil || done.Close() != nil {
		t.Errorf("NewVerifierAt(end) = %v, Close %v", err, done.Close())
	}
	for _, k := range []int{-1, c.ChunkCount() + 1} {
		if _, err := NewVerifierAt(&c, k); err == nil {
			t.Errorf("NewVerifierAt(%d) = nil error", k)
		}
	}
}

// TestVerifyFile checks the full check of an assembled file.
func TestVerifyFile(t *testing.T) {
	dir := t.TempDir()
	data := artifact("f", 3*MinChunkSize+1)
	c := component(t, "f", KindFile, "", "", "", data)
	wrongWhole := c
	wrongWhole.SHA256 = c.Chunks[1]
	corrupt := append([]byte(nil), data...)
	corrupt[len(corrupt)-1] ^= 1
	tests := []struct {
		name string
		c    Component
		data []byte
		want Reason
	}{
		{"good", c, data, ""},
		{"short", c, data[:len(data)-1], DigestMismatch},
		{"long", c, append(append([]byte(nil), data...), 1), DigestMismatch},
		{"corrupt last chunk", c, corrupt, DigestMismatch},
		{"whole digest", wrongWhole, data, DigestMismatch},
	}
	for i, tt := range tests {
		path := filepath.Join(dir, tt.name)
		if err := os.WriteFile(path, tt.data, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := tests[i].c.VerifyFile(path); ReasonOf(err) != tt.want || (tt.want == "" && err != nil) {
			t.Errorf("VerifyFile(%s) = %v, want %q", tt.name, err, tt.want)
		}
	}
	if err := c.VerifyFile(filepath.Join(dir, "missing")); err == nil || ReasonOf(err) != "" {
		t.Errorf("VerifyFile(missing) = %v, want a plain error", err)
	}
}

// TestComponentFromFile checks that a component built from a file verifies
// that file, and that a missing file is an error.
func TestComponentFromFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "agent")
	if err := os.WriteFile(path, artifact("file", 5*MinChunkSize/2), 0o755); err != nil {
		t.Fatal(err)
	}
	c, err := ComponentFromFile("agent", KindAgent, "linux", "arm", "7", path, MinChunkSize)
	if err != nil {
		t.Fatal(err)
	}
	if c.Size != 5*MinChunkSize/2 || c.ChunkCount() != 3 || c.Variant != "7" {
		t.Errorf("ComponentFromFile() = %+v", c)
	}
	if err := c.VerifyFile(path); err != nil {
		t.Errorf("VerifyFile(its own file) = %v", err)
	}
	if _, err := ComponentFromFile("agent", KindAgent, "linux", "arm", "7", path+".missing", 0); err == nil {
		t.Error("ComponentFromFile(missing) = nil error")
	}
}
