package childhub

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Hub is a hub run as a child process: `outpost hub` on a data dir
// with given API and sync addresses, so that it can be restarted on the
// same ones.
type Hub struct {
	cmd    *exec.Cmd
	stdout *exportLine
	stderr *tailBuffer
	exited chan struct{} // closed once Wait returned
	err    error         // Wait's result, set before exited is closed
}

// exportPrefix starts the line `outpost hub` prints on stdout once ready.
const exportPrefix = "export KUBECONFIG="

// Start starts binary as a hub keeping its state in dataDir, serving
// the API on apiAddr (port 0: the kernel picks, and the hub writes the
// port it got into its kubeconfig) and sync on syncAddr, with extra
// flags of `outpost hub` after those. It returns once the process runs;
// wait for ready with Kubeconfig. The caller must call Stop or Kill.
func Start(binary, dataDir, apiAddr, syncAddr string, extra ...string) (*Hub, error) {
	h := &Hub{
		stdout: &exportLine{found: make(chan struct{})},
		stderr: &tailBuffer{max: 16 << 10},
		exited: make(chan struct{}),
	}
	args := append([]string{"hub", "--data-dir", dataDir, "--api-addr", apiAddr, "--sync-addr", syncAddr}, extra...)
	h.cmd = exec.Command(binary, args...)
	h.cmd.Stdout = h.stdout
	h.cmd.Stderr = h.stderr
	if err := h.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start hub: %w", err)
	}
	go func() {
		h.err = h.cmd.Wait()
		close(h.exited)
	}()
	return h, nil
}

// PID returns the hub's process id.
func (h *Hub) PID() int { return h.cmd.Process.Pid }

// Kubeconfig waits, at most timeout, for the hub's export line and returns
// the kubeconfig path it names.
func (h *Hub) Kubeconfig(ctx context.Context, timeout time.Duration) (string, error) {
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-h.stdout.found:
		return h.stdout.path(), nil
	case <-h.exited:
		// The line may have come just before the exit.
		select {
		case <-h.stdout.found:
			return h.stdout.path(), nil
		default:
		}
		return "", fmt.Errorf("hub exited before it was ready: %v%s", h.err, h.stderr.indented())
	case <-t.C:
		return "", fmt.Errorf("hub not ready within %v%s", timeout, h.stderr.indented())
	case <-ctx.Done():
		return "", ctx.Err()
	}
}

// Kill ends the hub with SIGKILL, as a power cut or an OOM kill would, and
// waits for it to be gone.
func (h *Hub) Kill() {
	h.cmd.Process.Kill()
	<-h.exited
}

// Stop sends SIGTERM, waits at most timeout for the hub to exit, kills it
// if it has not, and returns how it ended. It is safe to call after the hub
// has exited on its own, and more than once.
func (h *Hub) Stop(timeout time.Duration) string {
	if err := h.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		h.cmd.Process.Kill()
		<-h.exited
		return fmt.Sprintf("killed: SIGTERM failed: %v", err)
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-h.exited:
	case <-t.C:
		h.cmd.Process.Kill()
		<-h.exited
		return fmt.Sprintf("killed after not exiting within %v of SIGTERM", timeout)
	}
	if h.err != nil {
		return h.err.Error()
	}
	return h.cmd.ProcessState.String()
}

// FreeUDPAddr returns a loopback UDP address that was free a moment ago:
// the hub's sync address must be known before it starts, so that it can be
// restarted on the same one.
func FreeUDPAddr() (string, error) {
	c, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("find a free UDP port: %w", err)
	}
	addr := c.LocalAddr().String()
	c.Close()
	return addr, nil
}

// APIAddr returns the host:port of a kubeconfig's server URL.
func APIAddr(server string) (string, error) {
	u, err := url.Parse(server)
	if err != nil || u.Host == "" || u.Port() == "" {
		return "", fmt.Errorf("kubeconfig server %q has no host:port", server)
	}
	return u.Host, nil
}

// exportLine is the hub's stdout: it watches for the export line and
// discards everything else.
type exportLine struct {
	mu      sync.Mutex
	partial []byte // an unfinished line
	kc      string
	found   chan struct{} // closed once kc is set
}

func (e *exportLine) Write(p []byte) (int, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.kc != "" {
		return len(p), nil
	}
	e.partial = append(e.partial, p...)
	for {
		i := bytes.IndexByte(e.partial, '\n')
		if i < 0 {
			break
		}
		line := strings.TrimSpace(string(e.partial[:i]))
		e.partial = e.partial[i+1:]
		if path, ok := strings.CutPrefix(line, exportPrefix); ok && path != "" {
			e.kc = path
			e.partial = nil
			close(e.found)
			break
		}
	}
	if len(e.partial) > 64<<10 {
		e.partial = nil // no line that long is the one wanted
	}
	return len(p), nil
}

func (e *exportLine) path() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.kc
}

// tailBuffer keeps the last max bytes written to it; it is safe for
// concurrent use.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	buf []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if over := len(t.buf) - t.max; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	return len(p), nil
}

// indented returns the kept output as indented lines after a newline, or "".
func (t *tailBuffer) indented() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := strings.TrimSpace(string(t.buf))
	if s == "" {
		return ""
	}
	return "\n    " + strings.ReplaceAll(s, "\n", "\n    ")
}
