// Package pki issues and keeps the hub's certificates: the cluster CA, the API
// server's serving certificate, the admin client certificate and the front
// proxy's CA and client certificate, as files in one directory that later
// starts reuse, and the kubeconfig files that carry them to clients.
package pki

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/outpost-mesh/outpost/internal/atomicfile"
)

// File names under Config.Dir. Keys are written with mode 0600, certificates
// with 0644, all atomically.
const (
	CACertFile      = "ca.crt"
	CAKeyFile       = "ca.key"
	ServingCertFile = "apiserver.crt"
	ServingKeyFile  = "apiserver.key"
	AdminCertFile   = "admin.crt"
	AdminKeyFile    = "admin.key"
)

// Subject of the admin client certificate: a member of system:masters, the
// group that RBAC lets do everything.
const (
	AdminUser  = "outpost-admin"
	AdminGroup = "system:masters"
)

const (
	caLifetime   = 10 * 365 * 24 * time.Hour
	leafLifetime = 365 * 24 * time.Hour
	// A leaf certificate with less than this left is reissued on the next
	// Ensure.
	renewBefore = 90 * 24 * time.Hour
	// Certificates start this far in the past so that a client whose clock
	// is a little behind accepts them.
	backdate = time.Hour
)

// Config says where the PKI lives and what the serving certificate names.
type Config struct {
	// Dir holds the files; it is created with mode 0700 when missing.
	Dir string
	// ServingNames are the DNS names and IP addresses the serving
	// certificate is valid for; at least one. When they change, the next
	// Ensure reissues the serving certificate.
	ServingNames []string
	// Now returns the current time; nil means time.Now.
	Now func() time.Time
	// Logger reports certificates issued; non-nil.
	Logger *slog.Logger
}

// DefaultConfig returns a Config for the PKI in dir, serving localhost only.
func DefaultConfig(dir string) Config {
	return Config{
		Dir:          dir,
		ServingNames: []string{"localhost", "127.0.0.1", "::1"}, // loopback only
		Logger:       slog.New(slog.DiscardHandler),             // silent
	}
}

// Validate reports the first problem with c.
func (c Config) Validate() error {
	if c.Dir == "" {
		return errors.New("pki directory is empty")
	}
	if len(c.ServingNames) == 0 {
		return errors.New("no serving names: the serving certificate needs at least one DNS name or IP address")
	}
	for _, n := range c.ServingNames {
		if err := CheckName(n); err != nil {
			return err
		}
	}
	if c.Logger == nil {
		return errors.New("logger is nil")
	}
	return nil
}

// CheckName returns an error unless n is an IP address or a DNS name (a
// leading "*." wildcard allowed) that a certificate can carry.
func CheckName(n string) error {
	if net.ParseIP(n) != nil {
		return nil
	}
	if n == "" || len(n) > 253 {
		return fmt.Errorf("serving name %q: not an IP address or DNS name", n)
	}
	for i, label := range strings.Split(n, ".") {
		if label == "*" && i == 0 {
			continue
		}
		if label == "" || len(label) > 63 {
			return fmt.Errorf("serving name %q: not an IP address or DNS name", n)
		}
		for _, r := range label {
			ok := r == '-' || r == '_' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z'
			if !ok {
				return fmt.Errorf("serving name %q: not an IP address or DNS name", n)
			}
		}
	}
	return nil
}

// PKI is the hub's loaded key material. It is read-only once returned and
// safe to share between goroutines.
type PKI struct {
	// CA is the cluster CA certificate; CACertPEM is its PEM form.
	CA        *x509.Certificate
	CACertPEM []byte
	// CAPool holds only CA, for verifying client certificates.
	CAPool *x509.CertPool
	// CAKey is the CA's private key, for signing node certificates
	// (SignNodeCSR). It never leaves the hub.
	CAKey crypto.Signer
	// Serving is the API server's certificate and key.
	Serving tls.Certificate
	// AdminCertPEM and AdminKeyPEM are the admin client certificate and key.
	AdminCertPEM []byte
	AdminKeyPEM  []byte
	// MeshSecret is the master secret of the site meshes' keys
	// (MeshKey), MeshSecretSize bytes from MeshSecretFile. It never
	// leaves the hub.
	MeshSecret []byte
}

