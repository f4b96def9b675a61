package updater

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"time"
)

// SuperviseConfig configures Supervise.
type SuperviseConfig struct {
	// Updater configures the updater whose Boot chooses each child's
	// binary. Its Installed should be the supervisor's own binary.
	Updater Config
	// Args are the child's arguments after its name: the supervisor's own,
	// minus --supervise (see ChildArgs).
	Args []string
	// Env is the child's environment; nil means os.Environ().
	Env []string
	// Stdout and Stderr of the child; nil means the supervisor's.
	Stdout, Stderr io.Writer
	// Signals are forwarded to the child; nil means Supervise subscribes
	// to SIGTERM and SIGINT itself. Once a signal is forwarded the child is
	// not restarted and Supervise returns when it exits.
	Signals <-chan os.Signal
	// MinBackoff is the wait before the first restart, doubling up to
	// MaxBackoff, reset when a child ran HealthyAfter. Defaults 1s, 30s, 1m.
	MinBackoff, MaxBackoff, HealthyAfter time.Duration
	// KillGrace is how long a child has after SIGTERM before SIGKILL, when
	// ctx ends or a trial hangs past its deadline. Default 10s.
	KillGrace time.Duration
	// HangGrace is how long past its deadline a trial that has not
	// committed may run before it is stopped as hung. The agent reverts
	// a trial itself at the deadline, so this is only a backstop for a
	// version that hangs or never gets to check its health. Default 10s.
	HangGrace time.Duration
	// Poll is how often the trial's deadline is checked. Default 1s.
	Poll time.Duration
	// Logger, or nil for slog.Default().
	Logger *slog.Logger
}

// DefaultSuperviseConfig returns the defaults for the firmware directory
// dir and the child arguments args.
func DefaultSuperviseConfig(dir string, args []string) SuperviseConfig {
	return SuperviseConfig{
		Updater:      DefaultConfig(dir),
		Args:         args,
		MinBackoff:   time.Second,      // the first restart is quick
		MaxBackoff:   30 * time.Second, // a crash loop costs little
		HealthyAfter: time.Minute,      // a child that ran a minute was fine
		KillGrace:    10 * time.Second, // time to stop pods' watchers cleanly
		HangGrace:    10 * time.Second, // time for the agent's own revert
		Poll:         time.Second,      // trial deadlines are minutes long
	}
}

// Validate reports a config that cannot work.
func (c *SuperviseConfig) Validate() error {
	if c.Updater.Dir == "" {
		return errors.New("supervise: no directory")
	}
	if c.MinBackoff <= 0 || c.MaxBackoff < c.MinBackoff || c.HealthyAfter <= 0 || c.KillGrace <= 0 || c.HangGrace <= 0 || c.Poll <= 0 {
		return errors.New("supervise: backoff, healthy, kill and hang graces and poll must be positive")
	}
	return nil
}

// ChildArgs returns args without the --supervise flag (in its -, --, and
// =true forms), for the child.
func ChildArgs(args []string) []string {
	var out []string
	for _, a := range args {
		switch a {
		case "--supervise", "-supervise", "--supervise=true", "-supervise=true":
			continue
		}
		out = append(out, a)
	}
	return out
}

// childEnd is why a child stopped.
type childEnd int

const (
	childExited    childEnd = iota // by itself: restart
	childHung                      // killed past its trial deadline: revert, restart
	childSignalled                 // a forwarded signal: stop
	childStopped                   // ctx ended: stop
)

