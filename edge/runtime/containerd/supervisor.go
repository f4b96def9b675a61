package containerd

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/containerd/containerd/v2/client"

	"github.com/outpost-mesh/outpost/internal/atomicfile"
	"github.com/outpost-mesh/outpost/sync/session"
)

// SupervisorConfig configures a Supervisor.
type SupervisorConfig struct {
	// Dir holds everything the containerd owns: its config, root, state,
	// sockets, runc state and log. Required; the agent passes its data
	// dir's "containerd". Its socket paths must fit a unix socket name
	// (about 100 bytes), so keep it short.
	Dir string
	// Binary is the containerd to run; default "/usr/bin/containerd".
	// The shims beside it (containerd-shim-runc-v2) come first in its
	// PATH, so that a containerd comes with its own shims.
	Binary string
	// ReadyTimeout is how long a started containerd may take to answer
	// before it is killed and started again; default 30s.
	ReadyTimeout time.Duration
	// StopTimeout is how long containerd has to exit after SIGTERM before
	// it is killed; default 10s.
	StopTimeout time.Duration
	// MinBackoff and MaxBackoff bound the wait before a restart, doubled
	// after each death within a minute of its start; defaults 500ms, 30s.
	MinBackoff, MaxBackoff time.Duration
	Logger                 *slog.Logger // non-nil
}

// DefaultSupervisorConfig returns the defaults for a containerd in dir.
func DefaultSupervisorConfig(dir string) SupervisorConfig {
	return SupervisorConfig{
		Dir:          dir,
		Binary:       "/usr/bin/containerd",
		ReadyTimeout: 30 * time.Second,
		StopTimeout:  10 * time.Second,
		MinBackoff:   500 * time.Millisecond,
		MaxBackoff:   30 * time.Second,
		Logger:       slog.Default(),
	}
}

// Validate reports whether c can be used.
func (c SupervisorConfig) Validate() error {
	switch {
	case c.Dir == "" || !filepath.IsAbs(c.Dir):
		return errors.New("containerd Dir must be an absolute path")
	case len(ttrpcSocket(c.Dir)) > 100:
		return fmt.Errorf("containerd Dir %q too long for its sockets", c.Dir)
	case c.Binary == "":
		return errors.New("containerd Binary is empty")
	case c.ReadyTimeout <= 0 || c.StopTimeout <= 0:
		return errors.New("containerd ReadyTimeout and StopTimeout must be positive")
	case c.MinBackoff <= 0 || c.MaxBackoff < c.MinBackoff:
		return errors.New("containerd back-off bounds are invalid")
	case c.Logger == nil:
		return errors.New("containerd Logger is nil")
	}
	return nil
}

func grpcSocket(dir string) string  { return filepath.Join(dir, "containerd.sock") }
func ttrpcSocket(dir string) string { return filepath.Join(dir, "containerd.sock.ttrpc") }

// RuncRoot returns the runc state directory a Runtime should use with the
// containerd in dir (Config.RuncRoot), so that all of it stays in dir.
func RuncRoot(dir string) string { return filepath.Join(dir, "runc") }

// disabledPlugins are plugins containerd 1.6 and 2.x load by default that
// an agent does not use: the CRI plugin (Outpost is its own kubelet),
// NRI (which would listen on /var/run/nri), tracing, and snapshotters
// other than overlayfs and native. Names a version lacks are ignored by
// it. The v1 runtime stays: 1.6's task service refuses to load without.
var disabledPlugins = []string{
	"io.containerd.grpc.v1.cri",
	"io.containerd.cri.v1.runtime",
	"io.containerd.cri.v1.images",
	"io.containerd.podsandbox.controller.v1.podsandbox",
	"io.containerd.sandbox.controller.v1.shim",
	"io.containerd.nri.v1.nri",
	"io.containerd.internal.v1.tracing",
	"io.containerd.tracing.processor.v1.otlp",
	"io.containerd.snapshotter.v1.aufs",
	"io.containerd.snapshotter.v1.btrfs",
	"io.containerd.snapshotter.v1.zfs",
	"io.containerd.snapshotter.v1.devmapper",
	"io.containerd.snapshotter.v1.blockfile",
	"io.containerd.snapshotter.v1.erofs",
}

