package updater

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/outpost-mesh/outpost/firmware/manifest"
	"github.com/outpost-mesh/outpost/internal/atomicfile"
	"github.com/outpost-mesh/outpost/internal/testlog"
	"github.com/outpost-mesh/outpost/internal/wait"
)

// The test agents: internal/testagent linked with a version and a mode.
var testAgents = map[string]string{
	"1.0.0": "ok",
	"1.1.0": "ok",
	"1.2.0": "crash",
	"1.3.0": "hang",
}

var (
	agentsOnce sync.Once
	agentsDir  string
	agentsErr  error
)

func TestMain(m *testing.M) {
	before := goroutines()
	code := m.Run()
	if agentsDir != "" {
		os.RemoveAll(agentsDir)
	}
	if code == 0 {
		// Every Supervise and child watcher must have exited.
		deadline := time.Now().Add(5 * time.Second)
		tick := time.NewTicker(10 * time.Millisecond)
		for len(goroutines()) > len(before) && time.Now().Before(deadline) {
			<-tick.C
		}
		tick.Stop()
		if now := goroutines(); len(now) > len(before) {
			fmt.Fprintf(os.Stderr, "goroutines leaked:\n%s\n", strings.Join(now, "\n\n"))
			code = 1
		}
	}
	os.Exit(code)
}

// goroutines returns the stacks of the goroutines other than the caller's
// and the runtime's signal loop (started by the fuzzing engine).
func goroutines() []string {
	buf := make([]byte, 1<<20)
	var out []string
	for i, g := range strings.Split(string(buf[:runtime.Stack(buf, true)]), "\n\n") {
		if i == 0 || strings.Contains(g, "os/signal.loop") {
			continue
		}
		out = append(out, g)
	}
	return out
}

// agentBinary returns the path of the test agent of version, building them
// all on first use.
func agentBinary(t *testing.T, version string) string {
	t.Helper()
	agentsOnce.Do(func() {
		agentsDir, agentsErr = os.MkdirTemp("", "updater-testagents-")
		if agentsErr != nil {
			return
		}
		goTool := filepath.Join(runtime.GOROOT(), "bin", "go")
		for v, mode := range testAgents {
			cmd := exec.Command(goTool, "build", "-tags", "grpcnotrace", "-o", filepath.Join(agentsDir, "agent-"+v),
				"-ldflags", "-X main.version="+v+" -X main.mode="+mode, "./internal/testagent")
			if out, err := cmd.CombinedOutput(); err != nil {
				agentsErr = fmt.Errorf("build the test agent %s: %v\n%s", v, err, out)
				return
			}
		}
	})
	if agentsErr != nil {
		t.Fatal(agentsErr)
	}
	return filepath.Join(agentsDir, "agent-"+version)
}

// agentStatus is what the test agent writes at each start.
type agentStatus struct {
	PID     int    `json:"pid"`
	Version string `json:"version"`
	Slot    string `json:"slot"`
	Trial   bool   `json:"trial"`
	Boots   int    `json:"boots"`
}

// node is Supervise running the test agents, as `outpost-edge --supervise`.
type node struct {
	t        *testing.T
	dir, ctl string
	sigs     chan os.Signal
	done     chan error
	seq      int
}

func startNode(t *testing.T, grace time.Duration) *node {
	t.Helper()
	root := t.TempDir()
	n := &node{t: t, dir: filepath.Join(root, "firmware"), ctl: filepath.Join(root, "ctl"),
		sigs: make(chan os.Signal, 1), done: make(chan error, 1)}
	if err := os.MkdirAll(n.ctl, 0o755); err != nil {
		t.Fatal(err)
	}
	cfg := DefaultSuperviseConfig(n.dir, nil)
	cfg.Updater.Installed = agentBinary(t, "1.0.0")
	cfg.Updater.Grace = grace
	cfg.Env = []string{"TESTAGENT_DIR=" + n.dir, "TESTAGENT_CTL=" + n.ctl, "TESTAGENT_GRACE=" + grace.String()}
	cfg.Signals = n.sigs
	log := testlog.New(t, slog.LevelInfo)
	cfg.Logger, cfg.Updater.Logger = log, log
	cfg.Stdout, cfg.Stderr = t.Output(), t.Output()
	cfg.MinBackoff, cfg.MaxBackoff = 10*time.Millisecond, 100*time.Millisecond
	cfg.KillGrace, cfg.HangGrace = 300*time.Millisecond, grace
	cfg.Poll = 20 * time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	go func() { n.done <- Supervise(ctx, cfg) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-n.done:
			if err != nil {
				t.Errorf("Supervise = %v", err)
			}
		case <-time.After(20 * time.Second):
			t.Errorf("Supervise did not return after its context ended")
		}
	})
	return n
}