// prepare checks cfg and makes its directory, and returns its clock (the
// wall clock when cfg.Now is nil): what Ensure and EnsureFrontProxy
// both start with.
func prepare(cfg Config) (func() time.Time, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("pki config: %w", err)
	}
	if err := os.MkdirAll(cfg.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("create pki directory: %w", err)
	}
	if cfg.Now != nil {
		return cfg.Now, nil
	}
	return time.Now, nil
}

// Ensure loads the PKI in cfg.Dir, creating what is missing and reissuing a
// leaf certificate that is unreadable, expiring, not signed by the CA, or (for
// the serving certificate) names other than cfg.ServingNames. The CA is
// created only when neither of its files exists: a CA certificate without its
// key is an error, since a new CA would strand everything the old one signed.
// The mesh secret (MeshSecretFile) is created when missing and kept when
// present; one that cannot be read or has the wrong size is an error.
func Ensure(cfg Config) (*PKI, error) {
	now, err := prepare(cfg)
	if err != nil {
		return nil, err
	}
	ca, caKey, caPEM, err := ensureCA(cfg, now(), clusterCA)
	if err != nil {
		return nil, err
	}
	p := &PKI{CA: ca, CACertPEM: caPEM, CAPool: x509.NewCertPool(), CAKey: caKey}
	p.CAPool.AddCert(ca)

	dns, ips := splitNames(cfg.ServingNames)
	servingCert, servingKey, err := ensureLeaf(cfg, now(), ca, caKey, leafSpec{
		name:     "serving",
		certFile: ServingCertFile,
		keyFile:  ServingKeyFile,
		subject:  pkix.Name{CommonName: "outpost-apiserver"},
		usage:    x509.ExtKeyUsageServerAuth,
		dns:      dns,
		ips:      ips,
	})
	if err != nil {
		return nil, err
	}
	if p.Serving, err = tls.X509KeyPair(servingCert, servingKey); err != nil {
		return nil, fmt.Errorf("load serving certificate: %w", err)
	}
	p.AdminCertPEM, p.AdminKeyPEM, err = ensureLeaf(cfg, now(), ca, caKey, leafSpec{
		name:     "admin",
		certFile: AdminCertFile,
		keyFile:  AdminKeyFile,
		subject:  pkix.Name{CommonName: AdminUser, Organization: []string{AdminGroup}},
		usage:    x509.ExtKeyUsageClientAuth,
	})
	if err != nil {
		return nil, err
	}
	if p.MeshSecret, err = ensureMeshSecret(cfg); err != nil {
		return nil, err
	}
	return p, nil
}

// caSpec names a CA the hub keeps: its files and its subject's prefix.
type caSpec struct {
	name              string // in logs
	certFile, keyFile string
	subjectPrefix     string // the subject is PREFIX@UNIXTIME
}

// clusterCA is the CA of the cluster: it signs the serving, admin and
// node certificates, and clients' certificates are checked against it.
var clusterCA = caSpec{name: "cluster CA", certFile: CACertFile, keyFile: CAKeyFile, subjectPrefix: "outpost-ca"}

