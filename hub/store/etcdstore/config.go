package etcdstore

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"time"

	"github.com/outpost-mesh/outpost/hub/store/internal/fanout"
)

// Config says which etcd cluster to use and how.
type Config struct {
	// Endpoints are the client URLs of the etcd members, such as
	// "https://10.0.0.1:2379"; at least one. The etcd members must accept
	// requests larger than store.MaxValueSize (--max-request-bytes of at
	// least 2 MiB), or the largest values fail with store.ErrValueTooLarge.
	Endpoints []string
	// TLS secures https:// and unixs:// endpoints and may hold a client
	// certificate; or nil for the system roots and no client certificate.
	TLS *tls.Config
	// DialTimeout bounds how long New waits for the cluster to answer; 0
	// waits as long as New's context allows.
	DialTimeout time.Duration
	// Watch bounds the backlog of each watcher whose consumer falls behind.
	Watch fanout.Limits
	// Logger receives the etcd client library's own logs (retries,
	// reconnects); or nil to discard them. Errors reach callers either way.
	Logger *slog.Logger
}

// DefaultConfig returns the configuration for a local etcd without TLS.
func DefaultConfig() Config {
	return Config{
		// The address etcd listens on by default.
		Endpoints: []string{"http://127.0.0.1:2379"},
		// No client certificate; production clusters set one.
		TLS: nil,
		// Long enough for a loaded cluster to answer, short enough that a
		// hub pointed at the wrong address says so at start.
		DialTimeout: 5 * time.Second,
		// 10,000 events or 64 MiB per watcher (fanout's defaults), then the
		// consumer gets store.ErrWatcherTooSlow and lists again.
		Watch: fanout.Limits{MaxEvents: 10000, MaxBytes: 64 << 20},
		// No client library logs.
		Logger: nil,
	}
}

// Validate reports the first problem with c.
func (c Config) Validate() error {
	if len(c.Endpoints) == 0 {
		return errors.New("no etcd endpoints")
	}
	for _, ep := range c.Endpoints {
		if ep == "" {
			return errors.New("empty etcd endpoint")
		}
		u, err := url.Parse(ep)
		if err != nil {
			return fmt.Errorf("etcd endpoint %q: %w", ep, err)
		}
		switch u.Scheme {
		case "http", "https", "unix", "unixs":
		default:
			return fmt.Errorf("etcd endpoint %q: want an http://, https://, unix:// or unixs:// URL", ep)
		}
	}
	if c.DialTimeout < 0 {
		return fmt.Errorf("negative dial timeout %v", c.DialTimeout)
	}
	if c.Watch.MaxEvents < 0 || c.Watch.MaxBytes < 0 {
		return fmt.Errorf("negative watch limits %+v", c.Watch)
	}
	return nil
}
