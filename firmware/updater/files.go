package updater

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"github.com/outpost-mesh/outpost/firmware/manifest"
)

// MaxHookOutput is how much of the hook's output (stdout and stderr
// together, the first bytes) goes into a failure message.
const MaxHookOutput = 4 << 10

// Hook verbs besides an artifact path.
const (
	HookCommit = "commit"
	HookRevert = "revert"
)

// filePath is where a file component's artifact of digest sha is kept:
// files/<sha256 of the name>/<sha>, so that no part of the path comes
// from the component's name.
func (u *Updater) filePath(name, sha string) string {
	h := sha256.Sum256([]byte(name))
	return filepath.Join(u.cfg.Dir, "files", hex.EncodeToString(h[:16]), sha)
}

// InstallFile installs a file component: it verifies the artifact against c
// itself, refuses what InstallAgent refuses, stores it under the directory,
// marks the trial, and runs `HOOK <stored artifact path>` with only
// OUTPOST_COMPONENT and OUTPOST_VERSION in the environment. If the hook
// fails, `HOOK revert` runs, the version is recorded failed and the
// returned *Error (HookFailed) carries the start of the hook's output.
// The trial then ends with CommitFile or RevertFile.
func (u *Updater) InstallFile(ctx context.Context, release, version, artifactPath string, c manifest.Component, window time.Duration, allowDowngrade bool) error {
	if c.Kind != manifest.KindFile {
		return refuse(WrongKind, "component %s is of kind %q, not %q", c.Name, c.Kind, manifest.KindFile)
	}
	if u.cfg.Hook == "" {
		return refuse(NoHook, "component %s: no install hook is configured on this node", c.Name)
	}
	if err := verifyArtifact(&c, artifactPath); err != nil {
		return err
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	s, err := u.load()
	if err != nil {
		return fmt.Errorf("install %s: %w", c.Name, err)
	}
	ev := installFile{FileState: FileState{Release: release, Version: version, Size: c.Size, SHA256: c.SHA256},
		name: c.Name, window: window, allowDowngrade: allowDowngrade, now: u.cfg.Now()}
	n, err := planInstallFile(s, ev)
	if err != nil {
		return err
	}
	if err := u.step(StepVerified); err != nil {
		return err
	}
	dst := u.filePath(c.Name, c.SHA256)
	if err := u.copyVerified(ctx, &c, artifactPath, dst, 0o644, StepSlotTemp); err != nil {
		return fmt.Errorf("install %s: store the artifact: %w", c.Name, err)
	}
	if err := u.step(StepFileCopied); err != nil {
		return err
	}
	if err := u.save(n); err != nil {
		return fmt.Errorf("install %s: mark the trial: %w", c.Name, err)
	}
	if err := u.step(StepFileMarked); err != nil {
		return err
	}
	out, herr := u.runHook(ctx, c.Name, version, dst)
	if err := u.step(StepFileHookDone); err != nil {
		return err
	}
	if herr != nil {
		msg := fmt.Sprintf("install hook: %v: %s", herr, out)
		if _, err := u.revertFileLocked(ctx, c.Name, HookFailed, msg); err != nil {
			return fmt.Errorf("install %s: %v; revert: %w", c.Name, herr, err)
		}
		return refuse(HookFailed, "component %s: %s", c.Name, cleanText(msg))
	}
	n, err = planFileInstalled(n, c.Name, u.cfg.Now())
	if err != nil {
		return err
	}
	if err := u.save(n); err != nil {
		return fmt.Errorf("install %s: %w", c.Name, err)
	}
	u.log.Info("installed file component", "component", c.Name, "version", version)
	return nil
}

// CommitFile runs `HOOK commit` for the component's trial and, if it
// succeeds, makes the trial's artifact the committed one (the base for the
// next delta) and removes the one it replaces. The hook's verbs must be
// idempotent: a crash after the hook and before the state is written runs
// the verb again. ErrNoTrial without a trial.
func (u *Updater) CommitFile(ctx context.Context, name string) error {
	u.mu.Lock()
	defer u.mu.Unlock()
	s, err := u.load()
	if err != nil {
		return err
	}
	rec := fileRecord(s, name)
	if rec == nil || rec.Trial == nil {
		return ErrNoTrial
	}
	if out, err := u.runHook(ctx, name, rec.Trial.Version, HookCommit); err != nil {
		return refuse(HookFailed, "component %s: commit hook: %v: %s", name, err, cleanText(out))
	}
	n, old, err := planCommitFile(s, name, u.cfg.Now())
	if err != nil {
		return err
	}
	if err := u.save(n); err != nil {
		return err
	}
	if old != "" {
		os.Remove(u.filePath(name, old))
	}
	return u.step(StepCommitted)
}

// RevertFile runs `HOOK revert` for the component's trial and records its
// version failed with reason and message. The trial ends even if the hook
// fails; its error is returned. ErrNoTrial without a trial.
func (u *Updater) RevertFile(ctx context.Context, name string, reason Reason, message string) error {
	u.mu.Lock()
	defer u.mu.Unlock()
	_, err := u.revertFileLocked(ctx, name, reason, message)
	return err
}

func (u *Updater) revertFileLocked(ctx context.Context, name string, reason Reason, message string) (*State, error) {
	s, err := u.load()
	if err != nil {
		return nil, err
	}
	rec := fileRecord(s, name)
	if rec == nil || rec.Trial == nil {
		return nil, ErrNoTrial
	}
	out, herr := u.runHook(ctx, name, rec.Trial.Version, HookRevert)
	if herr != nil {
		message = fmt.Sprintf("%s; revert hook: %v: %s", message, herr, out)
	}
	n, drop, err := planRevertFile(s, name, reason, message, u.cfg.Now())
	if err != nil {
		return nil, err
	}
	if err := u.save(n); err != nil {
		return nil, err
	}
	if drop != "" {
		os.Remove(u.filePath(name, drop))
	}
	if err := u.step(StepReverted); err != nil {
		return nil, err
	}
	if herr != nil {
		return n, refuse(HookFailed, "component %s: revert hook: %v: %s", name, herr, cleanText(out))
	}
	return n, nil
}

// RecoverFiles reverts the file trials that d (from Boot) says must be: a
// hook interrupted by a crash, a window that passed. The agent calls it
// after Boot, once it runs. It returns the first error and goes on.
func (u *Updater) RecoverFiles(ctx context.Context, d Decision) error {
	var first error
	for _, r := range d.FileReverts {
		if err := u.RevertFile(ctx, r.Component, r.Reason, r.Message); err != nil && !errors.Is(err, ErrNoTrial) && first == nil {
			first = err
		}
	}
	return first
}

// FileTrials returns the file components on trial, by name; the caller owns
// the map.
func (u *Updater) FileTrials() map[string]FileTrial {
	s, err := u.State()
	if err != nil {
		return nil
	}
	m := map[string]FileTrial{}
	for _, f := range s.Files {
		if f.Trial != nil {
			m[f.Name] = *f.Trial
		}
	}
	return m
}

// runHook runs the hook with the single argument arg (an artifact path or a
// verb), OUTPOST_COMPONENT and OUTPOST_VERSION as its only environment, no
// shell, within HookTimeout, in a process group of its own that is killed
// on timeout. It returns the first MaxHookOutput bytes of its output.
func (u *Updater) runHook(ctx context.Context, component, version, arg string) (string, error) {
	if err := checkText("component", component, false); err != nil {
		return "", err
	}
	if err := checkVersion(version); err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(ctx, u.cfg.HookTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, u.cfg.Hook, arg)
	cmd.Env = []string{"OUTPOST_COMPONENT=" + component, "OUTPOST_VERSION=" + version}
	cmd.Dir = "/"
	var out headBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	err := cmd.Run()
	if ctx.Err() != nil && err != nil {
		err = fmt.Errorf("%w (timeout %v)", err, u.cfg.HookTimeout)
	}
	return out.String(), err
}

// headBuffer keeps the first MaxHookOutput bytes written to it and discards
// the rest, so a chatty hook neither blocks nor fills memory.
type headBuffer struct{ b bytes.Buffer }

func (h *headBuffer) Write(p []byte) (int, error) {
	if room := MaxHookOutput - h.b.Len(); room > 0 {
		h.b.Write(p[:min(room, len(p))])
	}
	return len(p), nil
}

func (h *headBuffer) String() string { return h.b.String() }
