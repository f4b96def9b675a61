// Package hubd is the hub's composition root: it ensures the PKI, opens the
// store and serves the API, and stops them in order. Only cmd, bench and
// tests import it; every other hub package is wired here and knows nothing of
// the others' construction.
package hubd

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/outpost-mesh/outpost/firmware/artifacts"
	"github.com/outpost-mesh/outpost/hub/auth"
	"github.com/outpost-mesh/outpost/hub/controllers/csrsigning"
	"github.com/outpost-mesh/outpost/hub/controllers/nodeipam"
	"github.com/outpost-mesh/outpost/hub/controllers/nodelifecycle"
	"github.com/outpost-mesh/outpost/hub/metrics"
	"github.com/outpost-mesh/outpost/hub/pki"
	"github.com/outpost-mesh/outpost/hub/registry/core"
	"github.com/outpost-mesh/outpost/hub/store"
	"github.com/outpost-mesh/outpost/hub/store/badgerstore"
	"github.com/outpost-mesh/outpost/hub/store/etcdstore"
	"github.com/outpost-mesh/outpost/hub/streams"
	"github.com/outpost-mesh/outpost/hub/usage"
)

// StoreKind selects the storage backend.
type StoreKind string

const (
	// StoreBadger is the embedded store in DataDir/store.
	StoreBadger StoreKind = "badger"
	// StoreEtcd keeps the hub's state in an etcd cluster, for several hub
	// replicas.
	StoreEtcd StoreKind = "etcd"
)

// Paths under Config.DataDir.
const (
	PKIDir         = "pki"
	StoreDir       = "store"
	KubeconfigFile = "admin.kubeconfig"
)

// Config configures a hub.
type Config struct {
	// DataDir holds the PKI, the admin kubeconfig and the badger store;
	// created with mode 0700 when missing. Required.
	DataDir string
	// APIAddr is the host:port the API server listens on; port 0 picks a
	// free one (see Hub.Addr).
	APIAddr string
	// Store selects the backend.
	Store StoreKind
	// EtcdEndpoints are the etcd client URLs; required with StoreEtcd.
	EtcdEndpoints []string
	// TLSSANs are extra DNS names and IP addresses for the serving
	// certificate, beyond loopback, the host name and APIAddr's host.
	TLSSANs []string
	// SyncAddr is the host:port (UDP) of the QUIC endpoint edge nodes
	// join and sync through; "" runs no sync endpoint, port 0 picks a free
	// one (see Hub.SyncAddr).
	SyncAddr string
	// NodeCertLifetime is the life of the node certificates the hub signs;
	// nodes renew them once two thirds have passed.
	NodeCertLifetime time.Duration
	// IdleMemoryReturn is how long the API must have served nothing new,
	// after a spell of work, before the hub gives the memory that work
	// left behind back to the operating system (see idleReturn); 0 never
	// does.
	IdleMemoryReturn time.Duration
	// EventTTL is how long an event is kept after its last write, as
	// kube-apiserver's --event-ttl.
	EventTTL time.Duration
	// JoinLimits budget the failed joins of each source address and of
	// each bootstrap token id: auth.DefaultJoinLimitConfig.
	JoinLimits auth.JoinLimitConfig
	// Controllers runs the controllers and the scheduler in the hub,
	// while it holds the leader Lease (see hub/controllers/manager).
	Controllers bool
	// NodeMonitorGracePeriod is how long a node's Lease may go unrenewed
	// before the node is marked Ready=Unknown and tainted unreachable,
	// as kube-controller-manager's --node-monitor-grace-period. Its pods
	// are not evicted unless the Node asks for it (the annotation
	// outpost.dev/offline-tolerance). It must exceed the 10 s in which the
	// hub renews a connected node's Lease.
	NodeMonitorGracePeriod time.Duration
	// Services are the ranges of cluster IPs and node ports
	// (--service-cidr, --service-node-port-range).
	Services core.ServiceConfig
	// AllocateNodeCIDRs gives each Node without one a pod CIDR, a block
	// of ClusterCIDR with prefix length NodeCIDRMaskSize, as
	// kube-controller-manager's --allocate-node-cidrs (see
	// hub/controllers/nodeipam). It takes effect with Controllers; without
	// it the other two are unused and unchecked.
	AllocateNodeCIDRs bool
	// ClusterCIDR is the range of the pods' addresses, as
	// kube-controller-manager's --cluster-cidr. It may not overlap
	// Services.CIDR.
	ClusterCIDR netip.Prefix
	// NodeCIDRMaskSize is the prefix length of each node's pod CIDR, as
	// kube-controller-manager's --node-cidr-mask-size: longer than
	// ClusterCIDR's, by at most 16, and at most /30 (IPv4).
	NodeCIDRMaskSize int
	// Streams limits the streams of kubectl logs, exec, attach and
	// port-forward (see streams.Config): MaxPerNode (32) tunnels open at
	// once to one node and IdleTimeout (4h) without a byte; its Tunnels,
	// when set, replaces the sync endpoint's, for tests and simulations
	// that play the nodes (a fake node side).
	Streams streams.Config
	// MaxArtifactBytes is the largest firmware artifact the hub takes at
	// ArtifactsPath.
	MaxArtifactBytes int64
	// Logger receives the hub's logs; non-nil.
	Logger *slog.Logger
}

