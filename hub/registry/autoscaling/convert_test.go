package autoscaling

import (
	"encoding/json"
	"testing"

	autoscalingv1 "k8s.io/api/autoscaling/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utildiff "k8s.io/apimachinery/pkg/util/diff"
	"k8s.io/apimachinery/pkg/util/dump"
	"sigs.k8s.io/randfill"
)

// filler returns a randfill filler for seed whose quantities and times
// are the kind that survive JSON, as upstream's fuzzers make them.
func filler(seed int64) *randfill.Filler {
	return randfill.NewWithSeed(seed).NilChance(0.3).NumElements(0, 3).MaxDepth(8).Funcs(
		func(q *resource.Quantity, c randfill.Continue) {
			*q = *resource.NewMilliQuantity(c.Int63n(100000)+1, resource.DecimalSI)
		},
		func(t *metav1.Time, c randfill.Continue) { *t = metav1.Unix(c.Int63n(1<<31), 0) },
	)
}

// normalize makes a filled v2 autoscaler one whose every field v1 can
// carry, as upstream's autoscaling fuzzer does for its round-trip tests:
// each metric of one consistent source, at most one CPU utilization
// target and that last, and no round-trip annotations (which v2 never
// has). What v1 cannot say (a target's type beyond what its fields imply,
// a second CPU utilization target) is lost by upstream's conversion too.
func normalize(h *autoscalingv2.HorizontalPodAutoscaler, c randfill.Continue) {
	h.TypeMeta = metav1.TypeMeta{}
	h.Annotations = withoutRoundTrip(h.Annotations)
	q := func() *resource.Quantity { var v resource.Quantity; c.Fill(&v); return &v }
	var metrics []autoscalingv2.MetricSpec
	for i := range h.Spec.Metrics {
		var sel *metav1.LabelSelector
		c.Fill(&sel)
		id := autoscalingv2.MetricIdentifier{Name: c.String(8), Selector: sel}
		switch i % 5 {
		case 0:
			t := autoscalingv2.MetricTarget{Type: autoscalingv2.ValueMetricType, Value: q()}
			if c.Bool() {
				t.Type, t.AverageValue = autoscalingv2.AverageValueMetricType, q()
			}
			metrics = append(metrics, autoscalingv2.MetricSpec{Type: autoscalingv2.ObjectMetricSourceType, Object: &autoscalingv2.ObjectMetricSource{
				DescribedObject: autoscalingv2.CrossVersionObjectReference{Kind: "Service", Name: c.String(5), APIVersion: "v1"}, Metric: id, Target: t}})
		case 1:
			metrics = append(metrics, autoscalingv2.MetricSpec{Type: autoscalingv2.PodsMetricSourceType, Pods: &autoscalingv2.PodsMetricSource{
				Metric: id, Target: autoscalingv2.MetricTarget{Type: autoscalingv2.AverageValueMetricType, AverageValue: q()}}})
		case 2:
			metrics = append(metrics, autoscalingv2.MetricSpec{Type: autoscalingv2.ResourceMetricSourceType, Resource: &autoscalingv2.ResourceMetricSource{
				Name: corev1.ResourceMemory, Target: resourceTarget(nil, q())}})
		case 3:
			metrics = append(metrics, autoscalingv2.MetricSpec{Type: autoscalingv2.ContainerResourceMetricSourceType, ContainerResource: &autoscalingv2.ContainerResourceMetricSource{
				Name: corev1.ResourceCPU, Container: "app", Target: resourceTarget(new(c.Int31n(100)), nil)}})
		case 4:
			t := autoscalingv2.MetricTarget{Type: autoscalingv2.AverageValueMetricType, AverageValue: q()}
			if c.Bool() {
				t = autoscalingv2.MetricTarget{Type: autoscalingv2.ValueMetricType, Value: q()}
			}
			metrics = append(metrics, autoscalingv2.MetricSpec{Type: autoscalingv2.ExternalMetricSourceType, External: &autoscalingv2.ExternalMetricSource{Metric: id, Target: t}})
		}
	}
	if len(metrics) == 0 || c.Bool() {
		metrics = append(metrics, cpuUtilizationMetric(c.Int31n(100)+1))
	}
	h.Spec.Metrics = metrics
	var statuses []autoscalingv2.MetricStatus
	for i := range h.Status.CurrentMetrics {
		id := autoscalingv2.MetricIdentifier{Name: c.String(8)}
		cur := autoscalingv2.MetricValueStatus{Value: q()}
		switch i % 5 {
		case 0:
			statuses = append(statuses, autoscalingv2.MetricStatus{Type: autoscalingv2.ObjectMetricSourceType, Object: &autoscalingv2.ObjectMetricStatus{
				Metric: id, Current: cur, DescribedObject: autoscalingv2.CrossVersionObjectReference{Kind: "Service", Name: "s"}}})
		case 1:
			statuses = append(statuses, autoscalingv2.MetricStatus{Type: autoscalingv2.PodsMetricSourceType, Pods: &autoscalingv2.PodsMetricStatus{
				Metric: id, Current: autoscalingv2.MetricValueStatus{AverageValue: q()}}})
		case 2:
			statuses = append(statuses, autoscalingv2.MetricStatus{Type: autoscalingv2.ResourceMetricSourceType, Resource: &autoscalingv2.ResourceMetricStatus{
				Name: corev1.ResourceCPU, Current: autoscalingv2.MetricValueStatus{AverageValue: q(), AverageUtilization: new(c.Int31n(100))}}})
		case 3:
			statuses = append(statuses, autoscalingv2.MetricStatus{Type: autoscalingv2.ContainerResourceMetricSourceType, ContainerResource: &autoscalingv2.ContainerResourceMetricStatus{
				Name: corev1.ResourceMemory, Container: "app", Current: autoscalingv2.MetricValueStatus{AverageValue: q()}}})
		case 4:
			statuses = append(statuses, autoscalingv2.MetricStatus{Type: autoscalingv2.ExternalMetricSourceType, External: &autoscalingv2.ExternalMetricStatus{Metric: id, Current: cur}})
		}
	}
	h.Status.CurrentMetrics = statuses
}

