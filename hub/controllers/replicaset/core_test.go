package replicaset

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
)

var t0 = time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)

func testRS(n int32) *appsv1.ReplicaSet {
	return &appsv1.ReplicaSet{
		ObjectMeta: metav1.ObjectMeta{Name: "web-abc", Namespace: "default", UID: "rs-uid", Generation: 2},
		Spec: appsv1.ReplicaSetSpec{
			Replicas: ptr.To(n),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "web", "pod-template-hash": "abc"}},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: "nginx"}}},
			},
		},
	}
}

// pod is a pod of a test, changed by opts.
func pod(name string, opts ...func(*corev1.Pod)) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID(name + "-uid"),
			Labels:            map[string]string{"app": "web", "pod-template-hash": "abc"},
			CreationTimestamp: metav1.NewTime(t0.Add(-time.Hour))},
		Spec:   corev1.PodSpec{NodeName: "n1"},
		Status: corev1.PodStatus{Phase: corev1.PodRunning},
	}
	for _, o := range opts {
		o(p)
	}
	return p
}

func ready(since time.Time) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{
			Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.NewTime(since)})
	}
}

func onNode(n string) func(*corev1.Pod) { return func(p *corev1.Pod) { p.Spec.NodeName = n } }

func phase(ph corev1.PodPhase) func(*corev1.Pod) {
	return func(p *corev1.Pod) { p.Status.Phase = ph }
}

func created(t time.Time) func(*corev1.Pod) {
	return func(p *corev1.Pod) { p.CreationTimestamp = metav1.NewTime(t) }
}

func ownedBy(uid types.UID) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "web-abc", UID: uid, Controller: ptr.To(true)}}
	}
}

func deleting(p *corev1.Pod) { p.DeletionTimestamp = ptr.To(metav1.NewTime(t0)) }

func names(pods []*corev1.Pod) string {
	var s []string
	for _, p := range pods {
		s = append(s, p.Name)
	}
	return strings.Join(s, ",")
}

func TestBatches(t *testing.T) {
	for _, tc := range []struct {
		n    int
		want []int
	}{
		{0, nil},
		{1, []int{1}},
		{2, []int{1, 1}},
		{3, []int{1, 2}},
		{7, []int{1, 2, 4}},
		{10, []int{1, 2, 4, 3}},
		{500, []int{1, 2, 4, 8, 16, 32, 64, 128, 245}},
	} {
		if got := Batches(tc.n); !slices.Equal(got, tc.want) {
			t.Errorf("Batches(%d) = %v, want %v", tc.n, got, tc.want)
		}
	}
}

func TestPodsToDelete(t *testing.T) {
	now := t0
	for _, tc := range []struct {
		name    string
		pods    []*corev1.Pod
		related []*corev1.Pod
		n       int
		want    string
	}{
		{"all when n covers them", []*corev1.Pod{pod("a"), pod("b")}, nil, 2, "a,b"},
		{"unscheduled first",
			[]*corev1.Pod{pod("sched", ready(now.Add(-time.Hour))), pod("unsched", onNode(""), phase(corev1.PodPending))}, nil, 1, "unsched"},
		{"pending before unknown before running",
			[]*corev1.Pod{pod("run"), pod("unknown", phase(corev1.PodUnknown)), pod("pend", phase(corev1.PodPending))}, nil, 2, "pend,unknown"},
		{"not ready before ready",
			[]*corev1.Pod{pod("ready", ready(now.Add(-time.Minute))), pod("notready")}, nil, 1, "notready"},
		{"lower deletion cost first",
			[]*corev1.Pod{
				pod("cheap", ready(now.Add(-time.Hour)), func(p *corev1.Pod) { p.Annotations = map[string]string{DeletionCostAnnotation: "-5"} }),
				pod("dear", ready(now.Add(-time.Minute)), func(p *corev1.Pod) { p.Annotations = map[string]string{DeletionCostAnnotation: "100"} }),
				pod("plain", ready(now.Add(-time.Minute))),
			}, nil, 2, "cheap,plain"},
		{"doubled up before alone",
			[]*corev1.Pod{pod("alone", onNode("n2"), ready(now.Add(-time.Minute))), pod("crowded", onNode("n1"), ready(now.Add(-time.Hour)))},
			[]*corev1.Pod{pod("x", onNode("n1")), pod("y", onNode("n1")), pod("z", onNode("n2"))}, 1, "crowded"},
		{"ready for less time first",
			[]*corev1.Pod{pod("old", ready(now.Add(-10*time.Hour))), pod("new", ready(now.Add(-10*time.Second)))}, nil, 1, "new"},
		{"more restarts first",
			[]*corev1.Pod{
				pod("calm", ready(now.Add(-time.Hour))),
				pod("flappy", ready(now.Add(-time.Hour)), func(p *corev1.Pod) {
					p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "web", RestartCount: 4}}
				}),
			}, nil, 1, "flappy"},
		{"newer first among not ready",
			[]*corev1.Pod{pod("older", created(now.Add(-48*time.Hour))), pod("newer", created(now.Add(-time.Minute)))}, nil, 1, "newer"},
		{"same log bucket: by uid",
			[]*corev1.Pod{pod("b", created(now.Add(-65*time.Minute))), pod("a", created(now.Add(-64*time.Minute)))}, nil, 1, "a"},
		{"zero creation time first",
			[]*corev1.Pod{pod("dated"), pod("undated", created(time.Time{}))}, nil, 1, "undated"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := PodsToDelete(slices.Clone(tc.pods), tc.related, tc.n, now)
			if names(got) != tc.want {
				t.Errorf("PodsToDelete(%s, %d) = %s, want %s", names(tc.pods), tc.n, names(got), tc.want)
			}
		})
	}
}

