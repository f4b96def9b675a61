package nodelifecycle

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/kubernetes/scheme"
	metadatafake "k8s.io/client-go/metadata/fake"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"

	"github.com/outpost-mesh/outpost/hub/controllers"
	"github.com/outpost-mesh/outpost/internal/testlog"
)

// shell is a Controller over a fake clientset, in a synctest bubble: time
// passes only when every goroutine waits, so deadlines are exact.
type shell struct {
	t      *testing.T
	client *fake.Clientset
	events *record.FakeRecorder
	ctx    context.Context
}

func startShell(t *testing.T, objs ...runtime.Object) *shell {
	client := fake.NewClientset(objs...)
	factory := informers.NewSharedInformerFactory(client, 0)
	events := record.NewFakeRecorder(1000)
	c := controllers.Context{
		Client: client, Metadata: metadatafake.NewSimpleMetadataClient(scheme.Scheme), Informers: factory,
		Events: func(string) record.EventRecorder { return events },
		Clock:  clock.RealClock{}, // the bubble's
		Logger: testlog.New(t, slog.LevelInfo),
	}
	ctl, err := New(c, DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() {
		factory.Start(ctx.Done())
		done <- ctl.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run = %v, want nil", err)
		}
		factory.Shutdown()
	})
	synctest.Wait()
	return &shell{t: t, client: client, events: events, ctx: context.Background()}
}

// after lets d pass and the controller do what is due meanwhile.
func (s *shell) after(d time.Duration) {
	time.Sleep(d)
	synctest.Wait()
}

func (s *shell) node() *corev1.Node {
	s.t.Helper()
	n, err := s.client.CoreV1().Nodes().Get(s.ctx, "edge-a", metav1.GetOptions{})
	if err != nil {
		s.t.Fatal(err)
	}
	return n
}

func (s *shell) ready() corev1.ConditionStatus { return readyStatus(s.node().Status.Conditions) }

func (s *shell) taints() []string {
	var out []string
	for _, t := range s.node().Spec.Taints {
		out = append(out, t.Key+":"+string(t.Effect))
	}
	return out
}

func (s *shell) podReady(name string) (corev1.ConditionStatus, bool) {
	s.t.Helper()
	p, err := s.client.CoreV1().Pods("default").Get(s.ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return "", false
	}
	if err != nil {
		s.t.Fatal(err)
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status, true
		}
	}
	return "", true
}

func (s *shell) renew() {
	s.t.Helper()
	leases := s.client.CoordinationV1().Leases(corev1.NamespaceNodeLease)
	l, err := leases.Get(s.ctx, "edge-a", metav1.GetOptions{})
	if err != nil {
		s.t.Fatal(err)
	}
	l.Spec.RenewTime = &metav1.MicroTime{Time: time.Now()}
	if _, err := leases.Update(s.ctx, l, metav1.UpdateOptions{}); err != nil {
		s.t.Fatal(err)
	}
	synctest.Wait()
}

func (s *shell) annotate(v string) {
	s.t.Helper()
	n := s.node()
	n.Annotations = map[string]string{AnnotationOfflineTolerance: v}
	if _, err := s.client.CoreV1().Nodes().Update(s.ctx, n, metav1.UpdateOptions{}); err != nil {
		s.t.Fatal(err)
	}
	synctest.Wait()
}

// recorded returns the events recorded since the last call, repeats
// dropped: the fake clientset does not refuse a write of a stale object
// (resourceVersions unchecked), so a decision on a cache that has not yet
// seen the last write may repeat its event, where the API would refuse
// it with a conflict.
func (s *shell) recorded() []string {
	var out []string
	for {
		select {
		case e := <-s.events.Events:
			out = append(out, e)
		default:
			return slices.Compact(out)
		}
	}
}

func shellObjects(now time.Time) (*corev1.Node, *coordinationv1.Lease, *corev1.Pod, *corev1.Pod) {
	n := node(healthy())
	n.CreationTimestamp = metav1.NewTime(now.Add(-time.Hour))
	l := lease(now)
	web := pod("web", corev1.ConditionTrue)
	ds := pod("ds", corev1.ConditionTrue, corev1.Toleration{Operator: corev1.TolerationOpExists})
	return n, l, web, ds
}

