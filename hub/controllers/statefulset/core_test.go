package statefulset

import (
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/outpost-mesh/outpost/hub/controllers/history"
)

var t0 = time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)

func statefulSet(n int32) *appsv1.StatefulSet {
	return &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: "default", UID: "set-uid", Generation: 3},
		Spec: appsv1.StatefulSetSpec{
			Replicas:            &n,
			ServiceName:         "db",
			PodManagementPolicy: appsv1.OrderedReadyPodManagement,
			Selector:            &metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "db"}},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "db", Image: "postgres:16"}}},
			},
			UpdateStrategy: appsv1.StatefulSetUpdateStrategy{Type: appsv1.RollingUpdateStatefulSetStrategyType,
				RollingUpdate: &appsv1.RollingUpdateStatefulSetStrategy{Partition: new(int32(0))}},
		},
	}
}

func revisions(set *appsv1.StatefulSet) (cur, upd Revision) {
	old := set.DeepCopy()
	old.Spec.Template.Spec.Containers[0].Image = "postgres:15"
	return Revision{Name: "db-old", Set: old}, Revision{Name: "db-new", Set: set}
}

type podOpt func(*corev1.Pod)

func pod(ord int, rev string, opts ...podOpt) *corev1.Pod {
	name := fmt.Sprintf("db-%d", ord)
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID("uid-" + name),
			Labels: map[string]string{"app": "db", appsv1.StatefulSetRevisionLabel: "db-" + rev,
				appsv1.StatefulSetPodNameLabel: name, appsv1.PodIndexLabel: fmt.Sprint(ord)}},
		Status: corev1.PodStatus{Phase: corev1.PodPending},
	}
	for _, o := range opts {
		o(p)
	}
	return p
}

func ready(p *corev1.Pod) {
	p.Status.Phase = corev1.PodRunning
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.NewTime(t0)}}
}

func running(p *corev1.Pod) { p.Status.Phase = corev1.PodRunning }

func failed(p *corev1.Pod) { p.Status.Phase = corev1.PodFailed }

func deleting(p *corev1.Pod) { p.DeletionTimestamp = new(metav1.NewTime(t0)) }

func noIdentity(p *corev1.Pod) { delete(p.Labels, appsv1.PodIndexLabel) }

func plan(acts []Action) string {
	var s []string
	for _, a := range acts {
		x := a.String()
		if a.Verb == Create {
			x += "@" + strings.TrimPrefix(a.Pod.Labels[appsv1.StatefulSetRevisionLabel], "db-")
		}
		s = append(s, x)
	}
	return strings.Join(s, ", ")
}