// TestRoundTripV2 converts filled v2 autoscalers to v1 and back, and
// their v1 forms to v2 and back: nothing may be lost either way.
func TestRoundTripV2(t *testing.T) {
	for seed := range int64(300) {
		f := filler(seed)
		var h autoscalingv2.HorizontalPodAutoscaler
		f.Fill(&h)
		f.Funcs(func(h *autoscalingv2.HorizontalPodAutoscaler, c randfill.Continue) { normalize(h, c) }).Fill(&h)
		v1, err := ToV1(&h)
		if err != nil {
			t.Fatalf("seed %d: ToV1: %v", seed, err)
		}
		back, err := ToV2(v1)
		if err != nil {
			t.Fatalf("seed %d: ToV2(ToV1): %v", seed, err)
		}
		back.TypeMeta = metav1.TypeMeta{}
		if !apiequality.Semantic.DeepEqual(&h, back) {
			t.Fatalf("seed %d: v2 -> v1 -> v2 changed the autoscaler:\n%s\nv1 %s", seed, diff(&h, back), dump.Pretty(v1))
		}
		again, err := ToV1(back)
		if err != nil {
			t.Fatalf("seed %d: ToV1(ToV2): %v", seed, err)
		}
		if !apiequality.Semantic.DeepEqual(v1, again) {
			t.Fatalf("seed %d: v1 -> v2 -> v1 changed the autoscaler:\n%s", seed, diff(v1, again))
		}
	}
}

// diff shows how got differs from want, for a failure.
func diff(want, got any) string {
	return utildiff.Diff(want, got)
}