// DefaultConfig returns the defaults for a hub keeping its state in dataDir.
func DefaultConfig(dataDir string) Config {
	return Config{
		DataDir: dataDir,
		APIAddr: "127.0.0.1:6443",              // loopback, the Kubernetes API port
		Store:   StoreBadger,                   // embedded, nothing else to run
		Logger:  slog.New(slog.DiscardHandler), // silent
		// No sync endpoint unless asked: `outpost hub` asks for
		// 127.0.0.1:7443.
		NodeCertLifetime:       365 * 24 * time.Hour, // a year, as kubelet's
		EventTTL:               time.Hour,            // kube-apiserver's default
		IdleMemoryReturn:       10 * time.Second,     // a pause, not a lull between a controller's requests
		JoinLimits:             auth.DefaultJoinLimitConfig(),
		Controllers:            true,                                  // as kube-controller-manager and kube-scheduler beside the API
		NodeMonitorGracePeriod: 40 * time.Second,                      // upstream's default
		Services:               core.DefaultServiceConfig(),           // 10.43.0.0/16 and 30000-32767, as K3s
		AllocateNodeCIDRs:      true,                                  // as K3s: the hub cuts the pod network per node
		ClusterCIDR:            nodeipam.DefaultConfig().ClusterCIDR,  // 10.42.0.0/16, K3s's, beside its services'
		NodeCIDRMaskSize:       nodeipam.DefaultConfig().NodeMaskSize, // 24: 256 nodes of 254 pods, upstream's
		Streams:                streams.DefaultConfig(),               // 32 streams a node, cut after 4h idle, as kubelet
		MaxArtifactBytes:       DefaultMaxArtifactBytes,               // 1 GiB: an agent or a device image, with room
	}
}

