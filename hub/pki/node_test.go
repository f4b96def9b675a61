package pki

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"errors"
	"net"
	"net/url"
	"slices"
	"testing"
	"time"
)

// newCSR returns a DER certificate request for tmpl signed by a new key of
// the given kind ("p256", "p224", "ed25519", "rsa1024", "rsa2048"), as an
// edge node would make one.
func newCSR(t *testing.T, kind string, tmpl *x509.CertificateRequest) []byte {
	t.Helper()
	var key crypto.Signer
	var err error
	switch kind {
	case "p256":
		key, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	case "p224":
		key, err = ecdsa.GenerateKey(elliptic.P224(), rand.Reader)
	case "ed25519":
		_, key, err = ed25519.GenerateKey(rand.Reader)
	case "rsa1024":
		key, err = rsa.GenerateKey(rand.Reader, 1024)
	case "rsa2048":
		key, err = rsa.GenerateKey(rand.Reader, 2048)
	default:
		t.Fatalf("unknown key kind %q", kind)
	}
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, tmpl, key)
	if err != nil {
		t.Fatal(err)
	}
	return der
}

func nodeSubject(name string) pkix.Name {
	return pkix.Name{CommonName: "system:node:" + name, Organization: []string{"system:nodes"}}
}

func TestSignNodeCSR(t *testing.T) {
	p := mustEnsure(t, testConfig(t))
	now := time.Now()
	for _, kind := range []string{"p256", "ed25519", "rsa2048"} {
		csr := newCSR(t, kind, &x509.CertificateRequest{Subject: nodeSubject("edge-a")})
		der, err := SignNodeCSR(p.CA, p.CAKey, csr, "edge-a", 0, now)
		if err != nil {
			t.Fatalf("SignNodeCSR(%s key): %v", kind, err)
		}
		cert, err := x509.ParseCertificate(der)
		if err != nil {
			t.Fatal(err)
		}
		if cert.Subject.CommonName != "system:node:edge-a" || !slices.Equal(cert.Subject.Organization, []string{"system:nodes"}) {
			t.Errorf("%s: subject %q", kind, cert.Subject)
		}
		if !cert.NotBefore.Equal(now.Add(-5*time.Minute).Truncate(time.Second)) || !cert.NotAfter.Equal(now.Add(365*24*time.Hour).Truncate(time.Second)) {
			t.Errorf("%s: valid %v to %v, want from %v for a year", kind, cert.NotBefore, cert.NotAfter, now.Add(-5*time.Minute))
		}
		if cert.IsCA || cert.KeyUsage != x509.KeyUsageDigitalSignature || !slices.Equal(cert.ExtKeyUsage, []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}) {
			t.Errorf("%s: isCA %v, key usage %v, ext key usage %v", kind, cert.IsCA, cert.KeyUsage, cert.ExtKeyUsage)
		}
		if _, err := cert.Verify(x509.VerifyOptions{Roots: p.CAPool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
			t.Errorf("%s: node certificate does not verify for client auth: %v", kind, err)
		}
		if _, err := cert.Verify(x509.VerifyOptions{Roots: p.CAPool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err == nil {
			t.Errorf("%s: node certificate verifies for server auth", kind)
		}
		if cert.SerialNumber.BitLen() < 64 {
			t.Errorf("%s: serial %v is not random", kind, cert.SerialNumber)
		}
	}

	// Two certificates for one request get different serials.
	csr := newCSR(t, "p256", &x509.CertificateRequest{Subject: nodeSubject("edge-a")})
	a, _ := SignNodeCSR(p.CA, p.CAKey, csr, "edge-a", time.Hour, now)
	b, _ := SignNodeCSR(p.CA, p.CAKey, csr, "edge-a", time.Hour, now)
	ca, _ := x509.ParseCertificate(a)
	cb, _ := x509.ParseCertificate(b)
	if ca.SerialNumber.Cmp(cb.SerialNumber) == 0 {
		t.Error("two node certificates share a serial")
	}
	if !ca.NotAfter.Equal(now.Add(time.Hour).Truncate(time.Second)) {
		t.Errorf("lifetime 1h: not after %v, want %v", ca.NotAfter, now.Add(time.Hour))
	}

	// Never past the CA.
	der, err := SignNodeCSR(p.CA, p.CAKey, csr, "edge-a", 20*365*24*time.Hour, now)
	if err != nil {
		t.Fatal(err)
	}
	long, _ := x509.ParseCertificate(der)
	if !long.NotAfter.Equal(p.CA.NotAfter) {
		t.Errorf("20-year certificate ends %v, want the CA's end %v", long.NotAfter, p.CA.NotAfter)
	}
}

func TestSignNodeCSRRefuses(t *testing.T) {
	p := mustEnsure(t, testConfig(t))
	other := mustEnsure(t, testConfig(t))
	now := time.Now()
	good := newCSR(t, "p256", &x509.CertificateRequest{Subject: nodeSubject("edge-a")})
	tampered := slices.Clone(good)
	tampered[len(tampered)-1] ^= 1
	u, _ := url.Parse("spiffe://cluster/node/edge-a")

	for _, tc := range []struct {
		name     string
		csr      []byte
		node     string
		lifetime time.Duration
		at       time.Time
		caKey    crypto.Signer
		invalid  bool // the error wraps ErrInvalidCSR
	}{
		{name: "garbage", csr: []byte("not a csr"), node: "edge-a", invalid: true},
		{name: "bad signature", csr: tampered, node: "edge-a", invalid: true},
		{name: "other node", csr: good, node: "edge-b", invalid: true},
		{name: "bad node name", csr: newCSR(t, "p256", &x509.CertificateRequest{Subject: nodeSubject("Edge_A")}), node: "Edge_A", invalid: true},
		{name: "admin", csr: newCSR(t, "p256", &x509.CertificateRequest{Subject: pkix.Name{CommonName: "system:node:edge-a", Organization: []string{"system:masters"}}}), node: "edge-a", invalid: true},
		{name: "masters too", csr: newCSR(t, "p256", &x509.CertificateRequest{Subject: pkix.Name{CommonName: "system:node:edge-a", Organization: []string{"system:nodes", "system:masters"}}}), node: "edge-a", invalid: true},
		{name: "no group", csr: newCSR(t, "p256", &x509.CertificateRequest{Subject: pkix.Name{CommonName: "system:node:edge-a"}}), node: "edge-a", invalid: true},
		{name: "no common name", csr: newCSR(t, "p256", &x509.CertificateRequest{Subject: pkix.Name{Organization: []string{"system:nodes"}}}), node: "edge-a", invalid: true},
		{name: "organizational unit", csr: newCSR(t, "p256", &x509.CertificateRequest{Subject: pkix.Name{CommonName: "system:node:edge-a", Organization: []string{"system:nodes"}, OrganizationalUnit: []string{"x"}}}), node: "edge-a", invalid: true},
		{name: "extra attribute", csr: newCSR(t, "p256", &x509.CertificateRequest{Subject: pkix.Name{CommonName: "system:node:edge-a", Organization: []string{"system:nodes"},
			ExtraNames: []pkix.AttributeTypeAndValue{{Type: asn1.ObjectIdentifier{2, 5, 4, 3}, Value: "system:node:edge-b"}}}}), node: "edge-a", invalid: true},
		{name: "dns name", csr: newCSR(t, "p256", &x509.CertificateRequest{Subject: nodeSubject("edge-a"), DNSNames: []string{"hub.example.com"}}), node: "edge-a", invalid: true},
		{name: "ip address", csr: newCSR(t, "p256", &x509.CertificateRequest{Subject: nodeSubject("edge-a"), IPAddresses: []net.IP{net.IPv4(10, 0, 0, 1)}}), node: "edge-a", invalid: true},
		{name: "email", csr: newCSR(t, "p256", &x509.CertificateRequest{Subject: nodeSubject("edge-a"), EmailAddresses: []string{"a@example.com"}}), node: "edge-a", invalid: true},
		{name: "uri", csr: newCSR(t, "p256", &x509.CertificateRequest{Subject: nodeSubject("edge-a"), URIs: []*url.URL{u}}), node: "edge-a", invalid: true},
		{name: "weak rsa", csr: newCSR(t, "rsa1024", &x509.CertificateRequest{Subject: nodeSubject("edge-a")}), node: "edge-a", invalid: true},
		{name: "p224", csr: newCSR(t, "p224", &x509.CertificateRequest{Subject: nodeSubject("edge-a")}), node: "edge-a", invalid: true},
		{name: "negative lifetime", csr: good, node: "edge-a", lifetime: -time.Hour},
		{name: "expired CA", csr: good, node: "edge-a", at: p.CA.NotAfter},
		{name: "foreign CA key", csr: good, node: "edge-a", caKey: other.CAKey},
	} {
		at, key := tc.at, tc.caKey
		if at.IsZero() {
			at = now
		}
		if key == nil {
			key = p.CAKey
		}
		der, err := SignNodeCSR(p.CA, key, tc.csr, tc.node, tc.lifetime, at)
		if err == nil || der != nil {
			t.Errorf("%s: SignNodeCSR = %d bytes, %v; want an error", tc.name, len(der), err)
			continue
		}
		if errors.Is(err, ErrInvalidCSR) != tc.invalid {
			t.Errorf("%s: SignNodeCSR error %q wraps ErrInvalidCSR: %v, want %v", tc.name, err, !tc.invalid, tc.invalid)
		}
	}
}
