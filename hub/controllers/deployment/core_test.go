package deployment

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
)

var t0 = time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)

// deploy is a rolling Deployment of n replicas with maxSurge and
// maxUnavailable as given ("" for 25%).
func deploy(n int32, surge, unavailable string) *appsv1.Deployment {
	ios := func(s string) *intstr.IntOrString {
		if s == "" {
			s = "25%"
		}
		v := intstr.Parse(s)
		return &v
	}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default", UID: "d-uid", Generation: 1,
			Annotations: map[string]string{"team": "a", corev1.LastAppliedConfigAnnotation: "{}", RevisionAnnotation: "9"}},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(n),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "web"}},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: "nginx:1.28"}}},
			},
			Strategy: appsv1.DeploymentStrategy{Type: appsv1.RollingUpdateDeploymentStrategyType,
				RollingUpdate: &appsv1.RollingUpdateDeployment{MaxSurge: ios(surge), MaxUnavailable: ios(unavailable)}},
			RevisionHistoryLimit:    ptr.To(int32(10)),
			ProgressDeadlineSeconds: ptr.To(int32(600)),
		},
	}
}

func recreate(n int32) *appsv1.Deployment {
	d := deploy(n, "", "")
	d.Spec.Strategy = appsv1.DeploymentStrategy{Type: appsv1.RecreateDeploymentStrategyType}
	return d
}

// rs is a ReplicaSet named name, created age ago, with spec replicas n
// and available pods; rev and maxReplicas annotations when not "".
func rs(name string, age time.Duration, n, available int32, rev, maxReplicas string) *appsv1.ReplicaSet {
	r := &appsv1.ReplicaSet{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID(name + "-uid"),
			CreationTimestamp: metav1.NewTime(t0.Add(-age)), Annotations: map[string]string{}},
		Spec:   appsv1.ReplicaSetSpec{Replicas: ptr.To(n)},
		Status: appsv1.ReplicaSetStatus{Replicas: n, ReadyReplicas: available, AvailableReplicas: available, TerminatingReplicas: ptr.To(int32(0))},
	}
	if rev != "" {
		r.Annotations[RevisionAnnotation] = rev
	}
	if maxReplicas != "" {
		r.Annotations[MaxReplicasAnnotation] = maxReplicas
	}
	return r
}

func desired(r *appsv1.ReplicaSet, n string) *appsv1.ReplicaSet {
	r.Annotations[DesiredReplicasAnnotation] = n
	return r
}

func steps(s []Scale) string {
	var out []string
	for _, x := range s {
		out = append(out, x.String())
	}
	return strings.Join(out, ", ")
}

func TestComputeHash(t *testing.T) {
	d := deploy(1, "", "")
	h := ComputeHash(&d.Spec.Template, nil)
	if h != ComputeHash(d.Spec.Template.DeepCopy(), nil) {
		t.Errorf("ComputeHash of equal templates differs")
	}
	if h == ComputeHash(&d.Spec.Template, ptr.To(int32(1))) {
		t.Errorf("ComputeHash with collisionCount 1 = %s, the same as without", h)
	}
	if ComputeHash(&d.Spec.Template, ptr.To(int32(1))) == ComputeHash(&d.Spec.Template, ptr.To(int32(2))) {
		t.Errorf("ComputeHash with collisionCount 1 and 2 agree")
	}
	d2 := deploy(1, "", "")
	d2.Spec.Template.Spec.Containers[0].Image = "nginx:1.29"
	if h == ComputeHash(&d2.Spec.Template, nil) {
		t.Errorf("ComputeHash ignores the image")
	}
	for _, c := range h {
		if strings.ContainsRune("aeiou013", c) {
			t.Errorf("ComputeHash = %s, has %q outside the safe alphabet", h, c)
		}
	}
}

