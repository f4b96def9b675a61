package namespace

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
)

var (
	podsGVR = schema.GroupVersionResource{Version: "v1", Resource: "pods"}
	cmGVR   = schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
	depGVR  = schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}
)

func TestSettle(t *testing.T) {
	for _, tc := range []struct {
		name       string
		estimate   int64
		finalizers [][]string
		want       Content
		wantErr    bool
	}{
		{"all gone", 30, nil, Content{Resource: cmGVR}, false},
		{"terminating within the estimate", 30, [][]string{nil, nil}, Content{Resource: cmGVR, Remaining: 2, Estimate: 30}, false},
		{"held by finalizers", 0, [][]string{{"a"}, {"a", "b"}, nil}, Content{Resource: cmGVR, Remaining: 3, Estimate: finalizerEstimateSeconds, Finalizers: map[string]int{"a": 2, "b": 1}}, false},
		{"remaining unexplained", 0, [][]string{nil}, Content{Resource: cmGVR, Remaining: 1}, true},
	} {
		got := Settle(cmGVR, "ns", tc.estimate, tc.finalizers)
		if (got.Err != nil) != tc.wantErr {
			t.Errorf("%s: Settle err = %v, want error %v", tc.name, got.Err, tc.wantErr)
		}
		got.Err = nil
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: Settle = %+v, want %+v", tc.name, got, tc.want)
		}
	}
	if c := Settle(cmGVR, "ns", 0, [][]string{nil}); c.Err.Error() != "unexpected items still remain in namespace: ns for gvr: /v1, Resource=configmaps" {
		t.Errorf("Settle error text = %q", c.Err)
	}
}

func TestPodEstimate(t *testing.T) {
	g := func(s int64) *int64 { return &s }
	pods := []corev1.Pod{
		{Spec: corev1.PodSpec{TerminationGracePeriodSeconds: g(30)}},
		{Spec: corev1.PodSpec{TerminationGracePeriodSeconds: g(90)}, Status: corev1.PodStatus{Phase: corev1.PodSucceeded}},
		{Spec: corev1.PodSpec{TerminationGracePeriodSeconds: g(10)}},
	}
	at := time.Unix(1000, 0)
	for _, tc := range []struct {
		after time.Duration
		want  int64
	}{{0, 30}, {29 * time.Second, 30}, {30 * time.Second, 0}, {time.Hour, 0}} {
		if got := PodEstimate(pods, at, at.Add(tc.after)); got != tc.want {
			t.Errorf("PodEstimate(%v after) = %d, want %d", tc.after, got, tc.want)
		}
	}
	if got := PodEstimate(nil, at, at); got != 0 {
		t.Errorf("PodEstimate(none) = %d", got)
	}
}

func conds(r Result) map[corev1.NamespaceConditionType]corev1.NamespaceCondition {
	m := map[corev1.NamespaceConditionType]corev1.NamespaceCondition{}
	for _, c := range r.Failing {
		m[c.Type] = c
	}
	return m
}

func TestEvaluate(t *testing.T) {
	// Nothing wrong: no failing conditions, no estimate, no error.
	if r := Evaluate(nil, nil, []Content{{Resource: cmGVR}, {Resource: podsGVR}}); len(r.Failing) != 0 || r.Estimate != 0 || r.Err != nil {
		t.Errorf("Evaluate(clean) = %+v", r)
	}
	r := Evaluate(
		&discovery.ErrGroupDiscoveryFailed{Groups: map[schema.GroupVersion]error{{Group: "metrics", Version: "v1"}: errors.New("503")}},
		errors.New("bad gv"),
		[]Content{
			{Resource: podsGVR, Remaining: 2, Estimate: 30},
			{Resource: depGVR, Remaining: 1, Estimate: 15, Finalizers: map[string]int{"example.com/hold": 1}},
			{Resource: cmGVR, Remaining: 1, Err: errors.New("unexpected items still remain")},
		})
	if r.Estimate != 30 || r.Err == nil {
		t.Errorf("Evaluate: estimate %d err %v, want 30 and an error", r.Estimate, r.Err)
	}
	c := conds(r)
	for typ, want := range map[corev1.NamespaceConditionType][2]string{
		corev1.NamespaceDeletionDiscoveryFailure: {"DiscoveryFailed", "Discovery failed for some groups, 1 failing: "},
		corev1.NamespaceDeletionGVParsingFailure: {"GroupVersionParsingFailed", "bad gv"},
		corev1.NamespaceDeletionContentFailure:   {"ContentDeletionFailed", "Failed to delete all resource types, 1 remaining: unexpected items still remain"},
		corev1.NamespaceContentRemaining:         {"SomeResourcesRemain", "Some resources are remaining: configmaps. has 1 resource instances, deployments.apps has 1 resource instances, pods. has 2 resource instances"},
		corev1.NamespaceFinalizersRemaining:      {"SomeFinalizersRemain", "Some content in the namespace has finalizers remaining: example.com/hold in 1 resource instances"},
	} {
		got, ok := c[typ]
		if !ok || got.Status != corev1.ConditionTrue || got.Reason != want[0] || !strings.HasPrefix(got.Message, want[1]) {
			t.Errorf("condition %s = %+v, want True %s %q", typ, got, want[0], want[1])
		}
	}
}

func TestUpdateConditions(t *testing.T) {
	t0, t1 := metav1.NewTime(time.Unix(100, 0)), metav1.NewTime(time.Unix(200, 0))
	var st corev1.NamespaceStatus
	if !UpdateConditions(&st, nil, t0) || len(st.Conditions) != 5 {
		t.Fatalf("first update: %+v, want the five fine conditions", st.Conditions)
	}
	for _, c := range st.Conditions {
		if c.Status != corev1.ConditionFalse || c.LastTransitionTime != t0 {
			t.Errorf("fine condition %+v", c)
		}
	}
	if UpdateConditions(&st, nil, t1) {
		t.Error("the same conditions again reported a change")
	}
	failing := []corev1.NamespaceCondition{{Type: corev1.NamespaceContentRemaining, Status: corev1.ConditionTrue, Reason: "SomeResourcesRemain", Message: "m1"}}
	if !UpdateConditions(&st, failing, t1) {
		t.Fatal("a failing condition reported no change")
	}
	failing[0].Message = "m2"
	if !UpdateConditions(&st, failing, metav1.NewTime(time.Unix(300, 0))) {
		t.Fatal("a new message reported no change")
	}
	for _, c := range st.Conditions {
		switch {
		case c.Type == corev1.NamespaceContentRemaining:
			if c.Status != corev1.ConditionTrue || c.Message != "m2" || c.LastTransitionTime != t1 {
				t.Errorf("ContentRemaining = %+v, want True m2 since t1", c)
			}
		case c.LastTransitionTime != t0:
			t.Errorf("%s moved: %+v", c.Type, c)
		}
	}
}

func TestWithoutFinalizer(t *testing.T) {
	got, found := withoutFinalizer([]corev1.FinalizerName{"z", corev1.FinalizerKubernetes, "a", "z"}, corev1.FinalizerKubernetes)
	if !found || !reflect.DeepEqual(got, []corev1.FinalizerName{"a", "z"}) {
		t.Errorf("withoutFinalizer = %v, %v", got, found)
	}
	if got, found := withoutFinalizer(nil, corev1.FinalizerKubernetes); found || got == nil || len(got) != 0 {
		t.Errorf("withoutFinalizer(nil) = %#v, %v; want an empty list", got, found)
	}
}
