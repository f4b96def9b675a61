package fleetbench

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"runtime/pprof"
	"time"

	"k8s.io/client-go/rest"
)

// maxProfileBytes bounds a CPU profile read from the hub.
const maxProfileBytes = 64 << 20

// profiler captures CPU profiles of the hub, through its /debug/pprof
// endpoint, and of this process (agents, relays and clients) over the same
// window, into a directory.
type profiler struct {
	dir      string
	duration time.Duration
	hub      *http.Client
	host     string

	hubDone chan error
	self    *os.File
}

// newProfiler returns a profiler writing into dir, or nil when dir is "".
func newProfiler(dir string, duration time.Duration, cfg *rest.Config) (*profiler, error) {
	if dir == "" {
		return nil, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("create profile dir: %w", err)
	}
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("profile client: %w", err)
	}
	return &profiler{dir: dir, duration: duration, hub: hc, host: cfg.Host}, nil
}

// start begins both profiles; call stop next, also on failure.
func (p *profiler) start(ctx context.Context) error {
	if p == nil {
		return nil
	}
	f, err := os.Create(filepath.Join(p.dir, "fleet.cpu.pprof"))
	if err != nil {
		return fmt.Errorf("create client profile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return fmt.Errorf("start client profile: %w", err)
	}
	p.self = f
	p.hubDone = make(chan error, 1)
	secs := max(int(p.duration/time.Second), 1)
	go func() { p.hubDone <- p.fetchHub(ctx, secs) }()
	return nil
}

func (p *profiler) fetchHub(ctx context.Context, secs int) error {
	url := fmt.Sprintf("%s/debug/pprof/profile?seconds=%d", p.host, secs)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := p.hub.Do(req)
	if err != nil {
		return fmt.Errorf("fetch hub profile: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("fetch hub profile: %s", resp.Status)
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxProfileBytes))
	if err != nil {
		return fmt.Errorf("read hub profile: %w", err)
	}
	return os.WriteFile(filepath.Join(p.dir, "hub.cpu.pprof"), data, 0o644)
}

// stop waits for the hub's profile, which ends by itself once its window
// has passed, then ends this process's.
func (p *profiler) stop() error {
	if p == nil || p.self == nil {
		return nil
	}
	hubErr := <-p.hubDone
	pprof.StopCPUProfile()
	err := p.self.Close()
	p.self = nil
	if hubErr != nil {
		return hubErr
	}
	return err
}
