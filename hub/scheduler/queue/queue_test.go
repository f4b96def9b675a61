package queue

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/outpost-mesh/outpost/hub/scheduler/core"
)

func pod(name string, prio int32) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID(name)},
		Spec:       corev1.PodSpec{Priority: &prio},
	}
}

func newQueue() (*Queue, *clocktesting.FakeClock) {
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	return New(DefaultConfig(), clk), clk
}

// pop pops without blocking, failing if nothing is active.
func pop(t *testing.T, q *Queue) (*corev1.Pod, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	p, n, err := q.Pop(ctx)
	if err != nil {
		t.Fatalf("Pop: %v (counts %+v)", err, q.Counts())
	}
	return p, n
}

func wantCounts(t *testing.T, q *Queue, want Counts) {
	t.Helper()
	if got := q.Counts(); got != want {
		t.Fatalf("Counts() = %+v, want %+v", got, want)
	}
}

func TestOrderByPriorityThenTime(t *testing.T) {
	q, clk := newQueue()
	q.Add(pod("low-old", 0))
	clk.Step(time.Millisecond)
	q.Add(pod("high", 100))
	clk.Step(time.Millisecond)
	q.Add(pod("low-new", 0))
	var got []string
	for range 3 {
		p, _ := pop(t, q)
		got = append(got, p.Name)
	}
	want := []string{"high", "low-old", "low-new"}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("pop order = %v, want %v", got, want)
		}
	}
}

func TestBackoffDoublesToTenSeconds(t *testing.T) {
	q, _ := newQueue()
	e := &entry{}
	want := []time.Duration{1, 2, 4, 8, 10, 10}
	for i, w := range want {
		e.attempts = i + 1
		if got := q.backoffDuration(e); got != w*time.Second {
			t.Errorf("backoff after attempt %d = %v, want %v", e.attempts, got, w*time.Second)
		}
	}
}

func TestErrorBacksOff(t *testing.T) {
	q, clk := newQueue()
	q.Add(pod("a", 0))
	p, n := pop(t, q)
	if n != 1 {
		t.Fatalf("first attempt = %d, want 1", n)
	}
	q.Error(p.UID)
	wantCounts(t, q, Counts{Backoff: 1})
	clk.Step(999 * time.Millisecond)
	q.FlushBackoff()
	wantCounts(t, q, Counts{Backoff: 1})
	clk.Step(time.Millisecond)
	q.FlushBackoff()
	wantCounts(t, q, Counts{Active: 1})
	p, n = pop(t, q)
	if n != 2 {
		t.Fatalf("second attempt = %d, want 2", n)
	}
	q.Error(p.UID)
	clk.Step(1999 * time.Millisecond)
	q.FlushBackoff()
	wantCounts(t, q, Counts{Backoff: 1})
	clk.Step(time.Millisecond)
	q.FlushBackoff()
	wantCounts(t, q, Counts{Active: 1})
}

func TestUnschedulableWaitsForItsEvents(t *testing.T) {
	q, clk := newQueue()
	q.Add(pod("a", 0))
	p, _ := pop(t, q)
	q.Unschedulable(p.UID, core.NodeAdd|core.AssignedPodDelete)
	wantCounts(t, q, Counts{Unschedulable: 1})

	clk.Step(time.Hour / 60) // past the back-off
	q.Move(core.AssignedPodAdd)
	wantCounts(t, q, Counts{Unschedulable: 1})
	q.FlushBackoff()
	wantCounts(t, q, Counts{Unschedulable: 1})

	q.Move(core.NodeAdd)
	wantCounts(t, q, Counts{Active: 1})
}

func TestMoveWithinBackoffGoesToBackoff(t *testing.T) {
	q, clk := newQueue()
	q.Add(pod("a", 0))
	p, _ := pop(t, q)
	q.Unschedulable(p.UID, core.NodeAdd)
	clk.Step(500 * time.Millisecond)
	q.Move(core.NodeAdd)
	wantCounts(t, q, Counts{Backoff: 1})
	clk.Step(500 * time.Millisecond)
	q.FlushBackoff()
	wantCounts(t, q, Counts{Active: 1})
}

