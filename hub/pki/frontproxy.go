package pki

import (
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
)

// Files of the front proxy under Config.Dir, named as kubeadm names them.
const (
	FrontProxyCACertFile     = "front-proxy-ca.crt"
	FrontProxyCAKeyFile      = "front-proxy-ca.key"
	FrontProxyClientCertFile = "front-proxy-client.crt"
	FrontProxyClientKeyFile  = "front-proxy-client.key"
)

// FrontProxyClientName is the common name of the front-proxy client
// certificate, the one name extension API servers are told to allow
// (requestheader-allowed-names).
const FrontProxyClientName = "front-proxy-client"

// frontProxyCA is the CA of the front proxy, kept apart from the cluster
// CA as upstream's: a certificate it signs lets its holder assert any
// user in request headers, so no client certificate of the cluster may
// pass for one.
var frontProxyCA = caSpec{
	name:          "front-proxy CA",
	certFile:      FrontProxyCACertFile,
	keyFile:       FrontProxyCAKeyFile,
	subjectPrefix: "outpost-front-proxy-ca",
}

// FrontProxy is the hub's front-proxy key material: the certificate the
// aggregation layer presents to extension API servers, by which they
// trust the X-Remote-* headers it sends, and the CA they check it
// against. It is read-only once returned and safe to share.
type FrontProxy struct {
	// CACertPEM is the front-proxy CA's certificate, PEM: extension API
	// servers' requestheader-client-ca-file.
	CACertPEM []byte
	// Client is the front-proxy client certificate (CN
	// FrontProxyClientName) and its key.
	Client tls.Certificate
}

// EnsureFrontProxy loads the front proxy's CA and client certificate in
// cfg.Dir, creating what is missing and reissuing the client certificate
// on the terms of Ensure: the CA is created only when neither of its
// files exists.
func EnsureFrontProxy(cfg Config) (*FrontProxy, error) {
	now, err := prepare(cfg)
	if err != nil {
		return nil, err
	}
	ca, caKey, caPEM, err := ensureCA(cfg, now(), frontProxyCA)
	if err != nil {
		return nil, err
	}
	certPEM, keyPEM, err := ensureLeaf(cfg, now(), ca, caKey, leafSpec{
		name:     "front-proxy client",
		certFile: FrontProxyClientCertFile,
		keyFile:  FrontProxyClientKeyFile,
		subject:  pkix.Name{CommonName: FrontProxyClientName},
		usage:    x509.ExtKeyUsageClientAuth,
	})
	if err != nil {
		return nil, err
	}
	client, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("load front-proxy client certificate: %w", err)
	}
	return &FrontProxy{CACertPEM: caPEM, Client: client}, nil
}
