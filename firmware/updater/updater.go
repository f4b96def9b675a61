package updater

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	firmwarev1 "github.com/outpost-mesh/outpost/firmware/apis/v1"
	"github.com/outpost-mesh/outpost/firmware/manifest"
	"github.com/outpost-mesh/outpost/internal/atomicfile"
)

// Environment variables the updater passes to the binaries it starts.
const (
	// EnvBootToken marks a process whose start Boot has decided and
	// counted already (a child of the supervisor, or a process exec'd by
	// Exec after Boot chose a trial slot), so that its own Boot does not
	// count it again.
	EnvBootToken = "OUTPOST_FIRMWARE_BOOT"
	// EnvInstalled carries the path of the installed binary to processes
	// running from a slot, for when Config.Installed is empty.
	EnvInstalled = "OUTPOST_FIRMWARE_INSTALLED"
)

// BinaryName is the agent's file name in each slot.
const BinaryName = "outpost-edge"

// Steps after which Config.AfterStep is called: each follows a write that a
// power cut could interrupt.
const (
	StepVerified     = "verified"      // the artifact verified, nothing written
	StepSlotTemp     = "slot-temp"     // the slot's temporary file written and synced
	StepSlotWritten  = "slot-written"  // the slot binary renamed into place
	StepTrialMarked  = "trial-marked"  // the trial marker written
	StepCommitted    = "committed"     // the commit written
	StepReverted     = "reverted"      // a revert written
	StepFileCopied   = "file-copied"   // a file artifact stored
	StepFileMarked   = "file-marked"   // a file trial marker written
	StepFileHookDone = "file-hook-ran" // the hook's install verb returned
)

// Config configures an Updater.
type Config struct {
	// Dir holds the slots, the state and the file artifacts: the agent's
	// data dir + "/firmware". Required.
	Dir string
	// Installed is the binary the node was installed with (the package's
	// /usr/local/bin/outpost-edge), run before the first update commits.
	// Empty means $OUTPOST_FIRMWARE_INSTALLED, else the running executable.
	Installed string
	// InstalledArgs are put before the agent's arguments when the
	// installed binary runs: ["edge"] when it is the multi-command outpost
	// binary (`outpost edge`), none for outpost-edge. Slot binaries are
	// always outpost-edge.
	InstalledArgs []string
	// Hook is the absolute path of the install hook for file components,
	// from the node's local config; empty refuses file components.
	Hook string
	// HookTimeout bounds each run of the hook. Default 5 minutes.
	HookTimeout time.Duration
	// Grace is added to a trial's deadline before a start or the
	// supervisor reverts it. Default 1 minute.
	Grace time.Duration
	// MaxBoots is how many starts a trial gets before the next one
	// reverts it. Default 1: a second start in trial means the first died.
	MaxBoots int
	// Logger, or nil for slog.Default().
	Logger *slog.Logger
	// Now, or nil for time.Now.
	Now func() time.Time
	// AfterStep, if not nil, is called after each Step*; an error stops the
	// operation there, as a crash would. Tests only.
	AfterStep func(step string) error
}

// DefaultConfig returns the defaults for the data dir's firmware directory.
func DefaultConfig(dir string) Config {
	return Config{
		Dir:         dir,
		HookTimeout: 5 * time.Minute, // a device flash can take minutes
		Grace:       time.Minute,     // time for a slow start to commit
		MaxBoots:    1,               // a second start in trial means the first died
	}
}

// Validate reports a config that cannot work.
func (c *Config) Validate() error {
	if c.Dir == "" {
		return errors.New("updater: no directory")
	}
	if c.Hook != "" && !filepath.IsAbs(c.Hook) {
		return fmt.Errorf("updater: hook %q is not an absolute path", c.Hook)
	}
	if c.HookTimeout <= 0 || c.Grace < 0 || c.MaxBoots < 1 || c.MaxBoots > 100 {
		return fmt.Errorf("updater: hook timeout %v, grace %v, max boots %d out of range", c.HookTimeout, c.Grace, c.MaxBoots)
	}
	return nil
}