func TestFenceposts(t *testing.T) {
	for _, tc := range []struct {
		n                        int32
		surge, unavailable       string
		wantSurge, wantUnavailbl int32
	}{
		{10, "", "", 3, 2},    // 25% of 10: up to 3, down to 2
		{3, "", "", 1, 0},     // kubectl create deployment's 3 replicas
		{1, "", "", 1, 0},     // 0.25 up is 1
		{2, "0%", "1%", 0, 1}, // both round to zero: unavailable becomes 1
		{2, "1", "0", 1, 0},
		{5, "0", "100%", 0, 5},
		{0, "", "", 0, 1},
	} {
		d := deploy(tc.n, tc.surge, tc.unavailable)
		s := MaxSurge(d)
		u := MaxUnavailable(d)
		wantU := tc.wantUnavailbl
		if tc.n == 0 {
			wantU = 0 // no replicas, nothing to miss
		}
		if s != tc.wantSurge || u != wantU {
			t.Errorf("replicas %d surge %q unavailable %q: MaxSurge %d MaxUnavailable %d, want %d %d",
				tc.n, tc.surge, tc.unavailable, s, u, tc.wantSurge, wantU)
		}
	}
	if MaxSurge(recreate(3)) != 0 || MaxUnavailable(recreate(3)) != 0 {
		t.Errorf("Recreate has surge or unavailability")
	}
}

func TestNewReplicas(t *testing.T) {
	for _, tc := range []struct {
		name    string
		d       *appsv1.Deployment
		newN    int32
		oldN    int32
		want    int32
		surgeOK bool
	}{
		{name: "first step", d: deploy(3, "", ""), newN: 0, oldN: 3, want: 1},
		{name: "at the surge bound", d: deploy(3, "", ""), newN: 1, oldN: 3, want: 1},
		{name: "room after old scaled down", d: deploy(3, "", ""), newN: 1, oldN: 1, want: 3},
		{name: "bounded by replicas", d: deploy(3, "100%", ""), newN: 0, oldN: 0, want: 3},
		{name: "recreate: all", d: recreate(5), newN: 0, oldN: 0, want: 5},
	} {
		n := rs("new", 0, tc.newN, 0, "", "")
		o := rs("old", time.Hour, tc.oldN, tc.oldN, "", "")
		if got := NewReplicas(tc.d, []*appsv1.ReplicaSet{o, n}, n); got != tc.want {
			t.Errorf("%s: NewReplicas = %d, want %d", tc.name, got, tc.want)
		}
	}
}