func TestPlan(t *testing.T) {
	parallel := func(s *appsv1.StatefulSet) { s.Spec.PodManagementPolicy = appsv1.ParallelPodManagement }
	onDelete := func(s *appsv1.StatefulSet) {
		s.Spec.UpdateStrategy = appsv1.StatefulSetUpdateStrategy{Type: appsv1.OnDeleteStatefulSetStrategyType}
	}
	partition := func(n int32) func(*appsv1.StatefulSet) {
		return func(s *appsv1.StatefulSet) { s.Spec.UpdateStrategy.RollingUpdate.Partition = &n }
	}
	start := func(n int32) func(*appsv1.StatefulSet) {
		return func(s *appsv1.StatefulSet) { s.Spec.Ordinals = &appsv1.StatefulSetOrdinals{Start: n} }
	}
	minReady := func(s *appsv1.StatefulSet) { s.Spec.MinReadySeconds = 60 }
	for _, c := range []struct {
		name     string
		replicas int32
		opts     []func(*appsv1.StatefulSet)
		pods     []*corev1.Pod
		want     string
	}{
		{"first pod", 3, nil, nil, "Create db-0@new"},
		{"waits for db-0 to run", 3, nil, []*corev1.Pod{pod(0, "new")}, ""},
		{"waits for db-0 to be ready", 3, nil, []*corev1.Pod{pod(0, "new", running)}, ""},
		{"then db-1", 3, nil, []*corev1.Pod{pod(0, "new", ready)}, "Create db-1@new"},
		{"then db-2", 3, nil, []*corev1.Pod{pod(0, "new", ready), pod(1, "new", ready)}, "Create db-2@new"},
		{"all there", 3, nil, []*corev1.Pod{pod(0, "new", ready), pod(1, "new", ready), pod(2, "new", ready)}, ""},
		{"waits out minReadySeconds", 3, []func(*appsv1.StatefulSet){minReady}, []*corev1.Pod{pod(0, "new", ready)}, ""},
		{"a gap is filled first", 3, nil, []*corev1.Pod{pod(0, "new", ready), pod(2, "new", ready)}, "Create db-1@new"},
		{"parallel: all at once", 3, []func(*appsv1.StatefulSet){parallel}, nil, "Create db-0@new, Create db-1@new, Create db-2@new"},
		{"failed pod replaced", 3, nil, []*corev1.Pod{pod(0, "new", failed)}, "Delete db-0"},
		{"waits for a deleted pod to go", 3, nil, []*corev1.Pod{pod(0, "new", ready, deleting)}, ""},
		{"identity restored", 1, nil, []*corev1.Pod{pod(0, "new", ready, noIdentity)}, "Update db-0"},
		{"ordinals start at 5", 2, []func(*appsv1.StatefulSet){start(5)}, []*corev1.Pod{pod(5, "new", ready)}, "Create db-6@new"},

		{"scale down from the top", 1, nil, []*corev1.Pod{pod(0, "new", ready), pod(1, "new", ready), pod(2, "new", ready)}, "Delete db-2"},
		{"scale down waits for termination", 1, nil, []*corev1.Pod{pod(0, "new", ready), pod(1, "new", ready), pod(2, "new", ready, deleting)}, ""},
		{"scale down waits for replicas to be healthy", 1, nil, []*corev1.Pod{pod(0, "new", running), pod(1, "new", ready)}, ""},
		{"scale down removes the first unhealthy", 1, nil, []*corev1.Pod{pod(0, "new", ready), pod(1, "new", running), pod(2, "new", ready)}, "Delete db-2"},
		{"scale down waits on an unhealthy pod below", 1, nil, []*corev1.Pod{pod(0, "new", ready), pod(1, "new", ready), pod(2, "new", running), pod(3, "new", ready)}, "Delete db-3"},
		{"parallel scale down", 1, []func(*appsv1.StatefulSet){parallel}, []*corev1.Pod{pod(0, "new", ready), pod(1, "new", running), pod(2, "new")}, "Delete db-2, Delete db-1"},

		{"update from the top", 3, nil, []*corev1.Pod{pod(0, "old", ready), pod(1, "old", ready), pod(2, "old", ready)}, "Delete db-2"},
		{"recreated with the update revision", 3, nil, []*corev1.Pod{pod(0, "old", ready), pod(1, "old", ready)}, "Create db-2@new"},
		{"waits for the updated pod", 3, nil, []*corev1.Pod{pod(0, "old", ready), pod(1, "old", ready), pod(2, "new", running)}, ""},
		{"next one down", 3, nil, []*corev1.Pod{pod(0, "old", ready), pod(1, "old", ready), pod(2, "new", ready)}, "Delete db-1"},
		{"partition 2 keeps the lower ones", 3, []func(*appsv1.StatefulSet){partition(2)}, []*corev1.Pod{pod(0, "old", ready), pod(1, "old", ready), pod(2, "new", ready)}, ""},
		{"below the partition, recreated at the current revision", 3, []func(*appsv1.StatefulSet){partition(2)}, []*corev1.Pod{pod(1, "old", ready), pod(2, "new", ready)}, "Create db-0@old"},
		{"OnDelete does not update", 3, []func(*appsv1.StatefulSet){onDelete}, []*corev1.Pod{pod(0, "old", ready), pod(1, "old", ready), pod(2, "old", ready)}, ""},
		{"OnDelete recreates at the update revision", 3, []func(*appsv1.StatefulSet){onDelete}, []*corev1.Pod{pod(0, "old", ready), pod(1, "old", ready)}, "Create db-2@new"},
		{"parallel update still one at a time", 3, []func(*appsv1.StatefulSet){parallel}, []*corev1.Pod{pod(0, "old", ready), pod(1, "old", ready), pod(2, "new", running)}, ""},
	} {
		set := statefulSet(c.replicas)
		for _, o := range c.opts {
			o(set)
		}
		cur, upd := revisions(set)
		in := Input{Set: set, Current: cur, Updated: upd, Pods: c.pods, Now: t0.Add(30 * time.Second)}
		if got, _ := Plan(in); plan(got) != c.want {
			t.Errorf("%s: Plan = %q, want %q", c.name, plan(got), c.want)
		}
	}
}