// Updater is the edge side of over-the-air updates: the agent's A/B slots,
// the file components' artifacts, and the trial, commit and revert protocol,
// kept in Config.Dir. Its methods are safe for concurrent use within a
// process; across processes, only one may change the state at a time (the
// supervisor calls Boot only while no child runs).
type Updater struct {
	cfg Config
	log *slog.Logger
	mu  sync.Mutex
}

// New returns an Updater for cfg with defaults for zero fields. It touches
// nothing on disk.
func New(cfg Config) (*Updater, error) {
	d := DefaultConfig(cfg.Dir)
	if cfg.HookTimeout == 0 {
		cfg.HookTimeout = d.HookTimeout
	}
	if cfg.Grace == 0 {
		cfg.Grace = d.Grace
	}
	if cfg.MaxBoots == 0 {
		cfg.MaxBoots = d.MaxBoots
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	return &Updater{cfg: cfg, log: log.With("component", "firmware-updater")}, nil
}

// Boot is New(DefaultConfig(dir)) and its Boot.
func Boot(dir string) (Decision, error) {
	u, err := New(DefaultConfig(dir))
	if err != nil {
		return Decision{}, err
	}
	return u.Boot()
}

func (u *Updater) statePath() string { return filepath.Join(u.cfg.Dir, "state.json") }

// SlotPath returns the path of a slot's binary; SlotInstalled gives the
// installed binary.
func (u *Updater) SlotPath(slot string) string {
	if slot == SlotInstalled {
		return u.installed()
	}
	return filepath.Join(u.cfg.Dir, "slots", slot, BinaryName)
}

func (u *Updater) installed() string {
	if u.cfg.Installed != "" {
		return u.cfg.Installed
	}
	if p := os.Getenv(EnvInstalled); p != "" {
		return p
	}
	p, err := os.Executable()
	if err != nil {
		return os.Args[0]
	}
	return p
}

// load reads the state; a missing file is the empty state. A file that
// does not read or decode is a *CorruptStateError.
func (u *Updater) load() (*State, error) {
	f, err := os.Open(u.statePath())
	if errors.Is(err, fs.ErrNotExist) {
		return &State{Format: stateFormat}, nil
	}
	if err != nil {
		return nil, &CorruptStateError{Path: u.statePath(), Err: err}
	}
	defer f.Close()
	s, err := decodeState(f)
	if err != nil {
		return nil, &CorruptStateError{Path: u.statePath(), Err: err}
	}
	return s, nil
}

// save writes s atomically and durably.
func (u *Updater) save(s *State) error {
	b, err := encodeState(s)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(u.cfg.Dir, 0o700); err != nil {
		return fmt.Errorf("save state: %w", err)
	}
	return atomicfile.WriteFile(u.statePath(), b, 0o600)
}

func (u *Updater) step(name string) error {
	if u.cfg.AfterStep == nil {
		return nil
	}
	if err := u.cfg.AfterStep(name); err != nil {
		return fmt.Errorf("after step %s: %w", name, err)
	}
	return nil
}

// present reports whether slot's binary is a regular file of the size s
// records for it (any size if s records none).
func (u *Updater) present(s *State) func(string) bool {
	return func(slot string) bool {
		fi, err := os.Stat(u.SlotPath(slot))
		if err != nil || !fi.Mode().IsRegular() || fi.Size() == 0 {
			return false
		}
		var want int64
		switch {
		case s.Trial != nil && s.Trial.Slot == slot:
			want = s.Trial.Size
		case s.Committed != nil && s.Committed.Slot == slot:
			want = s.Committed.Size
		case s.Previous != nil && s.Previous.Slot == slot:
			want = s.Previous.Size
		}
		return want == 0 || fi.Size() == want
	}
}

// Boot decides which binary this start of the agent runs, and must be
// called first thing at every start (the supervisor calls it before each
// child). A trial gets Config.MaxBoots starts: Boot counts this one, durably,
// before the trial binary runs; a start past them, or past the trial's
// deadline plus the grace, reverts the trial (recorded failed, the committed
// slot runs, Decision.Reverted and LastOutcome say why). If Decision.Binary
// is not the running executable, the caller execs into it with Exec.
//
// A corrupt state file is moved aside to state.json.corrupt and a new state
// started: Boot then returns a *CorruptStateError with a Decision that runs
// the installed binary. Any other error also comes with a runnable Decision.
func (u *Updater) Boot() (Decision, error) {
	return u.boot(os.Getenv(EnvBootToken))
}

// boot is Boot with the boot token of this process ("" for the supervisor,
// whose every call is a new start).
func (u *Updater) boot(token string) (Decision, error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	now := u.cfg.Now()
	removeTemps(filepath.Join(u.cfg.Dir, ".state.json.tmp-*"))
	s, err := u.load()
	var corrupt error
	if err != nil {
		corrupt = err
		aside := u.statePath() + ".corrupt"
		if rerr := os.Rename(u.statePath(), aside); rerr != nil {
			u.log.Error("move the corrupt state aside", "err", rerr)
		}
		s = &State{Format: stateFormat}
		s.LastOutcome = outcome("", "", "", firmwarev1.StateFailed, StateCorrupt, fmt.Sprintf("%v; moved to %s, running the installed binary", err, aside), now)
	}
	n, d, changed := decideBoot(s, bootEvent{now: now, token: token, present: u.present(s), grace: u.cfg.Grace})
	if changed || corrupt != nil {
		if err := u.save(n); err != nil {
			// A trial boot that is not counted could crash forever:
			// run the committed slot instead.
			d = Decision{Slot: SlotInstalled, Fallback: fmt.Sprintf("cannot write the state (%v); running the committed binary", err), LastOutcome: d.LastOutcome}
			if c := s.Committed; c != nil && u.present(s)(c.Slot) {
				d.Slot, d.Version = c.Slot, c.Version
			}
			d.Binary = u.SlotPath(d.Slot)
			u.log.Error("boot", "err", err, "slot", d.Slot)
			return d, fmt.Errorf("boot: %w", err)
		}
	}
	d.Binary = u.SlotPath(d.Slot)
	if corrupt != nil {
		d.Fallback = "the state file is corrupt; running the installed binary"
	}
	u.log.Info("boot", "slot", d.Slot, "version", d.Version, "trial", d.Trial != nil, "reverted", d.Reverted, "fallback", d.Fallback)
	return d, corrupt
}

// RunsHere reports whether d.Binary is the running executable.
func (d Decision) RunsHere() bool {
	self, err := os.Executable()
	if err != nil {
		return false
	}
	a, err1 := os.Stat(self)
	b, err2 := os.Stat(d.Binary)
	return err1 == nil && err2 == nil && os.SameFile(a, b)
}

// Args returns the arguments the binary of slot runs with, given the
// agent's: Config.InstalledArgs first for the installed binary.
func (u *Updater) Args(slot string, args []string) []string {
	if slot == SlotInstalled && len(u.cfg.InstalledArgs) > 0 {
		return append(slices.Clone(u.cfg.InstalledArgs), args...)
	}
	return args
}

// Env returns env with the updater's variables set for running d.Binary as
// the start Boot decided: the boot token of a trial, the installed path.
func (u *Updater) Env(d Decision, env []string) []string {
	env = withoutVars(env, EnvBootToken, EnvInstalled)
	if d.token != "" {
		env = append(env, EnvBootToken+"="+d.token)
	}
	return append(env, EnvInstalled+"="+u.installed())
}

func withoutVars(env []string, names ...string) []string {
	out := make([]string, 0, len(env)+2)
next:
	for _, kv := range env {
		for _, n := range names {
			if strings.HasPrefix(kv, n+"=") {
				continue next
			}
		}
		out = append(out, kv)
	}
	return out
}

// Exec replaces the running process (same PID: a supervisor or systemd sees
// no exit) with the binary the state names: the trial slot if there is a
// trial, else the committed slot, else the installed binary. After
// InstallAgent the new binary's Boot counts its first start; after Boot
// chose a trial slot Exec passes the boot token so it is not counted twice.
// args are the agent's arguments after the program's name
// (Config.InstalledArgs go before them for the installed binary). It
// returns only on error.
func (u *Updater) Exec(args, env []string) error {
	u.mu.Lock()
	s, err := u.load()
	u.mu.Unlock()
	if err != nil {
		return fmt.Errorf("exec: %w", err)
	}
	d := Decision{Slot: SlotInstalled}
	switch {
	case s.Trial != nil:
		d.Slot = s.Trial.Slot
		if s.Trial.Boots > 0 {
			d.token = bootToken(s.Trial)
		}
	case s.Committed != nil:
		d.Slot = s.Committed.Slot
	}
	bin := u.SlotPath(d.Slot)
	env = u.Env(d, env)
	argv := append([]string{bin}, u.Args(d.Slot, args)...)
	u.log.Info("exec", "binary", bin)
	if err := syscall.Exec(bin, argv, env); err != nil {
		return fmt.Errorf("exec %s: %w", bin, err)
	}
	return nil
}

// InstallAgent installs the agent artifact at artifactPath, of release and
// version, into the inactive slot and marks it on trial for window. It first
// verifies the artifact against c itself (size, chunks, sha256) and refuses
// (*Error) a version that failed here, one below the highest committed unless
// allowDowngrade (the signed manifest's AllowDowngradeFrom covers it, as
// firmware/manifest decides), and a trial in progress (ErrTrialInProgress).
// The caller then calls Exec to run the new slot.
func (u *Updater) InstallAgent(ctx context.Context, release, version, artifactPath string, c manifest.Component, window time.Duration, allowDowngrade bool) error {
	if c.Kind != manifest.KindAgent {
		return refuse(WrongKind, "component %s is of kind %q, not %q", c.Name, c.Kind, manifest.KindAgent)
	}
	if c.OS != runtime.GOOS || c.Arch != runtime.GOARCH {
		return refuse(WrongPlatform, "component %s is for %s/%s, this node is %s/%s", c.Name, c.OS, c.Arch, runtime.GOOS, runtime.GOARCH)
	}
	if err := verifyArtifact(&c, artifactPath); err != nil {
		return err
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	s, err := u.load()
	if err != nil {
		return fmt.Errorf("install: %w", err)
	}
	ev := installAgent{component: c.Name, release: release, version: version, size: c.Size, sha256: c.SHA256,
		window: window, maxBoots: u.cfg.MaxBoots, allowDowngrade: allowDowngrade, now: u.cfg.Now()}
	n, slot, err := planInstallAgent(s, ev)
	if err != nil {
		return err
	}
	if err := u.step(StepVerified); err != nil {
		return err
	}
	dst := u.SlotPath(slot)
	removeTemps(filepath.Join(filepath.Dir(dst), "."+BinaryName+".tmp-*"))
	if err := u.copyVerified(ctx, &c, artifactPath, dst, 0o755, StepSlotTemp); err != nil {
		return fmt.Errorf("install into slot %s: %w", slot, err)
	}
	if err := u.step(StepSlotWritten); err != nil {
		return err
	}
	if err := u.save(n); err != nil {
		return fmt.Errorf("install: mark the trial: %w", err)
	}
	u.log.Info("installed agent", "release", release, "version", version, "slot", slot)
	return u.step(StepTrialMarked)
}

// verifyArtifact checks the file at path against c; a mismatch is an *Error
// with Reason DigestMismatch.
func verifyArtifact(c *manifest.Component, path string) error {
	if err := c.VerifyFile(path); err != nil {
		if manifest.ReasonOf(err) != "" {
			return refuse(DigestMismatch, "%v", err)
		}
		return err
	}
	return nil
}

// copyVerified copies src to dst with mode perm: into a temporary file in
// dst's directory, checked against c as it is written, synced, renamed,
// and the directory synced. Calls AfterStep(tempStep) before the rename.
func (u *Updater) copyVerified(ctx context.Context, c *manifest.Component, src, dst string, perm fs.FileMode, tempStep string) (err error) {
	dir := filepath.Dir(dst)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := atomicfile.SyncDir(filepath.Dir(dir)); err != nil {
		return err
	}
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(dst)+".tmp-*")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	v := manifest.NewVerifier(c)
	if _, err := io.Copy(io.MultiWriter(tmp, v), ctxReader{ctx, in}); err != nil {
		if manifest.ReasonOf(err) != "" {
			return refuse(DigestMismatch, "%v", err)
		}
		return err
	}
	if err := v.Close(); err != nil {
		return refuse(DigestMismatch, "%v", err)
	}
	if err := tmp.Chmod(perm); err != nil {
		return err
	}
	if err := tmp.Sync(); err != nil {
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := u.step(tempStep); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), dst); err != nil {
		return err
	}
	return atomicfile.SyncDir(dir)
}