func (n *node) status() (agentStatus, bool) {
	var st agentStatus
	b, err := os.ReadFile(filepath.Join(n.ctl, "status.json"))
	if err != nil || json.Unmarshal(b, &st) != nil {
		return st, false
	}
	return st, syscall.Kill(st.PID, 0) == nil
}

// waitRunning waits for the agent of version to run, on trial or not, in
// a process other than notPID, and returns its status.
func (n *node) waitRunning(version string, trial bool, notPID int) agentStatus {
	n.t.Helper()
	var st agentStatus
	wait.For(n.t, 30*time.Second, "agent "+version+" running", func() (bool, string) {
		var alive bool
		st, alive = n.status()
		return alive && st.Version == version && st.Trial == trial && st.PID != notPID, fmt.Sprintf("status %+v alive %v", st, alive)
	})
	return st
}

// send writes a command for the agent and returns its sequence number.
func (n *node) send(op string, fields map[string]any) int {
	n.t.Helper()
	n.seq++
	cmd := map[string]any{"seq": n.seq, "op": op}
	for k, v := range fields {
		cmd[k] = v
	}
	b, _ := json.Marshal(cmd)
	if err := atomicfile.WriteFile(filepath.Join(n.ctl, "cmd.json"), b, 0o644); err != nil {
		n.t.Fatal(err)
	}
	return n.seq
}

func (n *node) result(seq int) string {
	n.t.Helper()
	var res []byte
	wait.For(n.t, 30*time.Second, "result of command "+strconv.Itoa(seq), func() (bool, string) {
		var err error
		res, err = os.ReadFile(filepath.Join(n.ctl, "result-"+strconv.Itoa(seq)))
		return err == nil, fmt.Sprint(err)
	})
	return string(res)
}

func (n *node) install(version string, window time.Duration) int {
	n.t.Helper()
	path := agentBinary(n.t, version)
	c, err := manifest.ComponentFromFile("agent", manifest.KindAgent, runtime.GOOS, runtime.GOARCH, "", path, 0)
	if err != nil {
		n.t.Fatal(err)
	}
	return n.send("install", map[string]any{"release": "rel-" + version, "version": version, "artifact": path, "component": c, "window": window})
}

func (n *node) state() *State {
	n.t.Helper()
	u, err := New(DefaultConfig(n.dir))
	if err != nil {
		n.t.Fatal(err)
	}
	s, err := u.State()
	if err != nil {
		n.t.Fatal(err)
	}
	return s
}

func (n *node) failure(version string) *Failure {
	for _, f := range n.state().Failed {
		if f.Version == version {
			return &f
		}
	}
	return nil
}

func TestSuperviseCommitAndOrderedRevert(t *testing.T) {
	n := startNode(t, time.Minute)
	first := n.waitRunning("1.0.0", false, 0)
	n.install("1.1.0", time.Minute)
	st := n.waitRunning("1.1.0", true, 0)
	if st.PID != first.PID {
		t.Errorf("the trial runs as pid %d, want the same process %d re-executed", st.PID, first.PID)
	}
	if st.Boots != 1 {
		t.Errorf("trial boots = %d, want 1", st.Boots)
	}
	if res := n.result(n.send("commit", nil)); res != "ok" {
		t.Fatalf("commit: %s", res)
	}
	if s := n.state(); s.Committed == nil || s.Committed.Version != "1.1.0" || s.Trial != nil {
		t.Fatalf("state after commit: %+v", s)
	}
	// The rollout reverts: back to the installed binary, same process.
	if res := n.result(n.send("revert-committed", nil)); res != "ok" {
		t.Fatalf("revert-committed: %s", res)
	}
	if st := n.waitRunning("1.0.0", false, 0); st.PID != first.PID {
		t.Errorf("after the ordered revert pid %d, want %d", st.PID, first.PID)
	}
	if f := n.failure("1.1.0"); f == nil || f.Reason != RevertOrdered {
		t.Errorf("failure of 1.1.0 = %+v, want RevertOrdered", f)
	}
}

