package childhub

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

// Profiler captures CPU profiles of the hub, through its /debug/pprof
// endpoint, and of this process over the same window, into a directory:
// hub.cpu.pprof and <self>.cpu.pprof.
type Profiler struct {
	dir      string
	duration time.Duration
	hub      *http.Client
	host     string

	self string // names this process's profile

	hubDone  chan error
	selfFile *os.File
}

// NewProfiler returns a profiler writing into dir, naming this process's
// profile after self, or nil when dir is "".
func NewProfiler(dir, self string, duration time.Duration, cfg *rest.Config) (*Profiler, error) {
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
	return &Profiler{dir: dir, self: self, duration: duration, hub: hc, host: cfg.Host}, nil
}

// Start begins both profiles; call Stop next, also on failure.
func (p *Profiler) Start(ctx context.Context) error {
	if p == nil {
		return nil
	}
	f, err := os.Create(filepath.Join(p.dir, p.self+".cpu.pprof"))
	if err != nil {
		return fmt.Errorf("create client profile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return fmt.Errorf("start client profile: %w", err)
	}
	p.selfFile = f
	p.hubDone = make(chan error, 1)
	secs := max(int(p.duration/time.Second), 1)
	go func() { p.hubDone <- p.fetchHub(ctx, secs) }()
	return nil
}

func (p *Profiler) fetchHub(ctx context.Context, secs int) error {
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

// Stop waits for the hub's profile, which ends by itself once its window
// has passed, then ends this process's.
func (p *Profiler) Stop() error {
	if p == nil || p.selfFile == nil {
		return nil
	}
	hubErr := <-p.hubDone
	pprof.StopCPUProfile()
	err := p.selfFile.Close()
	p.selfFile = nil
	if hubErr != nil {
		return hubErr
	}
	return err
}

// maxHeapProfileBytes bounds a heap profile read from the hub.
const maxHeapProfileBytes = 64 << 20

// HeapProfiler writes heap profiles of the hub, from its /debug/pprof/heap,
// into a directory. A nil *HeapProfiler writes none.
type HeapProfiler struct {
	dir  string
	hub  *http.Client
	host string
}

// NewHeapProfiler returns a heap profiler writing into dir, or nil when
// dir is "".
func NewHeapProfiler(dir string, cfg *rest.Config) (*HeapProfiler, error) {
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
	return &HeapProfiler{dir: dir, hub: hc, host: cfg.Host}, nil
}

// Write saves the hub's heap profile as dir/hub.heap.NAME.pprof. Unless
// gc is set it does not make the hub collect garbage, so as not to change
// what is being measured, and its in-use figures are then as of one of the
// hub's last collections, which an idle hub makes only every two minutes.
// With gc they are what is live: the hub is made to collect twice, since a
// heap profile counts frees only once a later collection has swept them.
func (p *HeapProfiler) Write(ctx context.Context, name string, gc bool) error {
	if p == nil {
		return nil
	}
	url := p.host + "/debug/pprof/heap"
	if gc {
		url += "?gc=1"
		if _, err := p.fetch(ctx, url); err != nil {
			return err
		}
	}
	data, err := p.fetch(ctx, url)
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(p.dir, "hub.heap."+name+".pprof"), data, 0o644)
}

func (p *HeapProfiler) fetch(ctx context.Context, url string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := p.hub.Do(req)
	if err != nil {
		return nil, fmt.Errorf("fetch hub heap profile: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("fetch hub heap profile: %s", resp.Status)
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxHeapProfileBytes))
	if err != nil {
		return nil, fmt.Errorf("read hub heap profile: %w", err)
	}
	return data, nil
}
