package disruption

import (
	"errors"
	"reflect"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
)

var t0 = time.Unix(1_700_000_000, 0).UTC()

type podOpt func(*corev1.Pod)

func pod(name string, opts ...podOpt) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns"}}
	p.Status.Phase = corev1.PodRunning
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
	for _, o := range opts {
		o(p)
	}
	return p
}

func unready(p *corev1.Pod) { p.Status.Conditions[0].Status = corev1.ConditionFalse }
func deleting(p *corev1.Pod) {
	at := metav1.NewTime(t0)
	p.DeletionTimestamp = &at
}
func ownedBy(uid types.UID) podOpt {
	return func(p *corev1.Pod) {
		p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: string(uid), UID: uid, Controller: new(true)}}
	}
}

func pods(n int, opts ...podOpt) []*corev1.Pod {
	var out []*corev1.Pod
	for i := range n {
		out = append(out, pod(string(rune('a'+i)), opts...))
	}
	return out
}

func minAvailable(v intstr.IntOrString) *policyv1.PodDisruptionBudget {
	return &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Name: "b", Namespace: "ns", Generation: 1},
		Spec: policyv1.PodDisruptionBudgetSpec{MinAvailable: &v}}
}

func maxUnavailable(v intstr.IntOrString) *policyv1.PodDisruptionBudget {
	return &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Name: "b", Namespace: "ns", Generation: 1},
		Spec: policyv1.PodDisruptionBudgetSpec{MaxUnavailable: &v}}
}

func withDisrupted(pdb *policyv1.PodDisruptionBudget, m map[string]time.Time) *policyv1.PodDisruptionBudget {
	pdb.Status.DisruptedPods = map[string]metav1.Time{}
	for k, v := range m {
		pdb.Status.DisruptedPods[k] = metav1.NewTime(v)
	}
	return pdb
}

// counts is the part of a status the tables check.
type counts struct {
	expected, desired, healthy, allowed int32
	reason                              string
	disrupted                           []string
}

func countsOf(st policyv1.PodDisruptionBudgetStatus) counts {
	c := counts{expected: st.ExpectedPods, desired: st.DesiredHealthy, healthy: st.CurrentHealthy, allowed: st.DisruptionsAllowed}
	for _, cond := range st.Conditions {
		if cond.Type == policyv1.DisruptionAllowedCondition {
			c.reason = cond.Reason
		}
	}
	for _, p := range pods(8) {
		if _, ok := st.DisruptedPods[p.Name]; ok {
			c.disrupted = append(c.disrupted, p.Name)
		}
	}
	return c
}

