package agent_test

import (
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	edgeruntime "github.com/outpost-mesh/outpost/edge/runtime"
	"github.com/outpost-mesh/outpost/edge/runtime/fake"
	"github.com/outpost-mesh/outpost/internal/testlog"
	"github.com/outpost-mesh/outpost/internal/wait"
	"github.com/outpost-mesh/outpost/sync/wire"
)

// outboxEvents returns the events of an agent's outbox as "pod container
// type reason: message", in order.
func outboxEvents(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	for _, it := range outbox(t, dir) {
		if it.Kind != wire.KindEvent {
			continue
		}
		var ev corev1.Event
		if _, _, err := testCodec.Decode(it.Object, nil, &ev); err != nil {
			t.Fatalf("event %v does not decode: %v", it.Key, err)
		}
		o := ev.InvolvedObject
		if it.Key.Name != ev.Name || it.Key.Namespace != ev.Namespace || ev.Namespace != o.Namespace || o.Kind != "Pod" || o.UID != types.UID("uid-"+o.Name) ||
			ev.Source.Host != node || ev.ReportingInstance != node || ev.Count < 1 || ev.FirstTimestamp.IsZero() {
			t.Errorf("event %s: %+v, want one about its pod, from %s", it.Key, ev, node)
		}
		out = append(out, fmt.Sprintf("%s %s %s %s: %s", o.Name, o.FieldPath, ev.Type, ev.Reason, ev.Message))
	}
	return out
}

// TestEvents: what the agent does to pods is reported as kubelet's events:
// a container started, one that crashes going into back-off, an image that
// does not pull, and a container stopped for a pod being deleted.
func TestEvents(t *testing.T) {
	dir := t.TempDir()
	writeIdentity(t, dir)
	mk := func(name, image string) *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID("uid-" + name)},
			Spec:       corev1.PodSpec{NodeName: node, RestartPolicy: corev1.RestartPolicyAlways, Containers: []corev1.Container{{Name: "main", Image: image}}},
		}
	}
	put := func(p *corev1.Pod, rev int64) wire.Change {
		return wire.Change{Op: wire.OpPut, Key: podKey(p.Name), Revision: rev, Object: encode(t, p)}
	}
	web := mk("web", "nginx:1.27")
	cp := openCheckpoint(t, dir)
	if err := cp.ApplyBatch([]wire.Change{put(web, 5), put(mk("crash", "crash:1"), 6), put(mk("nopull", "pullfail:x"), 7)}, 7); err != nil {
		t.Fatal(err)
	}
	cp.Close()

	rt := fake.New(fake.Config{Behavior: fake.ByImage})
	ta := newAgentConfig(t, dir, rt)
	rec := testlog.NewRecorder(t, slog.LevelDebug)
	ta.cfg.Logger = slog.New(rec)
	// recorded waits until the agent has queued the event of pod's main
	// container with that reason and message.
	recorded := func(pod, reason, msg string) {
		t.Helper()
		wait.For(t, waitLong, pod+" "+reason+" event", func() (bool, string) {
			return rec.HasRecord("event", "object=Pod default/"+pod, "reason="+reason, "message="+msg), "not yet"
		})
	}
	stop := run(t, ta)
	wait.For(t, waitLong, "web running, crash exited", func() (bool, string) {
		if ok, why := running(t, rt, "web")(); !ok {
			return false, why
		}
		p := runtimePod(t, rt, "crash")
		if p == nil || p.Container("main") == nil || p.Container("main").State != edgeruntime.StateExited {
			return false, fmt.Sprintf("crash: %+v", p)
		}
		return true, ""
	})
	// Half-way through its first back-off, the pull's shows.
	ta.ahead.Store(int64(6 * time.Second))
	recorded("nopull", "BackOff", `Back-off pulling image "pullfail:x"`)
	recorded("crash", "BackOff", "Back-off restarting failed container main in pod crash_default(uid-crash)")
	stop()
	got := strings.Join(outboxEvents(t, dir), "\n")
	for _, want := range []string{
		"web spec.containers{main} Normal Started: Started container main",
		"crash spec.containers{main} Normal Started: Started container main",
		"crash spec.containers{main} Warning BackOff: Back-off restarting failed container main in pod crash_default(uid-crash)",
		`nopull spec.containers{main} Warning Failed: Failed to pull image "pullfail:x": `,
		`nopull spec.containers{main} Normal BackOff: Back-off pulling image "pullfail:x"`,
	} {
		if !strings.Contains(got, want) {
			t.Errorf("events lack %q; got:\n%s", want, got)
		}
	}
	// The back-off is reported when it starts, not at each round: one
	// event per start of the container that crashed. (On a slow machine
	// the first back-off, 4s past the clock's jump, may end and a second
	// start and back-off come before the agent stops.)
	starts := strings.Count(got, "crash spec.containers{main} Normal Started")
	if n := strings.Count(got, "crash spec.containers{main} Warning BackOff"); n < 1 || n > starts {
		t.Errorf("%d back-off events of crash for %d starts, want one per start: the back-off is reported when it starts", n, starts)
	}

	// The hub deletes web gracefully: its container is stopped.
	deleting := web.DeepCopy()
	now := metav1.NewTime(time.Now())
	grace := int64(0)
	deleting.DeletionTimestamp, deleting.DeletionGracePeriodSeconds = &now, &grace
	cp = openCheckpoint(t, dir)
	if err := cp.ApplyBatch([]wire.Change{put(deleting, 8)}, 8); err != nil {
		t.Fatal(err)
	}
	cp.Close()
	ta = newAgentConfig(t, dir, rt)
	rec = testlog.NewRecorder(t, slog.LevelDebug)
	ta.cfg.Logger = slog.New(rec)
	stop = run(t, ta)
	wait.For(t, waitLong, "web stopped", func() (bool, string) {
		p := runtimePod(t, rt, "web")
		if p == nil || p.Container("main") == nil {
			return true, ""
		}
		return p.Container("main").State != edgeruntime.StateRunning, fmt.Sprint(p.Container("main").State)
	})
	recorded("web", "Killing", "Stopping container main")
	stop()
	if got := strings.Join(outboxEvents(t, dir), "\n"); !strings.Contains(got, "web spec.containers{main} Normal Killing: Stopping container main") {
		t.Errorf("no Killing event of web; got:\n%s", got)
	}
}
