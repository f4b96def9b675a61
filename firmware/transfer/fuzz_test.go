package transfer

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/klauspost/compress/zstd"

	"github.com/outpost-mesh/outpost/firmware/manifest"
)

// FuzzDeltaChunk: whatever a hub sends as a patched chunk, the node's
// decoder yields at most the chunk's length, or fails; it never
// allocates past its window.
func FuzzDeltaChunk(f *testing.F) {
	base := bytes.Repeat([]byte("outpost base artifact "), 1000)
	target := bytes.Clone(base[:8192])
	copy(target[100:], "changed")
	enc, err := zstd.NewWriter(nil, zstd.WithEncoderDictRaw(dictID, base), zstd.WithWindowSize(deltaWindow(int64(len(base)), 8192)))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(enc.EncodeAll(target, nil))
	f.Add(enc.EncodeAll(bytes.Repeat([]byte{7}, 20000), nil)) // decodes to more than a chunk
	enc.Close()
	dir := f.TempDir()
	bp := filepath.Join(dir, "base")
	if err := os.WriteFile(bp, base, 0o600); err != nil {
		f.Fatal(err)
	}
	c := &manifest.Component{Name: "x", Size: 8192, ChunkSize: 8192, Chunks: []string{""}}
	fe := &fetch{cfg: DefaultFetchConfig(), c: c, basePath: bp}
	if err := fe.loadDecoder(); err != nil {
		f.Fatal(err)
	}
	f.Cleanup(fe.closeDecoder)
	f.Fuzz(func(t *testing.T, data []byte) {
		out, err := fe.dec.DecodeAll(data, make([]byte, 0, c.ChunkSize))
		if err == nil && int64(len(out)) > c.ChunkSize {
			t.Fatalf("a patch decoded to %d bytes, over the chunk's %d", len(out), c.ChunkSize)
		}
	})
}
