package pki

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"errors"
	"fmt"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/outpost-mesh/outpost/sync/wire"
)

// Subject of node certificates: user system:node:<name> in group
// system:nodes, as upstream's kubelets have.
const (
	NodeUserPrefix = wire.NodeUserPrefix
	NodesGroup     = wire.NodesGroup
)

const (
	// nodeLifetime is a node certificate's default lifetime.
	nodeLifetime = 365 * 24 * time.Hour
	// nodeBackdate starts node certificates a little in the past, for
	// nodes whose clock is behind the hub's.
	nodeBackdate = 5 * time.Minute
	// minRSABits is the smallest RSA key SignNodeCSR accepts.
	minRSABits = 2048
)

// ErrInvalidCSR is returned by SignNodeCSR for a certificate request it
// will not sign: unparsable, badly signed, a weak or unknown key, or
// asking for another subject or for names.
var ErrInvalidCSR = errors.New("invalid node certificate request")

var (
	oidCommonName   = asn1.ObjectIdentifier{2, 5, 4, 3}
	oidOrganization = asn1.ObjectIdentifier{2, 5, 4, 10}
)

// SignNodeCSR signs the DER certificate request csrDER of node nodeName
// with the CA, and returns the DER certificate. The request must be
// self-signed and ask for exactly the subject CN=system:node:<nodeName>,
// O=system:nodes, with no names (DNS, IP, email, URI); anything else is
// refused with an error wrapping ErrInvalidCSR. The certificate is for
// client authentication only, valid from now-5m for lifetime (a year when
// 0), and not past the CA's own expiry.
func SignNodeCSR(ca *x509.Certificate, caKey crypto.Signer, csrDER []byte, nodeName string, lifetime time.Duration, now time.Time) (certDER []byte, err error) {
	if errs := validation.IsDNS1123Subdomain(nodeName); len(errs) > 0 {
		return nil, fmt.Errorf("%w: node name %q: %s", ErrInvalidCSR, nodeName, strings.Join(errs, "; "))
	}
	if lifetime < 0 {
		return nil, fmt.Errorf("sign node certificate: negative lifetime %v", lifetime)
	}
	if lifetime == 0 {
		lifetime = nodeLifetime
	}
	if !ca.IsCA || !publicKeysEqual(ca.PublicKey, caKey.Public()) {
		return nil, errors.New("sign node certificate: the CA key does not match the CA certificate")
	}
	if !now.Before(ca.NotAfter) {
		return nil, fmt.Errorf("sign node certificate: the CA expired at %s", ca.NotAfter.UTC().Format(time.RFC3339))
	}
	csr, err := x509.ParseCertificateRequest(csrDER)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidCSR, err)
	}
	if err := csr.CheckSignature(); err != nil {
		return nil, fmt.Errorf("%w: signature: %v", ErrInvalidCSR, err)
	}
	if err := checkNodeKey(csr.PublicKey); err != nil {
		return nil, err
	}
	if err := checkNodeSubject(csr.Subject, nodeName); err != nil {
		return nil, err
	}
	if len(csr.DNSNames)+len(csr.IPAddresses)+len(csr.EmailAddresses)+len(csr.URIs) > 0 {
		return nil, fmt.Errorf("%w: asks for subject alternative names; a node's client certificate has none", ErrInvalidCSR)
	}

	notAfter := now.Add(lifetime)
	if notAfter.After(ca.NotAfter) {
		notAfter = ca.NotAfter
	}
	tmpl := &x509.Certificate{
		Subject:               pkix.Name{CommonName: NodeUserPrefix + nodeName, Organization: []string{NodesGroup}},
		NotBefore:             now.Add(-nodeBackdate),
		NotAfter:              notAfter,
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		BasicConstraintsValid: true,
	}
	cert, _, err := sign(tmpl, csr.PublicKey, ca, caKey)
	if err != nil {
		return nil, fmt.Errorf("sign node certificate: %w", err)
	}
	return cert.Raw, nil
}

// checkNodeSubject returns an error unless subject is exactly
// CN=system:node:<nodeName>, O=system:nodes.
func checkNodeSubject(subject pkix.Name, nodeName string) error {
	want := "CN=" + NodeUserPrefix + nodeName + ",O=" + NodesGroup
	bad := fmt.Errorf("%w: subject %q, want %q", ErrInvalidCSR, subject.String(), want)
	if len(subject.Names) != 2 {
		return bad
	}
	var cn, o int
	for _, attr := range subject.Names {
		v, ok := attr.Value.(string)
		switch {
		case !ok:
			return bad
		case attr.Type.Equal(oidCommonName) && v == NodeUserPrefix+nodeName:
			cn++
		case attr.Type.Equal(oidOrganization) && v == NodesGroup:
			o++
		default:
			return bad
		}
	}
	if cn != 1 || o != 1 {
		return bad
	}
	return nil
}

// checkNodeKey refuses keys a node certificate may not carry.
func checkNodeKey(pub crypto.PublicKey) error {
	switch k := pub.(type) {
	case *ecdsa.PublicKey:
		switch k.Curve {
		case elliptic.P256(), elliptic.P384(), elliptic.P521():
			return nil
		}
		return fmt.Errorf("%w: unsupported ECDSA curve %s", ErrInvalidCSR, k.Curve.Params().Name)
	case ed25519.PublicKey:
		return nil
	case *rsa.PublicKey:
		if k.N.BitLen() < minRSABits {
			return fmt.Errorf("%w: RSA key of %d bits, want at least %d", ErrInvalidCSR, k.N.BitLen(), minRSABits)
		}
		return nil
	}
	return fmt.Errorf("%w: unsupported key type %T", ErrInvalidCSR, pub)
}
