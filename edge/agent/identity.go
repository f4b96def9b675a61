package agent

import (
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
	"os"
	"path/filepath"
	"sync"

	"github.com/outpost-mesh/outpost/internal/atomicfile"

	"github.com/outpost-mesh/outpost/sync/wire"
)

// Files of the node identity in the data dir.
const (
	nodeKeyFile  = "node.key"
	nodeCertFile = "node.crt"
	caCertFile   = "ca.crt"
)

// identity is the node's key and certificate in the data dir. Its methods
// are safe for concurrent use.
type identity struct {
	dir  string
	node string

	mu   sync.Mutex
	cert *tls.Certificate
	ca   *x509.CertPool
}

// loadIdentity reads the node's certificate, key and CA from dir; joined
// is false when the node has not joined yet.
func loadIdentity(dir, node string) (id *identity, joined bool, err error) {
	id = &identity{dir: dir, node: node}
	certPEM, err := os.ReadFile(filepath.Join(dir, nodeCertFile))
	if errors.Is(err, fs.ErrNotExist) {
		return id, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("read node certificate: %w", err)
	}
	keyPEM, err := os.ReadFile(filepath.Join(dir, nodeKeyFile))
	if err != nil {
		return nil, false, fmt.Errorf("read node key: %w", err)
	}
	caPEM, err := os.ReadFile(filepath.Join(dir, caCertFile))
	if err != nil {
		return nil, false, fmt.Errorf("read hub CA: %w", err)
	}
	if err := id.set(certPEM, keyPEM, caPEM); err != nil {
		return nil, false, err
	}
	return id, true, nil
}

func (id *identity) set(certPEM, keyPEM, caPEM []byte) error {
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return fmt.Errorf("node certificate: %w", err)
	}
	if cn := cert.Leaf.Subject.CommonName; cn != wire.NodeUserPrefix+id.node {
		return fmt.Errorf("node certificate is for %q, not %q: use the data dir of that node, or a new one", cn, wire.NodeUserPrefix+id.node)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return errors.New("hub CA file holds no certificate")
	}
	id.mu.Lock()
	id.cert, id.ca = &cert, pool
	id.mu.Unlock()
	return nil
}

// certificate returns the current certificate and key.
func (id *identity) certificate() (*tls.Certificate, error) {
	id.mu.Lock()
	defer id.mu.Unlock()
	if id.cert == nil {
		return nil, errors.New("node has not joined")
	}
	return id.cert, nil
}

func (id *identity) roots() *x509.CertPool {
	id.mu.Lock()
	defer id.mu.Unlock()
	return id.ca
}

// newCSR makes a new key and a certificate request for the node; commit
// stores the certificate the hub signed for it, with the key, and makes
// them current.
func (id *identity) newCSR() (csr []byte, commit func(certDER []byte, caDER []byte) error, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("generate node key: %w", err)
	}
	csr, err = x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{
		Subject: pkix.Name{CommonName: wire.NodeUserPrefix + id.node, Organization: []string{wire.NodesGroup}},
	}, key)
	if err != nil {
		return nil, nil, fmt.Errorf("create certificate request: %w", err)
	}
	commit = func(certDER, caDER []byte) error {
		keyDER, err := x509.MarshalECPrivateKey(key)
		if err != nil {
			return fmt.Errorf("encode node key: %w", err)
		}
		keyPEM := pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})
		certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: certDER})
		var caPEM []byte
		if caDER != nil {
			caPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})
		} else if caPEM, err = os.ReadFile(filepath.Join(id.dir, caCertFile)); err != nil {
			return fmt.Errorf("read hub CA: %w", err)
		}
		if _, err := tls.X509KeyPair(certPEM, keyPEM); err != nil {
			return fmt.Errorf("signed certificate: %w", err)
		}
		// The key goes first: a certificate without its key is useless,
		// a key without a certificate is only a restart of the join.
		if err := atomicfile.WriteFile(filepath.Join(id.dir, nodeKeyFile), keyPEM, 0o600); err != nil {
			return err
		}
		if caDER != nil {
			if err := atomicfile.WriteFile(filepath.Join(id.dir, caCertFile), caPEM, 0o644); err != nil {
				return err
			}
		}
		if err := atomicfile.WriteFile(filepath.Join(id.dir, nodeCertFile), certPEM, 0o644); err != nil {
			return err
		}
		return id.set(certPEM, keyPEM, caPEM)
	}
	return csr, commit, nil
}