func TestEventDuringAttemptIsNotMissed(t *testing.T) {
	q, clk := newQueue()
	q.Add(pod("a", 0))
	p, _ := pop(t, q)
	q.Move(core.NodeAdd) // while "a" is being scheduled
	q.Unschedulable(p.UID, core.NodeAdd)
	wantCounts(t, q, Counts{Backoff: 1})
	clk.Step(time.Second)
	q.FlushBackoff()
	wantCounts(t, q, Counts{Active: 1})
}

func TestFlushUnschedulableAfterFiveMinutes(t *testing.T) {
	q, clk := newQueue()
	q.Add(pod("a", 0))
	p, _ := pop(t, q)
	q.Unschedulable(p.UID, core.NodeAdd)
	clk.Step(5 * time.Minute)
	q.FlushUnschedulable()
	wantCounts(t, q, Counts{Unschedulable: 1})
	clk.Step(time.Second)
	q.FlushUnschedulable()
	wantCounts(t, q, Counts{Active: 1})
}

func TestUpdateRetriesUnschedulablePod(t *testing.T) {
	q, clk := newQueue()
	a := pod("a", 0)
	q.Add(a)
	p, _ := pop(t, q)
	q.Unschedulable(p.UID, core.NodeAdd)
	clk.Step(time.Minute)

	status := a.DeepCopy()
	status.Status.Phase = corev1.PodPending
	q.Update(status)
	wantCounts(t, q, Counts{Unschedulable: 1})

	spec := a.DeepCopy()
	spec.Spec.NodeSelector = map[string]string{"disk": "ssd"}
	q.Update(spec)
	wantCounts(t, q, Counts{Active: 1})
	if p, _ := pop(t, q); p.Spec.NodeSelector["disk"] != "ssd" {
		t.Fatalf("popped %v, want the updated pod", p.Spec.NodeSelector)
	}
}

func TestGatedPodsWaitForTheirGates(t *testing.T) {
	q, _ := newQueue()
	a := pod("a", 0)
	a.Spec.SchedulingGates = []corev1.PodSchedulingGate{{Name: "example.com/wait"}}
	q.Add(a)
	wantCounts(t, q, Counts{Gated: 1})
	q.Move(core.AnyEvent)
	wantCounts(t, q, Counts{Gated: 1})
	open := a.DeepCopy()
	open.Spec.SchedulingGates = nil
	q.Update(open)
	wantCounts(t, q, Counts{Active: 1})
}

func TestDelete(t *testing.T) {
	q, _ := newQueue()
	for _, n := range []string{"a", "b", "c"} {
		q.Add(pod(n, 0))
	}
	q.Delete("b")
	p, _ := pop(t, q)
	q.Delete(p.UID) // in flight
	q.Unschedulable(p.UID, core.NodeAdd)
	wantCounts(t, q, Counts{Active: 1})
	p, _ = pop(t, q)
	if p.Name != "c" {
		t.Fatalf("popped %s, want c", p.Name)
	}
	q.Done(p.UID)
	wantCounts(t, q, Counts{})
}

func TestPopWaitsAndStops(t *testing.T) {
	q, _ := newQueue()
	ctx, cancel := context.WithCancel(context.Background())
	got := make(chan string)
	go func() {
		p, _, err := q.Pop(ctx)
		if err != nil {
			got <- err.Error()
			return
		}
		got <- p.Name
	}()
	q.Add(pod("a", 0))
	if n := <-got; n != "a" {
		t.Fatalf("Pop = %q, want a", n)
	}
	go func() {
		_, _, err := q.Pop(ctx)
		got <- err.Error()
	}()
	cancel()
	if e := <-got; e != context.Canceled.Error() {
		t.Fatalf("Pop after cancel = %q, want %q", e, context.Canceled)
	}
}