func TestPlanDeletedSet(t *testing.T) {
	set := statefulSet(3)
	set.DeletionTimestamp = new(metav1.NewTime(t0))
	cur, upd := revisions(set)
	if acts, _ := Plan(Input{Set: set, Current: cur, Updated: upd, Now: t0}); len(acts) != 0 {
		t.Errorf("Plan(set being deleted) = %q, want nothing", plan(acts))
	}
}

func TestStatus(t *testing.T) {
	for _, c := range []struct {
		name string
		pods []*corev1.Pod
		want appsv1.StatefulSetStatus
	}{
		{"mid-update", []*corev1.Pod{pod(0, "old", ready), pod(1, "new", running), pod(2, "new", ready)},
			appsv1.StatefulSetStatus{ObservedGeneration: 3, Replicas: 3, ReadyReplicas: 2, AvailableReplicas: 2, CurrentReplicas: 1, UpdatedReplicas: 2, CurrentRevision: "db-old", UpdateRevision: "db-new"}},
		{"terminating counts as a replica, not as a revision", []*corev1.Pod{pod(0, "old", ready, deleting)},
			appsv1.StatefulSetStatus{ObservedGeneration: 3, Replicas: 1, ReadyReplicas: 1, AvailableReplicas: 1, CurrentRevision: "db-old", UpdateRevision: "db-new"}},
		{"complete: current becomes update", []*corev1.Pod{pod(0, "new", ready), pod(1, "new", ready), pod(2, "new", ready)},
			appsv1.StatefulSetStatus{ObservedGeneration: 3, Replicas: 3, ReadyReplicas: 3, AvailableReplicas: 3, CurrentReplicas: 3, UpdatedReplicas: 3, CurrentRevision: "db-new", UpdateRevision: "db-new"}},
	} {
		set := statefulSet(3)
		cur, upd := revisions(set)
		_, got := Plan(Input{Set: set, Current: cur, Updated: upd, Pods: c.pods, Now: t0})
		if got.String() != c.want.String() {
			t.Errorf("%s: status = %+v,\nwant %+v", c.name, got, c.want)
		}
	}
}

func TestNewPod(t *testing.T) {
	set := statefulSet(3)
	p := NewPod(Revision{Name: "db-abc", Set: set}, 2)
	want := map[string]string{"app": "db", appsv1.StatefulSetRevisionLabel: "db-abc", appsv1.StatefulSetPodNameLabel: "db-2", appsv1.PodIndexLabel: "2"}
	if p.Name != "db-2" || p.Spec.Hostname != "db-2" || p.Spec.Subdomain != "db" || fmt.Sprint(p.Labels) != fmt.Sprint(want) {
		t.Errorf("NewPod = %s (hostname %s, subdomain %s, labels %v)", p.Name, p.Spec.Hostname, p.Spec.Subdomain, p.Labels)
	}
	if ref := metav1.GetControllerOf(p); ref == nil || ref.UID != "set-uid" || ref.Kind != "StatefulSet" {
		t.Errorf("NewPod controller = %+v", ref)
	}
	if set.Spec.Template.Labels[appsv1.PodIndexLabel] != "" {
		t.Errorf("NewPod modified the template")
	}
}

func TestOrdinal(t *testing.T) {
	for name, want := range map[string]int{"db-0": 0, "db-12": 12, "db-01": -1, "db-": -1, "db-x": -1, "dbx-1": -1, "db-1-2": -1, "web-1": -1, "db--1": -1} {
		if got := Ordinal("db", &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}}); got != want {
			t.Errorf("Ordinal(db, %s) = %d, want %d", name, got, want)
		}
	}
}

func TestApplyRevision(t *testing.T) {
	set := statefulSet(3)
	old := set.DeepCopy()
	old.Spec.Template.Spec.Containers[0].Image = "postgres:15"
	data, err := history.TemplatePatch(&old.Spec.Template)
	if err != nil {
		t.Fatal(err)
	}
	got, err := ApplyRevision(set, data)
	if err != nil || got.Spec.Template.Spec.Containers[0].Image != "postgres:15" || *got.Spec.Replicas != 3 {
		t.Errorf("ApplyRevision = %v, %v; want the old template on the set", got.Spec.Template.Spec.Containers, err)
	}
	if set.Spec.Template.Spec.Containers[0].Image != "postgres:16" {
		t.Errorf("ApplyRevision modified the set")
	}
	if _, err := ApplyRevision(set, []byte(`{"spec":{}}`)); err == nil {
		t.Errorf("ApplyRevision(no template) = nil error, want one")
	}
}
