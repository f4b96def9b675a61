package hubd

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"testing"
	"time"
)

// testCert returns a certificate for cn valid over [notBefore, notAfter],
// signed by parent (self-signed when parent is nil), and its key.
func testCert(t *testing.T, cn string, isCA bool, notBefore, notAfter time.Time, parent *x509.Certificate, parentKey *ecdsa.PrivateKey) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(time.Now().UnixNano()),
		Subject:               pkix.Name{CommonName: cn},
		NotBefore:             notBefore,
		NotAfter:              notAfter,
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		BasicConstraintsValid: true,
	}
	if isCA {
		tmpl.IsCA = true
		tmpl.KeyUsage |= x509.KeyUsageCertSign
		tmpl.ExtKeyUsage = nil
	}
	if parent == nil {
		parent, parentKey = tmpl, key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
	if err != nil {
		t.Fatal(err)
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return c, key
}

func TestCertAuthenticator(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	now := start
	ca, caKey := testCert(t, "hub-ca", true, start.Add(-time.Hour), start.Add(48*time.Hour), nil, nil)
	roots := x509.NewCertPool()
	roots.AddCert(ca)
	a := newCertAuthenticator(roots, func() time.Time { return now })

	alice, _ := testCert(t, "alice", false, start.Add(-time.Hour), start.Add(time.Hour), ca, caKey)
	for i := range 2 { // the second is answered from the cache
		if err := a.verify([]*x509.Certificate{alice}); err != nil {
			t.Fatalf("round %d: verify(alice) = %v", i, err)
		}
	}
	if len(a.verified) != 1 {
		t.Fatalf("cache holds %d chains, want 1", len(a.verified))
	}

	// Past the leaf's expiry the cached verification no longer counts.
	now = start.Add(2 * time.Hour)
	if err := a.verify([]*x509.Certificate{alice}); err == nil {
		t.Fatal("expired certificate accepted")
	}
	if len(a.verified) != 0 {
		t.Fatalf("cache holds %d chains after expiry, want 0", len(a.verified))
	}

	// A certificate of another CA with the same name is refused, every time.
	other, otherKey := testCert(t, "hub-ca", true, start.Add(-time.Hour), start.Add(48*time.Hour), nil, nil)
	mallory, _ := testCert(t, "alice", false, start.Add(-time.Hour), start.Add(24*time.Hour), other, otherKey)
	for i := range 2 {
		if err := a.verify([]*x509.Certificate{mallory}); err == nil {
			t.Fatalf("round %d: foreign certificate accepted", i)
		}
	}
	if len(a.verified) != 0 {
		t.Fatalf("a refused chain was cached")
	}
}

func TestCertAuthenticatorBounded(t *testing.T) {
	now := time.Now()
	ca, caKey := testCert(t, "hub-ca", true, now.Add(-time.Hour), now.Add(time.Hour), nil, nil)
	roots := x509.NewCertPool()
	roots.AddCert(ca)
	a := newCertAuthenticator(roots, time.Now)
	leaf, _ := testCert(t, "bob", false, now.Add(-time.Hour), now.Add(time.Hour), ca, caKey)
	// Fill the cache with made-up entries, then verify one more.
	for i := range maxVerifiedChains {
		var k [32]byte
		k[0], k[1] = byte(i), byte(i>>8)
		a.verified[k] = now.Add(time.Hour)
	}
	if err := a.verify([]*x509.Certificate{leaf}); err != nil {
		t.Fatal(err)
	}
	if n := len(a.verified); n > maxVerifiedChains {
		t.Fatalf("cache grew to %d chains, bound %d", n, maxVerifiedChains)
	}
	if _, ok := a.verified[chainKey([]*x509.Certificate{leaf})]; !ok {
		t.Fatal("the new chain was not cached")
	}
}
