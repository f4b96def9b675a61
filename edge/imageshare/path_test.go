package imageshare

import (
	"errors"
	"strings"
	"testing"
)

const testDigest = "sha256:2c26b46b68ffc68ff99b453c1d30413413422d706483bfa0f98a5e886266e7ae"

func TestParsePath(t *testing.T) {
	for _, tc := range []struct {
		path    string
		kind    string
		wantErr error
	}{
		{path: "/v2/library/busybox/blobs/" + testDigest, kind: kindBlob},
		{path: "/v2/x/manifests/" + testDigest, kind: kindManifest},
		{path: "/v2/a.b/c_d/e-f/blobs/" + testDigest, kind: kindBlob},
		{path: "/v2/x/manifests/latest", wantErr: errNotDigest},
		{path: "/v2/x/blobs/sha512:" + strings.Repeat("ab", 64), wantErr: errNotDigest},
		{path: "/v2/x/blobs/sha256:abc", wantErr: errNotDigest},
		{path: "/v2/blobs/" + testDigest, wantErr: errBadPath},
		{path: "/v2/X/blobs/" + testDigest, wantErr: errBadPath},
		{path: "/v2/x//blobs/" + testDigest, wantErr: errBadPath},
		{path: "/v2/x/tags/" + testDigest, wantErr: errBadPath},
		{path: "/v1/x/blobs/" + testDigest, wantErr: errBadPath},
		{path: "/v2/", wantErr: errBadPath},
		{path: "/v2/" + strings.Repeat("a/", 600) + "blobs/" + testDigest, wantErr: errBadPath},
	} {
		kind, d, err := parsePath(tc.path)
		if !errors.Is(err, tc.wantErr) || kind != tc.kind || err == nil && d.String() != testDigest {
			t.Errorf("parsePath(%q) = %q, %q, %v; want %q, %v", tc.path, kind, d, err, tc.kind, tc.wantErr)
		}
	}
}

// FuzzParsePath: parsePath never panics, and what it accepts is a
// sha256 digest of a blob or a manifest under a valid name.
func FuzzParsePath(f *testing.F) {
	f.Add("/v2/library/busybox/blobs/" + testDigest)
	f.Add("/v2/x/manifests/latest")
	f.Add("/v2//blobs/")
	f.Fuzz(func(t *testing.T, p string) {
		kind, d, err := parsePath(p)
		if err != nil {
			return
		}
		if kind != kindBlob && kind != kindManifest {
			t.Fatalf("parsePath(%q) kind %q", p, kind)
		}
		if _, ok := sha256Of(d); !ok {
			t.Fatalf("parsePath(%q) digest %q is not sha256", p, d)
		}
		if len(p) > maxPath || !strings.HasSuffix(p, "/"+kind+"/"+d.String()) {
			t.Fatalf("parsePath(%q) = %q, %q", p, kind, d)
		}
	})
}
