package hubd

import (
	"crypto/sha256"
	"crypto/x509"
	"sync"
	"time"
)

// certAuthenticator verifies client certificate chains against the hub CA
// for client authentication. A chain verified once is remembered, by the
// hash of its certificates, until the earliest of them expires: verifying
// is an ECDSA signature check per certificate, which on every request would
// cost the hub as much CPU as the request itself. Its methods are safe for
// concurrent use.
type certAuthenticator struct {
	roots *x509.CertPool
	now   func() time.Time

	mu sync.Mutex
	// verified holds the chains that verified, by chainKey, with when the
	// first of their certificates expires.
	verified map[[sha256.Size]byte]time.Time
}

// maxVerifiedChains bounds the cache: far more than the hub's clients at
// once, and a full cache only costs verifications, not correctness.
const maxVerifiedChains = 4096

func newCertAuthenticator(roots *x509.CertPool, now func() time.Time) *certAuthenticator {
	return &certAuthenticator{roots: roots, now: now, verified: map[[sha256.Size]byte]time.Time{}}
}

// verify checks that a chain, leaf first, verifies against the roots for
// client authentication, and says why not if it does not. The leaf's
// subject is then the user.
func (a *certAuthenticator) verify(certs []*x509.Certificate) error {
	now := a.now()
	key := chainKey(certs)
	a.mu.Lock()
	notAfter, ok := a.verified[key]
	if ok && !now.Before(notAfter) {
		delete(a.verified, key)
		ok = false
	}
	a.mu.Unlock()
	if ok {
		return nil
	}

	opts := x509.VerifyOptions{
		Roots:         a.roots,
		Intermediates: x509.NewCertPool(),
		KeyUsages:     []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		CurrentTime:   now,
	}
	for _, c := range certs[1:] {
		opts.Intermediates.AddCert(c)
	}
	chains, err := certs[0].Verify(opts)
	if err != nil {
		return err
	}
	// The chain is good until the first of its certificates expires.
	notAfter = certs[0].NotAfter
	for _, c := range chains[0] {
		if c.NotAfter.Before(notAfter) {
			notAfter = c.NotAfter
		}
	}
	a.mu.Lock()
	if len(a.verified) >= maxVerifiedChains {
		for k := range a.verified { // drop one at random
			delete(a.verified, k)
			break
		}
	}
	a.verified[key] = notAfter
	a.mu.Unlock()
	return nil
}

// chainKey hashes the DER of every certificate of a chain, in order, each
// prefixed by its length.
func chainKey(certs []*x509.Certificate) [sha256.Size]byte {
	h := sha256.New()
	var n [4]byte
	for _, c := range certs {
		l := len(c.Raw)
		n[0], n[1], n[2], n[3] = byte(l>>24), byte(l>>16), byte(l>>8), byte(l)
		h.Write(n[:])
		h.Write(c.Raw)
	}
	var k [sha256.Size]byte
	h.Sum(k[:0])
	return k
}
