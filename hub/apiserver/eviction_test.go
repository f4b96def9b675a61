package apiserver

import (
	"net/http"
	"reflect"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

var evictNow = time.Unix(1_700_000_000, 0).UTC()

func evictPod(phase corev1.PodPhase, ready bool, opts ...func(*corev1.Pod)) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web-1", Namespace: "ns", Labels: map[string]string{"app": "web"}}}
	p.Status.Phase = phase
	st := corev1.ConditionFalse
	if ready {
		st = corev1.ConditionTrue
	}
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: st}}
	for _, o := range opts {
		o(p)
	}
	return p
}

func beingDeleted(p *corev1.Pod) { t := metav1.NewTime(evictNow); p.DeletionTimestamp = &t }

// budget returns a budget of ns selecting app=web, computed for its
// generation, with allowed disruptions, current and desired healthy.
func budget(name string, allowed, current, desired int32, opts ...func(*policyv1.PodDisruptionBudget)) *policyv1.PodDisruptionBudget {
	b := &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", Generation: 1, ResourceVersion: "7"},
		Spec:       policyv1.PodDisruptionBudgetSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}},
		Status: policyv1.PodDisruptionBudgetStatus{ObservedGeneration: 1, DisruptionsAllowed: allowed, CurrentHealthy: current, DesiredHealthy: desired,
			Conditions: []metav1.Condition{{Type: policyv1.DisruptionAllowedCondition, Status: metav1.ConditionTrue, Reason: policyv1.SufficientPodsReason,
				LastTransitionTime: metav1.NewTime(evictNow.Add(-time.Hour))}}},
	}
	for _, o := range opts {
		o(b)
	}
	return b
}

// outcome is what a table checks of an evictionPlan.
type outcome struct {
	code     int32 // of Err, 0 for none
	cause    string
	pin      bool
	name     string
	allowed  int32 // of Budget, -1 when nothing is to be written
	condTrue bool  // of Budget's DisruptionAllowed condition
}

func outcomeOf(p evictionPlan) outcome {
	o := outcome{pin: p.Pin, name: p.BudgetName, allowed: -1}
	if p.Err != nil {
		st := toStatus(p.Err)
		o.code = st.Code
		if st.Details != nil && len(st.Details.Causes) > 0 {
			o.cause = st.Details.Causes[0].Message
		}
	}
	if b := p.Budget; b != nil {
		o.allowed = b.Status.DisruptionsAllowed
		o.condTrue = b.Status.Conditions[0].Status == metav1.ConditionTrue
	}
	return o
}

