package pki

import (
	"bytes"
	"crypto/x509"
	"testing"
)

// TestEnsureFrontProxy: the front-proxy client certificate is a client
// certificate named front-proxy-client, signed by a CA of its own, not
// the cluster CA; a second Ensure keeps both.
func TestEnsureFrontProxy(t *testing.T) {
	cfg := DefaultConfig(t.TempDir())
	p, err := Ensure(cfg)
	if err != nil {
		t.Fatal(err)
	}
	fp, err := EnsureFrontProxy(cfg)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(fp.Client.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	if leaf.Subject.CommonName != FrontProxyClientName {
		t.Errorf("client CN = %q, want %q", leaf.Subject.CommonName, FrontProxyClientName)
	}
	front := x509.NewCertPool()
	front.AppendCertsFromPEM(fp.CACertPEM)
	client := x509.VerifyOptions{KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	client.Roots = front
	if _, err := leaf.Verify(client); err != nil {
		t.Errorf("front-proxy client not verified by the front-proxy CA: %v", err)
	}
	client.Roots = p.CAPool
	if _, err := leaf.Verify(client); err == nil {
		t.Error("front-proxy client verified by the cluster CA; want a CA of its own")
	}
	if bytes.Equal(fp.CACertPEM, p.CACertPEM) {
		t.Error("front-proxy CA is the cluster CA")
	}

	again, err := EnsureFrontProxy(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(again.CACertPEM, fp.CACertPEM) || !bytes.Equal(again.Client.Certificate[0], fp.Client.Certificate[0]) {
		t.Error("second EnsureFrontProxy reissued; want the files kept")
	}
}
