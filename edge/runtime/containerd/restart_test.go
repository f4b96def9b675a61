package containerd

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/outpost-mesh/outpost/edge/runtime"
	"github.com/outpost-mesh/outpost/internal/testlog"
	"github.com/outpost-mesh/outpost/internal/wait"
)

// events collects what Watch reports.
type eventLog struct {
	mu sync.Mutex
	l  []string
}

func (e *eventLog) add(ev runtime.Event) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.l = append(e.l, fmt.Sprintf("%s/%s %s", ev.Pod.Name, ev.Container, ev.Type))
}

func (e *eventLog) has(s string) (bool, string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Contains(e.l, s), strings.Join(e.l, "; ")
}

func TestWatch(t *testing.T) {
	r := newRuntime(t, nil)
	var ev eventLog
	b := wait.Start(t, 10*time.Second, "Watch", func(ctx context.Context) error { return r.Watch(ctx, ev.add) })
	p := pod("watched")
	// The subscription is up once an event of ours arrives; start until
	// one does.
	if err := r.StartContainer(bg, p, sh("main", "sleep 0.5; exit 2"), 0); err != nil {
		t.Fatal(err)
	}
	wait.For(t, 10*time.Second, "start event", func() (bool, string) { return ev.has("watched/main ContainerStarted") })
	wait.For(t, 10*time.Second, "exit event", func() (bool, string) { return ev.has("watched/main ContainerExited") })

	// An OOM kill seen on the stream is recorded on the container.
	oom := sh("oom", "x=1; while true; do x=$x$x; done")
	oom.MemoryLimitBytes = 32 << 20
	if err := r.StartContainer(bg, p, oom, 0); err != nil {
		t.Fatal(err)
	}
	wait.For(t, 20*time.Second, "oom exit event", func() (bool, string) { return ev.has("watched/oom ContainerExited") })
	// The shim sends the OOM and the exit from two watchers: on a busy
	// machine the OOM may come second.
	wait.For(t, 10*time.Second, "the OOM kill recorded on the container", func() (bool, string) {
		cs, err := r.find(r.nsctx(bg), p.UID, "oom")
		if err != nil || len(cs) != 1 {
			return false, fmt.Sprintf("%d containers (%v)", len(cs), err)
		}
		return cs[0].Labels[labelOOM] == "true", fmt.Sprintf("labels %v, want %s=true", cs[0].Labels, labelOOM)
	})
	if err := r.RemovePod(bg, p); err != nil {
		t.Fatal(err)
	}
	wait.For(t, 10*time.Second, "remove event", func() (bool, string) { return ev.has("watched/main ContainerRemoved") })
	if err := b.Stop(); err != nil {
		t.Errorf("Watch = %v, want nil at ctx end", err)
	}
}

// TestContainerdRestart kills containerd: the Supervisor starts it
// again, the Runtime's connection comes back, the container ran on, and
// Watch returned an error when the stream broke.
func TestContainerdRestart(t *testing.T) {
	r := newRuntime(t, nil)
	p := pod("survivor")
	c := sh("main", "i=0; while true; do echo n $i; i=$((i+1)); sleep 0.1; done")
	c.LogPath = filepath.Join(t.TempDir(), "0.log")
	if err := r.StartContainer(bg, p, c, 0); err != nil {
		t.Fatal(err)
	}
	st := waitState(t, r, p, "main", runtime.StateRunning)
	pid := taskPID(t, r, st.ID)
	watchErr := make(chan error, 1)
	ctx, cancel := context.WithCancel(bg)
	defer cancel()
	go func() { watchErr <- r.Watch(ctx, func(runtime.Event) {}) }()

	old := sup.PID()
	if err := syscall.Kill(old, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-watchErr:
		if err == nil {
			t.Errorf("Watch = nil when containerd died, want an error")
		}
	case <-time.After(10 * time.Second):
		t.Errorf("Watch did not return when containerd died")
	}
	wait.For(t, 30*time.Second, "containerd restarted", func() (bool, string) {
		n := sup.PID()
		return n != 0 && n != old, fmt.Sprintf("pid %d", n)
	})
	var got runtime.ContainerStatus
	wait.For(t, 30*time.Second, "List works again", func() (bool, string) {
		l, err := r.List(bg)
		if err != nil {
			return false, err.Error()
		}
		for _, ps := range l {
			if c := ps.Container("main"); ps.Pod.UID == p.UID && c != nil {
				got = *c
				return true, ""
			}
		}
		return false, fmt.Sprintf("%+v", l)
	})
	if got.State != runtime.StateRunning || got.ID != st.ID {
		t.Errorf("after restart = %+v, want %s running", got, st.ID)
	}
	if pid2 := taskPID(t, r, st.ID); pid2 != pid {
		t.Errorf("PID after restart = %d, want %d", pid2, pid)
	}
	n := len(logLines(t, c.LogPath))
	wait.For(t, 10*time.Second, "log still flows", func() (bool, string) { return len(logLines(t, c.LogPath)) > n+3, "" })
}

// TestSupervisorStop stops a Supervisor as an agent's shutdown does: the
// container runs on without containerd, and the next Supervisor's
// containerd reconnects to its shim.
func TestSupervisorStop(t *testing.T) {
	need(t)
	dir, err := os.MkdirTemp("", "octrd")
	if err != nil {
		t.Fatal(err)
	}
	scfg := DefaultSupervisorConfig(dir)
	scfg.Logger = testlog.New(t, slog.LevelWarn)
	run := func() (*Supervisor, func()) {
		s, err := NewSupervisor(scfg)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(bg)
		done := make(chan error, 1)
		go func() { done <- s.Run(ctx) }()
		select {
		case <-s.Ready():
		case <-time.After(30 * time.Second):
			t.Fatal("containerd did not start")
		}
		return s, func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Supervisor.Run = %v", err)
			}
		}
	}
	s1, stop1 := run()
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			stop1()
		}
		if err := removeAll(dir, s1.Address()); err != nil {
			t.Error(err)
		}
	})
	r := newRuntime(t, func(c *Config) {
		c.Address, c.RuncRoot, c.StateDir = s1.Address(), RuncRoot(dir), filepath.Join(dir, "fifo", c.Namespace)
	})
	p := pod("longlived")
	if err := r.StartContainer(bg, p, sh("main", "sleep 1000"), 0); err != nil {
		t.Fatal(err)
	}
	st := waitState(t, r, p, "main", runtime.StateRunning)
	pid := taskPID(t, r, st.ID)
	r.Close()
	cpid := s1.PID()
	stop1()
	stopped = true
	if syscall.Kill(cpid, 0) == nil {
		t.Errorf("containerd %d still runs after Run returned", cpid)
	}
	if err := syscall.Kill(int(pid), 0); err != nil {
		t.Fatalf("container process %d died with containerd: %v", pid, err)
	}

	_, stop2 := run()
	stopped = false
	stop1 = stop2
	r2, err := New(r.cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer r2.Close()
	st2 := waitState(t, r2, p, "main", runtime.StateRunning)
	if st2.ID != st.ID || taskPID(t, r2, st2.ID) != pid {
		t.Errorf("after containerd restart %+v pid %d, want %s pid %d", st2, taskPID(t, r2, st2.ID), st.ID, pid)
	}
}
