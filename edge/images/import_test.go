package images

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"io"
	"slices"
	"strings"
	"testing"

	"github.com/containerd/containerd/v2/core/content"
	"github.com/containerd/containerd/v2/core/leases"
	"github.com/containerd/containerd/v2/core/snapshots"
	digest "github.com/opencontainers/go-digest"

	"github.com/outpost-mesh/outpost/edge/runtime"
)

func oci(t *testing.T, name string) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := testImage(t, name).WriteOCI(&b); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func dockerArchive(t *testing.T, name string) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := testImage(t, name).WriteDockerArchive(&b); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

type tarEntry struct {
	hdr  *tar.Header
	data []byte
}

func readTar(t *testing.T, b []byte) []tarEntry {
	t.Helper()
	var out []tarEntry
	tr := tar.NewReader(bytes.NewReader(b))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		d, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, tarEntry{h, d})
	}
}

// retar writes entries again, as edit changes them (false drops one).
func retar(t *testing.T, entries []tarEntry, edit func(name string, data []byte) ([]byte, bool)) []byte {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, e := range entries {
		data, keep := e.data, true
		if edit != nil {
			data, keep = edit(e.hdr.Name, e.data)
		}
		if !keep {
			continue
		}
		h := *e.hdr
		h.Size = int64(len(data))
		if err := tw.WriteHeader(&h); err != nil {
			t.Fatal(err)
		}
		tw.Write(data)
	}
	tw.Close()
	return b.Bytes()
}

// largest returns the name of the largest entry: an image's layer.
func largest(entries []tarEntry) string {
	return slices.MaxFunc(entries, func(a, b tarEntry) int { return len(a.data) - len(b.data) }).hdr.Name
}

// storeState counts what containerd holds, once it has collected its
// garbage: content blobs and snapshots.
func storeState(t *testing.T, s *Service) (blobs, snaps int) {
	t.Helper()
	ctx := s.ctx(context.Background())
	ls := s.c.LeasesService()
	l, err := ls.Create(ctx, leases.WithRandomID())
	if err != nil {
		t.Fatal(err)
	}
	if err := ls.Delete(ctx, l, leases.SynchronousDelete); err != nil {
		t.Fatal(err)
	}
	if err := s.c.ContentStore().Walk(ctx, func(content.Info) error { blobs++; return nil }); err != nil {
		t.Fatal(err)
	}
	if err := s.c.SnapshotService(s.cfg.Snapshotter).Walk(ctx, func(context.Context, snapshots.Info) error { snaps++; return nil }); err != nil {
		t.Fatal(err)
	}
	return blobs, snaps
}

func TestImport(t *testing.T) {
	c, _ := startContainerd(t)
	s := newService(t, c, nil)
	ctx := context.Background()
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write(dockerArchive(t, "gzipped:1"))
	zw.Close()

	for _, tc := range []struct {
		name    string
		archive []byte
		want    string
	}{
		{"oci layout", oci(t, "outpost.test/busybox:1"), "outpost.test/busybox:1"},
		{"docker archive", dockerArchive(t, "busybox:v1"), "docker.io/library/busybox:v1"},
		{"gzipped docker archive", gz.Bytes(), "docker.io/library/gzipped:1"},
		{"again", oci(t, "outpost.test/busybox:1"), "outpost.test/busybox:1"},
	} {
		got, err := s.Import(ctx, bytes.NewReader(tc.archive))
		if err != nil {
			t.Fatalf("Import %s: %v", tc.name, err)
		}
		if !slices.Equal(got, []string{tc.want}) {
			t.Errorf("Import %s = %v, want [%s]", tc.name, got, tc.want)
		}
		unpacked(t, s, tc.want)
		im, ok := find(t, s, tc.want)
		if !ok || !im.Pinned || im.Size == 0 || im.LastUsed.IsZero() {
			t.Errorf("List after import %s: %+v (found %v), want it pinned, with a size and a last use", tc.name, im, ok)
		}
	}
	// An imported image serves pods with no registry in reach.
	if _, err := s.Pull(ctx, "busybox:v1", runtime.PullNever, nil); err != nil {
		t.Errorf("Pull Never of the imported busybox:v1: %v", err)
	}
	if _, err := s.Pull(ctx, "busybox:v1", runtime.PullIfNotPresent, nil); err != nil {
		t.Errorf("Pull IfNotPresent of the imported busybox:v1: %v", err)
	}
	if got := names(t, s); !slices.Equal(got, []string{"docker.io/library/busybox:v1", "docker.io/library/gzipped:1", "outpost.test/busybox:1"}) {
		t.Errorf("List = %v", got)
	}
}

