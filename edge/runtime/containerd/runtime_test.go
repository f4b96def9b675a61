package containerd

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/outpost-mesh/outpost/edge/runtime"
	"github.com/outpost-mesh/outpost/internal/wait"
)

func TestRunExitAndLogs(t *testing.T) {
	r := newRuntime(t, nil)
	p := pod("web")
	dir := t.TempDir()
	c := sh("main", "echo hello; echo oops >&2; exit 3")
	c.LogPath = filepath.Join(dir, "main", "0.log")
	before := time.Now()
	if err := r.StartContainer(bg, p, c, 0); err != nil {
		t.Fatalf("StartContainer = %v", err)
	}
	st := waitState(t, r, p, "main", runtime.StateExited)
	if st.ExitCode != 3 || st.Reason != "Error" || st.Attempt != 0 {
		t.Errorf("status = %+v, want exit 3, Error, attempt 0", st)
	}
	if !strings.HasPrefix(st.ID, "containerd://") || !strings.HasPrefix(st.ImageID, "outpost.test/busybox@sha256:") || st.Image != busybox {
		t.Errorf("ID, Image, ImageID = %q, %q, %q", st.ID, st.Image, st.ImageID)
	}
	if st.StartedAt.Before(before) || st.FinishedAt.Before(st.StartedAt) || st.CreatedAt.After(st.StartedAt) {
		t.Errorf("created %v started %v finished %v, before %v", st.CreatedAt, st.StartedAt, st.FinishedAt, before)
	}
	waitLog(t, c.LogPath, "stdout:hello", "stderr:oops")

	// A restart replaces the instance and keeps the previous log.
	c.Command = []string{"sh", "-c", "echo second"}
	c.LogPath = filepath.Join(dir, "main", "1.log")
	if err := r.StartContainer(bg, p, c, 1); err != nil {
		t.Fatalf("StartContainer(attempt 1) = %v", err)
	}
	st2 := waitState(t, r, p, "main", runtime.StateExited)
	if st2.ExitCode != 0 || st2.Reason != "Completed" || st2.Attempt != 1 || st2.ID == st.ID {
		t.Errorf("restarted status = %+v, want exit 0, Completed, attempt 1, a new ID", st2)
	}
	waitLog(t, c.LogPath, "stdout:second")
	if l := logLines(t, filepath.Join(dir, "main", "0.log")); len(l) != 2 {
		t.Errorf("previous log = %q, want it kept", l)
	}
	pods, _ := r.List(bg)
	if len(pods) != 1 || len(pods[0].Containers) != 1 || pods[0].Pod != p || pods[0].IP != "" {
		t.Errorf("List = %+v, want the pod with one container", pods)
	}

	// The next one removes the log before the previous.
	c.LogPath = filepath.Join(dir, "main", "2.log")
	if err := r.StartContainer(bg, p, c, 2); err != nil {
		t.Fatalf("StartContainer(attempt 2) = %v", err)
	}
	waitState(t, r, p, "main", runtime.StateExited)
	if _, err := os.Stat(filepath.Join(dir, "main", "0.log")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("log of attempt 0: %v, want removed", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "main", "1.log")); err != nil {
		t.Errorf("log of attempt 1: %v, want kept", err)
	}
}

func TestVersion(t *testing.T) {
	r := newRuntime(t, nil)
	v, err := r.Version(bg)
	if err != nil || !strings.HasPrefix(v, "containerd://1.") && !strings.HasPrefix(v, "containerd://2.") {
		t.Errorf("Version = %q, %v; want containerd://1.x or 2.x", v, err)
	}
}

func TestAdoptionAndReattach(t *testing.T) {
	r := newRuntime(t, nil)
	p := pod("ticker")
	c := sh("tick", "i=0; while true; do echo tick $i; i=$((i+1)); sleep 0.1; done")
	c.LogPath = filepath.Join(t.TempDir(), "0.log")
	if err := r.StartContainer(bg, p, c, 0); err != nil {
		t.Fatal(err)
	}
	if err := r.StartContainer(bg, p, c, 1); !errors.Is(err, runtime.ErrAlreadyRunning) {
		t.Errorf("StartContainer(running) = %v, want ErrAlreadyRunning", err)
	}
	st := waitState(t, r, p, "tick", runtime.StateRunning)
	pid := taskPID(t, r, st.ID)
	waitLog(t, c.LogPath, "stdout:tick 1")
	r.Close()

	r2, err := New(r.cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer r2.Close()
	st2 := waitState(t, r2, p, "tick", runtime.StateRunning)
	if st2.ID != st.ID || !st2.StartedAt.Equal(st.StartedAt) || st2.Attempt != 0 {
		t.Errorf("adopted %+v, want %+v", st2, st)
	}
	if pid2 := taskPID(t, r2, st2.ID); pid2 != pid {
		t.Errorf("PID after adoption = %d, want %d", pid2, pid)
	}
	n := len(logLines(t, c.LogPath))
	wait.For(t, 10*time.Second, "log grows after reattach", func() (bool, string) {
		l := logLines(t, c.LogPath)
		return len(l) > n+5, strings.Join(l[max(len(l)-3, 0):], ", ")
	})
	// Lines are whole and in order across the reattach: nothing lost.
	l := logLines(t, c.LogPath)
	for i, line := range l {
		if want := "stdout:tick " + itoa(i); line != want {
			t.Fatalf("log line %d = %q, want %q", i, line, want)
		}
	}
}

func itoa(i int) string { return strconv.Itoa(i) }