func TestCompute(t *testing.T) {
	rsA := map[types.UID]Owner{"rs-a": {UID: "rs-a", Replicas: 3}}
	// Two ReplicaSets of one Deployment of 4 replicas.
	deploy := map[types.UID]Owner{"rs-1": {UID: "dep", Replicas: 4}, "rs-2": {UID: "dep", Replicas: 4}}
	mixed := append(pods(2, ownedBy("rs-1")), pod("c", ownedBy("rs-2")), pod("d", ownedBy("rs-2"), unready))
	for _, tc := range []struct {
		name          string
		pdb           *policyv1.PodDisruptionBudget
		pods          []*corev1.Pod
		owners        map[types.UID]Owner
		want          counts
		err           bool
		unmanaged     []string
		notDeleted    []string
		recheck       time.Duration
		changedNotSet bool
	}{
		{name: "minAvailable 2 of 3 ready", pdb: minAvailable(intstr.FromInt32(2)), pods: pods(3),
			want: counts{3, 2, 3, 1, policyv1.SufficientPodsReason, nil}},
		{name: "minAvailable 3 of 3 ready", pdb: minAvailable(intstr.FromInt32(3)), pods: pods(3),
			want: counts{3, 3, 3, 0, policyv1.InsufficientPodsReason, nil}},
		{name: "an unready pod is not healthy", pdb: minAvailable(intstr.FromInt32(2)), pods: append(pods(2), pod("c", unready)),
			want: counts{3, 2, 2, 0, policyv1.InsufficientPodsReason, nil}},
		{name: "a pod being deleted is not healthy", pdb: minAvailable(intstr.FromInt32(1)), pods: append(pods(2), pod("c", deleting)),
			want: counts{3, 1, 2, 1, policyv1.SufficientPodsReason, nil}},
		{name: "no pods allows nothing", pdb: minAvailable(intstr.FromInt32(0)),
			want: counts{0, 0, 0, 0, policyv1.InsufficientPodsReason, nil}},
		{name: "neither minAvailable nor maxUnavailable", pdb: &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Generation: 1}}, pods: pods(2),
			want: counts{0, 0, 2, 0, policyv1.InsufficientPodsReason, nil}},
		{name: "a recent eviction keeps its pod out of the count",
			pdb:  withDisrupted(minAvailable(intstr.FromInt32(1)), map[string]time.Time{"a": t0.Add(-30 * time.Second)}),
			pods: pods(3), want: counts{3, 1, 2, 1, policyv1.SufficientPodsReason, []string{"a"}}, recheck: 90 * time.Second},
		{name: "an eviction older than the timeout expires",
			pdb:  withDisrupted(minAvailable(intstr.FromInt32(1)), map[string]time.Time{"a": t0.Add(-DeletionTimeout - time.Second), "b": t0.Add(-time.Minute)}),
			pods: pods(3), want: counts{3, 1, 2, 1, policyv1.SufficientPodsReason, []string{"b"}}, notDeleted: []string{"a"}, recheck: time.Minute},
		{name: "entries of deleting or unselected pods go",
			pdb:  withDisrupted(minAvailable(intstr.FromInt32(1)), map[string]time.Time{"a": t0, "z": t0}),
			pods: []*corev1.Pod{pod("a", deleting), pod("b")}, want: counts{2, 1, 1, 0, policyv1.InsufficientPodsReason, nil}},
		{name: "maxUnavailable 1 of a ReplicaSet of 3", pdb: maxUnavailable(intstr.FromInt32(1)), pods: pods(3, ownedBy("rs-a")), owners: rsA,
			want: counts{3, 2, 3, 1, policyv1.SufficientPodsReason, nil}},
		{name: "maxUnavailable counts the controller's scale, not the pods", pdb: maxUnavailable(intstr.FromInt32(1)), pods: pods(2, ownedBy("rs-a")), owners: rsA,
			want: counts{3, 2, 2, 0, policyv1.InsufficientPodsReason, nil}},
		{name: "maxUnavailable above the scale", pdb: maxUnavailable(intstr.FromInt32(5)), pods: pods(3, ownedBy("rs-a")), owners: rsA,
			want: counts{3, 0, 3, 3, policyv1.SufficientPodsReason, nil}},
		{name: "maxUnavailable 25% of a Deployment's two ReplicaSets counted once", pdb: maxUnavailable(intstr.FromString("25%")), pods: mixed, owners: deploy,
			want: counts{4, 3, 3, 0, policyv1.InsufficientPodsReason, nil}},
		{name: "minAvailable 50% rounds up", pdb: minAvailable(intstr.FromString("50%")), pods: pods(3, ownedBy("rs-a")), owners: rsA,
			want: counts{3, 2, 3, 1, policyv1.SufficientPodsReason, nil}},
		{name: "unmanaged pods are left out of the scale", pdb: maxUnavailable(intstr.FromInt32(1)), pods: append(pods(2, ownedBy("rs-a")), pod("x")), owners: rsA,
			want: counts{3, 2, 3, 1, policyv1.SufficientPodsReason, nil}, unmanaged: []string{"x"}},
		{name: "all pods unmanaged", pdb: minAvailable(intstr.FromString("50%")), pods: pods(2),
			want: counts{0, 0, 2, 0, policyv1.InsufficientPodsReason, nil}, unmanaged: []string{"a", "b"}},
		{name: "a controller not found fails safe", pdb: maxUnavailable(intstr.FromInt32(1)), pods: pods(2, ownedBy("gone")), owners: rsA,
			want: counts{0, 0, 0, 0, policyv1.SyncFailedReason, nil}, err: true},
		{name: "minAvailable as a count needs no controllers", pdb: minAvailable(intstr.FromInt32(1)), pods: pods(2, ownedBy("gone")),
			want: counts{2, 1, 2, 1, policyv1.SufficientPodsReason, nil}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := tc.pdb.DeepCopy()
			r := Compute(Input{Budget: tc.pdb, Pods: tc.pods, Owners: tc.owners, Now: t0})
			if got := countsOf(r.Status); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("Compute status = %+v, want %+v", got, tc.want)
			}
			if (r.Err != nil) != tc.err {
				t.Errorf("Compute err = %v, want error %v", r.Err, tc.err)
			}
			if !r.Changed {
				t.Errorf("Compute Changed = false on a budget never computed")
			}
			if !tc.err && r.Status.ObservedGeneration != tc.pdb.Generation {
				t.Errorf("Compute observedGeneration = %d, want %d", r.Status.ObservedGeneration, tc.pdb.Generation)
			}
			if !reflect.DeepEqual(r.Unmanaged, tc.unmanaged) || !reflect.DeepEqual(r.NotDeleted, tc.notDeleted) || r.Recheck != tc.recheck {
				t.Errorf("Compute unmanaged %v, not deleted %v, recheck %v; want %v, %v, %v", r.Unmanaged, r.NotDeleted, r.Recheck, tc.unmanaged, tc.notDeleted, tc.recheck)
			}
			if !reflect.DeepEqual(tc.pdb, before) {
				t.Errorf("Compute modified its input budget")
			}
			// Computed again on the status just written: nothing to do.
			if tc.err {
				return
			}
			written := tc.pdb.DeepCopy()
			written.Status = r.Status
			if again := Compute(Input{Budget: written, Pods: tc.pods, Owners: tc.owners, Now: t0.Add(time.Second)}); again.Changed {
				t.Errorf("Compute on its own status: Changed, status %+v", again.Status)
			}
		})
	}
}