func TestDecideEviction(t *testing.T) {
	alwaysAllow := func(b *policyv1.PodDisruptionBudget) {
		b.Spec.UnhealthyPodEvictionPolicy = new(policyv1.AlwaysAllow)
	}
	ifHealthy := func(b *policyv1.PodDisruptionBudget) {
		b.Spec.UnhealthyPodEvictionPolicy = new(policyv1.IfHealthyBudget)
	}
	running := evictPod(corev1.PodRunning, true)
	for _, tc := range []struct {
		name    string
		pod     *corev1.Pod
		budgets []*policyv1.PodDisruptionBudget
		dry     bool
		want    outcome
	}{
		{"succeeded pod", evictPod(corev1.PodSucceeded, false), []*policyv1.PodDisruptionBudget{budget("b", 0, 0, 3)}, false,
			outcome{allowed: -1}},
		{"failed pod", evictPod(corev1.PodFailed, false), []*policyv1.PodDisruptionBudget{budget("b", 0, 0, 3)}, false,
			outcome{allowed: -1}},
		{"pending pod, pinned", evictPod(corev1.PodPending, false), []*policyv1.PodDisruptionBudget{budget("b", 0, 0, 3)}, false,
			outcome{pin: true, allowed: -1}},
		{"running pod being deleted", evictPod(corev1.PodRunning, true, beingDeleted), []*policyv1.PodDisruptionBudget{budget("b", 0, 0, 3)}, false,
			outcome{allowed: -1}},
		{"no budget", running, nil, false, outcome{allowed: -1}},
		{"budget of another namespace", running, []*policyv1.PodDisruptionBudget{budget("b", 0, 3, 3, func(b *policyv1.PodDisruptionBudget) { b.Namespace = "other" })}, false,
			outcome{allowed: -1}},
		{"budget selecting other pods", running, []*policyv1.PodDisruptionBudget{budget("b", 0, 3, 3, func(b *policyv1.PodDisruptionBudget) {
			b.Spec.Selector.MatchLabels["app"] = "db"
		})}, false, outcome{allowed: -1}},
		{"budget without selector selects nothing", running, []*policyv1.PodDisruptionBudget{budget("b", 0, 3, 3, func(b *policyv1.PodDisruptionBudget) { b.Spec.Selector = nil })}, false,
			outcome{allowed: -1}},
		{"empty selector selects everything", running, []*policyv1.PodDisruptionBudget{budget("b", 0, 3, 3, func(b *policyv1.PodDisruptionBudget) {
			b.Spec.Selector = &metav1.LabelSelector{}
		})}, false, outcome{code: 429, cause: "The disruption budget b needs 3 healthy pods and has 3 currently", name: "b", allowed: -1}},
		{"two budgets", running, []*policyv1.PodDisruptionBudget{budget("a", 1, 3, 2), budget("b", 1, 3, 2)}, false,
			outcome{code: http.StatusInternalServerError, allowed: -1}},
		{"last disruption spent", running, []*policyv1.PodDisruptionBudget{budget("b", 1, 3, 2)}, false,
			outcome{name: "b", allowed: 0, condTrue: false}},
		{"one of two disruptions spent", running, []*policyv1.PodDisruptionBudget{budget("b", 2, 3, 1)}, false,
			outcome{name: "b", allowed: 1, condTrue: true}},
		{"no disruption allowed", running, []*policyv1.PodDisruptionBudget{budget("b", 0, 2, 2)}, false,
			outcome{code: 429, cause: "The disruption budget b needs 2 healthy pods and has 2 currently", name: "b", allowed: -1}},
		{"status behind the spec", running, []*policyv1.PodDisruptionBudget{budget("b", 1, 3, 2, func(b *policyv1.PodDisruptionBudget) { b.Generation = 2 })}, false,
			outcome{code: 429, cause: "The disruption budget b is still being processed by the server.", name: "b", allowed: -1}},
		{"negative allowance", running, []*policyv1.PodDisruptionBudget{budget("b", -1, 3, 2)}, false,
			outcome{code: 403, name: "b", allowed: -1}},
		{"too many unconfirmed evictions", running, []*policyv1.PodDisruptionBudget{budget("b", 1, 3, 2, func(b *policyv1.PodDisruptionBudget) {
			b.Status.DisruptedPods = map[string]metav1.Time{}
			for i := range maxDisruptedPods + 1 {
				b.Status.DisruptedPods[string(rune(0x4e00+i))] = metav1.NewTime(evictNow)
			}
		})}, false, outcome{code: 403, name: "b", allowed: -1}},
		{"dry run checks without spending", running, []*policyv1.PodDisruptionBudget{budget("b", 1, 3, 2)}, true,
			outcome{name: "b", allowed: -1}},
		{"dry run refused too", running, []*policyv1.PodDisruptionBudget{budget("b", 0, 2, 2)}, true,
			outcome{code: 429, cause: "The disruption budget b needs 2 healthy pods and has 2 currently", name: "b", allowed: -1}},
		{"unready pod, AlwaysAllow", evictPod(corev1.PodRunning, false), []*policyv1.PodDisruptionBudget{budget("b", 0, 1, 3, alwaysAllow)}, false,
			outcome{pin: true, name: "b", allowed: -1}},
		{"unready pod, budget met", evictPod(corev1.PodRunning, false), []*policyv1.PodDisruptionBudget{budget("b", 0, 2, 2)}, false,
			outcome{pin: true, name: "b", allowed: -1}},
		{"unready pod, IfHealthyBudget not met", evictPod(corev1.PodRunning, false), []*policyv1.PodDisruptionBudget{budget("b", 0, 1, 2, ifHealthy)}, false,
			outcome{code: 429, cause: "The disruption budget b needs 2 healthy pods and has 1 currently", name: "b", allowed: -1}},
		{"unready pod, nothing desired, spends", evictPod(corev1.PodRunning, false), []*policyv1.PodDisruptionBudget{budget("b", 1, 1, 0)}, false,
			outcome{name: "b", allowed: 0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var before []*policyv1.PodDisruptionBudget
			for _, b := range tc.budgets {
				before = append(before, b.DeepCopy())
			}
			plan := decideEviction(tc.pod, tc.budgets, evictNow, tc.dry)
			got := outcomeOf(plan)
			if tc.want.cause == "" {
				got.cause = "" // checked where the table gives one
			}
			if got != tc.want {
				t.Errorf("decideEviction = %+v (err %v), want %+v", got, plan.Err, tc.want)
			}
			if !reflect.DeepEqual(tc.budgets, before) {
				t.Errorf("decideEviction modified the budgets it was given")
			}
			if b := plan.Budget; b != nil {
				if at, ok := b.Status.DisruptedPods[tc.pod.Name]; !ok || !at.Time.Equal(evictNow) {
					t.Errorf("spent budget's disruptedPods = %v, want %s at %v", b.Status.DisruptedPods, tc.pod.Name, evictNow)
				}
				if b.ResourceVersion != "7" {
					t.Errorf("spent budget's resourceVersion = %q, want the one read (7)", b.ResourceVersion)
				}
				c := b.Status.Conditions[0]
				if wantLTT := evictNow.Add(-time.Hour); c.Status == metav1.ConditionFalse {
					wantLTT = evictNow
					if c.Reason != policyv1.InsufficientPodsReason {
						t.Errorf("condition = %+v, want InsufficientPods", c)
					}
					if !c.LastTransitionTime.Time.Equal(wantLTT) {
						t.Errorf("condition transition = %v, want %v", c.LastTransitionTime, wantLTT)
					}
				}
			}
		})
	}
}

