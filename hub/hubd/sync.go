package hubd

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"sync"

	"github.com/outpost-mesh/outpost/firmware/artifacts"
	"github.com/outpost-mesh/outpost/firmware/transfer"
	"github.com/outpost-mesh/outpost/hub/auth"
	"github.com/outpost-mesh/outpost/hub/controllers/nodelifecycle"
	"github.com/outpost-mesh/outpost/hub/pki"
	"github.com/outpost-mesh/outpost/hub/store"
	"github.com/outpost-mesh/outpost/hub/usage"
	"github.com/outpost-mesh/outpost/sync/server"
	"github.com/outpost-mesh/outpost/sync/view"
)

// syncEndpoint is the hub's running sync endpoint.
type syncEndpoint struct {
	addr   string
	server *server.Server
	views  *view.Index
	stop   func()
}

// startSync starts the sync endpoint on h.cfg.SyncAddr: the views fed from
// the store, the QUIC server with the minter of the views' pod tokens and
// the artifact streams of firmware releases (from fw), and
// the renewer of the connected nodes' Leases. It returns once the views hold the store's state and the
// endpoint listens; stop ends it all and waits.
func (h *Hub) startSync(ctx context.Context, st store.Store, handler *apiHandler, certs *pki.PKI, sa *saTokens, nodeUsage *usage.Store, fw *artifacts.Store, log *slog.Logger) (*syncEndpoint, error) {
	keys, err := loadSyncKeys(filepath.Join(h.dataDir, syncKeysFile))
	if err != nil {
		return nil, err
	}
	api, err := inprocClient(handler, log)
	if err != nil {
		return nil, fmt.Errorf("in-process api client: %w", err)
	}
	joins, err := auth.NewJoinLimiter(h.cfg.JoinLimits)
	if err != nil {
		return nil, err
	}
	pcfg := nodelifecycle.DefaultPresenceConfig()
	pcfg.Client, pcfg.AsNode, pcfg.Logger = api, asNode, log.With("component", "node-lease")
	presence, err := nodelifecycle.NewPresence(pcfg)
	if err != nil {
		return nil, err
	}
	tcfg := transfer.DefaultConfig()
	tcfg.Releases, tcfg.Blobs = storeReleases{st}, storeBlobs{fw}
	tcfg.Logger = log.With("component", "firmware-transfer")
	artifactServer, err := transfer.NewServer(tcfg)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	glue := newSyncGlue(api, certs, h.cfg.NodeCertLifetime, joins, log.With("component", "sync"))
	idx := view.NewIndex(view.DefaultConfig())

	cfg := server.DefaultConfig()
	cfg.Certificate = certs.ServingChain()
	cfg.ClientCAs = certs.CAPool
	cfg.SessionTicketKeys = [][32]byte{keys.ticket}
	cfg.StatelessResetKey = &keys.reset
	cfg.Views, cfg.Objects = idx, syncObjects{st}
	cfg.Authority, cfg.Sink = glue, glue
	cfg.Presence = presence
	cfg.Usage = nodeUsage
	cfg.Tokens = syncTokens{issuer: sa.issuer, objs: storeTokenObjects{st}}
	cfg.MeshKeys = certs.MeshKey
	cfg.Artifacts = artifactServer
	cfg.Logger = log.With("component", "sync")
	srv, err := server.New(cfg)
	if err != nil {
		cancel()
		return nil, err
	}
	pc, err := net.ListenPacket("udp", h.cfg.SyncAddr)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("listen for sync on %s: %w", h.cfg.SyncAddr, err)
	}

	var wg sync.WaitGroup
	ready := make(chan struct{})
	wg.Go(func() { feedViews(ctx, st, idx, ready, log.With("component", "sync-feed")) })
	select {
	case <-ready:
	case <-ctx.Done():
		cancel()
		pc.Close()
		wg.Wait()
		return nil, ctx.Err()
	}
	wg.Go(func() { _ = presence.Run(ctx) }) // nil once ctx ends
	wg.Go(func() {
		if err := srv.Serve(ctx, pc); err != nil {
			log.Error("sync endpoint stopped", "err", err)
		}
	})
	return &syncEndpoint{
		addr:   pc.LocalAddr().String(),
		server: srv,
		views:  idx,
		stop:   func() { cancel(); wg.Wait() },
	}, nil
}