func TestScaleStep(t *testing.T) {
	for _, tc := range []struct {
		name  string
		d     *appsv1.Deployment
		newRS *appsv1.ReplicaSet
		old   []*appsv1.ReplicaSet
		want  string
	}{
		{"one active scaled up", deploy(12, "", ""), rs("new", 0, 10, 10, "2", "13"), []*appsv1.ReplicaSet{rs("old", time.Hour, 0, 0, "1", "")}, "new 10->12"},
		{"in step", deploy(10, "", ""), rs("new", 0, 10, 10, "2", "13"), nil, ""},
		{"none active: the new one", deploy(4, "", ""), rs("new", 0, 0, 0, "2", ""), []*appsv1.ReplicaSet{rs("old", time.Hour, 0, 0, "1", "")}, "new 0->4"},
		{"none active, no new: the newest old", deploy(4, "", ""), nil,
			[]*appsv1.ReplicaSet{rs("older", 2*time.Hour, 0, 0, "1", ""), rs("newer", time.Hour, 0, 0, "2", "")}, "newer 0->4"},
		{"saturated new: old ones to zero", deploy(3, "", ""), desired(rs("new", 0, 3, 3, "2", "4"), "3"),
			[]*appsv1.ReplicaSet{rs("old", time.Hour, 1, 1, "1", "4")}, "old 1->0"},
		// 10 -> 20 mid-rollout, maxSurge 3: allowed 23, 13 held, 10 to add
		// in proportion: old 8*23/13-8 = 6, new the 4 left.
		{"proportional up", deploy(20, "3", "2"), rs("new", 0, 5, 0, "2", "13"),
			[]*appsv1.ReplicaSet{rs("old", time.Hour, 8, 8, "1", "13")}, "old 8->14, new 5->9"},
		{"proportional down", deploy(5, "3", "2"), rs("new", 0, 5, 0, "2", "13"),
			[]*appsv1.ReplicaSet{rs("old", time.Hour, 8, 8, "1", "13")}, "old 8->5, new 5->3"},
		{"to zero mid-rollout", deploy(0, "3", "2"), rs("new", 0, 5, 0, "2", "13"),
			[]*appsv1.ReplicaSet{rs("old", time.Hour, 8, 8, "1", "13")}, "old 8->0, new 5->0"},
		{"unchanged size lists all for their annotations", deploy(10, "3", "2"), rs("new", 0, 5, 0, "2", "13"),
			[]*appsv1.ReplicaSet{rs("old", time.Hour, 8, 8, "1", "13")}, "old 8->8, new 5->5"},
		{"recreate: no proportion", recreate(10), rs("new", 0, 5, 0, "2", ""),
			[]*appsv1.ReplicaSet{rs("old", time.Hour, 5, 5, "1", "")}, ""},
	} {
		if got := steps(ScaleStep(tc.d, tc.newRS, tc.old)); got != tc.want {
			t.Errorf("%s: ScaleStep = %q, want %q", tc.name, got, tc.want)
		}
	}
}

func TestRollingStep(t *testing.T) {
	for _, tc := range []struct {
		name  string
		d     *appsv1.Deployment
		newRS *appsv1.ReplicaSet
		old   []*appsv1.ReplicaSet
		want  string
	}{
		{"surge first", deploy(3, "", ""), rs("new", 0, 0, 0, "2", ""), []*appsv1.ReplicaSet{rs("old", time.Hour, 3, 3, "1", "")}, "new 0->1"},
		{"new not available yet: wait", deploy(3, "", ""), rs("new", 0, 1, 0, "2", ""), []*appsv1.ReplicaSet{rs("old", time.Hour, 3, 3, "1", "")}, ""},
		{"new available: old down by one", deploy(3, "", ""), rs("new", 0, 1, 1, "2", ""), []*appsv1.ReplicaSet{rs("old", time.Hour, 3, 3, "1", "")}, "old 3->2"},
		{"then new up again", deploy(3, "", ""), rs("new", 0, 1, 1, "2", ""), []*appsv1.ReplicaSet{rs("old", time.Hour, 2, 2, "1", "")}, "new 1->2"},
		{"unavailable old ones go first", deploy(3, "1", "1"), rs("new", 0, 1, 0, "2", ""), []*appsv1.ReplicaSet{rs("old", time.Hour, 3, 1, "1", "")}, "old 3->2"},
		{"unhealthy, then healthy within maxUnavailable", deploy(4, "1", "2"), rs("new", 0, 1, 1, "2", ""),
			[]*appsv1.ReplicaSet{rs("old", time.Hour, 4, 3, "1", "")}, "old 4->1"},
		{"oldest old first", deploy(3, "0", "1"), rs("new", 0, 0, 0, "3", ""),
			[]*appsv1.ReplicaSet{rs("b", time.Hour, 2, 2, "2", ""), rs("a", 2*time.Hour, 1, 1, "1", "")}, "a 1->0"},
		{"new above replicas: down", deploy(2, "", ""), rs("new", 0, 3, 3, "2", ""), nil, "new 3->2"},
		{"done", deploy(3, "", ""), rs("new", 0, 3, 3, "2", ""), []*appsv1.ReplicaSet{rs("old", time.Hour, 0, 0, "1", "")}, ""},
		{"status lagging a scale-down: wait", deploy(3, "1", "1"), rs("new", 0, 1, 0, "2", ""), []*appsv1.ReplicaSet{rs("old", time.Hour, 3, 4, "1", "")}, ""},
	} {
		if got := steps(RollingStep(tc.d, tc.newRS, tc.old)); got != tc.want {
			t.Errorf("%s: RollingStep = %q, want %q", tc.name, got, tc.want)
		}
	}
}