func TestImportBadArchives(t *testing.T) {
	c, _ := startContainerd(t)
	s := newService(t, c, nil)
	ctx := context.Background()
	if _, err := s.Import(ctx, bytes.NewReader(oci(t, "outpost.test/kept:1"))); err != nil {
		t.Fatal(err)
	}
	good := readTar(t, oci(t, "outpost.test/bad:1"))
	goodDocker := readTar(t, dockerArchive(t, "bad:1"))
	whole := oci(t, "outpost.test/bad:1")
	other := readTar(t, oci(t, "outpost.test/other:1"))

	flip := func(b []byte) []byte {
		c := bytes.Clone(b)
		c[len(c)/2] ^= 0xff
		return c
	}
	editIndex := func(f func(map[string]any)) func(string, []byte) ([]byte, bool) {
		return func(name string, data []byte) ([]byte, bool) {
			if name != "index.json" {
				return data, true
			}
			var idx map[string]any
			json.Unmarshal(data, &idx)
			f(idx)
			b, _ := json.Marshal(idx)
			return b, true
		}
	}
	// Two images in one layout, the second one's layer corrupt.
	var twoEntries []tarEntry
	var otherManifest any
	for _, e := range other {
		if e.hdr.Name == "index.json" {
			var idx map[string]any
			json.Unmarshal(e.data, &idx)
			otherManifest = idx["manifests"].([]any)[0]
			continue
		}
		if e.hdr.Typeflag == tar.TypeReg && e.hdr.Name != "oci-layout" {
			twoEntries = append(twoEntries, e)
		}
	}
	twoEntries = append(slices.Clone(good), twoEntries...)
	otherLayer := largest(other)
	two := retar(t, twoEntries, func(name string, data []byte) ([]byte, bool) {
		if name == otherLayer {
			return flip(data), true
		}
		if name == "index.json" {
			var idx map[string]any
			json.Unmarshal(data, &idx)
			idx["manifests"] = append(idx["manifests"].([]any), otherManifest)
			b, _ := json.Marshal(idx)
			return b, true
		}
		return data, true
	})

	for _, tc := range []struct {
		name    string
		archive []byte
		says    string
	}{
		{"empty", nil, ""},
		{"garbage", bytes.Repeat([]byte("not a tarball "), 100), "not a tar archive"},
		{"truncated", whole[:len(whole)/2], "truncated"},
		{"truncated in the last entry", whole[:len(whole)-1024-412], "truncated"},
		{"missing layer", retar(t, good, func(name string, data []byte) ([]byte, bool) { return data, name != largest(good) }), "content missing"},
		{"layer not matching its digest", retar(t, good, func(name string, data []byte) ([]byte, bool) {
			if name == largest(good) {
				return flip(data), true
			}
			return data, true
		}), "not matching its digest"},
		{"docker layer not matching the config", retar(t, goodDocker, func(name string, data []byte) ([]byte, bool) {
			if name == largest(goodDocker) {
				// Still a tar, other bytes: the diff ID differs.
				return retar(t, readTar(t, data), func(n string, d []byte) ([]byte, bool) {
					if n == "etc/passwd" {
						return []byte("root:x:0:0::/:/bin/sh\n"), true
					}
					return d, true
				}), true
			}
			return data, true
		}), "unpack"},
		{"docker archive without names", retar(t, goodDocker, func(name string, data []byte) ([]byte, bool) {
			if name == "manifest.json" {
				return bytes.Replace(data, []byte(`"RepoTags":["bad:1"]`), []byte(`"RepoTags":[]`), 1), true
			}
			return data, true
		}), "names no image"},
		{"only a tag", retar(t, good, editIndex(func(idx map[string]any) {
			idx["manifests"].([]any)[0].(map[string]any)["annotations"] = map[string]string{"org.opencontainers.image.ref.name": "1"}
		})), "a tag without a repository"},
		{"index too large", retar(t, good, func(name string, data []byte) ([]byte, bool) {
			if name == "index.json" {
				return append(data, bytes.Repeat([]byte(" "), MaxArchiveMetadataSize)...), true
			}
			return data, true
		}), "index.json is"},
		{"one of two images corrupt", two, "not matching its digest"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			blobs, snaps := storeState(t, s)
			got, err := s.Import(ctx, bytes.NewReader(tc.archive))
			if !errors.Is(err, ErrBadArchive) {
				t.Fatalf("Import = %v, %v; want ErrBadArchive", got, err)
			}
			t.Logf("Import: %v", err)
			if !strings.Contains(err.Error(), tc.says) {
				t.Errorf("Import error %q does not say %q", err, tc.says)
			}
			if n := names(t, s); !slices.Equal(n, []string{"outpost.test/kept:1"}) {
				t.Errorf("images after the failed import: %v", n)
			}
			if b, sn := storeState(t, s); b != blobs || sn != snaps {
				t.Errorf("content blobs %d -> %d, snapshots %d -> %d: the failed import left some behind", blobs, b, snaps, sn)
			}
		})
	}
	unpacked(t, s, "outpost.test/kept:1")
}

func bytesReader(b []byte) *bytes.Reader { return bytes.NewReader(b) }

func mustDigest(s string) digest.Digest { return digest.Digest(s) }