// ctxReader stops a copy when ctx ends.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (r ctxReader) Read(p []byte) (int, error) {
	if err := r.ctx.Err(); err != nil {
		return 0, err
	}
	return r.r.Read(p)
}

// removeTemps removes the temporary files a crash left behind.
func removeTemps(pattern string) {
	names, _ := filepath.Glob(pattern)
	for _, n := range names {
		os.Remove(n)
	}
}

// Commit makes the trial slot the committed one (the previous committed
// slot is kept for RevertCommitted) and raises the highest committed
// version. Only the trial binary may call it, once its health check
// passed: ErrNoTrial without a trial, ErrTrialNotStarted before its Boot.
func (u *Updater) Commit() error {
	return u.transition(StepCommitted, func(s *State, now time.Time) (*State, error) { return planCommit(s, now) })
}

// Revert ends the trial as failed with reason and message (recorded in the
// failed versions and the last outcome). The caller then calls Exec to run
// the committed slot. ErrNoTrial without a trial.
func (u *Updater) Revert(reason Reason, message string) error {
	return u.transition(StepReverted, func(s *State, now time.Time) (*State, error) {
		return planRevert(s, reason, message, now)
	})
}

// RevertCommitted goes back from the committed version to the previous one,
// on the hub's order (a rollout's Revert action); the reverted version is
// recorded failed and the highest committed version becomes the previous
// one's. The caller then calls Exec. ErrNoPrevious if there is none,
// ErrTrialInProgress during a trial.
func (u *Updater) RevertCommitted(reason Reason, message string) error {
	return u.transition(StepReverted, func(s *State, now time.Time) (*State, error) {
		return planRevertCommitted(s, reason, message, now)
	})
}