// TestRoundTripV1 converts filled v1 autoscalers without round-trip
// annotations to v2 and back: the typed fields survive, and an unset CPU
// target comes back as upstream's default of 80%.
func TestRoundTripV1(t *testing.T) {
	for seed := range int64(200) {
		var h autoscalingv1.HorizontalPodAutoscaler
		filler(seed).Fill(&h)
		h.TypeMeta = metav1.TypeMeta{}
		h.Annotations = withoutRoundTrip(h.Annotations)
		v2, err := ToV2(&h)
		if err != nil {
			t.Fatalf("seed %d: ToV2: %v", seed, err)
		}
		back, err := ToV1(v2)
		if err != nil {
			t.Fatalf("seed %d: ToV1(ToV2): %v", seed, err)
		}
		want := h.DeepCopy()
		if want.Spec.TargetCPUUtilizationPercentage == nil {
			want.Spec.TargetCPUUtilizationPercentage = new(defaultCPUUtilization)
		}
		if !apiequality.Semantic.DeepEqual(want.Spec, back.Spec) || !apiequality.Semantic.DeepEqual(want.Status, back.Status) {
			t.Fatalf("seed %d: v1 -> v2 -> v1 changed spec or status:\n%s", seed, diff(want, back))
		}
		// The current CPU utilization now also travels in the annotation,
		// as upstream writes it; a v1 client that writes back what it read
		// loses nothing.
		v2, err = ToV2(back)
		if err != nil {
			t.Fatalf("seed %d: ToV2 again: %v", seed, err)
		}
		again, err := ToV1(v2)
		if err != nil || !apiequality.Semantic.DeepEqual(back, again) {
			t.Fatalf("seed %d: converting again: %v\n%s", seed, err, diff(back, again))
		}
	}
}

// TestConvertExamples pins the conversions of upstream's own examples:
// where the CPU target goes, the default, and the annotations' forms.
func TestConvertExamples(t *testing.T) {
	cpu70 := cpuUtilizationMetric(70)
	pods := autoscalingv2.MetricSpec{Type: autoscalingv2.PodsMetricSourceType, Pods: &autoscalingv2.PodsMetricSource{
		Metric: autoscalingv2.MetricIdentifier{Name: "qps"},
		Target: autoscalingv2.MetricTarget{Type: autoscalingv2.AverageValueMetricType, AverageValue: new(resource.MustParse("10"))},
	}}
	h := &autoscalingv2.HorizontalPodAutoscaler{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default", Annotations: map[string]string{"keep": "me"}},
		Spec: autoscalingv2.HorizontalPodAutoscalerSpec{
			ScaleTargetRef: autoscalingv2.CrossVersionObjectReference{Kind: "Deployment", Name: "web", APIVersion: "apps/v1"},
			MaxReplicas:    5,
			Metrics:        []autoscalingv2.MetricSpec{cpu70, pods},
			Behavior: &autoscalingv2.HorizontalPodAutoscalerBehavior{ScaleDown: &autoscalingv2.HPAScalingRules{
				StabilizationWindowSeconds: new(int32(60)), Tolerance: new(resource.MustParse("50m")),
			}},
		},
	}
	v1, err := ToV1(h)
	if err != nil {
		t.Fatal(err)
	}
	if p := v1.Spec.TargetCPUUtilizationPercentage; p == nil || *p != 70 {
		t.Errorf("targetCPUUtilizationPercentage = %v, want 70", p)
	}
	wantAnn := map[string]string{
		"keep":                  "me",
		MetricSpecsAnnotation:   `[{"type":"Pods","pods":{"metricName":"qps","targetAverageValue":"10"}}]`,
		BehaviorSpecsAnnotation: `{"ScaleUp":null,"ScaleDown":{"StabilizationWindowSeconds":60,"SelectPolicy":null,"Policies":null,"Tolerance":"50m"}}`,
	}
	if !apiequality.Semantic.DeepEqual(v1.Annotations, wantAnn) {
		t.Errorf("v1 annotations:\n%s", diff(wantAnn, v1.Annotations))
	}
	if h.Annotations[MetricSpecsAnnotation] != "" || len(h.Annotations) != 1 {
		t.Errorf("ToV1 changed its argument's annotations: %v", h.Annotations)
	}
	back, err := ToV2(v1)
	if err != nil {
		t.Fatal(err)
	}
	// The CPU target comes back after the annotation's metrics.
	if want := []autoscalingv2.MetricSpec{pods, cpu70}; !apiequality.Semantic.DeepEqual(back.Spec.Metrics, want) {
		t.Errorf("metrics back:\n%s", diff(want, back.Spec.Metrics))
	}
	if want := map[string]string{"keep": "me"}; !apiequality.Semantic.DeepEqual(back.Annotations, want) {
		t.Errorf("annotations back = %v, want %v", back.Annotations, want)
	}
	// Upstream's behavior annotation is read whatever the case of its names.
	v1.Annotations[BehaviorSpecsAnnotation] = `{"scaleUp":{"selectPolicy":"Min"}}`
	if back, err = ToV2(v1); err != nil || back.Spec.Behavior.ScaleUp == nil || *back.Spec.Behavior.ScaleUp.SelectPolicy != autoscalingv2.MinChangePolicySelect {
		t.Errorf("lower-case behavior annotation: %+v, %v", back.Spec.Behavior, err)
	}

	bare := &autoscalingv1.HorizontalPodAutoscaler{Spec: autoscalingv1.HorizontalPodAutoscalerSpec{MaxReplicas: 3}}
	v2, err := ToV2(bare)
	if err != nil {
		t.Fatal(err)
	}
	if want := []autoscalingv2.MetricSpec{cpuUtilizationMetric(80)}; !apiequality.Semantic.DeepEqual(v2.Spec.Metrics, want) {
		t.Errorf("v1 without a target converts to metrics %v, want the 80%% CPU default", v2.Spec.Metrics)
	}
}