// Validate reports the first problem with c.
func (c Config) Validate() error {
	if c.DataDir == "" {
		return errors.New("data directory is empty: set --data-dir")
	}
	if _, port, err := net.SplitHostPort(c.APIAddr); err != nil || port == "" {
		return fmt.Errorf("api address %q: want host:port, such as 127.0.0.1:6443", c.APIAddr)
	}
	switch c.Store {
	case StoreBadger:
		if len(c.EtcdEndpoints) > 0 {
			return errors.New("etcd endpoints given with the badger store: also set the store to etcd")
		}
	case StoreEtcd:
		if len(c.EtcdEndpoints) == 0 {
			return errors.New("the etcd store needs at least one etcd endpoint: set --etcd-endpoints")
		}
		ec := etcdstore.DefaultConfig()
		ec.Endpoints = c.EtcdEndpoints
		if err := ec.Validate(); err != nil {
			return err
		}
	default:
		return fmt.Errorf("unknown store %q: use %q or %q", c.Store, StoreBadger, StoreEtcd)
	}
	for _, san := range c.TLSSANs {
		if err := pki.CheckName(san); err != nil {
			return fmt.Errorf("tls san: %w", err)
		}
	}
	if c.SyncAddr != "" {
		if _, port, err := net.SplitHostPort(c.SyncAddr); err != nil || port == "" {
			return fmt.Errorf("sync address %q: want host:port, such as 127.0.0.1:7443", c.SyncAddr)
		}
	}
	if err := c.JoinLimits.Validate(); err != nil {
		return err
	}
	if err := c.Services.Validate(); err != nil {
		return err
	}
	if c.AllocateNodeCIDRs {
		if err := c.nodeIPAM().Validate(); err != nil {
			return fmt.Errorf("pod CIDRs: %w", err)
		}
		if c.ClusterCIDR.Overlaps(c.Services.CIDR) {
			return fmt.Errorf("cluster CIDR %v overlaps service CIDR %v: pods and services need ranges of their own", c.ClusterCIDR, c.Services.CIDR)
		}
	}
	if c.IdleMemoryReturn < 0 {
		return fmt.Errorf("idle memory return %v is negative", c.IdleMemoryReturn)
	}
	if c.EventTTL <= 0 {
		return fmt.Errorf("event TTL %v is not positive", c.EventTTL)
	}
	if c.NodeMonitorGracePeriod <= nodelifecycle.DefaultPresenceConfig().RenewInterval {
		return fmt.Errorf("node monitor grace period %v must exceed the %v in which node leases are renewed", c.NodeMonitorGracePeriod, nodelifecycle.DefaultPresenceConfig().RenewInterval)
	}
	if c.NodeCertLifetime < time.Hour {
		return fmt.Errorf("node certificate lifetime %v is under an hour", c.NodeCertLifetime)
	}
	if c.MaxArtifactBytes <= 0 {
		return fmt.Errorf("max artifact bytes %d is not positive", c.MaxArtifactBytes)
	}
	if c.Logger == nil {
		return errors.New("logger is nil")
	}
	return nil
}

// nodeIPAM returns the configuration of the node IPAM controller.
func (c Config) nodeIPAM() nodeipam.Config {
	ipam := nodeipam.DefaultConfig()
	ipam.ClusterCIDR, ipam.NodeMaskSize = c.ClusterCIDR, c.NodeCIDRMaskSize
	return ipam
}

// Hub is one hub process: API server, store and PKI.
type Hub struct {
	cfg        Config
	dataDir    string // absolute
	kubeconfig string // absolute

	started  atomic.Bool
	ready    chan struct{}
	addr     atomic.Pointer[string]
	syncAddr atomic.Pointer[string]
}

// New checks cfg and returns a hub; it starts nothing.
func New(cfg Config) (*Hub, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("hub config: %w", err)
	}
	dir, err := filepath.Abs(cfg.DataDir)
	if err != nil {
		return nil, fmt.Errorf("hub config: data directory: %w", err)
	}
	return &Hub{
		cfg:        cfg,
		dataDir:    dir,
		kubeconfig: filepath.Join(dir, KubeconfigFile),
		ready:      make(chan struct{}),
	}, nil
}

// Ready is closed once the API server accepts connections and the admin
// kubeconfig is written. It stays open if Run fails before that.
func (h *Hub) Ready() <-chan struct{} { return h.ready }

// Addr returns the host:port the API server listens on, once Ready is
// closed; "" before.
func (h *Hub) Addr() string {
	if p := h.addr.Load(); p != nil {
		return *p
	}
	return ""
}

// SyncAddr returns the host:port of the sync endpoint once Ready is
// closed; "" before, and when there is none.
func (h *Hub) SyncAddr() string {
	if p := h.syncAddr.Load(); p != nil {
		return *p
	}
	return ""
}

// KubeconfigPath returns the absolute path of the admin kubeconfig.
func (h *Hub) KubeconfigPath() string { return h.kubeconfig }