func TestDecideEvictionStatuses(t *testing.T) {
	// 429s carry upstream's message and retry hint; the 500 upstream's
	// message.
	running := evictPod(corev1.PodRunning, true)
	err := decideEviction(running, []*policyv1.PodDisruptionBudget{budget("b", 0, 2, 2)}, evictNow, false).Err
	if !apierrors.IsTooManyRequests(err) || toStatus(err).Message != violatesBudgetMsg || toStatus(err).Details.Causes[0].Type != policyv1.DisruptionBudgetCause {
		t.Errorf("no disruption allowed: %v (%+v), want 429 %q with a DisruptionBudget cause", err, toStatus(err), violatesBudgetMsg)
	}
	stale := budget("b", 1, 3, 2)
	stale.Generation = 2
	err = decideEviction(running, []*policyv1.PodDisruptionBudget{stale}, evictNow, false).Err
	if st := toStatus(err); st.Details == nil || st.Details.RetryAfterSeconds != 10 {
		t.Errorf("budget behind its spec: %+v, want Retry-After 10", st)
	}
	err = decideEviction(running, []*policyv1.PodDisruptionBudget{budget("a", 1, 3, 2), budget("b", 1, 3, 2)}, evictNow, false).Err
	if st := toStatus(err); st.Code != 500 || st.Message != "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support." {
		t.Errorf("two budgets: %+v, want upstream's 500", st)
	}
}

func TestEvictionOptions(t *testing.T) {
	bad := metav1.DeletionPropagation("Sideways")
	for _, tc := range []struct {
		name  string
		given *metav1.DeleteOptions
		dry   bool
		want  *metav1.DeleteOptions
		code  int32
	}{
		{"none", nil, false, &metav1.DeleteOptions{}, 0},
		{"dry run from the request", nil, true, &metav1.DeleteOptions{DryRun: []string{"All"}}, 0},
		{"dry run from the body", &metav1.DeleteOptions{DryRun: []string{"All"}}, false, &metav1.DeleteOptions{DryRun: []string{"All"}}, 0},
		{"both", &metav1.DeleteOptions{DryRun: []string{"All"}}, true, &metav1.DeleteOptions{DryRun: []string{"All"}}, 0},
		{"unknown dry run", &metav1.DeleteOptions{DryRun: []string{"Some"}}, false, nil, 400},
		{"negative grace", &metav1.DeleteOptions{GracePeriodSeconds: new(int64(-5))}, false, &metav1.DeleteOptions{GracePeriodSeconds: new(int64(0))}, 0},
		{"grace kept", &metav1.DeleteOptions{GracePeriodSeconds: new(int64(30))}, false, &metav1.DeleteOptions{GracePeriodSeconds: new(int64(30))}, 0},
		{"bad propagation", &metav1.DeleteOptions{PropagationPolicy: &bad}, false, nil, 422},
	} {
		got, err := evictionOptions(tc.given, tc.dry)
		if tc.code != 0 {
			if err == nil || toStatus(err).Code != tc.code {
				t.Errorf("evictionOptions(%s) = %v, %v; want %d", tc.name, got, err, tc.code)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("evictionOptions(%s) = %+v, %v; want %+v", tc.name, got, err, tc.want)
		}
	}
}

func TestSetDisruptionTarget(t *testing.T) {
	var st corev1.PodStatus
	if !setDisruptionTarget(&st, evictNow) {
		t.Fatal("setDisruptionTarget on a pod without the condition: unchanged")
	}
	c := st.Conditions[0]
	if c.Type != corev1.DisruptionTarget || c.Status != corev1.ConditionTrue || c.Reason != "EvictionByEvictionAPI" || !c.LastTransitionTime.Time.Equal(evictNow) {
		t.Errorf("condition = %+v, want True EvictionByEvictionAPI since now", c)
	}
	if setDisruptionTarget(&st, evictNow.Add(time.Minute)) {
		t.Errorf("setDisruptionTarget again: changed, want unchanged")
	}
	st.Conditions[0].Status = corev1.ConditionFalse
	if !setDisruptionTarget(&st, evictNow.Add(time.Minute)) || !st.Conditions[0].LastTransitionTime.Time.Equal(evictNow.Add(time.Minute)) {
		t.Errorf("setDisruptionTarget on a False condition = %+v, want True since a minute later", st.Conditions[0])
	}
}
