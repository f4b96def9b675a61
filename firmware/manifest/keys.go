package manifest

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
)

// PEM block types of key files.
const (
	privatePEMType = "PRIVATE KEY" // PKCS #8
	publicPEMType  = "PUBLIC KEY"  // PKIX
)

// GenerateKey makes a new release signing key from crypto/rand.
func GenerateKey() (ed25519.PublicKey, ed25519.PrivateKey, error) {
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("generate ed25519 key: %w", err)
	}
	return pub, priv, nil
}

// MarshalPrivateKey returns key as a PKCS #8 "PRIVATE KEY" PEM block.
func MarshalPrivateKey(key ed25519.PrivateKey) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("marshal private key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: privatePEMType, Bytes: der}), nil
}

// ParsePrivateKey parses what MarshalPrivateKey writes. Any other key type
// or trailing data is an error.
func ParsePrivateKey(data []byte) (ed25519.PrivateKey, error) {
	der, err := pemBlock(data, privatePEMType)
	if err != nil {
		return nil, fmt.Errorf("parse private key: %w", err)
	}
	k, err := x509.ParsePKCS8PrivateKey(der)
	if err != nil {
		return nil, fmt.Errorf("parse private key: %w", err)
	}
	priv, ok := k.(ed25519.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("parse private key: a %T, not an ed25519 key", k)
	}
	return priv, nil
}

// MarshalPublicKey returns key as a PKIX "PUBLIC KEY" PEM block.
func MarshalPublicKey(key ed25519.PublicKey) ([]byte, error) {
	der, err := x509.MarshalPKIXPublicKey(key)
	if err != nil {
		return nil, fmt.Errorf("marshal public key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: publicPEMType, Bytes: der}), nil
}

// ParsePublicKey parses what MarshalPublicKey writes. Any other key type or
// trailing data is an error.
func ParsePublicKey(data []byte) (ed25519.PublicKey, error) {
	der, err := pemBlock(data, publicPEMType)
	if err != nil {
		return nil, fmt.Errorf("parse public key: %w", err)
	}
	k, err := x509.ParsePKIXPublicKey(der)
	if err != nil {
		return nil, fmt.Errorf("parse public key: %w", err)
	}
	pub, ok := k.(ed25519.PublicKey)
	if !ok {
		return nil, fmt.Errorf("parse public key: a %T, not an ed25519 key", k)
	}
	return pub, nil
}

// pemBlock returns the bytes of the one PEM block of type typ in data.
func pemBlock(data []byte, typ string) ([]byte, error) {
	b, rest := pem.Decode(data)
	if b == nil {
		return nil, errors.New("no PEM block")
	}
	if b.Type != typ {
		return nil, fmt.Errorf("PEM block %q, want %q", b.Type, typ)
	}
	if len(bytes.TrimSpace(rest)) != 0 {
		return nil, errors.New("data after the PEM block")
	}
	return b.Bytes, nil
}

// WriteKeyPair generates a key and writes name+".key" (the private key,
// mode 0600) and name+".pub" (the public key, mode 0644), what `outpost
// release keygen --out NAME` makes. It never overwrites a file: an existing
// key is too valuable to lose to a typo. On error, nothing is left behind.
func WriteKeyPair(name string) error {
	pub, priv, err := GenerateKey()
	if err != nil {
		return err
	}
	privPEM, err := MarshalPrivateKey(priv)
	if err != nil {
		return err
	}
	pubPEM, err := MarshalPublicKey(pub)
	if err != nil {
		return err
	}
	if err := writeNew(name+".key", privPEM, 0o600); err != nil {
		return err
	}
	if err := writeNew(name+".pub", pubPEM, 0o644); err != nil {
		os.Remove(name + ".key")
		return err
	}
	return nil
}

// writeNew creates path, which must not exist, with mode perm, writes data
// and syncs it; on error it removes what it created.
func writeNew(path string, data []byte, perm os.FileMode) (err error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
	if err != nil {
		return fmt.Errorf("write key: %w", err)
	}
	defer func() {
		if cerr := f.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("write key: %w", cerr)
		}
		if err != nil {
			os.Remove(path)
		}
	}()
	// The umask may only clear bits; Chmod makes the mode exact.
	if err := f.Chmod(perm); err != nil {
		return fmt.Errorf("write key: %w", err)
	}
	if _, err := f.Write(data); err != nil {
		return fmt.Errorf("write key: %w", err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("write key: %w", err)
	}
	return nil
}