// ConfigFile returns the containerd configuration file for dir: version 2,
// which containerd 1.6 reads as is and 2.x migrates on load. Everything
// lives under dir; the only listeners are the gRPC and ttrpc sockets
// there (no metrics, no debug socket).
func ConfigFile(dir string) []byte {
	var b bytes.Buffer
	q := strconv.Quote
	fmt.Fprintf(&b, "version = 2\nroot = %s\nstate = %s\n", q(filepath.Join(dir, "root")), q(filepath.Join(dir, "state")))
	b.WriteString("disabled_plugins = [")
	for i, p := range disabledPlugins {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(q(p))
	}
	b.WriteString("]\n\n")
	fmt.Fprintf(&b, "[grpc]\n  address = %s\n\n", q(grpcSocket(dir)))
	fmt.Fprintf(&b, "[ttrpc]\n  address = %s\n\n", q(ttrpcSocket(dir)))
	b.WriteString("[debug]\n  address = \"\"\n  level = \"info\"\n\n")
	b.WriteString("[metrics]\n  address = \"\"\n\n")
	fmt.Fprintf(&b, "[plugins.\"io.containerd.internal.v1.opt\"]\n  path = %s\n", q(filepath.Join(dir, "opt")))
	return b.Bytes()
}

// Supervisor runs a containerd of the agent's own: it starts it, restarts
// it with back-off when it dies, and stops it when Run's context ends.
// Shims and containers outlive it: they are not its children once
// started, and containerd reconnects to them when it starts again.
type Supervisor struct {
	cfg SupervisorConfig

	ready     chan struct{} // closed once containerd first answered
	readyOnce sync.Once

	mu  sync.Mutex
	pid int
}

// NewSupervisor returns a Supervisor of the containerd in cfg.Dir. It
// starts nothing.
func NewSupervisor(cfg SupervisorConfig) (*Supervisor, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Supervisor{cfg: cfg, ready: make(chan struct{})}, nil
}

// Address returns the path of containerd's gRPC socket, for Config.Address.
func (s *Supervisor) Address() string { return grpcSocket(s.cfg.Dir) }

// Ready is closed once containerd has answered for the first time.
func (s *Supervisor) Ready() <-chan struct{} { return s.ready }

// PID returns the process ID of the running containerd, or 0.
func (s *Supervisor) PID() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pid
}

// Run starts containerd and keeps it running until ctx is done, then
// stops it (SIGTERM, then SIGKILL after StopTimeout) and returns nil. A
// containerd left running by an earlier agent that died (its PID is in
// Dir/containerd.pid) is stopped first; containerd's and runc's state are
// put on tmpfs (see volatileDirs). It returns an error only if the
// config cannot be written.
func (s *Supervisor) Run(ctx context.Context) error {
	dir := s.cfg.Dir
	if err := os.MkdirAll(dir, 0o711); err != nil {
		return fmt.Errorf("containerd dir: %w", err)
	}
	cfgPath := filepath.Join(dir, "config.toml")
	if err := atomicfile.WriteFile(cfgPath, ConfigFile(dir), 0o600); err != nil {
		return fmt.Errorf("write containerd config: %w", err)
	}
	s.stopStale(cfgPath)
	if err := mountVolatile(dir); err != nil {
		s.cfg.Logger.Warn("containerd's state is not on tmpfs; after a reboot it cleans up what died", "err", err)
	}
	// A containerd that ran a minute starts the back-off over.
	backoff := session.Backoff{Min: s.cfg.MinBackoff, Max: s.cfg.MaxBackoff, Reset: time.Minute}
	for {
		started := time.Now()
		err := s.runOnce(ctx, cfgPath)
		if ctx.Err() != nil {
			return nil
		}
		wait := backoff.Next(time.Since(started))
		s.cfg.Logger.Warn("containerd exited; restarting", "err", err, "in", wait)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
	}
}

