package updater

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/outpost-mesh/outpost/firmware/manifest"
)

// hookScript is an install hook that logs its argument count, each
// argument and its environment, copies an artifact to installed, and
// fails with output while the file "fail" exists.
const hookScript = `#!/bin/sh
d=%q
echo "argc=$#" >> "$d/log"
for a in "$@"; do echo "arg=[$a]" >> "$d/log"; done
env | sort > "$d/env"
if [ -e "$d/fail" ]; then echo "flash failed: bad block"; exit 7; fi
case "$1" in
commit|revert) ;;
*) cp "$1" "$d/installed" || exit 1 ;;
esac
`

func writeHook(t *testing.T, body string) (hook, hookDir string) {
	t.Helper()
	hookDir = t.TempDir()
	hook = filepath.Join(hookDir, "install-hook")
	if err := os.WriteFile(hook, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	return hook, hookDir
}

func readLog(t *testing.T, hookDir string) string {
	t.Helper()
	b, _ := os.ReadFile(filepath.Join(hookDir, "log"))
	os.Remove(filepath.Join(hookDir, "log"))
	return string(b)
}

func TestFileHookProtocol(t *testing.T) {
	hookDir := t.TempDir()
	hook := filepath.Join(hookDir, "install-hook")
	if err := os.WriteFile(hook, fmt.Appendf(nil, hookScript, hookDir), 0o755); err != nil {
		t.Fatal(err)
	}
	f := newFixture(t)
	cfg := DefaultConfig(f.dir)
	cfg.Hook = hook
	u, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	// A name no manifest would pass, to show no shell sees it.
	name := `modem; touch /tmp/pwned $(id) "x" 'y' *`
	content := bytes.Repeat([]byte("firmware 1.0.0\n"), 500)
	path, c := artifact(t, f.tmp, name, manifest.KindFile, content)
	ctx := context.Background()
	if err := u.InstallFile(ctx, "rel", "1.0.0", path, c, time.Minute, false); err != nil {
		t.Fatal(err)
	}
	log := readLog(t, hookDir)
	lines := strings.Split(strings.TrimSpace(log), "\n")
	if len(lines) != 2 || lines[0] != "argc=1" || !strings.HasPrefix(lines[1], "arg=[") {
		t.Fatalf("hook log = %q, want one argument", log)
	}
	arg := strings.TrimSuffix(strings.TrimPrefix(lines[1], "arg=["), "]")
	if !strings.HasPrefix(arg, f.dir+string(filepath.Separator)) || strings.ContainsAny(arg, ";$'\"* ") {
		t.Errorf("hook argument %q: want a plain path under %s", arg, f.dir)
	}
	if got, _ := os.ReadFile(arg); !bytes.Equal(got, content) {
		t.Errorf("hook argument %q does not hold the artifact", arg)
	}
	if got, _ := os.ReadFile(filepath.Join(hookDir, "installed")); !bytes.Equal(got, content) {
		t.Errorf("the hook did not get the artifact")
	}
	env, _ := os.ReadFile(filepath.Join(hookDir, "env"))
	for _, kv := range strings.Split(strings.TrimSpace(string(env)), "\n") {
		k, v, _ := strings.Cut(kv, "=")
		switch k {
		case "OUTPOST_COMPONENT":
			if v != name {
				t.Errorf("OUTPOST_COMPONENT=%q, want %q", v, name)
			}
		case "OUTPOST_VERSION":
			if v != "1.0.0" {
				t.Errorf("OUTPOST_VERSION=%q", v)
			}
		case "PWD", "SHLVL", "_", "OLDPWD": // set by the shell itself
		default:
			t.Errorf("the hook's environment has %q", kv)
		}
	}
	if _, err := os.Stat("/tmp/pwned"); err == nil {
		t.Errorf("/tmp/pwned exists: a shell interpreted the name")
	}
	if tr := u.FileTrials(); tr[name].Phase != PhaseInstalled {
		t.Fatalf("FileTrials() = %+v", tr)
	}
	if _, ok := u.Base(name); ok {
		t.Errorf("Base before commit = ok")
	}
	if err := u.CommitFile(ctx, name); err != nil {
		t.Fatal(err)
	}
	if log := readLog(t, hookDir); log != "argc=1\narg=[commit]\n" {
		t.Errorf("commit hook log = %q", log)
	}
	base, ok := u.Base(name)
	if got, _ := os.ReadFile(base); !ok || !bytes.Equal(got, content) {
		t.Fatalf("Base(%q) = %q, %v, want the committed artifact", name, base, ok)
	}

	// A failing hook: reverted, recorded, the base kept.
	os.WriteFile(filepath.Join(hookDir, "fail"), nil, 0o644)
	path2, c2 := artifact(t, f.tmp, name, manifest.KindFile, bytes.Repeat([]byte("firmware 1.1.0\n"), 500))
	err = u.InstallFile(ctx, "rel", "1.1.0", path2, c2, time.Minute, false)
	if ReasonOf(err) != HookFailed || !strings.Contains(err.Error(), "flash failed: bad block") {
		t.Fatalf("InstallFile with a failing hook = %v, want HookFailed with its output", err)
	}
	if log := readLog(t, hookDir); !strings.Contains(log, "arg=[revert]") {
		t.Errorf("failing install: hook log %q, want a revert", log)
	}
	os.Remove(filepath.Join(hookDir, "fail"))
	if b2, _ := u.Base(name); b2 != base {
		t.Errorf("Base after a failed install = %q, want %q", b2, base)
	}
	if err := u.InstallFile(ctx, "rel", "1.1.0", path2, c2, time.Minute, false); ReasonOf(err) != AlreadyFailed {
		t.Errorf("install of the failed version = %v, want AlreadyFailed", err)
	}
	path0, c0 := artifact(t, f.tmp, name, manifest.KindFile, []byte("old firmware"))
	if err := u.InstallFile(ctx, "rel", "0.9.0", path0, c0, time.Minute, false); ReasonOf(err) != Downgrade {
		t.Errorf("install of a lower version = %v, want Downgrade", err)
	}

	// A trial the agent reverts.
	path3, c3 := artifact(t, f.tmp, name, manifest.KindFile, []byte("firmware 1.2.0"))
	if err := u.InstallFile(ctx, "rel", "1.2.0", path3, c3, time.Minute, false); err != nil {
		t.Fatal(err)
	}
	readLog(t, hookDir)
	if err := u.RevertFile(ctx, name, Unhealthy, "the modem does not register"); err != nil {
		t.Fatal(err)
	}
	if log := readLog(t, hookDir); log != "argc=1\narg=[revert]\n" {
		t.Errorf("revert hook log = %q", log)
	}
	s, _ := u.State()
	if got := fmt.Sprint(s.FailedVersions()); got != "[1.1.0 1.2.0]" {
		t.Errorf("failed = %s", got)
	}
	if err := u.CommitFile(ctx, name); !errors.Is(err, ErrNoTrial) {
		t.Errorf("CommitFile without a trial = %v", err)
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(base), c3.SHA256)); err == nil {
		t.Errorf("the reverted artifact is still stored")
	}
}

