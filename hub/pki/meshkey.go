package pki

import (
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"

	"github.com/outpost-mesh/outpost/internal/atomicfile"
	"github.com/outpost-mesh/outpost/sync/wire"
)

// MeshSecretFile, under Config.Dir, holds the master secret from which the
// keys of the site meshes are derived (see PKI.MeshKey), written with mode
// 0600.
const MeshSecretFile = "mesh.secret"

// MeshSecretSize is the length of the mesh secret.
const MeshSecretSize = 32

// meshKeyInfo begins the HKDF info of a mesh key; the version lets a
// later derivation differ without a new secret.
const meshKeyInfo = "outpost mesh key v1"

// ensureMeshSecret returns the mesh secret in cfg.Dir, creating it when
// the file does not exist. A file that cannot be read, or is not
// MeshSecretSize bytes, is an error: a new secret would change the key of
// every site, and the edges offline would be cut off from their peers.
func ensureMeshSecret(cfg Config) ([]byte, error) {
	path := filepath.Join(cfg.Dir, MeshSecretFile)
	secret, err := os.ReadFile(path)
	switch {
	case err == nil && len(secret) == MeshSecretSize:
		return secret, nil
	case err == nil:
		return nil, fmt.Errorf("%s holds %d bytes, not %d: restore it from a backup, or remove it to make a new one (every site's mesh key then changes)", path, len(secret), MeshSecretSize)
	case !errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("load mesh secret: %w", err)
	}
	secret = make([]byte, MeshSecretSize)
	rand.Read(secret) // never fails
	if err := atomicfile.WriteFile(path, secret, 0o600); err != nil {
		return nil, fmt.Errorf("create mesh secret: %w", err)
	}
	cfg.Logger.Info("created mesh secret", "file", path)
	return secret, nil
}

// MeshKey returns the key of site's mesh for epoch (see sync/view's
// MeshKeyPolicy), wire.MeshKeySize bytes: HKDF-SHA256 of MeshSecret, with
// the info "outpost mesh key v1", a zero byte, site, a zero byte and epoch
// in decimal. It is deterministic, so a restarted hub, and every hub of
// the same PKI, derive the same keys. The caller owns the returned slice.
func (p *PKI) MeshKey(site string, epoch int64) []byte {
	info := meshKeyInfo + "\x00" + site + "\x00" + strconv.FormatInt(epoch, 10)
	key, err := hkdf.Key(sha256.New, p.MeshSecret, nil, info, wire.MeshKeySize)
	if err != nil {
		panic(fmt.Sprintf("pki: derive a mesh key: %v", err)) // only for a length HKDF cannot give
	}
	return key
}