// FuzzToV2 converts v1 autoscalers with arbitrary round-trip annotations:
// a conversion either fails with 400 Bad Request or gives an autoscaler
// that converts back, and never panics.
func FuzzToV2(f *testing.F) {
	f.Add(`[{"type":"Pods","pods":{"metricName":"qps","targetAverageValue":"10"}}]`, `[]`, `[{"type":"AbleToScale","status":"True"}]`, `{"ScaleUp":{"Policies":[{"Type":"Pods","Value":4,"PeriodSeconds":15}]}}`)
	f.Add(`[{"type":"Object","object":{"target":{"kind":"Service","name":"s"},"metricName":"m","targetValue":"1"}}]`, `[{"type":"Resource","resource":{"name":"cpu","currentAverageValue":"1"}}]`, `null`, `{}`)
	f.Add(`{`, `[1]`, `"x"`, `{"ScaleDown":{"Tolerance":"-1"}}`)
	f.Add(`[{"type":"External","external":{"metricName":"e","targetValue":"1e3"}}]`, ``, `[]`, `null`)
	f.Fuzz(func(t *testing.T, metrics, current, conditions, behavior string) {
		h := &autoscalingv1.HorizontalPodAutoscaler{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{
			MetricSpecsAnnotation: metrics, MetricStatusesAnnotation: current, ConditionsAnnotation: conditions, BehaviorSpecsAnnotation: behavior,
		}}}
		v2, err := ToV2(h)
		if err != nil {
			if !apierrors.IsBadRequest(err) {
				t.Fatalf("ToV2: %v, want a 400 Bad Request", err)
			}
			return
		}
		if _, err := ToV1(v2); err != nil {
			t.Fatalf("ToV1(ToV2): %v", err)
		}
		if _, err := json.Marshal(v2); err != nil {
			t.Fatalf("encode: %v", err)
		}
	})
}