// Run ensures the PKI, opens the store and serves the API until ctx ends,
// then shuts the server down, closes the store and returns nil once all it
// started has exited. It returns an error if any part fails to start or
// stops on its own. Run may be called once.
func (h *Hub) Run(ctx context.Context) (err error) {
	if !h.started.CompareAndSwap(false, true) {
		return errors.New("hub: Run called twice")
	}
	log := h.cfg.Logger
	if err := os.MkdirAll(h.dataDir, 0o700); err != nil {
		return fmt.Errorf("create data directory: %w", err)
	}

	pkiCfg := pki.DefaultConfig(filepath.Join(h.dataDir, PKIDir))
	pkiCfg.ServingNames = servingNames(h.cfg.APIAddr, h.cfg.TLSSANs, log)
	pkiCfg.Logger = log
	certs, err := pki.Ensure(pkiCfg)
	if err != nil {
		return fmt.Errorf("ensure pki: %w", err)
	}
	frontProxy, err := pki.EnsureFrontProxy(pkiCfg)
	if err != nil {
		return fmt.Errorf("ensure pki: %w", err)
	}

	st, err := h.openStore(ctx)
	if err != nil {
		return err
	}
	release := releaseMemory(st) // the store itself, not its instrumented wrapper
	mets := metrics.New()
	st = mets.InstrumentStore(st)
	defer func() {
		if cerr := st.Close(); cerr != nil {
			err = errors.Join(err, fmt.Errorf("close store: %w", cerr))
		}
	}()

	tokens, err := newSATokens(DefaultSATokenConfig(filepath.Join(h.dataDir, PKIDir)), st)
	if err != nil {
		return err
	}
	tunnels := &lateTunnels{}
	podStreams, err := h.newStreams(tunnels, log)
	if err != nil {
		return err
	}
	// The nodes' usage, reported over sync, served as metrics.k8s.io, and
	// their relays' counters as the hub's metrics.
	nodeUsage, err := usage.New(usage.DefaultConfig())
	if err != nil {
		return err
	}
	if err := mets.Register(nodeUsage.RelayCollector()); err != nil {
		return err
	}
	hooks := newPolicyHooks(&lateAuth{tokens: tokens.authn}, serviceDialer{st: st, pods: podStreams}, log)
	defer hooks.webhooks.Close()
	api, spec, err := newAPI(st, h.cfg.Services, tokens, podStreams, nodeUsage, hooks, log)
	if err != nil {
		return err
	}
	hooks.objects.api.Store(api)
	// Before anything is served: a crash may have left reservations
	// without their objects, or objects without their reservations. Only
	// the embedded store is this hub's alone, so only there are
	// reservations without objects surely leaks rather than another
	// hub's creates in flight.
	if err := api.RepairAllocations(ctx, h.cfg.Store == StoreBadger); err != nil {
		return err
	}
	if err := ensureNamespaces(ctx, api); err != nil {
		return err
	}
	if err := ensureSystemPriorityClasses(ctx, api); err != nil {
		return err
	}
	if err := ensureFlowControlDefaults(ctx, api); err != nil {
		return err
	}
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", h.cfg.APIAddr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", h.cfg.APIAddr, err)
	}
	defer ln.Close() // Serve owns it once started; closing twice is harmless
	addr := ln.Addr().String()
	if err := ensureKubernetesService(ctx, api, h.cfg.Services.KubernetesIP(), int32(ln.Addr().(*net.TCPAddr).Port)); err != nil {
		return err
	}
	if ip := h.cfg.Services.DNSIP(); !ip.IsValid() {
		log.Warn("the service CIDR is too small for a cluster DNS address: pods resolve through their nodes' resolvers", "service_cidr", h.cfg.Services.CIDR)
	} else if err := ensureDNSService(ctx, api, ip); err != nil {
		// A Service of the user's holding the address must not keep
		// the hub from starting.
		log.Warn("cluster DNS service not created: pods resolve through their nodes' resolvers", "address", ip, "err", err)
	}
	server := "https://" + clientAddr(h.cfg.APIAddr, ln.Addr())
	if err := pki.WriteKubeconfig(h.kubeconfig, certs.AdminKubeconfig(server)); err != nil {
		return err
	}
	handler := newAPIHandler(st, certs.CAPool, log, mets.Middleware(api), spec, mets.Handler())
	handler.tokens = tokens.authn
	fwStore, err := artifacts.Open(filepath.Join(h.dataDir, FirmwareArtifactsDir))
	if err != nil {
		return err
	}
	handler.mux.Handle(artifactsMount, &artifactHandler{store: fwStore, maxBytes: h.cfg.MaxArtifactBytes, log: log.With("component", "firmware-artifacts")})

	// The parts that run until the hub stops. They stop in the reverse
	// of the order they depend on one another: the controllers first
	// (they act through the API), then the sync endpoint (its sessions
	// write through the API), then the API server, then the store's
	// upkeep; the store closes last. The first part to fail stops them
	// all, in the same order.
	var parts parts
	defer parts.stop()
	authorizing, err := startRBAC(ctx, &parts, handler, st, hooks, log)
	if err != nil {
		return err
	}
	customizing, err := startCustomResources(ctx, &parts, handler, api, spec, serviceDialer{st: st, pods: podStreams}, log)
	if err != nil {
		return err
	}
	if err := installFirmwareCRDs(ctx, handler, log); err != nil {
		return err
	}
	aggregating, err := startAggregator(ctx, &parts, handler, api, serviceDialer{st: st, pods: podStreams},
		frontProxyTrust{clusterCA: certs.CACertPEM, front: frontProxy}, log)
	if err != nil {
		return err
	}
	upkeep := parts.start("store upkeep", context.WithoutCancel(ctx), func(ctx context.Context) error {
		var wg sync.WaitGroup
		wg.Go(func() { compactLoop(ctx, st, compactInterval, log) })
		expiry := &eventExpiry{st: st, ttl: h.cfg.EventTTL, log: log}
		wg.Go(func() { expiry.run(ctx, min(eventSweepEvery, h.cfg.EventTTL), time.Now) })
		if h.cfg.IdleMemoryReturn > 0 {
			wg.Go(func() { idleReturn(ctx, handler.served.Load, h.cfg.IdleMemoryReturn, release) })
		}
		wg.Wait()
		return nil
	})

	srv := &http.Server{
		Handler: handler,
		TLSConfig: &tls.Config{
			Certificates: []tls.Certificate{certs.Serving},
			// Ask for a client certificate but verify it in the handler,
			// so that a foreign one is answered 401 with a Status, as
			// Kubernetes does, not a failed handshake, and a request
			// without one is anonymous.
			ClientAuth: tls.RequestClientCert,
			MinVersion: tls.VersionTLS12,
		},
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       90 * time.Second,
		// Failed handshakes and the like are the client's problem.
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelDebug),
	}
	serving := parts.start("api server", context.WithoutCancel(ctx), func(ctx context.Context) error {
		served := make(chan error, 1)
		go func() { served <- srv.ServeTLS(ln, "", "") }()
		select {
		case err := <-served:
			return fmt.Errorf("serve api: %w", err)
		case <-ctx.Done():
		}
		shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		api.Shutdown()     // end watches, or Shutdown would wait for them
		podStreams.Close() // and streams of pods
		if err := srv.Shutdown(shutdownCtx); err != nil {
			log.Warn("api server did not drain in time; closing connections", "err", err)
			srv.Close()
		}
		if err := <-served; err != nil && !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("serve api: %w", err)
		}
		log.Info("api server stopped")
		return nil
	})

	if ip, ok := advertiseAddr(h.cfg.APIAddr, net.InterfaceAddrs); ok {
		port := int32(ln.Addr().(*net.TCPAddr).Port)
		parts.start("api endpoints", context.WithoutCancel(ctx), func(ctx context.Context) error {
			return keepAPIEndpoints(ctx, handler, ip, port, log)
		})
	} else {
		log.Info("no address but loopback to advertise: the kubernetes service has no endpoints", "api", h.cfg.APIAddr)
	}

	syncAddr := ""
	var syncing *part
	if h.cfg.SyncAddr != "" {
		ep, err := h.startSync(ctx, st, handler, certs, tokens, nodeUsage, fwStore, log) // the views' pods get the API's tokens
		if err != nil {
			return fmt.Errorf("start sync endpoint: %w", err)
		}
		syncAddr = ep.addr
		tunnels.set(ep.server)
		h.syncAddr.Store(&syncAddr)
		syncing = parts.start("sync endpoint", context.WithoutCancel(ctx), func(ctx context.Context) error {
			<-ctx.Done()
			ep.stop()
			return nil
		})
	}

	var controlling *part
	if h.cfg.Controllers {
		signer, err := csrsigning.NewCASigner(certs.CA, certs.CAKey, nil)
		if err != nil {
			return err
		}
		mgr, err := newControllerManager(handler, h.cfg, certs.CACertPEM, signer, fwStore, log)
		if err != nil {
			return err
		}
		controlling = parts.start("controllers", context.WithoutCancel(ctx), mgr.Run)
	}
	parts.order(controlling, syncing, aggregating, customizing, authorizing, serving, upkeep)

	h.addr.Store(&addr)
	close(h.ready)
	log.Info("hub ready", "api", server, "addr", addr, "sync", syncAddr, "kubeconfig", h.kubeconfig,
		"store", h.cfg.Store, "controllers", h.cfg.Controllers)

	select {
	case <-parts.failed:
	case <-ctx.Done():
	}
	log.Info("hub stopping")
	parts.stop()
	if err := parts.err(); err != nil {
		return err
	}
	log.Info("hub stopped; closing the store")
	return nil
}

