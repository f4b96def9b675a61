package csrsigning

import (
	"crypto"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"slices"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
)

// Signer issues certificates for approved requests. Its methods must be
// safe for concurrent use.
type Signer interface {
	// Sign returns the PEM certificate for req, a parsed request whose
	// signature the API has checked, with usages (as the CSR's
	// spec.usages) and valid for lifetime from now.
	Sign(req *x509.CertificateRequest, usages []certificatesv1.KeyUsage, lifetime time.Duration) (certPEM []byte, err error)
}

// backdate is how far before now a certificate starts, for clients whose
// clock is behind; short is the lifetime below which its end is not
// backdated as well (upstream's signer: 5 minutes, 8 hours).
const (
	backdate = 5 * time.Minute
	short    = 8 * time.Hour
)

// CASigner signs with a CA certificate and its key, as upstream's local
// signer does: the request's subject and subject alternative names, the
// usages asked for, no other extensions, not a CA, and never past the CA's
// own expiry. Safe for concurrent use.
type CASigner struct {
	ca  *x509.Certificate
	key crypto.Signer
	now func() time.Time
}

var _ Signer = (*CASigner)(nil)

// NewCASigner returns a signer with CA certificate ca and its key, which
// must match; now is the clock, nil for the wall clock.
func NewCASigner(ca *x509.Certificate, key crypto.Signer, now func() time.Time) (*CASigner, error) {
	if ca == nil || key == nil {
		return nil, errors.New("csrsigning: nil CA certificate or key")
	}
	if !ca.IsCA {
		return nil, errors.New("csrsigning: the CA certificate is not a CA's")
	}
	if pub, ok := key.Public().(interface{ Equal(crypto.PublicKey) bool }); !ok || !pub.Equal(ca.PublicKey) {
		return nil, errors.New("csrsigning: the CA key does not match the CA certificate")
	}
	if now == nil {
		now = time.Now
	}
	return &CASigner{ca: ca, key: key, now: now}, nil
}

// Sign issues the certificate; it fails for usages it does not know and
// once the CA has expired.
func (s *CASigner) Sign(req *x509.CertificateRequest, usages []certificatesv1.KeyUsage, lifetime time.Duration) ([]byte, error) {
	if err := req.CheckSignature(); err != nil {
		return nil, fmt.Errorf("check request signature: %w", err)
	}
	ku, eku, err := keyUsages(usages)
	if err != nil {
		return nil, err
	}
	now := s.now()
	notAfter := now.Add(lifetime)
	if lifetime >= short {
		notAfter = notAfter.Add(-backdate)
	}
	if !notAfter.Before(s.ca.NotAfter) {
		notAfter = s.ca.NotAfter
	}
	if !now.Before(s.ca.NotAfter) {
		return nil, fmt.Errorf("refusing to sign a certificate that expired in the past: NotAfter=%v", s.ca.NotAfter)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
	if err != nil {
		return nil, fmt.Errorf("serial number: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               req.Subject,
		DNSNames:              req.DNSNames,
		IPAddresses:           req.IPAddresses,
		EmailAddresses:        req.EmailAddresses,
		URIs:                  req.URIs,
		PublicKeyAlgorithm:    req.PublicKeyAlgorithm,
		PublicKey:             req.PublicKey,
		KeyUsage:              ku,
		ExtKeyUsage:           eku,
		BasicConstraintsValid: true,
		NotBefore:             now.Add(-backdate),
		NotAfter:              notAfter,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, s.ca, req.PublicKey, s.key)
	if err != nil {
		return nil, fmt.Errorf("sign certificate: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), nil
}

var keyUsageOf = map[certificatesv1.KeyUsage]x509.KeyUsage{
	certificatesv1.UsageSigning:           x509.KeyUsageDigitalSignature,
	certificatesv1.UsageDigitalSignature:  x509.KeyUsageDigitalSignature,
	certificatesv1.UsageContentCommitment: x509.KeyUsageContentCommitment,
	certificatesv1.UsageKeyEncipherment:   x509.KeyUsageKeyEncipherment,
	certificatesv1.UsageKeyAgreement:      x509.KeyUsageKeyAgreement,
	certificatesv1.UsageDataEncipherment:  x509.KeyUsageDataEncipherment,
	certificatesv1.UsageCertSign:          x509.KeyUsageCertSign,
	certificatesv1.UsageCRLSign:           x509.KeyUsageCRLSign,
	certificatesv1.UsageEncipherOnly:      x509.KeyUsageEncipherOnly,
	certificatesv1.UsageDecipherOnly:      x509.KeyUsageDecipherOnly,
}

var extKeyUsageOf = map[certificatesv1.KeyUsage]x509.ExtKeyUsage{
	certificatesv1.UsageAny:             x509.ExtKeyUsageAny,
	certificatesv1.UsageServerAuth:      x509.ExtKeyUsageServerAuth,
	certificatesv1.UsageClientAuth:      x509.ExtKeyUsageClientAuth,
	certificatesv1.UsageCodeSigning:     x509.ExtKeyUsageCodeSigning,
	certificatesv1.UsageEmailProtection: x509.ExtKeyUsageEmailProtection,
	certificatesv1.UsageSMIME:           x509.ExtKeyUsageEmailProtection,
	certificatesv1.UsageIPsecEndSystem:  x509.ExtKeyUsageIPSECEndSystem,
	certificatesv1.UsageIPsecTunnel:     x509.ExtKeyUsageIPSECTunnel,
	certificatesv1.UsageIPsecUser:       x509.ExtKeyUsageIPSECUser,
	certificatesv1.UsageTimestamping:    x509.ExtKeyUsageTimeStamping,
	certificatesv1.UsageOCSPSigning:     x509.ExtKeyUsageOCSPSigning,
	certificatesv1.UsageMicrosoftSGC:    x509.ExtKeyUsageMicrosoftServerGatedCrypto,
	certificatesv1.UsageNetscapeSGC:     x509.ExtKeyUsageNetscapeServerGatedCrypto,
}

// keyUsages translates the API's usages to x509's, extended usages
// sorted and without duplicates, as upstream's signer does.
func keyUsages(usages []certificatesv1.KeyUsage) (x509.KeyUsage, []x509.ExtKeyUsage, error) {
	var ku x509.KeyUsage
	var eku []x509.ExtKeyUsage
	var unknown []certificatesv1.KeyUsage
	for _, u := range usages {
		if k, ok := keyUsageOf[u]; ok {
			ku |= k
		} else if e, ok := extKeyUsageOf[u]; ok {
			if !slices.Contains(eku, e) {
				eku = append(eku, e)
			}
		} else {
			unknown = append(unknown, u)
		}
	}
	if len(unknown) > 0 {
		return 0, nil, fmt.Errorf("unrecognized usage values: %q", unknown)
	}
	slices.Sort(eku)
	return ku, eku, nil
}
