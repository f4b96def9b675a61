package e2e

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const (
	// hubReadyTimeout bounds the wait for the export line: the first start
	// creates the CA and certificates, and the race-built hub is slow on a
	// busy machine.
	hubReadyTimeout = 90 * time.Second
	// hubStopGrace is how long a hub may take to exit after SIGTERM before
	// it is killed; hubd gives its server 10s to drain.
	hubStopGrace = 20 * time.Second
)

// hub is an `outpost hub` process.
type hub struct {
	proc       *proc
	dataDir    string
	kubeconfig string // from the export line it printed
}

// startHub runs `outpost hub` with a fresh data directory on a free
// loopback port and returns it once it printed its export line. The hub is
// stopped when the test ends, and the test fails unless it then exits
// cleanly on SIGTERM.
//
// Port 0 lets the kernel pick the port as the hub binds it, so two hubs
// never race for one; the kubeconfig the hub writes names the bound port.
// extra are more flags of `outpost hub`.
func startHub(t *testing.T, extra ...string) *hub {
	t.Helper()
	bin := outpostBinary(t)
	dataDir := filepath.Join(t.TempDir(), "hub")
	// No CommandContext: the hub is stopped with SIGTERM by stopHub, not
	// killed when a context ends.
	args := append([]string{"hub", "--data-dir", dataDir, "--api-addr", "127.0.0.1:0", "--sync-addr", "127.0.0.1:0"}, extra...)
	cmd := exec.Command(bin, args...)
	p := startProc(t, cmd)
	h := &hub{proc: p, dataDir: dataDir}
	t.Cleanup(func() { h.stop(t) })

	const prefix = "export KUBECONFIG="
	out := p.waitOutput(t, hubReadyTimeout, "the export line", false, func(s string) bool {
		return strings.Contains(s, prefix) && strings.Contains(s[strings.Index(s, prefix):], "\n")
	})
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), prefix); ok {
			h.kubeconfig = v
		}
	}
	if want := filepath.Join(dataDir, "admin.kubeconfig"); h.kubeconfig != want {
		t.Fatalf("hub printed %q, want %s%s\n%s", strings.TrimSpace(out), prefix, want, p.describe())
	}
	if _, err := os.Stat(h.kubeconfig); err != nil {
		t.Fatalf("hub printed its export line before writing the kubeconfig: %v\n%s", err, p.describe())
	}
	return h
}

// stop sends SIGTERM and fails the test unless the hub exits with status 0
// within hubStopGrace, without a data race report. It logs the hub's output
// when the test failed.
func (h *hub) stop(t *testing.T) {
	t.Helper()
	err, killed := h.proc.stop(hubStopGrace)
	switch {
	case killed:
		t.Errorf("hub did not exit within %v of SIGTERM; killed it\n%s", hubStopGrace, h.proc.describe())
	case err != nil:
		t.Errorf("hub exited with %v after SIGTERM, want status 0\n%s", err, h.proc.describe())
	case strings.Contains(h.proc.stderr.String(), "WARNING: DATA RACE"):
		t.Errorf("hub reported a data race\n%s", h.proc.describe())
	case t.Failed():
		t.Logf("hub output:\n%s", h.proc.describe())
	}
}
