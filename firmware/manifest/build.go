package manifest

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
)

// BuildComponent reads an artifact from r to its end and returns its
// component: size, whole-file and per-chunk digests. It streams, holding
// one chunk's hash state and a copy buffer, never the artifact. chunkSize 0
// means DefaultChunkSize. The result is validated.
func BuildComponent(name, kind, goos, arch, variant string, r io.Reader, chunkSize int64) (Component, error) {
	if chunkSize == 0 {
		chunkSize = DefaultChunkSize
	}
	c := Component{Name: name, Kind: kind, OS: goos, Arch: arch, Variant: variant, ChunkSize: chunkSize}
	if chunkSize < MinChunkSize || chunkSize > MaxChunkSize {
		return c, fmt.Errorf("component %s: chunk size %d, want %d..%d", name, chunkSize, MinChunkSize, MaxChunkSize)
	}
	whole, ch := sha256.New(), sha256.New()
	w := io.MultiWriter(whole, ch)
	for {
		n, err := io.CopyN(w, r, chunkSize)
		if n > 0 {
			if len(c.Chunks) == MaxChunks {
				return c, fmt.Errorf("component %s: over %d chunks of %d bytes: use larger chunks", name, MaxChunks, chunkSize)
			}
			c.Chunks = append(c.Chunks, hex.EncodeToString(ch.Sum(nil)))
			c.Size += n
			ch.Reset()
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return c, fmt.Errorf("component %s: read: %w", name, err)
		}
	}
	c.SHA256 = hex.EncodeToString(whole.Sum(nil))
	if err := c.validate(); err != nil {
		return c, fmt.Errorf("component %s: %w", name, err)
	}
	return c, nil
}

// ComponentFromFile is BuildComponent of the file at path.
func ComponentFromFile(name, kind, goos, arch, variant, path string, chunkSize int64) (Component, error) {
	f, err := os.Open(path)
	if err != nil {
		return Component{}, fmt.Errorf("component %s: %w", name, err)
	}
	defer f.Close()
	return BuildComponent(name, kind, goos, arch, variant, f, chunkSize)
}
