package csrsigning

import (
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
)

// SignerName is the signer this controller issues for: client
// certificates that the hub's API authenticates.
const SignerName = certificatesv1.KubeAPIServerClientSignerName

// FailureReason is the reason of the Failed condition of a request the
// signer refuses, as upstream's.
const FailureReason = "SignerValidationFailure"

// minLifetime is the shortest certificate issued, whatever
// spec.expirationSeconds asks: twice the backdate, as upstream.
const minLifetime = 10 * time.Minute

// step is what to do with one CSR.
type step struct {
	// sign, with req and lifetime, issues a certificate.
	sign     bool
	req      *x509.CertificateRequest
	lifetime time.Duration
	// fail, with message, adds the Failed condition.
	fail    bool
	message string
}

// plan decides what to do with c, issuing certificates for at most
// maxLifetime: nothing unless it is for SignerName, approved, neither
// denied nor failed, and not yet issued; then fail it if its usages break
// the signer's rules, else sign it. An error means the request does not
// parse, which validation rules out. No I/O.
func plan(c *certificatesv1.CertificateSigningRequest, maxLifetime time.Duration) (step, error) {
	if c.Spec.SignerName != SignerName || len(c.Status.Certificate) > 0 {
		return step{}, nil
	}
	var approved, denied, failed bool
	for _, cond := range c.Status.Conditions {
		isTrue := cond.Status == corev1.ConditionTrue
		switch cond.Type {
		case certificatesv1.CertificateApproved:
			approved = approved || isTrue
		case certificatesv1.CertificateDenied:
			denied = denied || isTrue
		case certificatesv1.CertificateFailed:
			failed = failed || isTrue
		}
	}
	if !approved || denied || failed {
		return step{}, nil
	}
	req, err := parseRequest(c.Spec.Request)
	if err != nil {
		return step{}, fmt.Errorf("parse csr %q: %w", c.Name, err)
	}
	if err := checkClientUsages(c.Spec.Usages); err != nil {
		return step{fail: true, message: err.Error()}, nil
	}
	return step{sign: true, req: req, lifetime: lifetime(c.Spec.ExpirationSeconds, maxLifetime)}, nil
}

// parseRequest decodes spec.request: a PEM CERTIFICATE REQUEST.
func parseRequest(pemBytes []byte) (*x509.CertificateRequest, error) {
	block, _ := pem.Decode(pemBytes)
	if block == nil || block.Type != "CERTIFICATE REQUEST" {
		return nil, errors.New("PEM block type must be CERTIFICATE REQUEST")
	}
	return x509.ParseCertificateRequest(block.Bytes)
}

// checkClientUsages holds a kube-apiserver-client request to upstream's
// rule: client auth, and optionally digital signature and key
// encipherment, nothing else.
func checkClientUsages(usages []certificatesv1.KeyUsage) error {
	client := false
	for _, u := range usages {
		switch u {
		case certificatesv1.UsageDigitalSignature, certificatesv1.UsageKeyEncipherment:
		case certificatesv1.UsageClientAuth:
			client = true
		default:
			return fmt.Errorf("invalid usage for client certificate: %s", u)
		}
	}
	if !client {
		return fmt.Errorf("missing required usage for client certificate: %s", certificatesv1.UsageClientAuth)
	}
	return nil
}

// lifetime is the certificate's: expirationSeconds when set, but no less
// than minLifetime and no more than maxLifetime, else maxLifetime.
func lifetime(expirationSeconds *int32, maxLifetime time.Duration) time.Duration {
	if expirationSeconds == nil {
		return maxLifetime
	}
	d := time.Duration(*expirationSeconds) * time.Second
	switch {
	case d > maxLifetime:
		return maxLifetime
	case d < minLifetime:
		return minLifetime
	}
	return d
}