func TestComputeGenerationAndConditions(t *testing.T) {
	pdb := minAvailable(intstr.FromInt32(2))
	r := Compute(Input{Budget: pdb, Pods: pods(3), Now: t0})
	pdb.Status = r.Status
	cond := r.Status.Conditions[0]
	if cond.Status != metav1.ConditionTrue || !cond.LastTransitionTime.Time.Equal(t0) || cond.ObservedGeneration != 1 {
		t.Fatalf("condition = %+v, want True since t0 for generation 1", cond)
	}

	// A new generation with the same numbers is written, the condition
	// keeping its transition time.
	pdb.Generation = 2
	r = Compute(Input{Budget: pdb, Pods: pods(3), Now: t0.Add(time.Minute)})
	if !r.Changed || r.Status.ObservedGeneration != 2 {
		t.Fatalf("after a spec change: changed %v, observedGeneration %d; want true, 2", r.Changed, r.Status.ObservedGeneration)
	}
	if c := r.Status.Conditions[0]; !c.LastTransitionTime.Time.Equal(t0) || c.ObservedGeneration != 2 {
		t.Errorf("condition = %+v, want the transition time of t0 and generation 2", c)
	}
	pdb.Status = r.Status

	// A pod goes unready: the condition turns, now.
	later := t0.Add(2 * time.Minute)
	r = Compute(Input{Budget: pdb, Pods: append(pods(2), pod("c", unready)), Now: later})
	if c := r.Status.Conditions[0]; c.Status != metav1.ConditionFalse || c.Reason != policyv1.InsufficientPodsReason || !c.LastTransitionTime.Time.Equal(later) {
		t.Errorf("condition = %+v, want False InsufficientPods since %v", c, later)
	}
	pdb.Status = r.Status

	// A condition that says something else is rewritten.
	pdb.Status.Conditions[0].Reason = policyv1.SyncFailedReason
	if r := Compute(Input{Budget: pdb, Pods: append(pods(2), pod("c", unready)), Now: later}); !r.Changed {
		t.Errorf("Compute with a SyncFailed condition: unchanged, want it rewritten")
	}
}