func TestFileHookTimeoutAndOutput(t *testing.T) {
	// The hook prints far more than is kept, then hangs with a child
	// holding its output open.
	hook, _ := writeHook(t, "#!/bin/sh\nhead -c 100000 /dev/zero | tr '\\0' x\nsleep 60 &\nsleep 60\n")
	f := newFixture(t)
	cfg := DefaultConfig(f.dir)
	cfg.Hook = hook
	cfg.HookTimeout = 300 * time.Millisecond
	u, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	path, c := artifact(t, f.tmp, "cfg", manifest.KindFile, []byte("bundle"))
	start := time.Now()
	err = u.InstallFile(context.Background(), "rel", "1.0.0", path, c, time.Minute, false)
	if ReasonOf(err) != HookFailed {
		t.Fatalf("InstallFile with a hanging hook = %v, want HookFailed", err)
	}
	if d := time.Since(start); d > 20*time.Second {
		t.Errorf("the hook ran %v past its timeout", d)
	}
	s, _ := u.State()
	if len(s.Failed) != 1 || len(s.Failed[0].Message) > MaxHookOutput*2+1024 || !strings.Contains(s.Failed[0].Message, "xxxx") {
		t.Errorf("failure = %d bytes, want the start of the output, bounded", len(s.Failed[0].Message))
	}
}

func TestFileRefusals(t *testing.T) {
	f := newFixture(t)
	u := f.updater()
	path, c := artifact(t, f.tmp, "cfg", manifest.KindFile, []byte("bundle"))
	if err := u.InstallFile(context.Background(), "rel", "1.0.0", path, c, time.Minute, false); ReasonOf(err) != NoHook {
		t.Errorf("InstallFile without a hook = %v, want NoHook", err)
	}
	apath, ac := artifact(t, f.tmp, "agent", manifest.KindAgent, agentBytes("1.0.0"))
	if err := u.InstallFile(context.Background(), "rel", "1.0.0", apath, ac, time.Minute, false); ReasonOf(err) != WrongKind {
		t.Errorf("InstallFile(agent) = %v, want WrongKind", err)
	}
	if err := u.InstallAgent(context.Background(), "rel", "1.0.0", path, c, time.Minute, false); ReasonOf(err) != WrongKind {
		t.Errorf("InstallAgent(file) = %v, want WrongKind", err)
	}
}

// TestFileHookInterrupted: the agent dies while the hook installs; the next
// start lists the trial, and RecoverFiles reverts it through the hook.
func TestFileHookInterrupted(t *testing.T) {
	hookDir := t.TempDir()
	hook := filepath.Join(hookDir, "install-hook")
	if err := os.WriteFile(hook, fmt.Appendf(nil, hookScript, hookDir), 0o755); err != nil {
		t.Fatal(err)
	}
	f := newFixture(t)
	cfg := DefaultConfig(f.dir)
	cfg.Hook = hook
	cfg.AfterStep = func(step string) error {
		if step == StepFileMarked {
			return errCrash
		}
		return nil
	}
	u, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	path, c := artifact(t, f.tmp, "modem", manifest.KindFile, []byte("firmware 2.0.0"))
	if err := u.InstallFile(context.Background(), "rel", "2.0.0", path, c, time.Minute, false); !errors.Is(err, errCrash) {
		t.Fatalf("InstallFile = %v, want the crash", err)
	}
	cfg.AfterStep = nil
	u, _ = New(cfg)
	d, err := u.Boot()
	if err != nil {
		t.Fatal(err)
	}
	if len(d.FileReverts) != 1 || d.FileReverts[0].Component != "modem" || d.FileReverts[0].Reason != HookInterrupted {
		t.Fatalf("FileReverts = %+v", d.FileReverts)
	}
	if err := u.RecoverFiles(context.Background(), d); err != nil {
		t.Fatal(err)
	}
	if log := readLog(t, hookDir); log != "argc=1\narg=[revert]\n" {
		t.Errorf("hook log = %q, want a revert", log)
	}
	s, _ := u.State()
	if len(s.Failed) != 1 || s.Failed[0].Reason != HookInterrupted || len(u.FileTrials()) != 0 {
		t.Errorf("failed %+v trials %+v", s.Failed, u.FileTrials())
	}
}