func TestManage(t *testing.T) {
	three := []*corev1.Pod{pod("a", ready(t0.Add(-time.Hour))), pod("b"), pod("c", ready(t0.Add(-time.Hour)))}
	for _, tc := range []struct {
		name       string
		replicas   int32
		active     []*corev1.Pod
		wantCreate int
		wantDelete string
	}{
		{"in step", 3, three, 0, ""},
		{"too few", 5, three, 2, ""},
		{"from none", 3, nil, 3, ""},
		{"burst bound", 2000, nil, BurstReplicas, ""},
		{"too many: the not ready one", 2, three, 0, "b"},
		{"to zero", 0, three, 0, "a,b,c"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Manage(testRS(tc.replicas), slices.Clone(tc.active), nil, t0)
			if got.Create != tc.wantCreate || names(got.Delete) != tc.wantDelete {
				t.Errorf("Manage(replicas %d, %d pods) = create %d delete %q, want create %d delete %q",
					tc.replicas, len(tc.active), got.Create, names(got.Delete), tc.wantCreate, tc.wantDelete)
			}
		})
	}
}

func TestClaim(t *testing.T) {
	rs := testRS(1)
	deletedRS := testRS(1)
	deletedRS.DeletionTimestamp = ptr.To(metav1.NewTime(t0))
	for _, tc := range []struct {
		name     string
		ctrl     *appsv1.ReplicaSet
		pod      *corev1.Pod
		selected bool
		want     ClaimAction
	}{
		{"ours and selected", rs, pod("p", ownedBy("rs-uid")), true, Keep},
		{"ours, unselected", rs, pod("p", ownedBy("rs-uid")), false, Release},
		{"ours, unselected, we are being deleted", deletedRS, pod("p", ownedBy("rs-uid")), false, Ignore},
		{"ours, selected, we are being deleted", deletedRS, pod("p", ownedBy("rs-uid")), true, Keep},
		{"another's", rs, pod("p", ownedBy("other")), true, Ignore},
		{"orphan selected", rs, pod("p"), true, Adopt},
		{"orphan unselected", rs, pod("p"), false, Ignore},
		{"orphan, we are being deleted", deletedRS, pod("p"), true, Ignore},
		{"orphan being deleted", rs, pod("p", deleting), true, Ignore},
		{"orphan of another namespace", rs, pod("p", func(p *corev1.Pod) { p.Namespace = "other" }), true, Ignore},
		{"owner not controller is an orphan", rs, pod("p", ownedBy("rs-uid"), func(p *corev1.Pod) { p.OwnerReferences[0].Controller = nil }), true, Adopt},
	} {
		if got := Claim(tc.ctrl, tc.pod, tc.selected); got != tc.want {
			t.Errorf("%s: Claim = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestPatches(t *testing.T) {
	rs := testRS(1)
	if got, want := string(AdoptPatch(rs, Kind, "pod-uid")),
		`{"metadata":{"ownerReferences":[{"apiVersion":"apps/v1","kind":"ReplicaSet","name":"web-abc","uid":"rs-uid","controller":true,"blockOwnerDeletion":true}],"uid":"pod-uid"}}`; got != want {
		t.Errorf("AdoptPatch = %s, want %s", got, want)
	}
	if got, want := string(ReleasePatch("rs-uid", "pod-uid")),
		`{"metadata":{"ownerReferences":[{"$patch":"delete","uid":"rs-uid"}],"uid":"pod-uid"}}`; got != want {
		t.Errorf("ReleasePatch = %s, want %s", got, want)
	}
}

func TestStatus(t *testing.T) {
	minReady := func(s int32) func(*appsv1.ReplicaSet) {
		return func(rs *appsv1.ReplicaSet) { rs.Spec.MinReadySeconds = s }
	}
	failing := func(rs *appsv1.ReplicaSet) {
		rs.Status.Conditions = []appsv1.ReplicaSetCondition{{Type: appsv1.ReplicaSetReplicaFailure, Status: corev1.ConditionTrue, Reason: FailedCreate, Message: "old"}}
	}
	quota := errors.New(`pods "web-abc-x" is forbidden: exceeded quota`)
	for _, tc := range []struct {
		name        string
		replicas    int32
		opts        []func(*appsv1.ReplicaSet)
		active      []*corev1.Pod
		terminating int
		err         error
		want        appsv1.ReplicaSetStatus
		wantRecheck time.Duration
	}{
		{
			name: "counts", replicas: 3,
			active: []*corev1.Pod{
				pod("a", ready(t0.Add(-time.Hour))),
				pod("b", ready(t0.Add(-time.Hour)), func(p *corev1.Pod) { delete(p.Labels, "pod-template-hash") }),
				pod("c"),
			},
			terminating: 1,
			want:        appsv1.ReplicaSetStatus{Replicas: 3, FullyLabeledReplicas: 2, ReadyReplicas: 2, AvailableReplicas: 2, TerminatingReplicas: ptr.To(int32(1)), ObservedGeneration: 2},
		},
		{
			name: "minReadySeconds", replicas: 2, opts: []func(*appsv1.ReplicaSet){minReady(30)},
			active: []*corev1.Pod{pod("a", ready(t0.Add(-time.Minute))), pod("b", ready(t0.Add(-10*time.Second)))},
			want:   appsv1.ReplicaSetStatus{Replicas: 2, FullyLabeledReplicas: 2, ReadyReplicas: 2, AvailableReplicas: 1, TerminatingReplicas: ptr.To(int32(0)), ObservedGeneration: 2},
			// b is available 20 s from now; a second more.
			wantRecheck: 21 * time.Second,
		},
		{
			name: "creations fail", replicas: 3, active: []*corev1.Pod{pod("a")}, err: quota,
			want: appsv1.ReplicaSetStatus{Replicas: 1, FullyLabeledReplicas: 1, TerminatingReplicas: ptr.To(int32(0)), ObservedGeneration: 2,
				Conditions: []appsv1.ReplicaSetCondition{{Type: appsv1.ReplicaSetReplicaFailure, Status: corev1.ConditionTrue,
					Reason: FailedCreate, Message: quota.Error(), LastTransitionTime: metav1.NewTime(t0)}}},
		},
		{
			name: "failure kept while failing", replicas: 3, opts: []func(*appsv1.ReplicaSet){failing}, err: quota,
			want: appsv1.ReplicaSetStatus{TerminatingReplicas: ptr.To(int32(0)), ObservedGeneration: 2,
				Conditions: []appsv1.ReplicaSetCondition{{Type: appsv1.ReplicaSetReplicaFailure, Status: corev1.ConditionTrue, Reason: FailedCreate, Message: "old"}}},
		},
		{
			name: "failure cleared", replicas: 0, opts: []func(*appsv1.ReplicaSet){failing},
			want: appsv1.ReplicaSetStatus{TerminatingReplicas: ptr.To(int32(0)), ObservedGeneration: 2},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rs := testRS(tc.replicas)
			for _, o := range tc.opts {
				o(rs)
			}
			var term []*corev1.Pod
			for range tc.terminating {
				term = append(term, pod("t", deleting))
			}
			got, recheck := Status(rs, tc.active, term, tc.err, t0)
			if !equalStatus(got, tc.want) || recheck != tc.wantRecheck {
				t.Errorf("Status = %+v, %v\nwant %+v, %v", got, recheck, tc.want, tc.wantRecheck)
			}
			rs.Status = got
			if StatusChanged(rs, got) {
				t.Errorf("StatusChanged(rs with status %+v, same) = true, want false", got)
			}
		})
	}
}

func equalStatus(a, b appsv1.ReplicaSetStatus) bool {
	rs := &appsv1.ReplicaSet{Status: a, ObjectMeta: metav1.ObjectMeta{Generation: a.ObservedGeneration}}
	return a.ObservedGeneration == b.ObservedGeneration && !StatusChanged(rs, b)
}

func TestStatusChanged(t *testing.T) {
	rs := testRS(1)
	rs.Status = appsv1.ReplicaSetStatus{Replicas: 1, ObservedGeneration: 1}
	st := rs.Status
	if !StatusChanged(rs, st) {
		t.Errorf("StatusChanged with generation 2 observed 1 = false, want true")
	}
}

func TestOwned(t *testing.T) {
	rs := testRS(1)
	sel := labels.SelectorFromSet(labels.Set{"app": "web"})
	pods := []*corev1.Pod{
		pod("ours", ownedBy("rs-uid")),
		pod("theirs", ownedBy("x")),
		pod("orphan"),
		pod("ours-unselected", ownedBy("rs-uid"), func(p *corev1.Pod) { p.Labels = nil }),
	}
	if got := names(Owned(rs, sel, pods)); got != "ours" {
		t.Errorf("Owned = %s, want ours", got)
	}
}

func TestPodFromTemplate(t *testing.T) {
	rs := testRS(1)
	rs.Spec.Template.Annotations = map[string]string{"a": "b"}
	p, err := PodFromTemplate(rs, Kind)
	if err != nil {
		t.Fatal(err)
	}
	ref := metav1.GetControllerOf(p)
	if p.GenerateName != "web-abc-" || p.Namespace != "default" || p.Labels["app"] != "web" || p.Annotations["a"] != "b" ||
		ref == nil || ref.UID != "rs-uid" || ref.Kind != "ReplicaSet" || !ptr.Deref(ref.BlockOwnerDeletion, false) {
		t.Errorf("PodFromTemplate = %+v", p)
	}
	p.Labels["app"] = "changed"
	if rs.Spec.Template.Labels["app"] != "web" {
		t.Errorf("PodFromTemplate shares labels with the ReplicaSet")
	}
	rs.Spec.Template.Labels = nil
	if _, err := PodFromTemplate(rs, Kind); err == nil {
		t.Errorf("PodFromTemplate without labels: nil error, want one")
	}
}

func TestPodPrefix(t *testing.T) {
	long := strings.Repeat("a", 253)
	for _, tc := range []struct{ name, want string }{
		{"web-abc", "web-abc-"},
		{long, long},
	} {
		if got := PodPrefix(tc.name); got != tc.want {
			t.Errorf("PodPrefix(%.20s...) = %.20s..., want %.20s...", tc.name, got, tc.want)
		}
	}
}

func TestIsAvailable(t *testing.T) {
	p := pod("a", ready(t0.Add(-30*time.Second)))
	for _, tc := range []struct {
		minReady int32
		want     bool
	}{{0, true}, {29, true}, {30, false}, {60, false}} {
		if got := IsAvailable(p, tc.minReady, t0); got != tc.want {
			t.Errorf("IsAvailable(ready 30s, minReady %d) = %v, want %v", tc.minReady, got, tc.want)
		}
	}
	if IsAvailable(pod("b"), 0, t0) {
		t.Errorf("IsAvailable(not ready) = true, want false")
	}
}

func TestExpectations(t *testing.T) {
	clk := clocktesting.NewFakePassiveClock(t0)
	e := NewExpectations(clk)
	const k = "default/web"
	if !e.Satisfied(k) {
		t.Fatal("Satisfied with nothing expected = false, want true")
	}
	e.ExpectCreations(k, 2)
	e.CreationObserved(k)
	if e.Satisfied(k) {
		t.Fatal("Satisfied with 1 of 2 creations seen = true, want false")
	}
	e.CreationObserved(k)
	if !e.Satisfied(k) {
		t.Fatal("Satisfied with all creations seen = false, want true")
	}
	e.ExpectDeletions(k, []string{"default/a", "default/b"})
	e.DeletionObserved(k, "default/a")
	e.DeletionObserved(k, "default/other") // not ours: no effect
	if e.Satisfied(k) {
		t.Fatal("Satisfied with b not yet deleted = true, want false")
	}
	clk.SetTime(t0.Add(ExpectationsTimeout + time.Second))
	if !e.Satisfied(k) {
		t.Fatal("Satisfied after the timeout = false, want true")
	}
	e.ExpectCreations(k, 1)
	e.Delete(k)
	if !e.Satisfied(k) {
		t.Fatal("Satisfied after Delete = false, want true")
	}
}