func TestSuperviseTrialExitsAtStart(t *testing.T) {
	n := startNode(t, time.Minute)
	n.waitRunning("1.0.0", false, 0)
	start := time.Now()
	window := 2 * time.Minute
	n.install("1.2.0", window)
	wait.For(t, 30*time.Second, "1.2.0 recorded failed", func() (bool, string) {
		f := n.failure("1.2.0")
		return f != nil, fmt.Sprintf("failed %v", n.state().FailedVersions())
	})
	n.waitRunning("1.0.0", false, 0)
	if f := n.failure("1.2.0"); f.Reason != CrashedInTrial {
		t.Errorf("failure = %+v, want CrashedInTrial", f)
	}
	if d := time.Since(start); d > window {
		t.Errorf("reverted after %v, past the window %v", d, window)
	}
	if s := n.state(); s.LastOutcome == nil || s.LastOutcome.Version != "1.2.0" || s.LastOutcome.Reason != CrashedInTrial {
		t.Errorf("last outcome = %+v", s.LastOutcome)
	}
	// Never again.
	if res := n.result(n.install("1.2.0", window)); res == "ok" {
		t.Errorf("install of the failed version again = ok")
	}
}

func TestSuperviseTrialHangs(t *testing.T) {
	n := startNode(t, 200*time.Millisecond)
	first := n.waitRunning("1.0.0", false, 0)
	n.install("1.3.0", time.Second)
	hung := n.waitRunning("1.3.0", true, 0)
	n.waitRunning("1.0.0", false, first.PID)
	if f := n.failure("1.3.0"); f == nil || f.Reason != HealthWindowExpired {
		t.Errorf("failure = %+v, want HealthWindowExpired", f)
	}
	if syscall.Kill(hung.PID, 0) == nil {
		t.Errorf("the hung trial (pid %d, which ignores SIGTERM) still runs", hung.PID)
	}
}