// ensureCA loads the CA of spec, creating it when neither of its files
// exists.
func ensureCA(cfg Config, now time.Time, spec caSpec) (*x509.Certificate, crypto.Signer, []byte, error) {
	certPath := filepath.Join(cfg.Dir, spec.certFile)
	keyPath := filepath.Join(cfg.Dir, spec.keyFile)
	certPEM, certErr := os.ReadFile(certPath)
	keyPEM, keyErr := os.ReadFile(keyPath)
	switch {
	case certErr == nil && keyErr == nil:
		cert, err := parseCert(certPEM)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("load %s: %w", certPath, err)
		}
		key, err := parseKey(keyPEM)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("load %s: %w", keyPath, err)
		}
		if !publicKeysEqual(cert.PublicKey, key.Public()) {
			return nil, nil, nil, fmt.Errorf("%s does not match %s: restore the CA's key, or remove %s to start a new cluster", keyPath, certPath, cfg.Dir)
		}
		if !cert.IsCA {
			return nil, nil, nil, fmt.Errorf("%s is not a CA certificate", certPath)
		}
		return cert, key, certPEM, nil
	case certErr == nil && errors.Is(keyErr, fs.ErrNotExist):
		return nil, nil, nil, fmt.Errorf("%s exists but %s is missing: restore the CA's key, or remove %s to start a new cluster", certPath, keyPath, cfg.Dir)
	case certErr != nil && !errors.Is(certErr, fs.ErrNotExist):
		return nil, nil, nil, fmt.Errorf("load %s: %w", spec.name, certErr)
	case keyErr != nil && !errors.Is(keyErr, fs.ErrNotExist):
		return nil, nil, nil, fmt.Errorf("load %s: %w", spec.name, keyErr)
	}
	// No CA certificate. A key alone is left over from a creation that
	// stopped before the certificate was written (the key goes first), so
	// nothing was ever signed with it: start over.
	key, keyPEM, err := newKey()
	if err != nil {
		return nil, nil, nil, err
	}
	tmpl := &x509.Certificate{
		Subject:               pkix.Name{CommonName: fmt.Sprintf("%s@%d", spec.subjectPrefix, now.Unix())},
		NotBefore:             now.Add(-backdate),
		NotAfter:              now.Add(caLifetime),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	cert, certPEM, err := sign(tmpl, key.Public(), tmpl, key)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("create %s: %w", spec.name, err)
	}
	if err := atomicfile.WriteFile(keyPath, keyPEM, 0o600); err != nil {
		return nil, nil, nil, fmt.Errorf("create %s: %w", spec.name, err)
	}
	if err := atomicfile.WriteFile(certPath, certPEM, 0o644); err != nil {
		return nil, nil, nil, fmt.Errorf("create %s: %w", spec.name, err)
	}
	cfg.Logger.Info("created "+spec.name, "cert", certPath, "subject", cert.Subject.CommonName, "expires", cert.NotAfter.Format(time.DateOnly))
	return cert, key, certPEM, nil
}

type leafSpec struct {
	name              string
	certFile, keyFile string
	subject           pkix.Name
	usage             x509.ExtKeyUsage
	dns               []string
	ips               []net.IP
}

// ensureLeaf returns the PEM certificate and key of spec, reusing the files
// when they still fit and issuing new ones otherwise.
func ensureLeaf(cfg Config, now time.Time, ca *x509.Certificate, caKey crypto.Signer, spec leafSpec) (certPEM, keyPEM []byte, err error) {
	certPath := filepath.Join(cfg.Dir, spec.certFile)
	keyPath := filepath.Join(cfg.Dir, spec.keyFile)
	reason := "missing"
	certPEM, certErr := os.ReadFile(certPath)
	keyPEM, keyErr := os.ReadFile(keyPath)
	if certErr == nil && keyErr == nil {
		reason = leafStale(certPEM, keyPEM, now, ca, spec)
		if reason == "" {
			return certPEM, keyPEM, nil
		}
	} else {
		for _, err := range []error{certErr, keyErr} {
			if err != nil && !errors.Is(err, fs.ErrNotExist) {
				return nil, nil, fmt.Errorf("load %s certificate: %w", spec.name, err)
			}
		}
	}

	key, keyPEM, err := newKey()
	if err != nil {
		return nil, nil, err
	}
	notAfter := now.Add(leafLifetime)
	if notAfter.After(ca.NotAfter) {
		notAfter = ca.NotAfter
	}
	tmpl := &x509.Certificate{
		Subject:               spec.subject,
		NotBefore:             now.Add(-backdate),
		NotAfter:              notAfter,
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{spec.usage},
		BasicConstraintsValid: true,
		DNSNames:              spec.dns,
		IPAddresses:           spec.ips,
	}
	cert, certPEM, err := sign(tmpl, key.Public(), ca, caKey)
	if err != nil {
		return nil, nil, fmt.Errorf("issue %s certificate: %w", spec.name, err)
	}
	// Key first: a crash between the two writes leaves a key that does not
	// match the old certificate, which the next start reissues.
	if err := atomicfile.WriteFile(keyPath, keyPEM, 0o600); err != nil {
		return nil, nil, fmt.Errorf("issue %s certificate: %w", spec.name, err)
	}
	if err := atomicfile.WriteFile(certPath, certPEM, 0o644); err != nil {
		return nil, nil, fmt.Errorf("issue %s certificate: %w", spec.name, err)
	}
	cfg.Logger.Info("issued certificate", "name", spec.name, "reason", reason, "cert", certPath,
		"subject", cert.Subject.String(), "sans", sanStrings(cert), "expires", cert.NotAfter.Format(time.DateOnly))
	return certPEM, keyPEM, nil
}

