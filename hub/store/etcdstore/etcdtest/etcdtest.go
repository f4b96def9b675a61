// Package etcdtest runs a single-member etcd server inside the test process,
// so the etcd store backend is tested against the real thing. Only tests may
// import it.
package etcdtest

import (
	"fmt"
	"net/url"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

const (
	// maxRequestBytes lets a write of a store.MaxValueSize value (1.5 MiB)
	// with its key and request framing through; etcd's default is exactly
	// 1.5 MiB, which is not enough.
	maxRequestBytes = 2 << 20
	// readyTimeout bounds waiting for the server to elect itself and serve.
	// Generous: test machines are shared and slow under -race.
	readyTimeout = 60 * time.Second
)

// Server is an embedded etcd with its data in one directory. Its methods may
// be called from any goroutine.
type Server struct {
	dir string

	mu        sync.Mutex
	etcd      *embed.Etcd // nil while stopped
	endpoints []string
	stopping  *atomic.Bool // silences the running server's shutdown noise
}

// Start starts an etcd server keeping its data in dir (an empty directory
// for a fresh server, such as t.TempDir()) and listening on free loopback
// ports. It fails t if the server does not become ready. Stop is registered
// with t.Cleanup.
func Start(t testing.TB, dir string) *Server {
	t.Helper()
	s := &Server{dir: dir}
	if err := s.start(); err != nil {
		t.Fatalf("etcdtest: start: %v", err)
	}
	t.Cleanup(s.Stop)
	return s
}

// Endpoints returns the client URLs of the running server. The caller owns
// the returned slice.
func (s *Server) Endpoints() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.endpoints...)
}

// Dir returns the data directory.
func (s *Server) Dir() string { return s.dir }

// Stop shuts the server down gracefully and waits until its goroutines have
// exited and its listeners are closed. It is safe to call more than once.
func (s *Server) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stopLocked()
}

// Restart stops the server and starts it again on the same data directory,
// as after a process restart. The ports may change: read Endpoints again.
// It fails t if the server does not come back.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	s.mu.Lock()
	s.stopLocked()
	s.mu.Unlock()
	if err := s.start(); err != nil {
		t.Fatalf("etcdtest: restart: %v", err)
	}
}

func (s *Server) stopLocked() {
	if s.etcd == nil {
		return
	}
	s.stopping.Store(true)
	s.etcd.Close() // returns after its goroutines have exited
	s.etcd, s.endpoints, s.stopping = nil, nil, nil
}

func (s *Server) start() error {
	cfg := embed.NewConfig()
	cfg.Name = "etcdtest"
	cfg.Dir = s.dir
	stopping := new(atomic.Bool)
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(quietLogger(stopping))
	// Port 0: the kernel picks free ports while etcd binds, so there is no
	// window in which another process could take a port chosen earlier. The
	// advertised URLs keep port 0; a single member never dials its own peer
	// URL, and clients use Endpoints.
	loopback := url.URL{Scheme: "http", Host: "127.0.0.1:0"}
	cfg.ListenClientUrls = []url.URL{loopback}
	cfg.AdvertiseClientUrls = []url.URL{loopback}
	cfg.ListenPeerUrls = []url.URL{loopback}
	cfg.AdvertisePeerUrls = []url.URL{loopback}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	cfg.MaxRequestBytes = maxRequestBytes
	// The gateway would dial the listen address, which holds port 0.
	cfg.EnableGRPCGateway = false
	// The server is only ever stopped gracefully, which writes everything
	// out; skipping fsync keeps tests fast on shared disks.
	cfg.UnsafeNoFsync = true

	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return fmt.Errorf("start etcd in %s: %w", s.dir, err)
	}
	timer := time.NewTimer(readyTimeout)
	defer timer.Stop()
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		e.Close()
		return fmt.Errorf("etcd in %s: %w", s.dir, err)
	case <-timer.C:
		e.Close()
		return fmt.Errorf("etcd in %s not ready after %v", s.dir, readyTimeout)
	}
	if len(e.Clients) == 0 {
		e.Close()
		return fmt.Errorf("etcd in %s has no client listener", s.dir)
	}
	eps := make([]string, 0, len(e.Clients))
	for _, l := range e.Clients {
		eps = append(eps, "http://"+l.Addr().String())
	}
	s.mu.Lock()
	s.etcd, s.endpoints, s.stopping = e, eps, stopping
	s.mu.Unlock()
	return nil
}

// quietLogger logs errors to stderr, and nothing below a panic once
// stopping is set: a graceful stop makes every listener report that it was
// closed, at error level.
func quietLogger(stopping *atomic.Bool) *zap.Logger {
	level := zap.LevelEnablerFunc(func(l zapcore.Level) bool {
		if stopping.Load() {
			return l >= zapcore.DPanicLevel
		}
		return l >= zapcore.ErrorLevel
	})
	enc := zapcore.NewConsoleEncoder(zap.NewDevelopmentEncoderConfig())
	return zap.New(zapcore.NewCore(enc, zapcore.Lock(os.Stderr), level))
}
