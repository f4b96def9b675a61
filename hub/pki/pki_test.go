package pki

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/tls"
	"crypto/x509"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

func testConfig(t *testing.T) Config {
	cfg := DefaultConfig(filepath.Join(t.TempDir(), "pki"))
	cfg.ServingNames = []string{"127.0.0.1", "localhost", "::1", "gateway-7", "hub.example.com", "10.1.2.3"}
	return cfg
}

func mustEnsure(t *testing.T, cfg Config) *PKI {
	t.Helper()
	p, err := Ensure(cfg)
	if err != nil {
		t.Fatalf("Ensure: %v", err)
	}
	return p
}

func readCert(t *testing.T, path string) *x509.Certificate {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	c, err := parseCert(data)
	if err != nil {
		t.Fatalf("parse %s: %v", path, err)
	}
	return c
}

func TestEnsureCreates(t *testing.T) {
	cfg := testConfig(t)
	p := mustEnsure(t, cfg)

	if !p.CA.IsCA {
		t.Errorf("CA certificate is not a CA")
	}
	if got := p.CA.NotAfter.Sub(p.CA.NotBefore); got < 10*365*24*time.Hour {
		t.Errorf("CA lifetime = %v, want at least 10 years", got)
	}
	if k, ok := p.CA.PublicKey.(*ecdsa.PublicKey); !ok || k.Curve != elliptic.P256() {
		t.Errorf("CA key is %T, want ECDSA P-256", p.CA.PublicKey)
	}

	serving := p.Serving.Leaf
	if serving == nil {
		var err error
		if serving, err = x509.ParseCertificate(p.Serving.Certificate[0]); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{"localhost", "gateway-7", "hub.example.com", "127.0.0.1", "::1", "10.1.2.3"} {
		if _, err := serving.Verify(x509.VerifyOptions{
			DNSName:   name,
			Roots:     p.CAPool,
			KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		}); err != nil {
			t.Errorf("serving certificate for %q: %v", name, err)
		}
	}
	if _, err := serving.Verify(x509.VerifyOptions{DNSName: "other.example.com", Roots: p.CAPool}); err == nil {
		t.Errorf("serving certificate verifies for a name it was not issued for")
	}

	admin, err := parseCert(p.AdminCertPEM)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Verify(x509.VerifyOptions{Roots: p.CAPool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("admin certificate does not chain to the CA for client auth: %v", err)
	}
	if admin.Subject.CommonName != AdminUser || !slices.Equal(admin.Subject.Organization, []string{AdminGroup}) {
		t.Errorf("admin subject = %v, want CN=%s O=%s", admin.Subject, AdminUser, AdminGroup)
	}
	if _, err := tls.X509KeyPair(p.AdminCertPEM, p.AdminKeyPEM); err != nil {
		t.Errorf("admin key pair: %v", err)
	}

	for file, mode := range map[string]os.FileMode{
		CACertFile: 0o644, CAKeyFile: 0o600,
		ServingCertFile: 0o644, ServingKeyFile: 0o600,
		AdminCertFile: 0o644, AdminKeyFile: 0o600,
	} {
		fi, err := os.Stat(filepath.Join(cfg.Dir, file))
		if err != nil {
			t.Errorf("%s: %v", file, err)
			continue
		}
		if fi.Mode().Perm() != mode {
			t.Errorf("%s mode = %v, want %v", file, fi.Mode().Perm(), mode)
		}
	}
	fi, err := os.Stat(cfg.Dir)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o700 {
		t.Errorf("pki directory mode = %v, want 0700", fi.Mode().Perm())
	}
}

func TestEnsureReuses(t *testing.T) {
	cfg := testConfig(t)
	first := mustEnsure(t, cfg)
	before := map[string][]byte{}
	for _, f := range []string{CACertFile, CAKeyFile, ServingCertFile, ServingKeyFile, AdminCertFile, AdminKeyFile} {
		data, err := os.ReadFile(filepath.Join(cfg.Dir, f))
		if err != nil {
			t.Fatal(err)
		}
		before[f] = data
	}

	// The same names in another order and case are the same SANs.
	cfg.ServingNames = []string{"HUB.example.com", "::1", "10.1.2.3", "gateway-7", "localhost", "127.0.0.1", "localhost"}
	second := mustEnsure(t, cfg)
	for f, data := range before {
		after, err := os.ReadFile(filepath.Join(cfg.Dir, f))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(data, after) {
			t.Errorf("%s changed on the second Ensure", f)
		}
	}
	if !bytes.Equal(first.Serving.Certificate[0], second.Serving.Certificate[0]) {
		t.Errorf("serving certificate reissued with unchanged names")
	}
}

func TestEnsureReissuesServingOnNewNames(t *testing.T) {
	cfg := testConfig(t)
	first := mustEnsure(t, cfg)
	cfg.ServingNames = append(cfg.ServingNames, "edge-hub.local")
	second := mustEnsure(t, cfg)

	if bytes.Equal(first.Serving.Certificate[0], second.Serving.Certificate[0]) {
		t.Fatalf("serving certificate not reissued after a SAN was added")
	}
	if !bytes.Equal(first.CACertPEM, second.CACertPEM) {
		t.Errorf("CA changed when only the serving names did")
	}
	if !bytes.Equal(first.AdminCertPEM, second.AdminCertPEM) {
		t.Errorf("admin certificate changed when only the serving names did")
	}
	leaf := readCert(t, filepath.Join(cfg.Dir, ServingCertFile))
	if !slices.Contains(leaf.DNSNames, "edge-hub.local") {
		t.Errorf("reissued serving certificate DNS names = %v, want edge-hub.local among them", leaf.DNSNames)
	}
}

func TestEnsureReissuesExpiring(t *testing.T) {
	cfg := testConfig(t)
	start := time.Now()
	cfg.Now = func() time.Time { return start }
	first := mustEnsure(t, cfg)

	cfg.Now = func() time.Time { return start.Add(300 * 24 * time.Hour) }
	second := mustEnsure(t, cfg)
	if bytes.Equal(first.AdminCertPEM, second.AdminCertPEM) {
		t.Errorf("admin certificate with 65 days left was not reissued")
	}
	if !bytes.Equal(first.CACertPEM, second.CACertPEM) {
		t.Errorf("CA was reissued")
	}
}

func TestEnsureReissuesMismatchedKey(t *testing.T) {
	cfg := testConfig(t)
	first := mustEnsure(t, cfg)
	// A crash between writing a new key and its certificate leaves this.
	_, keyPEM, err := newKey()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(cfg.Dir, AdminKeyFile), keyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	second := mustEnsure(t, cfg)
	if bytes.Equal(first.AdminCertPEM, second.AdminCertPEM) {
		t.Errorf("admin certificate not reissued for a mismatched key")
	}
	if _, err := tls.X509KeyPair(second.AdminCertPEM, second.AdminKeyPEM); err != nil {
		t.Errorf("reissued admin key pair: %v", err)
	}
}

func TestEnsureCAWithoutKey(t *testing.T) {
	cfg := testConfig(t)
	mustEnsure(t, cfg)
	if err := os.Remove(filepath.Join(cfg.Dir, CAKeyFile)); err != nil {
		t.Fatal(err)
	}
	if _, err := Ensure(cfg); err == nil {
		t.Fatalf("Ensure with the CA key missing = nil error, want one")
	}
}

func TestEnsureCAKeyWithoutCert(t *testing.T) {
	cfg := testConfig(t)
	first := mustEnsure(t, cfg)
	// The CA key is written first; a crash before its certificate leaves a
	// key nothing was signed with, and the next start begins again.
	if err := os.Remove(filepath.Join(cfg.Dir, CACertFile)); err != nil {
		t.Fatal(err)
	}
	second := mustEnsure(t, cfg)
	if bytes.Equal(first.CACertPEM, second.CACertPEM) {
		t.Fatalf("CA not recreated")
	}
	admin, err := parseCert(second.AdminCertPEM)
	if err != nil {
		t.Fatal(err)
	}
	if err := admin.CheckSignatureFrom(second.CA); err != nil {
		t.Errorf("admin certificate not reissued under the new CA: %v", err)
	}
}

func TestConfigValidate(t *testing.T) {
	good := DefaultConfig("/tmp/x")
	for _, tc := range []struct {
		name   string
		mutate func(*Config)
		ok     bool
	}{
		{"default", func(*Config) {}, true},
		{"wildcard", func(c *Config) { c.ServingNames = []string{"*.example.com"} }, true},
		{"no dir", func(c *Config) { c.Dir = "" }, false},
		{"no names", func(c *Config) { c.ServingNames = nil }, false},
		{"bad name", func(c *Config) { c.ServingNames = []string{"bad name"} }, false},
		{"url", func(c *Config) { c.ServingNames = []string{"https://x"} }, false},
		{"no logger", func(c *Config) { c.Logger = nil }, false},
	} {
		c := good
		tc.mutate(&c)
		if err := c.Validate(); (err == nil) != tc.ok {
			t.Errorf("%s: Validate() = %v, want ok=%v", tc.name, err, tc.ok)
		}
	}
}

func TestKubeconfig(t *testing.T) {
	cfg := testConfig(t)
	p := mustEnsure(t, cfg)
	path := filepath.Join(t.TempDir(), "admin.kubeconfig")
	if err := WriteKubeconfig(path, p.AdminKubeconfig("https://127.0.0.1:6443")); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("kubeconfig mode = %v, want 0600", fi.Mode().Perm())
	}
	k, err := ReadKubeconfig(path)
	if err != nil {
		t.Fatal(err)
	}
	if k.APIVersion != "v1" || k.CurrentContext != ClusterName {
		t.Errorf("apiVersion %q current-context %q, want v1 and %q", k.APIVersion, k.CurrentContext, ClusterName)
	}
	cluster, user, err := k.Context(ClusterName)
	if err != nil {
		t.Fatal(err)
	}
	if cluster.Server != "https://127.0.0.1:6443" {
		t.Errorf("server = %q", cluster.Server)
	}
	if !bytes.Equal(cluster.CertificateAuthorityData, p.CACertPEM) {
		t.Errorf("certificate-authority-data is not the CA")
	}
	if !bytes.Equal(user.ClientCertificateData, p.AdminCertPEM) || !bytes.Equal(user.ClientKeyData, p.AdminKeyPEM) {
		t.Errorf("user credentials are not the admin certificate and key")
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"certificate-authority-data:", "client-certificate-data:", "client-key-data:", "current-context: outpost", "kind: Config"} {
		if !bytes.Contains(raw, []byte(want)) {
			t.Errorf("kubeconfig lacks %q:\n%s", want, raw)
		}
	}
}