func (u *Updater) transition(step string, plan func(*State, time.Time) (*State, error)) error {
	u.mu.Lock()
	defer u.mu.Unlock()
	s, err := u.load()
	if err != nil {
		return err
	}
	n, err := plan(s, u.cfg.Now())
	if err != nil {
		return err
	}
	if err := u.save(n); err != nil {
		return err
	}
	if o := n.LastOutcome; o != nil {
		u.log.Info("firmware "+string(o.State), "version", o.Version, "reason", o.Reason, "message", o.Message)
	}
	return u.step(step)
}

// Trial returns the agent's trial and true, or false if there is none (or
// the state does not read). Its Deadline is when the agent must have
// committed; the caller owns the copy.
func (u *Updater) Trial() (*Trial, bool) {
	s, err := u.State()
	if err != nil || s.Trial == nil {
		return nil, false
	}
	return s.Trial, true
}

// State returns a copy of the state on disk, owned by the caller.
func (u *Updater) State() (*State, error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.load()
}

// Base returns the path of the committed artifact of a component, the base
// for a delta download: the committed slot's binary for the agent component,
// the stored artifact for a file component. False if there is none.
func (u *Updater) Base(component string) (string, bool) {
	s, err := u.State()
	if err != nil {
		return "", false
	}
	var p string
	if s.AgentComponent == component && s.Committed != nil {
		p = u.SlotPath(s.Committed.Slot)
	} else if rec := fileRecord(s, component); rec != nil && rec.Committed != nil {
		p = u.filePath(component, rec.Committed.SHA256)
	} else {
		return "", false
	}
	if _, err := os.Stat(p); err != nil {
		return "", false
	}
	return p, true
}
