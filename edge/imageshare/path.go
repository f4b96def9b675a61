package imageshare

import (
	"errors"
	"strings"

	digest "github.com/opencontainers/go-digest"
)

// maxPath bounds the path of a request the Server reads.
const maxPath = 1024

// Kinds of content a request names.
const (
	kindBlob     = "blobs"
	kindManifest = "manifests"
)

// Errors of parsePath.
var (
	// errNotDigest is a reference that is not a sha256 digest: a tag,
	// which a peer never answers for.
	errNotDigest = errors.New("reference is not a sha256 digest")
	errBadPath   = errors.New("not a path of the distribution API")
)

// parsePath reads the path of a GET or HEAD of the distribution API,
// /v2/<name>/blobs/<digest> or /v2/<name>/manifests/<digest>, and returns
// the kind (kindBlob or kindManifest) and the digest. The name is checked
// for form and otherwise ignored: content is addressed by digest.
func parsePath(p string) (kind string, d digest.Digest, err error) {
	if len(p) > maxPath || !strings.HasPrefix(p, "/v2/") {
		return "", "", errBadPath
	}
	rest := p[len("/v2/"):]
	i := strings.LastIndexByte(rest, '/')
	if i < 0 {
		return "", "", errBadPath
	}
	ref := rest[i+1:]
	rest = rest[:i]
	j := strings.LastIndexByte(rest, '/')
	if j <= 0 {
		return "", "", errBadPath
	}
	name, kind := rest[:j], rest[j+1:]
	if kind != kindBlob && kind != kindManifest || !validName(name) {
		return "", "", errBadPath
	}
	d, err = digest.Parse(ref)
	if err != nil || d.Algorithm() != digest.SHA256 {
		return "", "", errNotDigest
	}
	return kind, d, nil
}

// validName reports whether name is a repository name of the
// distribution spec's form: path components of [a-z0-9] separated by
// ".", "_", "__", "-" runs, joined by "/". It is looser than the spec's
// regular expression on separators, which it need not enforce.
func validName(name string) bool {
	if name == "" {
		return false
	}
	for _, c := range strings.Split(name, "/") {
		if c == "" || !alnum(c[0]) || !alnum(c[len(c)-1]) {
			return false
		}
		for i := 0; i < len(c); i++ {
			if !alnum(c[i]) && c[i] != '.' && c[i] != '_' && c[i] != '-' {
				return false
			}
		}
	}
	return true
}

func alnum(b byte) bool { return 'a' <= b && b <= 'z' || '0' <= b && b <= '9' }
