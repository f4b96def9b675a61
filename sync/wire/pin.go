package wire

import (
	"crypto/sha256"
	"crypto/subtle"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"strings"
)

// CAHash returns the pin of a CA certificate as joining nodes are given it
// (kubeadm's --discovery-token-ca-cert-hash): "sha256:" and the hex SHA-256
// of the certificate's SubjectPublicKeyInfo.
func CAHash(ca *x509.Certificate) string {
	sum := sha256.Sum256(ca.RawSubjectPublicKeyInfo)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// ErrNoCA is returned by CAHashPEM for PEM data that holds no CA
// certificate.
var ErrNoCA = errors.New("no CA certificate")

// CAHashPEM returns the pin (CAHash) of the first CA certificate in the
// PEM data, as a kubeconfig's certificate-authority-data carries the hub
// CA; ErrNoCA if it holds none, and an error for a CERTIFICATE block that
// does not parse.
func CAHashPEM(data []byte) (string, error) {
	for len(data) > 0 {
		var block *pem.Block
		block, data = pem.Decode(data)
		if block == nil {
			break
		}
		if block.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return "", fmt.Errorf("parse the CA certificate: %w", err)
		}
		if c.IsCA {
			return CAHash(c), nil
		}
	}
	return "", ErrNoCA
}

// ErrPinMismatch is returned by VerifyPinned when no certificate of the
// chain matches the pin.
var ErrPinMismatch = errors.New("no certificate of the hub's chain matches the CA hash")

// ErrPinMalformed is returned (wrapped) by CheckPin and VerifyPinned for a
// pin that is not "sha256:" and 64 hex digits.
var ErrPinMalformed = errors.New("CA hash is malformed: want sha256:<64 hex digits>, as outpost token create prints it")

// CheckPin checks that pin has the form of a CA hash, "sha256:" and the 64
// hex digits of a SHA-256 (either case), as CAHash makes it.
func CheckPin(pin string) error {
	digits, ok := strings.CutPrefix(pin, "sha256:")
	if !ok || len(digits) != 2*sha256.Size {
		return fmt.Errorf("%w; got %q", ErrPinMalformed, pin)
	}
	if _, err := hex.DecodeString(digits); err != nil {
		return fmt.Errorf("%w; got %q, which is not hex", ErrPinMalformed, pin)
	}
	return nil
}

// VerifyPinned checks a server's certificate chain (leaf first, as TLS
// presents it) against a CA pin: a certificate of the chain must have the
// pinned key, and the leaf must chain to it and be valid for serverName.
// It returns the pinned CA certificate.
func VerifyPinned(rawCerts [][]byte, pin, serverName string) (*x509.Certificate, error) {
	if err := CheckPin(pin); err != nil {
		return nil, err
	}
	want := pin[len("sha256:"):]
	if len(rawCerts) == 0 {
		return nil, errors.New("hub presented no certificate")
	}
	certs := make([]*x509.Certificate, 0, len(rawCerts))
	for _, raw := range rawCerts {
		c, err := x509.ParseCertificate(raw)
		if err != nil {
			return nil, fmt.Errorf("parse hub certificate: %w", err)
		}
		certs = append(certs, c)
	}
	var ca *x509.Certificate
	for _, c := range certs {
		if subtle.ConstantTimeCompare([]byte(CAHash(c)[len("sha256:"):]), []byte(strings.ToLower(want))) == 1 {
			ca = c
			break
		}
	}
	if ca == nil {
		return nil, ErrPinMismatch
	}
	if !ca.IsCA {
		return nil, fmt.Errorf("%w: the pinned certificate is not a CA", ErrPinMismatch)
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca)
	inter := x509.NewCertPool()
	for _, c := range certs[1:] {
		inter.AddCert(c)
	}
	if _, err := certs[0].Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter, DNSName: serverName, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
		return nil, fmt.Errorf("hub certificate: %w", err)
	}
	return ca, nil
}
