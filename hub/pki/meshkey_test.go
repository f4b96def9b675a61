package pki

import (
	"bytes"
	"crypto/hkdf"
	"crypto/sha256"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestMeshSecret: Ensure makes the secret once, 0600, and keeps it; a
// file of the wrong size is an error that says what to do.
func TestMeshSecret(t *testing.T) {
	cfg := testConfig(t)
	p := mustEnsure(t, cfg)
	path := filepath.Join(cfg.Dir, MeshSecretFile)
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 || fi.Size() != MeshSecretSize {
		t.Errorf("%s: mode %v, %d bytes; want 0600, %d", path, fi.Mode().Perm(), fi.Size(), MeshSecretSize)
	}
	if len(p.MeshSecret) != MeshSecretSize || bytes.Equal(p.MeshSecret, make([]byte, MeshSecretSize)) {
		t.Errorf("MeshSecret = %x, want %d random bytes", p.MeshSecret, MeshSecretSize)
	}
	again := mustEnsure(t, cfg)
	if !bytes.Equal(again.MeshSecret, p.MeshSecret) {
		t.Error("a second Ensure made a new mesh secret")
	}
	if other := mustEnsure(t, testConfig(t)); bytes.Equal(other.MeshSecret, p.MeshSecret) {
		t.Error("two PKIs share a mesh secret")
	}

	if err := os.WriteFile(path, []byte("short"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Ensure(cfg); err == nil || !strings.Contains(err.Error(), "restore it") {
		t.Errorf("Ensure with a 5-byte mesh secret = %v, want an error saying what to do", err)
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(path, 0o700); err != nil { // unreadable as a file
		t.Fatal(err)
	}
	if _, err := Ensure(cfg); err == nil {
		t.Error("Ensure with a directory for the mesh secret succeeded")
	}
}

// TestMeshKey: the key of a site for an epoch is HKDF-SHA256 of the
// secret with the documented info, the same from every PKI of the
// secret, and differs by site and by epoch.
func TestMeshKey(t *testing.T) {
	p := &PKI{MeshSecret: bytes.Repeat([]byte{7}, MeshSecretSize)}
	k := p.MeshKey("store-7", 20432)
	want, err := hkdf.Key(sha256.New, p.MeshSecret, nil, "outpost mesh key v1\x00store-7\x0020432", 32)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(k, want) {
		t.Errorf("MeshKey(store-7, 20432) = %x, want %x", k, want)
	}
	same := &PKI{MeshSecret: bytes.Repeat([]byte{7}, MeshSecretSize)}
	if !bytes.Equal(same.MeshKey("store-7", 20432), k) {
		t.Error("MeshKey differs between two PKIs of the same secret")
	}
	for _, o := range []struct {
		site  string
		epoch int64
	}{{"store-8", 20432}, {"store-7", 20433}, {"store-72", 20432}, {"store-7", -20432}} {
		if bytes.Equal(p.MeshKey(o.site, o.epoch), k) {
			t.Errorf("MeshKey(%s, %d) = MeshKey(store-7, 20432)", o.site, o.epoch)
		}
	}
	other := &PKI{MeshSecret: bytes.Repeat([]byte{8}, MeshSecretSize)}
	if bytes.Equal(other.MeshKey("store-7", 20432), k) {
		t.Error("MeshKey is the same under another secret")
	}
}