// runOnce runs one containerd until it exits or ctx is done.
func (s *Supervisor) runOnce(ctx context.Context, cfgPath string) error {
	logf, err := os.OpenFile(filepath.Join(s.cfg.Dir, "containerd.log"), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("open containerd log: %w", err)
	}
	defer logf.Close()
	if fi, err := logf.Stat(); err == nil && fi.Size() > 10<<20 {
		_ = logf.Truncate(0)
	}
	cmd := exec.Command(s.cfg.Binary, "--config", cfgPath)
	cmd.Env = withPathFirst(os.Environ(), filepath.Dir(s.cfg.Binary))
	cmd.Stdout, cmd.Stderr = logf, logf
	// Its own process group, so that a signal to the agent's group (^C)
	// leaves it to the agent to stop containerd in order.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start containerd: %w", err)
	}
	pidFile := filepath.Join(s.cfg.Dir, "containerd.pid")
	_ = atomicfile.WriteFile(pidFile, []byte(strconv.Itoa(cmd.Process.Pid)), 0o600)
	s.mu.Lock()
	s.pid = cmd.Process.Pid
	s.mu.Unlock()
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer func() {
		s.mu.Lock()
		s.pid = 0
		s.mu.Unlock()
	}()

	readyCtx, cancel := context.WithTimeout(ctx, s.cfg.ReadyTimeout)
	readyErr := s.waitReady(readyCtx, exited)
	cancel()
	switch {
	case errors.Is(readyErr, errExited):
		err := <-exited
		return fmt.Errorf("containerd exited before answering: %v", err)
	case readyErr != nil && ctx.Err() == nil:
		s.cfg.Logger.Error("containerd did not answer; killing it", "err", readyErr)
		_ = cmd.Process.Kill()
		return fmt.Errorf("containerd did not answer: %w (%v)", readyErr, <-exited)
	case readyErr == nil:
		s.readyOnce.Do(func() { close(s.ready) })
		s.cfg.Logger.Info("containerd running", "pid", cmd.Process.Pid, "address", s.Address())
	}

	select {
	case err := <-exited:
		return fmt.Errorf("containerd exited: %v", err)
	case <-ctx.Done():
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-exited:
	case <-time.After(s.cfg.StopTimeout):
		s.cfg.Logger.Warn("containerd did not stop; killing it")
		_ = cmd.Process.Kill()
		<-exited
	}
	_ = os.Remove(pidFile)
	return nil
}

var errExited = errors.New("exited")

// waitReady polls containerd's version until it answers, ctx ends or the
// process exits (errExited; the exit is left in exited for the caller).
func (s *Supervisor) waitReady(ctx context.Context, exited chan error) error {
	c, err := client.New(s.Address(), client.WithTimeout(time.Second))
	if err != nil {
		return err
	}
	defer c.Close()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		if _, err := os.Stat(s.Address()); err == nil {
			vctx, cancel := context.WithTimeout(ctx, time.Second)
			_, err := c.Version(vctx)
			cancel()
			if err == nil {
				return nil
			}
		}
		select {
		case err := <-exited:
			exited <- err
			return errExited
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
}

// stopStale stops a containerd an earlier agent left running with this
// config, so that the new one can take its sockets.
func (s *Supervisor) stopStale(cfgPath string) {
	b, err := os.ReadFile(filepath.Join(s.cfg.Dir, "containerd.pid"))
	if err != nil {
		return
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 1 {
		return
	}
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil || !bytes.Contains(cmdline, []byte(cfgPath)) {
		return
	}
	s.cfg.Logger.Warn("stopping containerd left running", "pid", pid)
	_ = syscall.Kill(pid, syscall.SIGTERM)
	deadline := time.Now().Add(s.cfg.StopTimeout)
	for time.Now().Before(deadline) {
		if syscall.Kill(pid, 0) != nil {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	_ = syscall.Kill(pid, syscall.SIGKILL)
}

// withPathFirst returns env with dir first in its PATH.
func withPathFirst(env []string, dir string) []string {
	out := make([]string, 0, len(env)+1)
	path := "PATH=" + dir
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			if v != "" {
				path += string(os.PathListSeparator) + v
			}
			continue
		}
		out = append(out, kv)
	}
	return append(out, path)
}
