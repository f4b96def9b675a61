package updater

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"testing"
	"time"

	firmwarev1 "github.com/outpost-mesh/outpost/firmware/apis/v1"
	"github.com/outpost-mesh/outpost/firmware/manifest"
)

// artifact writes content to a file in dir and returns its path and a
// component describing it.
func artifact(t *testing.T, dir, name, kind string, content []byte) (string, manifest.Component) {
	t.Helper()
	sum := sha256.Sum256(content)
	path := filepath.Join(dir, "artifact-"+hex.EncodeToString(sum[:8]))
	if err := os.WriteFile(path, content, 0o644); err != nil {
		t.Fatal(err)
	}
	goos, arch := runtime.GOOS, runtime.GOARCH
	if kind == manifest.KindFile {
		goos, arch = "", ""
	}
	c, err := manifest.ComponentFromFile("x", kind, goos, arch, "", path, manifest.MinChunkSize)
	if err != nil {
		t.Fatal(err)
	}
	c.Name = name // may be one the manifest would refuse
	return path, c
}

// agentBytes is a fake agent binary of a version, large enough for a few
// chunks.
func agentBytes(version string) []byte {
	return bytes.Repeat([]byte("#!/bin/false agent "+version+"\n"), 1000)
}

type fixture struct {
	t         *testing.T
	dir, tmp  string
	installed string
	now       time.Time
	crashAt   string
}

func newFixture(t *testing.T) *fixture {
	f := &fixture{t: t, dir: filepath.Join(t.TempDir(), "firmware"), tmp: t.TempDir(), now: t0}
	f.installed = filepath.Join(f.tmp, "installed-outpost-edge")
	if err := os.WriteFile(f.installed, agentBytes("0.1.0"), 0o755); err != nil {
		t.Fatal(err)
	}
	return f
}

// updater returns a new Updater on the fixture's directory, as a new
// process would have.
func (f *fixture) updater() *Updater {
	f.t.Helper()
	cfg := DefaultConfig(f.dir)
	cfg.Installed = f.installed
	cfg.Now = func() time.Time { return f.now }
	cfg.AfterStep = func(step string) error {
		if step == f.crashAt {
			return errCrash
		}
		return nil
	}
	u, err := New(cfg)
	if err != nil {
		f.t.Fatal(err)
	}
	return u
}

var errCrash = errors.New("simulated crash")

func (f *fixture) install(u *Updater, version string, allow bool) error {
	path, c := artifact(f.t, f.tmp, "agent", manifest.KindAgent, agentBytes(version))
	return u.InstallAgent(context.Background(), "rel-"+version, version, path, c, 5*time.Minute, allow)
}

// boot is a new start of the agent.
func (f *fixture) boot() Decision {
	f.t.Helper()
	d, err := f.updater().boot("")
	if err != nil {
		f.t.Fatalf("Boot: %v", err)
	}
	return d
}

// checkRunnable checks that d names a binary that holds the agent of d's
// version.
func (f *fixture) checkRunnable(d Decision) {
	f.t.Helper()
	got, err := os.ReadFile(d.Binary)
	if err != nil {
		f.t.Fatalf("decision %+v: %v", d, err)
	}
	want := agentBytes(d.Version)
	if d.Slot == SlotInstalled {
		want = agentBytes("0.1.0")
	}
	if !bytes.Equal(got, want) {
		f.t.Fatalf("decision slot %q version %q: the binary is not that version's", d.Slot, d.Version)
	}
}