func TestControllerTimeline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n, l, web, ds := shellObjects(time.Now())
		s := startShell(t, n, l, web, ds)
		if got := s.recorded(); len(got) != 0 {
			t.Errorf("events of a healthy node = %q, want none", got)
		}

		// Away: Unknown after exactly the grace.
		s.after(39 * time.Second)
		if s.ready() != corev1.ConditionTrue || len(s.taints()) != 0 {
			t.Fatalf("after 39s: Ready %s, taints %v; want True and none", s.ready(), s.taints())
		}
		s.after(time.Second)
		if s.ready() != corev1.ConditionUnknown || !slices.Equal(s.taints(), []string{"node.kubernetes.io/unreachable:NoSchedule"}) {
			t.Fatalf("after 40s: Ready %s, taints %v; want Unknown and unreachable:NoSchedule", s.ready(), s.taints())
		}
		for _, p := range []string{"web", "ds"} {
			if r, ok := s.podReady(p); !ok || r != corev1.ConditionFalse {
				t.Errorf("pod %s of the node away: Ready %s, there %v; want False, kept", p, r, ok)
			}
		}
		want := []string{"Normal NodeNotReady Node edge-a status is now: NodeNotReady", "Warning NodeNotReady Node is not ready"}
		if got := s.recorded(); !slices.Equal(got, want) {
			t.Errorf("events once away = %q, want %q", got, want)
		}

		// A day on, nothing more happens.
		s.after(24 * time.Hour)
		if got := s.recorded(); len(got) != 0 {
			t.Errorf("events a day on = %q, want none", got)
		}

		// Back: Ready, untainted; the pods as they were.
		s.renew()
		if s.ready() != corev1.ConditionTrue || len(s.taints()) != 0 {
			t.Fatalf("back: Ready %s, taints %v; want True and none", s.ready(), s.taints())
		}
		if r, _ := s.podReady("web"); r != corev1.ConditionFalse {
			t.Errorf("pod web once back: Ready %s, want False until the node reports it", r)
		}
		if got, want := s.recorded(), []string{"Normal NodeReady Node edge-a status is now: NodeReady"}; !slices.Equal(got, want) {
			t.Errorf("events once back = %q, want %q", got, want)
		}

		// A bad tolerance: one Warning per value.
		s.annotate("soon")
		s.annotate("soon")
		s.renew()
		s.annotate("later")
		got := s.recorded()
		if len(got) != 2 || !strings.HasPrefix(got[0], "Warning InvalidOfflineTolerance annotation outpost.dev/offline-tolerance=\"soon\"") || !strings.Contains(got[1], `"later"`) {
			t.Errorf("events of bad tolerances = %q, want one Warning for each value", got)
		}

		// Opted in: evicted a minute after the grace, but for the pod
		// that tolerates all.
		s.annotate("1m")
		s.renew()
		s.after(40 * time.Second)
		s.after(59 * time.Second)
		if _, ok := s.podReady("web"); !ok || slices.Contains(s.taints(), "node.kubernetes.io/unreachable:NoExecute") {
			t.Fatalf("59s into the tolerance: pod web there %v, taints %v; want there and no NoExecute", ok, s.taints())
		}
		s.recorded()
		s.after(time.Second)
		if !slices.Equal(s.taints(), []string{"node.kubernetes.io/unreachable:NoSchedule", "node.kubernetes.io/unreachable:NoExecute"}) {
			t.Errorf("after the tolerance: taints %v, want unreachable NoSchedule and NoExecute", s.taints())
		}
		if _, ok := s.podReady("web"); ok {
			t.Errorf("after the tolerance: pod web is there, want it evicted")
		}
		if _, ok := s.podReady("ds"); !ok {
			t.Errorf("after the tolerance: pod ds is gone, want it kept")
		}
		if got, want := s.recorded(), []string{"Normal TaintManagerEviction Marking for deletion Pod default/web"}; !slices.Equal(got, want) {
			t.Errorf("events of the eviction = %q, want %q", got, want)
		}
	})
}
