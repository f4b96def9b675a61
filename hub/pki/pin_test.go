package pki

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"net"
	"testing"
	"time"

	"github.com/outpost-mesh/outpost/sync/wire"
)

func TestCAHash(t *testing.T) {
	cfg := testConfig(t)
	p := mustEnsure(t, cfg)
	sum := sha256.Sum256(p.CA.RawSubjectPublicKeyInfo)
	want := "sha256:" + hex.EncodeToString(sum[:])
	if got := CAHash(p.CA); got != want {
		t.Errorf("CAHash = %q, want %q", got, want)
	}
	if again := mustEnsure(t, cfg); CAHash(again.CA) != want {
		t.Errorf("CAHash changed across loads of one CA")
	}
	if other := mustEnsure(t, testConfig(t)); CAHash(other.CA) == want {
		t.Errorf("two CAs share a hash")
	}
}

func leafOf(t *testing.T, c tls.Certificate) *x509.Certificate {
	t.Helper()
	leaf, err := x509.ParseCertificate(c.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	return leaf
}

// TestVerifyCAHashHandshake dials a TLS server with the PKI's serving chain
// the way a joining node does: trusting nothing but the pin.
func TestVerifyCAHashHandshake(t *testing.T) {
	p := mustEnsure(t, testConfig(t))
	other := mustEnsure(t, testConfig(t))
	for _, tc := range []struct {
		name   string
		server tls.Certificate
		hash   string
		ok     bool
	}{
		{"pinned", p.ServingChain(), CAHash(p.CA), true},
		{"without the CA in the chain", p.Serving, CAHash(p.CA), false},
		{"other hub", other.ServingChain(), CAHash(p.CA), false},
	} {
		var pinned *x509.Certificate
		client := &tls.Config{
			InsecureSkipVerify: true,
			MinVersion:         tls.VersionTLS13,
			VerifyPeerCertificate: func(raw [][]byte, _ [][]*x509.Certificate) error {
				var err error
				pinned, err = wire.VerifyPinned(raw, tc.hash, "127.0.0.1")
				return err
			},
		}
		err := handshake(t, &tls.Config{Certificates: []tls.Certificate{tc.server}}, client)
		if tc.ok && (err != nil || pinned == nil || !pinned.Equal(p.CA)) {
			t.Errorf("%s: handshake: %v, pinned %v", tc.name, err, pinned)
		}
		if !tc.ok && err == nil {
			t.Errorf("%s: handshake succeeded", tc.name)
		}
	}
}

// handshake runs a TLS handshake between server and client over loopback
// TCP (a net.Pipe, unbuffered, deadlocks when both ends write an alert)
// and returns the client's error.
func handshake(t *testing.T, server, client *tls.Config) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	done := make(chan struct{})
	go func() {
		defer close(done)
		c, err := ln.Accept()
		if err != nil {
			return
		}
		s := tls.Server(c, server)
		s.HandshakeContext(ctx)
		s.Close()
	}()
	var d net.Dialer
	cc, err := d.DialContext(ctx, "tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	c := tls.Client(cc, client)
	err = c.HandshakeContext(ctx)
	c.Close()
	<-done
	return err
}