func TestInstallCommitRevert(t *testing.T) {
	f := newFixture(t)
	if d := f.boot(); d.Slot != SlotInstalled || d.Binary != f.installed {
		t.Fatalf("first boot = %+v, want the installed binary", d)
	}
	if _, err := os.Stat(filepath.Join(f.dir, "state.json")); err == nil {
		t.Errorf("first boot wrote a state; want nothing recorded before the first update")
	}
	u := f.updater()
	if err := f.install(u, "1.0.0", false); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(u.SlotPath(SlotA))
	if err != nil || fi.Mode().Perm() != 0o755 {
		t.Fatalf("slot a: %v %v, want mode 0755", fi, err)
	}
	if err := u.Commit(); !errors.Is(err, ErrTrialNotStarted) {
		t.Fatalf("Commit before the trial's boot = %v, want ErrTrialNotStarted", err)
	}
	d := f.boot()
	if d.Slot != SlotA || d.Trial == nil || d.Trial.Boots != 1 || d.token != "a:1:1.0.0" {
		t.Fatalf("boot after install = %+v", d)
	}
	f.checkRunnable(d)
	if tr, ok := u.Trial(); !ok || !tr.Deadline().Equal(t0.Add(5*time.Minute)) {
		t.Fatalf("Trial() = %+v, %v", tr, ok)
	}
	if err := u.Commit(); err != nil {
		t.Fatal(err)
	}
	if p, ok := u.Base("agent"); !ok || p != u.SlotPath(SlotA) {
		t.Errorf("Base(agent) = %q, %v", p, ok)
	}
	// A bad update is reverted by the agent's health check.
	if err := f.install(u, "1.1.0", false); err != nil {
		t.Fatal(err)
	}
	if err := f.install(u, "1.2.0", false); !errors.Is(err, ErrTrialInProgress) {
		t.Fatalf("install during a trial = %v", err)
	}
	if d := f.boot(); d.Slot != SlotB {
		t.Fatalf("boot = %+v", d)
	}
	if err := u.Revert(Unhealthy, "pods did not come back"); err != nil {
		t.Fatal(err)
	}
	d = f.boot()
	if d.Slot != SlotA || d.Version != "1.0.0" || d.LastOutcome.State != firmwarev1.StateReverted || d.LastOutcome.Reason != Unhealthy {
		t.Fatalf("boot after revert = %+v %+v", d, d.LastOutcome)
	}
	f.checkRunnable(d)
	for _, tc := range []struct {
		version string
		allow   bool
		want    Reason
	}{
		{"1.1.0", false, AlreadyFailed},
		{"0.9.0", false, Downgrade},
		{"1.0.0", false, AlreadyCommitted},
	} {
		if err := f.install(u, tc.version, tc.allow); ReasonOf(err) != tc.want {
			t.Errorf("InstallAgent(%s) = %v, want %s", tc.version, err, tc.want)
		}
	}
	// The signed manifest allows it.
	if err := f.install(u, "0.9.0", true); err != nil {
		t.Fatalf("allowed downgrade: %v", err)
	}
	f.boot()
	if err := u.Commit(); err != nil {
		t.Fatal(err)
	}
	// Hub-ordered revert back to the previous version.
	if err := u.RevertCommitted(RevertOrdered, "the rollout's budget tripped"); err != nil {
		t.Fatal(err)
	}
	d = f.boot()
	if d.Slot != SlotA || d.Version != "1.0.0" {
		t.Fatalf("boot after the ordered revert = %+v", d)
	}
	s, _ := u.State()
	if got := fmt.Sprint(s.FailedVersions()); got != "[1.1.0 0.9.0]" || s.Highest != "1.0.0" {
		t.Errorf("failed %s highest %s, want [1.1.0 0.9.0] 1.0.0", got, s.Highest)
	}
	if err := u.RevertCommitted(RevertOrdered, ""); !errors.Is(err, ErrNoPrevious) {
		t.Errorf("second ordered revert = %v, want ErrNoPrevious", err)
	}
}

func TestInstallRefusesBadArtifact(t *testing.T) {
	f := newFixture(t)
	u := f.updater()
	path, c := artifact(t, f.tmp, "agent", manifest.KindAgent, agentBytes("1.0.0"))
	data, _ := os.ReadFile(path)
	data[5000] ^= 1
	os.WriteFile(path, data, 0o644)
	err := u.InstallAgent(context.Background(), "r", "1.0.0", path, c, time.Minute, false)
	if ReasonOf(err) != DigestMismatch {
		t.Fatalf("InstallAgent(tampered) = %v, want DigestMismatch", err)
	}
	os.WriteFile(path, data[:100], 0o644)
	if err := u.InstallAgent(context.Background(), "r", "1.0.0", path, c, time.Minute, false); ReasonOf(err) != DigestMismatch {
		t.Fatalf("InstallAgent(truncated) = %v, want DigestMismatch", err)
	}
	c2 := c
	c2.Arch = "s390x"
	if runtime.GOARCH == "s390x" {
		c2.Arch = "amd64"
	}
	if err := u.InstallAgent(context.Background(), "r", "1.0.0", path, c2, time.Minute, false); ReasonOf(err) != WrongPlatform {
		t.Fatalf("InstallAgent(other arch) = %v, want WrongPlatform", err)
	}
	if _, err := os.Stat(f.dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a refused install wrote under %s", f.dir)
	}
}

func TestBootCorruptState(t *testing.T) {
	f := newFixture(t)
	u := f.updater()
	if err := f.install(u, "1.0.0", false); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(f.dir, "state.json"), []byte(`{"format":1,"committed":`), 0o600); err != nil {
		t.Fatal(err)
	}
	d, err := f.updater().boot("")
	if !errors.Is(err, ErrCorruptState) {
		t.Fatalf("Boot = %v, want ErrCorruptState", err)
	}
	if d.Binary != f.installed || d.Fallback == "" || d.LastOutcome == nil || d.LastOutcome.Reason != StateCorrupt {
		t.Fatalf("decision = %+v, want the installed binary and a reason", d)
	}
	if _, err := os.Stat(filepath.Join(f.dir, "state.json.corrupt")); err != nil {
		t.Errorf("corrupt state not kept aside: %v", err)
	}
	if d := f.boot(); d.Binary != f.installed {
		t.Fatalf("next boot = %+v", d)
	}
	// The node can update again.
	if err := f.install(f.updater(), "1.1.0", false); err != nil {
		t.Fatal(err)
	}
}