func TestFailSafe(t *testing.T) {
	pdb := minAvailable(intstr.FromInt32(1))
	pdb.Status = policyv1.PodDisruptionBudgetStatus{ObservedGeneration: 1, DisruptionsAllowed: 2, CurrentHealthy: 3, DesiredHealthy: 1, ExpectedPods: 3,
		Conditions: []metav1.Condition{{Type: policyv1.DisruptionAllowedCondition, Status: metav1.ConditionTrue, Reason: policyv1.SufficientPodsReason, LastTransitionTime: metav1.NewTime(t0)}}}
	pdb.Generation = 2
	st := FailSafe(pdb, errors.New("boom"), t0.Add(time.Minute))
	c := st.Conditions[0]
	if st.DisruptionsAllowed != 0 || st.CurrentHealthy != 3 || st.ObservedGeneration != 1 ||
		c.Status != metav1.ConditionFalse || c.Reason != policyv1.SyncFailedReason || c.Message != "boom" || !c.LastTransitionTime.Time.Equal(t0.Add(time.Minute)) {
		t.Errorf("FailSafe = %+v, want the old counts, no disruption allowed, SyncFailed: boom", st)
	}
	if pdb.Status.DisruptionsAllowed != 2 {
		t.Errorf("FailSafe modified its input")
	}
}

func TestNeedsScale(t *testing.T) {
	for _, tc := range []struct {
		pdb  *policyv1.PodDisruptionBudget
		want bool
	}{
		{minAvailable(intstr.FromInt32(1)), false},
		{minAvailable(intstr.FromString("10%")), true},
		{maxUnavailable(intstr.FromInt32(1)), true},
		{maxUnavailable(intstr.FromString("10%")), true},
		{&policyv1.PodDisruptionBudget{}, false},
	} {
		if got := NeedsScale(tc.pdb); got != tc.want {
			t.Errorf("NeedsScale(%+v) = %v, want %v", tc.pdb.Spec, got, tc.want)
		}
	}
}

func TestStaleDisruption(t *testing.T) {
	target := func(status corev1.ConditionStatus, reason string, age time.Duration) podOpt {
		return func(p *corev1.Pod) {
			p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{Type: corev1.DisruptionTarget, Status: status, Reason: reason,
				Message: "Eviction API: evicting", LastTransitionTime: metav1.NewTime(t0.Add(-age))})
		}
	}
	phase := func(ph corev1.PodPhase) podOpt { return func(p *corev1.Pod) { p.Status.Phase = ph } }
	for _, tc := range []struct {
		name  string
		pod   *corev1.Pod
		stale bool
		after time.Duration
	}{
		{"no condition", pod("a"), false, 0},
		{"fresh", pod("a", target(corev1.ConditionTrue, "EvictionByEvictionAPI", 30*time.Second)), true, 90 * time.Second},
		{"due", pod("a", target(corev1.ConditionTrue, "EvictionByEvictionAPI", 3*time.Minute)), true, 0},
		{"false", pod("a", target(corev1.ConditionFalse, "", 3*time.Minute)), false, 0},
		{"kubelet's", pod("a", target(corev1.ConditionTrue, corev1.PodReasonTerminationByKubelet, 3*time.Minute)), false, 0},
		{"being deleted", pod("a", deleting, target(corev1.ConditionTrue, "EvictionByEvictionAPI", 3*time.Minute)), false, 0},
		{"terminal", pod("a", phase(corev1.PodFailed), target(corev1.ConditionTrue, "EvictionByEvictionAPI", 3*time.Minute)), false, 0},
	} {
		stale, after := StaleDisruption(tc.pod, t0)
		if stale != tc.stale || after != tc.after {
			t.Errorf("StaleDisruption(%s) = %v, %v; want %v, %v", tc.name, stale, after, tc.stale, tc.after)
		}
		cleared := ClearDisruption(tc.pod, t0)
		if hasTrue := tc.name != "no condition" && tc.name != "false"; (cleared != nil) != hasTrue {
			t.Errorf("ClearDisruption(%s) = %v, want a copy: %v", tc.name, cleared, hasTrue)
		}
		if cleared != nil {
			c := cleared.Status.Conditions[len(cleared.Status.Conditions)-1]
			if c.Status != corev1.ConditionFalse || c.Reason != "" || c.Message != "" || !c.LastTransitionTime.Time.Equal(t0) {
				t.Errorf("ClearDisruption(%s) condition = %+v, want False with no reason since t0", tc.name, c)
			}
		}
	}
}
