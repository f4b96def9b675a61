package pki

import (
	"crypto/tls"
	"crypto/x509"

	"github.com/outpost-mesh/outpost/sync/wire"
)

// CAHash returns the pin of a CA certificate that joining nodes are given,
// as kubeadm's --discovery-token-ca-cert-hash; see wire.CAHash, which the
// nodes check it with (wire.VerifyPinned).
func CAHash(ca *x509.Certificate) string { return wire.CAHash(ca) }

// ServingChain returns the serving certificate with the CA appended to its
// chain, for listeners that nodes verify by CA hash (wire.VerifyPinned): they
// must see the CA to check its key against the pin. The returned value
// shares the key and leaf with p.Serving.
func (p *PKI) ServingChain() tls.Certificate {
	c := p.Serving
	c.Certificate = append(append([][]byte(nil), p.Serving.Certificate...), p.CA.Raw)
	return c
}
