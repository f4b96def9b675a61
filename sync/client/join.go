package client

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/outpost-mesh/outpost/sync/stream"
	"github.com/outpost-mesh/outpost/sync/wire"
)

// JoinConfig is what a node needs to join a hub.
type JoinConfig struct {
	HubAddr string // host:port of the hub's sync endpoint
	// ServerName is checked against the hub's certificate; "" means the
	// host of HubAddr.
	ServerName string
	Token      string // bootstrap token, id.secret
	CAHash     string // sha256:<hex> pin of the hub CA
	NodeName   string
	Site       string
	CSR        []byte // DER certificate request for the node's key
}

// Join admits the node: it verifies the hub by the pinned CA hash, presents
// the token and CSR, and returns the node's certificate and the hub CA's
// certificate, both DER. A refusal by the hub is a *wire.Error, such as
// CodeUnauthorized for a wrong, expired or deleted token, or
// CodeUnavailable, with a RetryAfter to wait before asking again, after
// too many failed joins from this address or with this token.
func Join(ctx context.Context, cfg JoinConfig) (cert, ca []byte, err error) {
	serverName := cfg.ServerName
	if serverName == "" {
		if serverName, _, err = net.SplitHostPort(cfg.HubAddr); err != nil {
			return nil, nil, fmt.Errorf("hub address %q: %w", cfg.HubAddr, err)
		}
	}
	var pinErr error
	tlsConf := &tls.Config{
		NextProtos: []string{wire.ALPN},
		MinVersion: tls.VersionTLS13,
		ServerName: serverName,
		// The hub is not known yet but by its CA's pin, checked here in
		// place of the usual verification.
		InsecureSkipVerify: true,
		VerifyPeerCertificate: func(raw [][]byte, _ [][]*x509.Certificate) error {
			_, pinErr = wire.VerifyPinned(raw, cfg.CAHash, serverName)
			return pinErr
		},
	}
	conn, err := quic.DialAddr(ctx, cfg.HubAddr, tlsConf, &quic.Config{HandshakeIdleTimeout: 10 * time.Second, MaxIdleTimeout: 15 * time.Second})
	if err != nil {
		if pinErr != nil {
			return nil, nil, fmt.Errorf("verify hub %s: %w", cfg.HubAddr, pinErr)
		}
		return nil, nil, fmt.Errorf("dial hub %s: %w", cfg.HubAddr, err)
	}
	defer conn.CloseWithError(0, "joined")
	qs, err := conn.OpenStreamSync(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("join stream: %w", err)
	}
	st := stream.NewLean(qs)
	defer st.CancelRead(0)
	stop := st.AbortWhenDone(ctx)
	defer stop()
	req := &wire.JoinRequest{
		CapabilityVersion: wire.CapabilityVersion,
		Token:             cfg.Token,
		NodeName:          cfg.NodeName,
		Site:              cfg.Site,
		CSR:               cfg.CSR,
	}
	if err := st.Write(req); err != nil {
		return nil, nil, fmt.Errorf("send join request: %w", err)
	}
	st.CloseWrite()
	m, err := st.Read()
	if err != nil {
		return nil, nil, fmt.Errorf("read join response: %w", err)
	}
	switch m := m.(type) {
	case *wire.JoinResponse:
		if len(m.Certificate) == 0 || len(m.CA) == 0 {
			return nil, nil, errors.New("join response without certificates")
		}
		return m.Certificate, m.CA, nil
	case *wire.Error:
		return nil, nil, m
	default:
		return nil, nil, fmt.Errorf("join: unexpected %v", m.Type())
	}
}
