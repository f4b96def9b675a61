package containerd

import (
	"context"
	"testing"
	"time"

	apievents "github.com/containerd/containerd/api/events"
	tasktypes "github.com/containerd/containerd/api/types/task"

	"github.com/outpost-mesh/outpost/edge/runtime"
	"github.com/outpost-mesh/outpost/internal/wait"
)

func running() taskState { return taskState{status: tasktypes.Status_RUNNING} }

// TestTaskCache: the kept tasks are used only while a subscription is
// live and was listed under, for fullListEvery; the events are applied
// to them and to the listings under way.
func TestTaskCache(t *testing.T) {
	var c taskCache
	t0 := time.Unix(1000, 0)
	if _, ok := c.get(t0); ok {
		t.Fatal("kept tasks used before any subscription")
	}
	n := c.subscribing()
	l := c.beginList(t0) // before the probe came back: it may miss events
	c.endList(l, map[string]taskState{"a": running()}, true)
	if _, ok := c.get(t0); ok {
		t.Fatal("kept tasks used from a listing begun before the subscription was live")
	}
	c.live(n)
	l = c.beginList(t0)
	// Events while listing: b starts, a exits; the listing may or may
	// not have seen them.
	c.record(taskEvent{id: "b", status: tasktypes.Status_RUNNING})
	c.record(taskEvent{id: "a", status: tasktypes.Status_STOPPED, exit: 3})
	got := c.endList(l, map[string]taskState{"a": running()}, true)
	if got["a"].status != tasktypes.Status_STOPPED || got["a"].exit != 3 || got["b"].status != tasktypes.Status_RUNNING {
		t.Fatalf("listing with the events applied = %v, want a stopped (3), b running", got)
	}
	kept, ok := c.get(t0.Add(time.Second))
	if !ok || len(kept) != 2 || kept["a"].status != tasktypes.Status_STOPPED {
		t.Fatalf("kept = %v, %v; want the listing with its events", kept, ok)
	}
	kept["z"] = running() // a copy: the caller's to change
	c.record(taskEvent{id: "a", gone: true})
	c.record(taskEvent{id: "c", status: tasktypes.Status_CREATED})
	c.started("c")
	c.started("d") // not kept: left to List's own look
	kept, _ = c.get(t0.Add(2 * time.Second))
	if _, ok := kept["a"]; ok || kept["c"].status != tasktypes.Status_RUNNING || len(kept) != 2 {
		t.Errorf("kept after a's deletion and c's start = %v, want b and c running", kept)
	}
	if _, ok := c.get(t0.Add(fullListEvery)); ok {
		t.Error("kept tasks used fullListEvery after their listing")
	}
	c.ended(n)
	if _, ok := c.get(t0.Add(time.Second)); ok {
		t.Error("kept tasks used after the subscription ended")
	}
	// A failed listing keeps nothing and ends the log.
	n = c.subscribing()
	c.live(n)
	l = c.beginList(t0)
	c.record(taskEvent{id: "x", status: tasktypes.Status_RUNNING})
	c.endList(l, nil, false)
	if _, ok := c.get(t0); ok || c.log != nil || c.listing != 0 {
		t.Errorf("after a failed listing: kept used %v, log %v, listings %d", ok, c.log, c.listing)
	}
}

func TestTaskEventOf(t *testing.T) {
	for _, tc := range []struct {
		ev   any
		want taskEvent
		ok   bool
	}{
		{&apievents.TaskCreate{ContainerID: "a"}, taskEvent{id: "a", status: tasktypes.Status_CREATED}, true},
		{&apievents.TaskStart{ContainerID: "a"}, taskEvent{id: "a", status: tasktypes.Status_RUNNING}, true},
		{&apievents.TaskExit{ContainerID: "a", ID: "a", ExitStatus: 2}, taskEvent{id: "a", status: tasktypes.Status_STOPPED, exit: 2}, true},
		{&apievents.TaskExit{ContainerID: "a", ID: "exec-1", ExitStatus: 2}, taskEvent{}, false}, // an exec's
		{&apievents.TaskDelete{ContainerID: "a", ID: "a"}, taskEvent{id: "a", gone: true}, true},
		{&apievents.TaskDelete{ContainerID: "a", ID: "exec-1"}, taskEvent{}, false},
		{&apievents.TaskPaused{ContainerID: "a"}, taskEvent{id: "a", status: tasktypes.Status_PAUSED}, true},
		{&apievents.ContainerDelete{ID: "a"}, taskEvent{id: "a", gone: true}, true},
		{&apievents.TaskOOM{ContainerID: "a"}, taskEvent{}, false},
	} {
		got, ok := taskEventOf(tc.ev)
		if ok != tc.ok || got != tc.want {
			t.Errorf("taskEventOf(%T) = %+v, %v; want %+v, %v", tc.ev, got, ok, tc.want, tc.ok)
		}
	}
}

// TestListFromEvents: with Watch running, List tells a container's start
// and exit from the events, without listing the tasks again, and says
// the same as a listing of them.
func TestListFromEvents(t *testing.T) {
	r := newRuntime(t, nil)
	var ev eventLog
	b := wait.Start(t, 10*time.Second, "Watch", func(ctx context.Context) error { return r.Watch(ctx, ev.add) })
	wait.For(t, 10*time.Second, "the event stream live", func() (bool, string) {
		r.kept.mu.Lock()
		defer r.kept.mu.Unlock()
		return r.kept.sub != 0, "no probe back yet"
	})
	if _, err := r.List(bg); err != nil { // the listing the kept tasks start from
		t.Fatal(err)
	}
	p := pod("kept")
	if err := r.StartContainer(bg, p, sh("main", "sleep 0.3; exit 4"), 0); err != nil {
		t.Fatal(err)
	}
	state := func(l []runtime.PodStatus) (runtime.ContainerState, int32) {
		for _, ps := range l {
			if c := ps.Container("main"); ps.Pod.UID == p.UID && c != nil {
				return c.State, c.ExitCode
			}
		}
		return "", 0
	}
	wait.For(t, 10*time.Second, "main exited, by List", func() (bool, string) {
		l, err := r.List(bg)
		if err != nil {
			return false, err.Error()
		}
		s, code := state(l)
		return s == runtime.StateExited && code == 4, string(s)
	})
	r.kept.mu.Lock()
	synced, listedAt := r.kept.synced, r.kept.listedAt
	r.kept.mu.Unlock()
	if synced == 0 || time.Since(listedAt) >= fullListEvery {
		t.Fatalf("List did not keep the tasks (synced %d, listed %v ago)", synced, time.Since(listedAt))
	}
	// The same as containerd's own listing says.
	r.kept.ended(synced)
	l, err := r.List(bg)
	if err != nil {
		t.Fatal(err)
	}
	if s, code := state(l); s != runtime.StateExited || code != 4 {
		t.Errorf("a full listing says %s (%d), want exited (4)", s, code)
	}
	if err := r.RemovePod(bg, p); err != nil {
		t.Fatal(err)
	}
	if err := b.Stop(); err != nil {
		t.Errorf("Watch = %v", err)
	}
}