func TestRecreateSteps(t *testing.T) {
	old := []*appsv1.ReplicaSet{rs("a", time.Hour, 2, 2, "1", ""), rs("b", 2*time.Hour, 0, 0, "0", "")}
	if got := steps(RecreateScaleDown(old)); got != "a 2->0" {
		t.Errorf("RecreateScaleDown = %q, want a 2->0", got)
	}
	gone := rs("a", time.Hour, 0, 0, "1", "")
	newRS := rs("new", 0, 0, 0, "2", "")
	pod := func(ph corev1.PodPhase) *corev1.Pod { return &corev1.Pod{Status: corev1.PodStatus{Phase: ph}} }
	for _, tc := range []struct {
		name string
		old  []*appsv1.ReplicaSet
		pods map[types.UID][]*corev1.Pod
		want bool
	}{
		{"old reports pods", old, nil, true},
		{"none left", []*appsv1.ReplicaSet{gone}, nil, false},
		{"a pod still running", []*appsv1.ReplicaSet{gone}, map[types.UID][]*corev1.Pod{gone.UID: {pod(corev1.PodRunning)}}, true},
		{"an unknown pod counts", []*appsv1.ReplicaSet{gone}, map[types.UID][]*corev1.Pod{gone.UID: {pod(corev1.PodUnknown)}}, true},
		{"terminated pods do not", []*appsv1.ReplicaSet{gone}, map[types.UID][]*corev1.Pod{gone.UID: {pod(corev1.PodSucceeded), pod(corev1.PodFailed)}}, false},
		{"the new one's pods do not", []*appsv1.ReplicaSet{gone}, map[types.UID][]*corev1.Pod{newRS.UID: {pod(corev1.PodRunning)}}, false},
	} {
		if got := OldPodsRunning(newRS, tc.old, tc.pods); got != tc.want {
			t.Errorf("%s: OldPodsRunning = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestIsScalingEvent(t *testing.T) {
	d := deploy(5, "", "")
	if !IsScalingEvent(d, desired(rs("new", 0, 3, 3, "1", ""), "3"), nil) {
		t.Errorf("IsScalingEvent(3 -> 5) = false, want true")
	}
	if IsScalingEvent(d, desired(rs("new", 0, 5, 3, "1", ""), "5"), []*appsv1.ReplicaSet{desired(rs("old", time.Hour, 0, 0, "0", ""), "3")}) {
		t.Errorf("IsScalingEvent(inactive old one saw 3) = true, want false")
	}
	if IsScalingEvent(d, nil, nil) {
		t.Errorf("IsScalingEvent(no replica sets) = true, want false")
	}
}

func TestNewReplicaSet(t *testing.T) {
	d := deploy(3, "", "")
	old := []*appsv1.ReplicaSet{rs("old", time.Hour, 3, 3, "4", "")}
	got := NewReplicaSet(d, old)
	hash := ComputeHash(&d.Spec.Template, nil)
	if got.Name != "web-"+hash || got.Labels[appsv1.DefaultDeploymentUniqueLabelKey] != hash || got.Labels["app"] != "web" ||
		got.Spec.Selector.MatchLabels[appsv1.DefaultDeploymentUniqueLabelKey] != hash || got.Spec.Template.Labels[appsv1.DefaultDeploymentUniqueLabelKey] != hash {
		t.Errorf("NewReplicaSet name %s labels %v selector %v template labels %v", got.Name, got.Labels, got.Spec.Selector, got.Spec.Template.Labels)
	}
	if _, ok := d.Spec.Template.Labels[appsv1.DefaultDeploymentUniqueLabelKey]; ok || d.Spec.Selector.MatchLabels[appsv1.DefaultDeploymentUniqueLabelKey] != "" {
		t.Errorf("NewReplicaSet changed the deployment's template or selector")
	}
	if ref := metav1.GetControllerOf(got); ref == nil || ref.UID != d.UID || ref.Kind != "Deployment" {
		t.Errorf("NewReplicaSet controller = %+v", ref)
	}
	if *got.Spec.Replicas != 1 {
		t.Errorf("NewReplicaSet replicas = %d, want 1 (the surge)", *got.Spec.Replicas)
	}
	want := map[string]string{"team": "a", RevisionAnnotation: "5", DesiredReplicasAnnotation: "3", MaxReplicasAnnotation: "4"}
	if fmt.Sprint(got.Annotations) != fmt.Sprint(want) {
		t.Errorf("NewReplicaSet annotations = %v, want %v", got.Annotations, want)
	}
	d.Status.CollisionCount = ptr.To(int32(1))
	if NewReplicaSet(d, old).Name == got.Name {
		t.Errorf("NewReplicaSet ignores the collision count")
	}
}

func TestSyncNewReplicaSet(t *testing.T) {
	d := deploy(3, "", "")
	d.Spec.MinReadySeconds = 5
	// A rollback: revision 1 is new again after 2 and 3.
	back := rs("back", 3*time.Hour, 0, 0, "1", "")
	back.Annotations[RevisionHistoryAnnotation] = ""
	old := []*appsv1.ReplicaSet{rs("b", 2*time.Hour, 3, 3, "2", ""), rs("c", time.Hour, 0, 0, "3", "")}
	got, changed := SyncNewReplicaSet(d, back, old)
	if !changed || got.Annotations[RevisionAnnotation] != "4" || got.Annotations[RevisionHistoryAnnotation] != "1" ||
		got.Annotations["team"] != "a" || got.Spec.MinReadySeconds != 5 {
		t.Errorf("SyncNewReplicaSet = %v minReady %d changed %v", got.Annotations, got.Spec.MinReadySeconds, changed)
	}
	if back.Annotations[RevisionAnnotation] != "1" {
		t.Errorf("SyncNewReplicaSet changed its input")
	}
	again, changed := SyncNewReplicaSet(d, got, old)
	if changed {
		t.Errorf("SyncNewReplicaSet of a synced one changed %v to %v", got.Annotations, again.Annotations)
	}
	// Its revision is already the highest: kept.
	high := rs("new", 0, 0, 0, "7", "")
	if got, _ := SyncNewReplicaSet(d, high, old); got.Annotations[RevisionAnnotation] != "7" {
		t.Errorf("SyncNewReplicaSet lowered revision 7 to %s", got.Annotations[RevisionAnnotation])
	}
}

func TestAppendHistory(t *testing.T) {
	for _, tc := range []struct{ history, rev, want string }{
		{"", "1", "1"},
		{"1,3", "5", "1,3,5"},
		{strings.Repeat("9", 1998), "12", "12"}, // the oldest dropped to fit
	} {
		if got := appendHistory(tc.history, tc.rev); got != tc.want {
			t.Errorf("appendHistory(%.10q, %q) = %.10q, want %.10q", tc.history, tc.rev, got, tc.want)
		}
	}
}

func TestCleanup(t *testing.T) {
	d := deploy(3, "", "")
	d.Spec.RevisionHistoryLimit = ptr.To(int32(1))
	stale := rs("stale", 5*time.Hour, 0, 0, "2", "")
	stale.Generation = 2 // its controller has not seen the scale-down yet
	busy := rs("busy", 6*time.Hour, 0, 0, "1", "")
	busy.Status.Replicas = 1
	going := rs("going", 7*time.Hour, 0, 0, "0", "")
	going.DeletionTimestamp = ptr.To(metav1.NewTime(t0))
	old := []*appsv1.ReplicaSet{
		rs("r5", time.Hour, 0, 0, "5", ""),
		rs("r3", 3*time.Hour, 0, 0, "3", ""),
		rs("r4", 2*time.Hour, 0, 0, "4", ""),
		stale, busy, going,
	}
	var got []string
	for _, r := range Cleanup(d, old) {
		got = append(got, r.Name)
	}
	if strings.Join(got, ",") != "r3,r4" {
		t.Errorf("Cleanup(limit 1) = %v, want r3,r4 (not busy, stale, going or the newest)", got)
	}
	d.Spec.RevisionHistoryLimit = nil
	if got := Cleanup(d, old); got != nil {
		t.Errorf("Cleanup(no limit) = %v, want none", got)
	}
}

func TestFindNew(t *testing.T) {
	d := deploy(3, "", "")
	match := func(name string, age time.Duration) *appsv1.ReplicaSet {
		r := rs(name, age, 1, 1, "", "")
		r.Spec.Template = *d.Spec.Template.DeepCopy()
		r.Spec.Template.Labels[appsv1.DefaultDeploymentUniqueLabelKey] = "h-" + name
		return r
	}
	other := rs("other", 3*time.Hour, 1, 1, "", "")
	rss := []*appsv1.ReplicaSet{match("young", time.Hour), other, match("elder", 2*time.Hour)}
	if n := FindNew(d, rss); n == nil || n.Name != "elder" {
		t.Errorf("FindNew = %v, want the oldest match, elder", n)
	}
	if old := FindOld(d, rss); len(old) != 2 {
		t.Errorf("FindOld = %d replica sets, want 2", len(old))
	}
}

func cond(st appsv1.DeploymentStatus, t appsv1.DeploymentConditionType) string {
	c := Condition(&st, t)
	if c == nil {
		return "none"
	}
	return fmt.Sprintf("%s/%s", c.Status, c.Reason)
}

func TestRolloutStatus(t *testing.T) {
	progressed := func(d *appsv1.Deployment, reason string, ago time.Duration) {
		d.Status.Conditions = append(d.Status.Conditions, appsv1.DeploymentCondition{Type: appsv1.DeploymentProgressing, Status: corev1.ConditionTrue,
			Reason: reason, LastUpdateTime: metav1.NewTime(t0.Add(-ago)), LastTransitionTime: metav1.NewTime(t0.Add(-ago))})
	}
	for _, tc := range []struct {
		name         string
		d            func() *appsv1.Deployment
		newRS        *appsv1.ReplicaSet
		old          []*appsv1.ReplicaSet
		wantAvail    string
		wantProgress string
		wantFailure  string
		wantChanged  bool
		wantRecheck  time.Duration
	}{
		{
			name: "complete",
			d: func() *appsv1.Deployment {
				d := deploy(3, "", "")
				progressed(d, ReplicaSetUpdated, time.Minute)
				return d
			},
			newRS:     rs("new", 0, 3, 3, "2", ""),
			wantAvail: "True/MinimumReplicasAvailable", wantProgress: "True/NewReplicaSetAvailable", wantFailure: "none", wantChanged: true,
		},
		{
			name: "progressing",
			d: func() *appsv1.Deployment {
				d := deploy(3, "", "")
				progressed(d, NewReplicaSetCreated, time.Minute)
				return d
			},
			newRS:     rs("new", 0, 1, 1, "2", ""),
			old:       []*appsv1.ReplicaSet{rs("old", time.Hour, 3, 3, "1", "")},
			wantAvail: "True/MinimumReplicasAvailable", wantProgress: "True/ReplicaSetUpdated", wantFailure: "none", wantChanged: true,
		},
		{
			name: "past the deadline",
			d: func() *appsv1.Deployment {
				d := deploy(3, "", "")
				d.Status.Replicas, d.Status.UpdatedReplicas = 1, 1 // no progress since
				progressed(d, ReplicaSetUpdated, 11*time.Minute)
				return d
			},
			newRS:     rs("new", 0, 1, 0, "2", ""),
			wantAvail: "False/MinimumReplicasUnavailable", wantProgress: "False/ProgressDeadlineExceeded", wantFailure: "none", wantChanged: true,
		},
		{
			name: "replica failure of the new one",
			d: func() *appsv1.Deployment {
				d := deploy(3, "", "")
				progressed(d, ReplicaSetUpdated, time.Minute)
				return d
			},
			newRS: func() *appsv1.ReplicaSet {
				r := rs("new", 0, 3, 0, "2", "")
				r.Status.Replicas = 0
				r.Status.Conditions = []appsv1.ReplicaSetCondition{{Type: appsv1.ReplicaSetReplicaFailure, Status: corev1.ConditionTrue, Reason: "FailedCreate", Message: "quota"}}
				return r
			}(),
			wantAvail: "False/MinimumReplicasUnavailable", wantProgress: "True/ReplicaSetUpdated", wantFailure: "True/FailedCreate", wantChanged: true,
		},
		{
			name: "no deadline: no Progressing",
			d: func() *appsv1.Deployment {
				d := deploy(3, "", "")
				d.Spec.ProgressDeadlineSeconds = nil
				progressed(d, ReplicaSetUpdated, time.Minute)
				return d
			},
			newRS:     rs("new", 0, 3, 3, "2", ""),
			wantAvail: "True/MinimumReplicasAvailable", wantProgress: "none", wantFailure: "none", wantChanged: true,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := tc.d()
			all := append(tc.old, tc.newRS)
			st, changed, _ := RolloutStatus(d, all, tc.newRS, t0)
			if got := cond(st, appsv1.DeploymentAvailable); got != tc.wantAvail {
				t.Errorf("Available = %s, want %s", got, tc.wantAvail)
			}
			if got := cond(st, appsv1.DeploymentProgressing); got != tc.wantProgress {
				t.Errorf("Progressing = %s, want %s", got, tc.wantProgress)
			}
			if got := cond(st, appsv1.DeploymentReplicaFailure); got != tc.wantFailure {
				t.Errorf("ReplicaFailure = %s, want %s", got, tc.wantFailure)
			}
			if changed != tc.wantChanged {
				t.Errorf("changed = %v, want %v", changed, tc.wantChanged)
			}
			// Written and read back, it is stable.
			d.Status = st
			if _, changed, _ := RolloutStatus(d, all, tc.newRS, t0.Add(time.Second)); changed {
				t.Errorf("RolloutStatus of its own status changed again")
			}
		})
	}
}

func TestRolloutStatusRecheck(t *testing.T) {
	d := deploy(3, "", "")
	newRS := rs("new", 0, 1, 0, "2", "")
	all := []*appsv1.ReplicaSet{rs("old", time.Hour, 3, 3, "1", ""), newRS}
	st, _, _ := RolloutStatus(d, all, newRS, t0)
	st.Conditions = append(st.Conditions, appsv1.DeploymentCondition{Type: appsv1.DeploymentProgressing, Status: corev1.ConditionTrue,
		Reason: ReplicaSetUpdated, LastUpdateTime: metav1.NewTime(t0), LastTransitionTime: metav1.NewTime(t0)})
	d.Status = st
	_, changed, recheck := RolloutStatus(d, all, newRS, t0.Add(3*time.Minute))
	if changed || recheck != 7*time.Minute+time.Second {
		t.Errorf("RolloutStatus 3 minutes into a 10 minute deadline: changed %v recheck %v, want false 7m1s", changed, recheck)
	}
	st, changed, _ = RolloutStatus(d, all, newRS, t0.Add(11*time.Minute))
	if !changed || cond(st, appsv1.DeploymentProgressing) != "False/ProgressDeadlineExceeded" {
		t.Errorf("RolloutStatus past the deadline: changed %v Progressing %s", changed, cond(st, appsv1.DeploymentProgressing))
	}
}

func TestCalculateStatus(t *testing.T) {
	d := deploy(4, "1", "1")
	d.Generation = 7
	newRS := rs("new", 0, 2, 1, "2", "")
	old := rs("old", time.Hour, 3, 3, "1", "")
	old.Status.TerminatingReplicas = ptr.To(int32(1))
	st := CalculateStatus(d, []*appsv1.ReplicaSet{old, newRS}, newRS, t0)
	if st.ObservedGeneration != 7 || st.Replicas != 5 || st.UpdatedReplicas != 2 || st.ReadyReplicas != 4 || st.AvailableReplicas != 4 ||
		st.UnavailableReplicas != 1 || ptr.Deref(st.TerminatingReplicas, -1) != 1 {
		t.Errorf("CalculateStatus = %+v", st)
	}
	if got := cond(st, appsv1.DeploymentAvailable); got != "True/MinimumReplicasAvailable" {
		t.Errorf("Available = %s, want True (4 of 4, 1 may be missing)", got)
	}
	newRS.Status.TerminatingReplicas = nil
	if st := CalculateStatus(d, []*appsv1.ReplicaSet{old, newRS}, newRS, t0); st.TerminatingReplicas != nil {
		t.Errorf("terminatingReplicas = %d with a replica set not reporting it, want nil", *st.TerminatingReplicas)
	}
}

func TestPausedConditions(t *testing.T) {
	d := deploy(3, "", "")
	d.Spec.Paused = true
	st, changed := PausedConditions(d, t0)
	if !changed || cond(st, appsv1.DeploymentProgressing) != "Unknown/DeploymentPaused" {
		t.Errorf("paused: changed %v Progressing %s", changed, cond(st, appsv1.DeploymentProgressing))
	}
	d.Status = st
	if _, changed := PausedConditions(d, t0); changed {
		t.Errorf("paused again: changed")
	}
	d.Spec.Paused = false
	if st, changed := PausedConditions(d, t0); !changed || cond(st, appsv1.DeploymentProgressing) != "Unknown/DeploymentResumed" {
		t.Errorf("resumed: changed %v Progressing %s", changed, cond(st, appsv1.DeploymentProgressing))
	}
	d.Spec.Paused = true
	d.Status.Conditions = []appsv1.DeploymentCondition{{Type: appsv1.DeploymentProgressing, Status: corev1.ConditionFalse, Reason: ProgressDeadline}}
	if _, changed := PausedConditions(d, t0); changed {
		t.Errorf("paused after timing out: changed, want the timeout kept")
	}
}

func TestCreatedCondition(t *testing.T) {
	d := deploy(3, "", "")
	r := rs("web-x", 0, 0, 0, "", "")
	st, _ := CreatedCondition(d, r, errors.New("quota exceeded"), t0)
	c := Condition(&st, appsv1.DeploymentProgressing)
	if c == nil || c.Reason != FailedRSCreate || c.Status != corev1.ConditionFalse || c.Message != `Failed to create new replica set "web-x": quota exceeded` {
		t.Errorf("CreatedCondition(error) = %+v", c)
	}
	st, _ = CreatedCondition(d, r, nil, t0)
	if got := cond(st, appsv1.DeploymentProgressing); got != "True/NewReplicaSetCreated" {
		t.Errorf("CreatedCondition = %s", got)
	}
	st, changed := FoundCondition(d, r, t0)
	if !changed || cond(st, appsv1.DeploymentProgressing) != "True/FoundNewReplicaSet" {
		t.Errorf("FoundCondition = %v %s", changed, cond(st, appsv1.DeploymentProgressing))
	}
}
