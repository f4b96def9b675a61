package manifest

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"testing"
)

// TestKeyRoundTrip checks that marshalled keys parse back and that other
// key types and extra data are refused.
func TestKeyRoundTrip(t *testing.T) {
	pub, priv, err := GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	privPEM, err := MarshalPrivateKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	pubPEM, err := MarshalPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := ParsePrivateKey(privPEM); err != nil || !got.Equal(priv) {
		t.Errorf("ParsePrivateKey(MarshalPrivateKey(k)) = %v, %v", got, err)
	}
	if got, err := ParsePublicKey(pubPEM); err != nil || !got.Equal(pub) {
		t.Errorf("ParsePublicKey(MarshalPublicKey(k)) = %v, %v", got, err)
	}

	ec, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	ecDER, _ := x509.MarshalPKCS8PrivateKey(ec)
	ecPubDER, _ := x509.MarshalPKIXPublicKey(&ec.PublicKey)
	ecPEM := pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: ecDER})
	ecPubPEM := pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: ecPubDER})
	for name, data := range map[string][]byte{
		"public as private": pubPEM,
		"ecdsa":             ecPEM,
		"two blocks":        append(append([]byte(nil), privPEM...), privPEM...),
		"not PEM":           []byte("hello"),
		"garbage DER":       pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: []byte{1, 2, 3}}),
	} {
		if _, err := ParsePrivateKey(data); err == nil {
			t.Errorf("ParsePrivateKey(%s) = nil error", name)
		}
	}
	for name, data := range map[string][]byte{
		"private as public": privPEM,
		"ecdsa":             ecPubPEM,
		"trailing":          append(append([]byte(nil), pubPEM...), "x"...),
		"empty":             nil,
	} {
		if _, err := ParsePublicKey(data); err == nil {
			t.Errorf("ParsePublicKey(%s) = nil error", name)
		}
	}
}

// TestWriteKeyPair checks the key files' modes and contents, that they sign
// and verify a release, and that an existing key is never overwritten.
func TestWriteKeyPair(t *testing.T) {
	name := filepath.Join(t.TempDir(), "release")
	if err := WriteKeyPair(name); err != nil {
		t.Fatal(err)
	}
	for path, mode := range map[string]os.FileMode{name + ".key": 0o600, name + ".pub": 0o644} {
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != mode {
			t.Errorf("%s mode %v, want %v", path, fi.Mode().Perm(), mode)
		}
	}
	privPEM, _ := os.ReadFile(name + ".key")
	pubPEM, _ := os.ReadFile(name + ".pub")
	priv, err := ParsePrivateKey(privPEM)
	if err != nil {
		t.Fatal(err)
	}
	pub, err := ParsePublicKey(pubPEM)
	if err != nil {
		t.Fatal(err)
	}
	if !pub.Equal(priv.Public()) {
		t.Fatal("the .pub file is not the .key file's public key")
	}
	env := sign(t, testManifest(t), priv)
	if _, err := Verify(env, Trust{Keys: []ed25519.PublicKey{pub}}, VerifyOptions{Now: testNow}); err != nil {
		t.Errorf("Verify with the written keys: %v", err)
	}

	if err := WriteKeyPair(name); err == nil {
		t.Error("WriteKeyPair over an existing pair = nil error")
	}
	if again, _ := os.ReadFile(name + ".key"); !bytes.Equal(again, privPEM) {
		t.Error("WriteKeyPair overwrote an existing key")
	}

	// A .pub in the way: no .key is left behind.
	other := filepath.Join(filepath.Dir(name), "other")
	if err := os.WriteFile(other+".pub", []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := WriteKeyPair(other); err == nil {
		t.Error("WriteKeyPair with an existing .pub = nil error")
	}
	if _, err := os.Stat(other + ".key"); !os.IsNotExist(err) {
		t.Errorf("a .key was left behind: %v", err)
	}
}
