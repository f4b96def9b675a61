package wire

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"slices"
	"strings"
	"testing"
	"time"
)

func newCert(t *testing.T, cn string, isCA bool, usage x509.ExtKeyUsage, parent *x509.Certificate, parentKey *ecdsa.PrivateKey) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		BasicConstraintsValid: true, IsCA: isCA,
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
	}
	if !isCA {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{usage}
		tmpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1)}
	}
	if parent == nil {
		parent, parentKey = tmpl, key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
	if err != nil {
		t.Fatal(err)
	}
	c, _ := x509.ParseCertificate(der)
	return c, key
}

func TestVerifyPinned(t *testing.T) {
	ca, caKey := newCert(t, "ca", true, 0, nil, nil)
	other, otherKey := newCert(t, "other", true, 0, nil, nil)
	serving, _ := newCert(t, "hub", false, x509.ExtKeyUsageServerAuth, ca, caKey)
	client, _ := newCert(t, "admin", false, x509.ExtKeyUsageClientAuth, ca, caKey)
	foreign, _ := newCert(t, "hub", false, x509.ExtKeyUsageServerAuth, other, otherKey)
	raw := func(cs ...*x509.Certificate) [][]byte {
		var out [][]byte
		for _, c := range cs {
			out = append(out, c.Raw)
		}
		return out
	}
	pin := CAHash(ca)
	for _, tc := range []struct {
		name  string
		chain [][]byte
		pin   string
		host  string
		ok    bool
	}{
		{"leaf and CA", raw(serving, ca), pin, "127.0.0.1", true},
		{"upper-case hex", raw(serving, ca), "sha256:" + strings.ToUpper(pin[7:]), "127.0.0.1", true},
		{"other CA's pin", raw(serving, ca), CAHash(other), "127.0.0.1", false},
		{"CA not presented", raw(serving), pin, "127.0.0.1", false},
		{"foreign leaf beside the pinned CA", raw(foreign, ca), pin, "127.0.0.1", false},
		{"client certificate as leaf", raw(client, ca), pin, "127.0.0.1", false},
		{"pin of the leaf", raw(serving, ca), CAHash(serving), "127.0.0.1", false},
		{"wrong host", raw(serving, ca), pin, "10.0.0.1", false},
		{"no chain", nil, pin, "127.0.0.1", false},
		{"no prefix", raw(serving, ca), pin[7:], "127.0.0.1", false},
		{"short", raw(serving, ca), pin[:len(pin)-2], "127.0.0.1", false},
	} {
		got, err := VerifyPinned(tc.chain, tc.pin, tc.host)
		if tc.ok != (err == nil) || (tc.ok && !got.Equal(ca)) {
			t.Errorf("%s: VerifyPinned = %v, %v; want ok=%v", tc.name, got, err, tc.ok)
		}
	}
	if _, err := VerifyPinned(raw(serving, ca), CAHash(other), "127.0.0.1"); !errors.Is(err, ErrPinMismatch) {
		t.Errorf("mismatch error %v, want ErrPinMismatch", err)
	}
}

func TestCheckPin(t *testing.T) {
	good := "sha256:" + strings.Repeat("0a", 32)
	for _, tc := range []struct {
		pin string
		ok  bool
	}{
		{good, true},
		{strings.ToUpper(good[:7]) + good[7:], false}, // the prefix is lower-case, as kubeadm's
		{"sha256:" + strings.Repeat("0A", 32), true},
		{"nothash", false},
		{"", false},
		{good[7:], false},
		{good[:len(good)-1], false},
		{good + "0", false},
		{"sha256:" + strings.Repeat("zz", 32), false},
		{"sha1:" + strings.Repeat("0a", 20), false},
	} {
		err := CheckPin(tc.pin)
		if tc.ok != (err == nil) || (err != nil && !errors.Is(err, ErrPinMalformed)) {
			t.Errorf("CheckPin(%q) = %v, want ok=%v", tc.pin, err, tc.ok)
		}
	}
}

func TestCAHashPEM(t *testing.T) {
	ca, caKey := newCert(t, "ca", true, 0, nil, nil)
	leaf, _ := newCert(t, "leaf", false, x509.ExtKeyUsageServerAuth, ca, caKey)
	enc := func(typ string, der []byte) []byte { return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}) }
	key := enc("EC PRIVATE KEY", []byte("not read"))
	// A kubeconfig's CA data: here a leaf and a key before the CA.
	got, err := CAHashPEM(slices.Concat(enc("CERTIFICATE", leaf.Raw), key, enc("CERTIFICATE", ca.Raw)))
	if err != nil || got != CAHash(ca) {
		t.Errorf("CAHashPEM = %q, %v; want %q", got, err, CAHash(ca))
	}
	for name, data := range map[string][]byte{
		"empty":       nil,
		"no CA":       enc("CERTIFICATE", leaf.Raw),
		"not PEM":     []byte("certificate-authority-data"),
		"only a key":  key,
		"garbled DER": enc("CERTIFICATE", []byte{0x30, 0x03, 0x02, 0x01}),
	} {
		if _, err := CAHashPEM(data); err == nil {
			t.Errorf("CAHashPEM(%s) = nil error", name)
		} else if name != "garbled DER" && !errors.Is(err, ErrNoCA) {
			t.Errorf("CAHashPEM(%s) = %v, want ErrNoCA", name, err)
		}
	}
}
