package imageshare

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"strings"
)

// nodePrefix is the common name prefix of a node certificate of the hub
// CA: "system:node:" + the node's name (wire.NodeUserPrefix).
const nodePrefix = "system:node:"

// Identity is the node's own certificate and the hub CA, as the agent
// holds them; both functions are called at each handshake, so that a
// renewed certificate is used at once. They must be safe for concurrent
// use.
type Identity struct {
	// Certificate returns the node's certificate, signed by the hub CA,
	// common name "system:node:" + its name, and its key; non-nil.
	Certificate func() (*tls.Certificate, error)
	// Roots returns the hub CA; non-nil.
	Roots func() *x509.CertPool
}

// verifyNode checks that chain (leaf first, as the peer sent it) is a
// node certificate of the hub CA and returns the node's name. Node
// certificates carry the client-auth key usage only, and no IP SANs, so
// both ends check them this way rather than by TLS's hostname
// verification: the chain to the CA with ExtKeyUsageClientAuth, and the
// name from the common name.
func verifyNode(roots *x509.CertPool, chain []*x509.Certificate) (string, error) {
	if len(chain) == 0 {
		return "", errors.New("no certificate")
	}
	if roots == nil {
		return "", errors.New("no hub CA")
	}
	inter := x509.NewCertPool()
	for _, c := range chain[1:] {
		inter.AddCert(c)
	}
	if _, err := chain[0].Verify(x509.VerifyOptions{
		Roots: roots, Intermediates: inter,
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}); err != nil {
		return "", fmt.Errorf("not a node certificate of the hub CA: %w", err)
	}
	name, ok := strings.CutPrefix(chain[0].Subject.CommonName, nodePrefix)
	if !ok || name == "" {
		return "", fmt.Errorf("certificate of %q is not a node's", chain[0].Subject.CommonName)
	}
	return name, nil
}

// serverTLS is the Server's TLS configuration: the node's certificate,
// and a client certificate required of a node for which allowed is true.
func serverTLS(id Identity, allowed func(node string) bool) *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS13,
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			return id.Certificate()
		},
		// Verified below, against the CA as it is now.
		ClientAuth: tls.RequireAnyClientCert,
		VerifyConnection: func(cs tls.ConnectionState) error {
			name, err := verifyNode(id.Roots(), cs.PeerCertificates)
			if err != nil {
				return err
			}
			if !allowed(name) {
				return fmt.Errorf("node %s is not a site peer", name)
			}
			return nil
		},
	}
}

// clientTLS is the TLS configuration of a connection to peer's Server:
// the node's certificate, and the server's checked to be peer's.
func clientTLS(id Identity, peer string) *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS13,
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			return id.Certificate()
		},
		// The default verification wants a server-auth key usage and a
		// name for the address: VerifyConnection checks the node instead.
		InsecureSkipVerify: true,
		VerifyConnection: func(cs tls.ConnectionState) error {
			name, err := verifyNode(id.Roots(), cs.PeerCertificates)
			if err != nil {
				return err
			}
			if name != peer {
				return fmt.Errorf("peer answered as node %s, not %s", name, peer)
			}
			return nil
		},
	}
}