// Supervise runs the agent as a child until ctx ends or a forwarded signal
// stops it: before each start it calls Boot, which counts trial starts and
// reverts a trial that died, and it starts the chosen binary with
// cfg.Args. A child that exits by itself is restarted after a backoff. A
// trial that passes its deadline plus HangGrace without committing is sent
// SIGTERM, then SIGKILL after KillGrace, and reverted (HealthWindowExpired).
// The supervisor only execs binaries; it never runs the agent's code. It
// returns nil when stopped by ctx or a signal.
func Supervise(ctx context.Context, cfg SuperviseConfig) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	u, err := New(cfg.Updater)
	if err != nil {
		return err
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	log = log.With("component", "firmware-supervisor")
	sigs := cfg.Signals
	if sigs == nil {
		ch := make(chan os.Signal, 2)
		signal.Notify(ch, syscall.SIGTERM, syscall.SIGINT)
		defer signal.Stop(ch)
		sigs = ch
	}
	env := cfg.Env
	if env == nil {
		env = os.Environ()
	}
	s := &supervisor{cfg: cfg, u: u, log: log, sigs: sigs}
	backoff := cfg.MinBackoff
	for {
		if ctx.Err() != nil {
			return nil
		}
		d, err := u.boot("")
		if err != nil {
			log.Error("boot", "err", err, "fallback", d.Fallback)
		}
		if d.Reverted && d.LastOutcome != nil {
			log.Warn("trial reverted", "version", d.LastOutcome.Version, "reason", d.LastOutcome.Reason, "message", d.LastOutcome.Message)
		}
		started := time.Now()
		end := s.run(ctx, d, u.Env(d, env))
		switch end {
		case childStopped, childSignalled:
			return nil
		case childHung:
			if err := u.Revert(HealthWindowExpired, "the trial hung past its deadline and was killed by the supervisor"); err != nil && !errors.Is(err, ErrNoTrial) {
				log.Error("revert the hung trial", "err", err)
			}
			backoff = cfg.MinBackoff
			continue
		}
		if time.Since(started) >= cfg.HealthyAfter {
			backoff = cfg.MinBackoff
		}
		log.Info("restarting the agent", "after", backoff)
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-sigs:
			t.Stop()
			return nil
		case <-t.C:
		}
		backoff = min(2*backoff, cfg.MaxBackoff)
	}
}

type supervisor struct {
	cfg  SuperviseConfig
	u    *Updater
	log  *slog.Logger
	sigs <-chan os.Signal
}

// run starts d.Binary and waits for it to end, forwarding signals and
// killing a trial that hangs. The child has always exited when run returns.
func (s *supervisor) run(ctx context.Context, d Decision, env []string) childEnd {
	cmd := exec.Command(d.Binary, s.u.Args(d.Slot, s.cfg.Args)...)
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = s.cfg.Stdout, s.cfg.Stderr
	if cmd.Stdout == nil {
		cmd.Stdout = os.Stdout
	}
	if cmd.Stderr == nil {
		cmd.Stderr = os.Stderr
	}
	// A process group of its own, so a terminal's ^C reaches the child
	// once, through the supervisor.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		s.log.Error("start the agent", "binary", d.Binary, "err", err)
		return childExited
	}
	s.log.Info("started the agent", "binary", d.Binary, "pid", cmd.Process.Pid, "version", d.Version, "trial", d.Trial != nil)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	poll := time.NewTicker(s.cfg.Poll)
	defer poll.Stop()
	var kill <-chan time.Time
	end := childExited
	ctxDone := ctx.Done()
	for {
		select {
		case err := <-done:
			s.log.Info("the agent exited", "pid", cmd.Process.Pid, "status", fmt.Sprint(err), "end", end)
			return end
		case <-ctxDone:
			ctxDone = nil
			end = childStopped
			cmd.Process.Signal(syscall.SIGTERM)
			kill = time.After(s.cfg.KillGrace)
		case sig := <-s.sigs:
			if end == childExited || end == childHung {
				end = childSignalled
			}
			cmd.Process.Signal(sig)
		case <-kill:
			cmd.Process.Kill()
		case <-poll.C:
			if end != childExited {
				continue
			}
			t, ok := s.u.Trial()
			if ok && !time.Now().Before(t.Deadline().Add(s.cfg.HangGrace)) {
				s.log.Warn("the trial passed its deadline without committing; stopping it", "version", t.Version, "deadline", t.Deadline())
				end = childHung
				cmd.Process.Signal(syscall.SIGTERM)
				kill = time.After(s.cfg.KillGrace)
			}
		}
	}
}