// openStore opens the configured backend. The caller closes it.
func (h *Hub) openStore(ctx context.Context) (store.Store, error) {
	switch h.cfg.Store {
	case StoreEtcd:
		cfg := etcdstore.DefaultConfig()
		cfg.Endpoints = h.cfg.EtcdEndpoints
		cfg.Logger = h.cfg.Logger
		st, err := etcdstore.New(ctx, cfg)
		if err != nil {
			return nil, fmt.Errorf("open etcd store: %w", err)
		}
		return st, nil
	default:
		cfg := badgerstore.DefaultConfig(filepath.Join(h.dataDir, StoreDir))
		cfg.Logger = h.cfg.Logger
		st, err := badgerstore.Open(cfg)
		if err != nil {
			return nil, fmt.Errorf("open badger store: %w", err)
		}
		return st, nil
	}
}

// servingNames returns the names the serving certificate must cover:
// loopback, this host's name, the host of apiAddr and the extra names.
func servingNames(apiAddr string, extra []string, log *slog.Logger) []string {
	names := []string{"localhost", "127.0.0.1", "::1"}
	if hn, err := os.Hostname(); err != nil {
		log.Warn("host name unknown; leaving it out of the serving certificate", "err", err)
	} else if err := pki.CheckName(hn); err == nil {
		names = append(names, strings.ToLower(hn))
	}
	if host, _, err := net.SplitHostPort(apiAddr); err == nil && !unspecified(host) {
		names = append(names, host)
	}
	return append(names, extra...)
}

// clientAddr returns the host:port clients dial for a listener configured
// with apiAddr and bound to bound: the configured host, or loopback when it
// was a wildcard, with the bound port.
func clientAddr(apiAddr string, bound net.Addr) string {
	host, _, _ := net.SplitHostPort(apiAddr)
	_, port, _ := net.SplitHostPort(bound.String())
	switch {
	case host == "" || host == "0.0.0.0":
		host = "127.0.0.1"
	case unspecified(host):
		host = "::1"
	}
	return net.JoinHostPort(host, port)
}

func unspecified(host string) bool {
	if host == "" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsUnspecified()
}
