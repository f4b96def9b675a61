package storebench

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/outpost-mesh/outpost/hub/store"
	"github.com/outpost-mesh/outpost/hub/store/badgerstore"
	"github.com/outpost-mesh/outpost/hub/store/etcdstore"
)

// Setup descriptions, shown with the results.
const (
	badgerSetup = "badgerstore embedded in the worker process, default config (group-committed, synced writes)"
	etcdSetup   = "etcd server embedded in the worker process (WAL fsync on), reached by the etcdstore client over loopback gRPC, as a hub talks to a local etcd; RSS counts server and client"
)

// setup returns how b is run.
func setup(b Backend) string {
	if b == Etcd {
		return etcdSetup
	}
	return badgerSetup
}

// instance is one open backend.
type instance struct {
	store store.Store
	// dataDir is the directory whose size is reported.
	dataDir string
	close   func() error
}

// open starts backend b with its data under dir, which must exist and be
// empty.
func open(ctx context.Context, b Backend, dir string) (*instance, error) {
	switch b {
	case Badger:
		st, err := badgerstore.Open(badgerstore.DefaultConfig(dir))
		if err != nil {
			return nil, fmt.Errorf("open badger store: %w", err)
		}
		return &instance{store: st, dataDir: dir, close: st.Close}, nil
	case Etcd:
		dataDir := filepath.Join(dir, "etcd")
		var closing atomic.Bool
		srv, endpoint, err := startEtcd(ctx, dataDir, &closing)
		if err != nil {
			return nil, err
		}
		cfg := etcdstore.DefaultConfig()
		cfg.Endpoints = []string{endpoint}
		st, err := etcdstore.New(ctx, cfg)
		if err != nil {
			closing.Store(true)
			srv.Close()
			return nil, fmt.Errorf("connect etcd store: %w", err)
		}
		return &instance{store: st, dataDir: dataDir, close: func() error {
			err := st.Close()
			closing.Store(true)
			srv.Close()
			return err
		}}, nil
	}
	return nil, fmt.Errorf("unknown backend %q", b)
}

// etcdStartTimeout bounds the wait for the embedded etcd to serve.
const etcdStartTimeout = 60 * time.Second

// startEtcd starts a single-member etcd with its data in dir, listening on
// free loopback ports, with etcd's default durability (WAL fsync on) and a
// 2 MiB request limit (etcd's 1.5 MiB default cannot carry a value of
// store.MaxValueSize). It returns the server and its client endpoint; the
// caller sets closing and then closes the server.
func startEtcd(ctx context.Context, dir string, closing *atomic.Bool) (*embed.Etcd, string, error) {
	cfg := embed.NewConfig()
	cfg.Name = "bench"
	cfg.Dir = dir
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(quietLogger(closing))
	// Port 0: the kernel picks free ports as etcd binds, so no other
	// process can take them in between. The advertised URLs keep port 0: a
	// single member never dials its own peer URL, and the client is given
	// the bound address.
	loopback := url.URL{Scheme: "http", Host: "127.0.0.1:0"}
	cfg.ListenClientUrls = []url.URL{loopback}
	cfg.AdvertiseClientUrls = []url.URL{loopback}
	cfg.ListenPeerUrls = []url.URL{loopback}
	cfg.AdvertisePeerUrls = []url.URL{loopback}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	cfg.MaxRequestBytes = 2 << 20
	// The gateway would dial the listen address, which holds port 0.
	cfg.EnableGRPCGateway = false

	srv, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, "", fmt.Errorf("start etcd: %w", err)
	}
	timer := time.NewTimer(etcdStartTimeout)
	defer timer.Stop()
	select {
	case <-srv.Server.ReadyNotify():
	case err := <-srv.Err():
		closing.Store(true)
		srv.Close()
		return nil, "", fmt.Errorf("start etcd: %w", err)
	case <-timer.C:
		closing.Store(true)
		srv.Close()
		return nil, "", fmt.Errorf("start etcd: not ready after %v", etcdStartTimeout)
	case <-ctx.Done():
		closing.Store(true)
		srv.Close()
		return nil, "", fmt.Errorf("start etcd: %w", ctx.Err())
	}
	if len(srv.Clients) == 0 {
		closing.Store(true)
		srv.Close()
		return nil, "", errors.New("start etcd: no client listener")
	}
	return srv, "http://" + srv.Clients[0].Addr().String(), nil
}

// quietLogger returns etcd's logger: errors only, as JSON on stderr, and
// nothing once closing is set, when etcd reports each listener it shuts as
// a failure to serve.
func quietLogger(closing *atomic.Bool) *zap.Logger {
	core := zapcore.NewCore(
		zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig()),
		zapcore.Lock(os.Stderr),
		zapcore.ErrorLevel,
	)
	return zap.New(quietCore{Core: core, closing: closing})
}

// quietCore drops every entry once closing is set.
type quietCore struct {
	zapcore.Core
	closing *atomic.Bool
}

func (c quietCore) With(fields []zapcore.Field) zapcore.Core {
	return quietCore{Core: c.Core.With(fields), closing: c.closing}
}

func (c quietCore) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if c.closing.Load() {
		return ce
	}
	return c.Core.Check(e, ce)
}
