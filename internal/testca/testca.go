// Package testca makes throwaway certificate authorities for tests, and
// the certificates they need from one: a hub's serving certificate and a
// node's client certificate. Only tests import it; the hub's real CA is
// hub/pki's.
package testca

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outpost-mesh/outpost/sync/wire"
)

// CA is a certificate authority whose key is in memory.
type CA struct {
	Cert *x509.Certificate
	Key  *ecdsa.PrivateKey
	Pool *x509.CertPool // holds Cert alone
}

// serial numbers the certificates of every CA of the test binary.
var serial atomic.Int64

// New returns a CA valid from an hour ago for a day.
func New(t testing.TB) *CA {
	t.Helper()
	key := newKey(t)
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(serial.Add(1)),
		Subject:               pkix.Name{CommonName: "outpost test CA"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &CA{Cert: cert, Key: key, Pool: pool}
}

// Sign issues a certificate of tmpl for pub and returns it DER-encoded.
// It sets tmpl's serial number, and its validity when tmpl has none: from
// an hour ago for a day.
func (ca *CA) Sign(t testing.TB, tmpl *x509.Certificate, pub any) []byte {
	t.Helper()
	tmpl.SerialNumber = big.NewInt(serial.Add(1))
	if tmpl.NotBefore.IsZero() && tmpl.NotAfter.IsZero() {
		now := time.Now()
		tmpl.NotBefore, tmpl.NotAfter = now.Add(-time.Hour), now.Add(24*time.Hour)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, pub, ca.Key)
	if err != nil {
		t.Fatal(err)
	}
	return der
}

// Serving returns a server certificate for 127.0.0.1 and localhost, with
// the CA in its chain, as the hub serves it (joining nodes pin the CA).
func (ca *CA) Serving(t testing.TB) tls.Certificate {
	t.Helper()
	return ca.leaf(t, &x509.Certificate{
		Subject:     pkix.Name{CommonName: "outpost-hub"},
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:    []string{"localhost"},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
	})
}

// Node returns a client certificate of node's identity, as the hub issues
// it: user system:node:<node> in group system:nodes, the CA in its chain.
func (ca *CA) Node(t testing.TB, node string) tls.Certificate {
	t.Helper()
	return ca.leaf(t, NodeTemplate(node))
}

// NodeTemplate is the subject and usage of a certificate of node's
// identity, without validity or serial.
func NodeTemplate(node string) *x509.Certificate {
	return &x509.Certificate{
		Subject:     pkix.Name{CommonName: wire.NodeUserPrefix + node, Organization: []string{wire.NodesGroup}},
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
}

func (ca *CA) leaf(t testing.TB, tmpl *x509.Certificate) tls.Certificate {
	t.Helper()
	key := newKey(t)
	der := ca.Sign(t, tmpl, &key.PublicKey)
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der, ca.Cert.Raw}, PrivateKey: key, Leaf: leaf}
}

// CertPEM returns the certificate of DER der in PEM.
func CertPEM(der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

// KeyPEM returns the private key of c (one this package made) in PEM.
func KeyPEM(t testing.TB, c tls.Certificate) []byte {
	t.Helper()
	key, ok := c.PrivateKey.(*ecdsa.PrivateKey)
	if !ok {
		t.Fatalf("key of type %T, want *ecdsa.PrivateKey", c.PrivateKey)
	}
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der})
}

func newKey(t testing.TB) *ecdsa.PrivateKey {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return key
}
