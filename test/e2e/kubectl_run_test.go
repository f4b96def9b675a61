package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// kubectlDir holds kubectl binaries of several minor versions, named
// kubectl.1.27 ... kubectl.1.33.
const kubectlDir = "/usr/lib/google-cloud-sdk/bin"

const (
	// kubectlTimeout bounds one kubectl command that should return by
	// itself.
	kubectlTimeout = 60 * time.Second
	// kubectlBackgroundTimeout bounds a kubectl command left running in the
	// background, such as `get -w`; the test stops it long before.
	kubectlBackgroundTimeout = 2 * time.Minute
	// waitTimeout bounds a wait for a background command to print
	// something or to exit after what it waited for happened.
	waitTimeout = 30 * time.Second
)

// kubectl runs one kubectl binary against one hub, in one namespace.
type kubectl struct {
	version    string // minor version, such as "1.27"
	bin        string
	kubeconfig string
	home       string // HOME, so the discovery cache is this test's own
	namespace  string // passed as --namespace to every command
}

// newKubectl returns the kubectl of the given minor version, or skips the
// test when that binary is not installed.
func newKubectl(t *testing.T, version string) *kubectl {
	t.Helper()
	bin := filepath.Join(kubectlDir, "kubectl."+version)
	if _, err := os.Stat(bin); err != nil {
		t.Skipf("kubectl %s is not installed: %v", version, err)
	}
	return &kubectl{version: version, bin: bin, home: t.TempDir()}
}

// result is what one kubectl command did.
type result struct {
	cmdline        string
	stdout, stderr string
	err            error // from Run: nil, an *exec.ExitError or a timeout
}

func (r result) String() string {
	return fmt.Sprintf("command: %s\nerror: %v\n--- stdout:\n%s\n--- stderr:\n%s", r.cmdline, r.err, r.stdout, r.stderr)
}

// lines returns the non-empty lines of stdout.
func (r result) lines() []string {
	var out []string
	for l := range strings.SplitSeq(r.stdout, "\n") {
		if strings.TrimSpace(l) != "" {
			out = append(out, l)
		}
	}
	return out
}

func (k *kubectl) command(ctx context.Context, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, k.bin, append([]string{"--namespace=" + k.namespace}, args...)...)
	cmd.Env = []string{"HOME=" + k.home, "KUBECONFIG=" + k.kubeconfig, "PATH=/usr/bin:/bin"}
	// Wait returns this long after the deadline killed kubectl even if
	// something still holds its output open.
	cmd.WaitDelay = 5 * time.Second
	return cmd
}

// exec runs kubectl with args and returns what it did, whether it succeeded
// or not.
func (k *kubectl) exec(t *testing.T, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), kubectlTimeout)
	defer cancel()
	cmd := k.command(ctx, args...)
	dieWithTest(cmd)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if ctx.Err() != nil {
		err = fmt.Errorf("timed out after %v: %w", kubectlTimeout, err)
	}
	return result{
		cmdline: "kubectl." + k.version + " " + strings.Join(cmd.Args[1:], " "),
		stdout:  stdout.String(),
		stderr:  stderr.String(),
		err:     err,
	}
}

// run runs kubectl and fails the test unless it exits with status 0.
func (k *kubectl) run(t *testing.T, args ...string) result {
	t.Helper()
	r := k.exec(t, args...)
	if r.err != nil {
		t.Fatalf("kubectl failed\n%s", r)
	}
	return r
}

// fail runs kubectl and fails the test unless it exits with a non-zero
// status (and not by a timeout).
func (k *kubectl) fail(t *testing.T, args ...string) result {
	t.Helper()
	r := k.exec(t, args...)
	if _, ok := r.err.(*exec.ExitError); !ok {
		t.Fatalf("kubectl: want a non-zero exit status\n%s", r)
	}
	return r
}

// jsonpath returns the output of `kubectl get args... -o jsonpath=expr`.
func (k *kubectl) jsonpath(t *testing.T, expr string, args ...string) string {
	t.Helper()
	return k.run(t, append(append([]string{"get"}, args...), "-o", "jsonpath="+expr)...).stdout
}

// start runs kubectl in the background until it exits or the test ends;
// the test then stops it.
func (k *kubectl) start(t *testing.T, args ...string) *proc {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), kubectlBackgroundTimeout)
	p := startProc(t, k.command(ctx, args...))
	p.name = "kubectl." + k.version + " " + strings.Join(p.cmd.Args[1:], " ")
	t.Cleanup(func() {
		p.stop(5 * time.Second)
		cancel()
	})
	return p
}

// wantLines fails the test unless r printed exactly the lines want.
func wantLines(t *testing.T, r result, want ...string) {
	t.Helper()
	if got := r.lines(); !slices.Equal(got, want) {
		t.Errorf("stdout lines = %q, want %q\n%s", got, want, r)
	}
}

// wantContains fails the test unless text contains each of subs; r is
// shown on failure.
func wantContains(t *testing.T, r result, text string, subs ...string) {
	t.Helper()
	for _, s := range subs {
		if !strings.Contains(text, s) {
			t.Errorf("output lacks %q\n%s", s, r)
		}
	}
}

// wantMatch fails the test unless text matches each of the regular
// expressions; r is shown on failure.
func wantMatch(t *testing.T, r result, text string, exprs ...string) {
	t.Helper()
	for _, e := range exprs {
		if !regexp.MustCompile(e).MatchString(text) {
			t.Errorf("output does not match %s\n%s", e, r)
		}
	}
}

// wantEqual fails the test unless got == want.
func wantEqual[T comparable](t *testing.T, what string, got, want T) {
	t.Helper()
	if got != want {
		t.Errorf("%s = %v, want %v", what, got, want)
	}
}