// TestCrashAtEveryStep stops each operation after each of its durable
// steps, as a power cut would, and checks that the next start runs a
// binary that is the version it claims, committed or on trial, and that
// finishing the protocol ends on one version.
func TestCrashAtEveryStep(t *testing.T) {
	type op func(f *fixture, u *Updater) error
	install := func(f *fixture, u *Updater) error { return f.install(u, "1.1.0", false) }
	installed := func(f *fixture) {
		if err := f.install(f.updater(), "1.1.0", false); err != nil {
			t.Fatal(err)
		}
	}
	started := func(f *fixture) { installed(f); f.boot() }
	for _, tc := range []struct {
		name    string
		setup   func(f *fixture)
		op      op
		step    string
		want    string // the version the node ends on
		wantErr bool   // the op reported the crash
	}{
		{"install/verified", nil, install, StepVerified, "1.1.0", true},
		{"install/slot-temp", nil, install, StepSlotTemp, "1.1.0", true},
		{"install/slot-written", nil, install, StepSlotWritten, "1.1.0", true},
		{"install/trial-marked", nil, install, StepTrialMarked, "1.1.0", true},
		{"commit/committed", started, func(f *fixture, u *Updater) error { return u.Commit() }, StepCommitted, "1.1.0", true},
		{"revert/reverted", started, func(f *fixture, u *Updater) error { return u.Revert(Unhealthy, "x") }, StepReverted, "1.0.0", true},
		{"trial crashed before commit", started, func(f *fixture, u *Updater) error { return nil }, "", "1.0.0", false},
		{"crashed before the trial's first start", installed, func(f *fixture, u *Updater) error { return nil }, "", "1.1.0", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			f.t = t
			u := f.updater()
			if err := f.install(u, "1.0.0", false); err != nil {
				t.Fatal(err)
			}
			f.boot()
			if err := u.Commit(); err != nil {
				t.Fatal(err)
			}
			if tc.setup != nil {
				tc.setup(f)
			}
			f.crashAt = tc.step
			err := tc.op(f, f.updater())
			if (err != nil) != tc.wantErr || (err != nil && !errors.Is(err, errCrash)) {
				t.Fatalf("op = %v, want the crash: %v", err, tc.wantErr)
			}
			f.crashAt = ""
			// The power comes back.
			d := f.boot()
			f.checkRunnable(d)
			if d.Version != "1.0.0" && d.Version != "1.1.0" {
				t.Fatalf("boot after the crash runs %q", d.Version)
			}
			u = f.updater()
			s, _ := u.State()
			if d.Trial == nil && (s.Committed == nil || s.Committed.Version != d.Version) {
				t.Fatalf("boot runs %q, neither committed (%+v) nor trial", d.Version, s.Committed)
			}
			// Finish the protocol: a trial that runs commits; an update
			// that never reached the trial is installed again.
			if d.Trial != nil {
				if err := u.Commit(); err != nil {
					t.Fatal(err)
				}
			} else if d.Version == "1.0.0" && tc.want == "1.1.0" {
				if err := f.install(u, "1.1.0", false); err != nil {
					t.Fatalf("install again: %v", err)
				}
				f.boot()
				if err := u.Commit(); err != nil {
					t.Fatal(err)
				}
			}
			d = f.boot()
			f.checkRunnable(d)
			s, _ = u.State()
			if d.Version != tc.want || s.Trial != nil || s.Committed.Version != tc.want {
				t.Fatalf("ends on %q (committed %+v, trial %+v), want %s", d.Version, s.Committed, s.Trial, tc.want)
			}
			leftovers, _ := filepath.Glob(filepath.Join(f.dir, "slots", "*", ".*"))
			if len(leftovers) != 0 {
				t.Errorf("temporary files left: %v", leftovers)
			}
		})
	}
}

func TestTrialWindowExpires(t *testing.T) {
	f := newFixture(t)
	u := f.updater()
	if err := f.install(u, "1.0.0", false); err != nil {
		t.Fatal(err)
	}
	d := f.boot()
	f.now = f.now.Add(5*time.Minute + time.Minute) // window + default grace
	d2, err := f.updater().boot(d.token)
	if err != nil {
		t.Fatal(err)
	}
	if !d2.Reverted || d2.LastOutcome.Reason != HealthWindowExpired || d2.Slot != SlotInstalled {
		t.Fatalf("boot past the deadline = %+v %+v", d2, d2.LastOutcome)
	}
}

// TestInstalledArgs: the multi-command outpost binary runs the agent as
// `outpost edge`; slot binaries are outpost-edge and take the flags alone.
func TestInstalledArgs(t *testing.T) {
	cfg := DefaultConfig(t.TempDir())
	cfg.InstalledArgs = []string{"edge"}
	u, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	args := []string{"--hub", "h:1"}
	if got := u.Args(SlotInstalled, args); !slices.Equal(got, []string{"edge", "--hub", "h:1"}) {
		t.Errorf("Args(installed) = %q", got)
	}
	if got := u.Args(SlotA, args); !slices.Equal(got, args) {
		t.Errorf("Args(a) = %q", got)
	}
	if !slices.Equal(args, []string{"--hub", "h:1"}) {
		t.Errorf("Args changed its argument: %q", args)
	}
}