// leafStale says why the stored leaf must be reissued, or "" when it fits.
func leafStale(certPEM, keyPEM []byte, now time.Time, ca *x509.Certificate, spec leafSpec) string {
	if _, err := tls.X509KeyPair(certPEM, keyPEM); err != nil {
		return "unreadable or key mismatch"
	}
	cert, err := parseCert(certPEM)
	if err != nil {
		return "unreadable"
	}
	if cert.CheckSignatureFrom(ca) != nil {
		return "not signed by the current CA"
	}
	if now.Before(cert.NotBefore) || cert.NotAfter.Sub(now) < renewBefore {
		return "expiring"
	}
	if cert.Subject.String() != spec.subject.String() || !slices.Equal(cert.ExtKeyUsage, []x509.ExtKeyUsage{spec.usage}) {
		return "subject changed"
	}
	want := &x509.Certificate{DNSNames: spec.dns, IPAddresses: spec.ips}
	if !slices.Equal(sanStrings(cert), sanStrings(want)) {
		return "names changed"
	}
	return ""
}

// splitNames sorts names into DNS names (lower-cased) and IP addresses,
// dropping duplicates.
func splitNames(names []string) (dns []string, ips []net.IP) {
	seenIP := map[string]bool{}
	for _, n := range names {
		if ip := net.ParseIP(n); ip != nil {
			if v4 := ip.To4(); v4 != nil {
				ip = v4
			}
			if !seenIP[ip.String()] {
				seenIP[ip.String()] = true
				ips = append(ips, ip)
			}
			continue
		}
		dns = append(dns, strings.ToLower(n))
	}
	slices.Sort(dns)
	dns = slices.Compact(dns)
	slices.SortFunc(ips, func(a, b net.IP) int { return bytes.Compare(a, b) })
	return dns, ips
}

// sanStrings returns the sorted DNS and IP SANs of c as strings.
func sanStrings(c *x509.Certificate) []string {
	var s []string
	s = append(s, c.DNSNames...)
	for _, ip := range c.IPAddresses {
		s = append(s, ip.String())
	}
	slices.Sort(s)
	return s
}

func newKey() (crypto.Signer, []byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("generate key: %w", err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, fmt.Errorf("marshal key: %w", err)
	}
	return key, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

func sign(tmpl *x509.Certificate, pub crypto.PublicKey, parent *x509.Certificate, parentKey crypto.Signer) (*x509.Certificate, []byte, error) {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, nil, fmt.Errorf("generate serial: %w", err)
	}
	tmpl.SerialNumber = serial
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, pub, parentKey)
	if err != nil {
		return nil, nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, err
	}
	return cert, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), nil
}

func parseCert(data []byte) (*x509.Certificate, error) {
	block, _ := pem.Decode(data)
	if block == nil || block.Type != "CERTIFICATE" {
		return nil, errors.New("no PEM certificate")
	}
	return x509.ParseCertificate(block.Bytes)
}

func parseKey(data []byte) (crypto.Signer, error) {
	block, _ := pem.Decode(data)
	if block == nil {
		return nil, errors.New("no PEM key")
	}
	var key any
	var err error
	switch block.Type {
	case "PRIVATE KEY":
		key, err = x509.ParsePKCS8PrivateKey(block.Bytes)
	case "EC PRIVATE KEY":
		key, err = x509.ParseECPrivateKey(block.Bytes)
	default:
		return nil, fmt.Errorf("unsupported PEM block %q", block.Type)
	}
	if err != nil {
		return nil, err
	}
	signer, ok := key.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("key of type %T cannot sign", key)
	}
	return signer, nil
}

func publicKeysEqual(a, b crypto.PublicKey) bool {
	ak, ok := a.(interface{ Equal(crypto.PublicKey) bool })
	return ok && ak.Equal(b)
}