func TestSuperviseForwardsSignal(t *testing.T) {
	n := startNode(t, time.Minute)
	st := n.waitRunning("1.0.0", false, 0)
	n.sigs <- syscall.SIGTERM
	select {
	case err := <-n.done:
		n.done <- err // for the cleanup
		if err != nil {
			t.Fatalf("Supervise = %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Supervise did not return after forwarding SIGTERM")
	}
	if syscall.Kill(st.PID, 0) == nil {
		t.Errorf("the agent still runs")
	}
	if now, _ := n.status(); now.PID != st.PID {
		t.Errorf("the agent was restarted after the forwarded signal (pid %d, was %d)", now.PID, st.PID)
	}
}

// TestKill9EveryStep kills the agent with SIGKILL at each step of the
// protocol, with Supervise restarting it: the node always comes back on a
// committed or trial slot and ends on one version.
func TestKill9EveryStep(t *testing.T) {
	for _, tc := range []struct {
		point    string // a Step* to pause at, or a named moment
		wantBack string // the version that runs after the kill
		backTry  bool   // on trial
		wantEnd  string // the version the node ends on
	}{
		{"after-download", "1.0.0", false, "1.1.0"},
		{StepVerified, "1.0.0", false, "1.1.0"},
		{StepSlotTemp, "1.0.0", false, "1.1.0"},
		{StepSlotWritten, "1.0.0", false, "1.1.0"},
		{StepTrialMarked, "1.1.0", true, "1.1.0"},
		{"in-trial", "1.0.0", false, "1.0.0"},
		{StepCommitted, "1.1.0", false, "1.1.0"},
	} {
		t.Run(tc.point, func(t *testing.T) {
			n := startNode(t, time.Minute)
			n.waitRunning("1.0.0", false, 0)
			pause := filepath.Join(n.ctl, "pause")
			var victim int
			switch tc.point {
			case "after-download":
				st, _ := n.status()
				victim = st.PID
			case "in-trial":
				n.install("1.1.0", time.Minute)
				victim = n.waitRunning("1.1.0", true, 0).PID
			case StepCommitted:
				n.install("1.1.0", time.Minute)
				n.waitRunning("1.1.0", true, 0)
				os.WriteFile(pause, []byte(tc.point), 0o644)
				n.send("commit", nil)
				victim = n.waitPaused(tc.point)
			default:
				os.WriteFile(pause, []byte(tc.point), 0o644)
				n.install("1.1.0", time.Minute)
				victim = n.waitPaused(tc.point)
			}
			os.Remove(pause)
			os.Remove(filepath.Join(n.ctl, "paused"))
			if err := syscall.Kill(victim, syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			back := n.waitRunning(tc.wantBack, tc.backTry, victim)
			s := n.state()
			switch {
			case back.Trial && (s.Trial == nil || s.Trial.Version != back.Version):
				t.Fatalf("back on trial %s but the state's trial is %+v", back.Version, s.Trial)
			case !back.Trial && s.Trial != nil:
				t.Fatalf("back on %s but a trial is pending: %+v", back.Version, s.Trial)
			case !back.Trial && committedVersion(s) != back.Version:
				t.Fatalf("back on %s but committed is %q", back.Version, committedVersion(s))
			}
			// Finish the protocol.
			switch {
			case back.Trial:
				if res := n.result(n.send("commit", nil)); res != "ok" {
					t.Fatalf("commit: %s", res)
				}
			case back.Version != tc.wantEnd:
				n.install(tc.wantEnd, time.Minute)
				n.waitRunning(tc.wantEnd, true, 0)
				if res := n.result(n.send("commit", nil)); res != "ok" {
					t.Fatalf("commit: %s", res)
				}
			}
			end := n.waitRunning(tc.wantEnd, false, 0)
			s = n.state()
			if s.Trial != nil || committedVersion(s) != end.Version {
				t.Fatalf("ends running %s with committed %q and trial %+v", end.Version, committedVersion(s), s.Trial)
			}
			if tc.point == "in-trial" {
				if f := n.failure("1.1.0"); f == nil || f.Reason != CrashedInTrial {
					t.Errorf("failure of the killed trial = %+v, want CrashedInTrial", f)
				}
			}
		})
	}
}

// committedVersion is the version the state boots without a trial; the
// installed binary is 1.0.0 in these tests.
func committedVersion(s *State) string {
	if s.Committed == nil {
		return "1.0.0"
	}
	return s.Committed.Version
}

// waitPaused waits for the agent to stop at step and returns its pid.
func (n *node) waitPaused(step string) int {
	n.t.Helper()
	var pid int
	wait.For(n.t, 30*time.Second, "agent paused at "+step, func() (bool, string) {
		b, err := os.ReadFile(filepath.Join(n.ctl, "paused"))
		if err != nil {
			return false, err.Error()
		}
		var got string
		if _, err := fmt.Sscan(string(b), &got, &pid); err != nil || got != step {
			return false, fmt.Sprintf("paused %q", b)
		}
		return true, ""
	})
	return pid
}

// TestPlainStart is the agent under systemd with Restart=always and no
// supervisor: each start is the installed binary, whose Boot chooses the
// slot and execs into it in the same process.
func TestPlainStart(t *testing.T) {
	root := t.TempDir()
	dir, ctl := filepath.Join(root, "firmware"), filepath.Join(root, "ctl")
	os.MkdirAll(ctl, 0o755)
	installed := agentBinary(t, "1.0.0")
	cfg := DefaultConfig(dir)
	cfg.Installed = installed
	u, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	path := agentBinary(t, "1.1.0")
	c, err := manifest.ComponentFromFile("agent", manifest.KindAgent, runtime.GOOS, runtime.GOARCH, "", path, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := u.InstallAgent(context.Background(), "rel", "1.1.0", path, c, time.Minute, false); err != nil {
		t.Fatal(err)
	}
	n := &node{t: t, dir: dir, ctl: ctl}
	start := func() *exec.Cmd {
		cmd := exec.Command(installed)
		cmd.Env = []string{"TESTAGENT_DIR=" + dir, "TESTAGENT_CTL=" + ctl, "TESTAGENT_GRACE=1m"}
		cmd.Stdout, cmd.Stderr = t.Output(), t.Output()
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		return cmd
	}
	// The machine rebooted after the install, before the trial ran.
	cmd := start()
	st := n.waitRunning("1.1.0", true, 0)
	if st.PID != cmd.Process.Pid || st.Boots != 1 {
		t.Fatalf("trial status %+v, want pid %d (exec'd in place) and one boot, counted once", st, cmd.Process.Pid)
	}
	// It crashes; systemd starts the installed binary again.
	cmd.Process.Kill()
	cmd.Wait()
	cmd = start()
	st = n.waitRunning("1.0.0", false, st.PID)
	if st.PID != cmd.Process.Pid {
		t.Fatalf("status %+v, want pid %d", st, cmd.Process.Pid)
	}
	if f := n.failure("1.1.0"); f == nil || f.Reason != CrashedInTrial {
		t.Fatalf("failure = %+v, want CrashedInTrial", f)
	}
}
