package autoscaling

import (
	"encoding/json"
	"fmt"

	autoscalingv1 "k8s.io/api/autoscaling/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// The annotations in which an autoscaling/v1 HorizontalPodAutoscaler
// carries what only autoscaling/v2 can say, as upstream names them
// (k8s.io/kubernetes/pkg/apis/autoscaling/annotations.go): a v1 client that
// reads an autoscaler, changes it and writes it back loses nothing.
const (
	// MetricSpecsAnnotation holds the spec's metrics other than the CPU
	// utilization target, as a JSON list of autoscaling/v1 MetricSpecs.
	MetricSpecsAnnotation = "autoscaling.alpha.kubernetes.io/metrics"
	// MetricStatusesAnnotation holds the status's current metrics, as a
	// JSON list of autoscaling/v1 MetricStatuses.
	MetricStatusesAnnotation = "autoscaling.alpha.kubernetes.io/current-metrics"
	// ConditionsAnnotation holds the status's conditions, as a JSON list
	// of autoscaling/v1 HorizontalPodAutoscalerConditions.
	ConditionsAnnotation = "autoscaling.alpha.kubernetes.io/conditions"
	// BehaviorSpecsAnnotation holds the spec's behavior, in the JSON of
	// upstream's internal type: field names as in Go, as upstream writes
	// it (and reads it, Go's JSON matching names without regard to case).
	BehaviorSpecsAnnotation = "autoscaling.alpha.kubernetes.io/behavior"
)

// roundTripAnnotations are the annotations above, which an autoscaler
// stored or served at autoscaling/v2 never carries.
var roundTripAnnotations = []string{MetricSpecsAnnotation, MetricStatusesAnnotation, ConditionsAnnotation, BehaviorSpecsAnnotation}

// maxAnnotationBytes bounds what the conversion decodes: no more than
// upstream lets all of an object's annotations hold together.
const maxAnnotationBytes = apivalidation.TotalAnnotationSizeLimitB

// defaultCPUUtilization is the CPU utilization target of an autoscaler
// that names no metric, as upstream's autoscaling.DefaultCPUUtilization.
const defaultCPUUtilization int32 = 80

// ToV2 converts an autoscaling/v1 autoscaler to autoscaling/v2 as upstream
// does through its internal version: the CPU target becomes a Resource
// metric, placed after the metrics of MetricSpecsAnnotation, and the other
// annotations fill in current metrics, conditions and behavior; an
// autoscaler with no metric at all targets 80% CPU. in is not changed or
// kept. A round-trip annotation that does not decode is a 400 Bad Request,
// the answer upstream gives to a body it cannot convert.
func ToV2(in *autoscalingv1.HorizontalPodAutoscaler) (*autoscalingv2.HorizontalPodAutoscaler, error) {
	in = in.DeepCopy()
	out := &autoscalingv2.HorizontalPodAutoscaler{
		TypeMeta:   typeMeta(autoscalingv2.SchemeGroupVersion.String()),
		ObjectMeta: in.ObjectMeta,
		Spec: autoscalingv2.HorizontalPodAutoscalerSpec{
			ScaleTargetRef: autoscalingv2.CrossVersionObjectReference(in.Spec.ScaleTargetRef),
			MinReplicas:    in.Spec.MinReplicas,
			MaxReplicas:    in.Spec.MaxReplicas,
		},
		Status: autoscalingv2.HorizontalPodAutoscalerStatus{
			ObservedGeneration: in.Status.ObservedGeneration,
			LastScaleTime:      in.Status.LastScaleTime,
			CurrentReplicas:    in.Status.CurrentReplicas,
			DesiredReplicas:    in.Status.DesiredReplicas,
		},
	}
	if p := in.Spec.TargetCPUUtilizationPercentage; p != nil {
		out.Spec.Metrics = []autoscalingv2.MetricSpec{cpuUtilizationMetric(*p)}
	}
	if p := in.Status.CurrentCPUUtilizationPercentage; p != nil {
		out.Status.CurrentMetrics = []autoscalingv2.MetricStatus{{
			Type:     autoscalingv2.ResourceMetricSourceType,
			Resource: &autoscalingv2.ResourceMetricStatus{Name: corev1.ResourceCPU, Current: autoscalingv2.MetricValueStatus{AverageUtilization: new(*p)}},
		}}
	}
	if err := fromAnnotations(in.Annotations, out); err != nil {
		return nil, apierrors.NewBadRequest(err.Error())
	}
	if len(out.Spec.Metrics) == 0 {
		out.Spec.Metrics = []autoscalingv2.MetricSpec{cpuUtilizationMetric(defaultCPUUtilization)}
	}
	out.Annotations = withoutRoundTrip(out.Annotations)
	return out, nil
}

// cpuUtilizationMetric is the metric of v1's targetCPUUtilizationPercentage.
func cpuUtilizationMetric(percent int32) autoscalingv2.MetricSpec {
	return autoscalingv2.MetricSpec{
		Type: autoscalingv2.ResourceMetricSourceType,
		Resource: &autoscalingv2.ResourceMetricSource{
			Name:   corev1.ResourceCPU,
			Target: autoscalingv2.MetricTarget{Type: autoscalingv2.UtilizationMetricType, AverageUtilization: new(percent)},
		},
	}
}

// fromAnnotations fills out from the round-trip annotations of a v1
// autoscaler.
func fromAnnotations(ann map[string]string, out *autoscalingv2.HorizontalPodAutoscaler) error {
	if enc, ok := ann[MetricSpecsAnnotation]; ok {
		var specs []autoscalingv1.MetricSpec
		if err := decodeAnnotation(MetricSpecsAnnotation, enc, &specs); err != nil {
			return err
		}
		metrics := make([]autoscalingv2.MetricSpec, 0, len(specs)+len(out.Spec.Metrics))
		for i := range specs {
			metrics = append(metrics, metricSpecToV2(&specs[i]))
		}
		out.Spec.Metrics = append(metrics, out.Spec.Metrics...)
	}
	if enc, ok := ann[MetricStatusesAnnotation]; ok {
		var statuses []autoscalingv1.MetricStatus
		if err := decodeAnnotation(MetricStatusesAnnotation, enc, &statuses); err != nil {
			return err
		}
		// The annotation says more than currentCPUUtilizationPercentage.
		out.Status.CurrentMetrics = make([]autoscalingv2.MetricStatus, len(statuses))
		for i := range statuses {
			out.Status.CurrentMetrics[i] = metricStatusToV2(&statuses[i])
		}
	}
	if enc, ok := ann[ConditionsAnnotation]; ok {
		var conds []autoscalingv1.HorizontalPodAutoscalerCondition
		if err := decodeAnnotation(ConditionsAnnotation, enc, &conds); err != nil {
			return err
		}
		out.Status.Conditions = make([]autoscalingv2.HorizontalPodAutoscalerCondition, len(conds))
		for i, c := range conds {
			out.Status.Conditions[i] = autoscalingv2.HorizontalPodAutoscalerCondition{
				Type: autoscalingv2.HorizontalPodAutoscalerConditionType(c.Type), Status: c.Status, LastTransitionTime: c.LastTransitionTime,
				Reason: c.Reason, Message: c.Message, ObservedGeneration: c.ObservedGeneration,
			}
		}
	}
	if enc, ok := ann[BehaviorSpecsAnnotation]; ok {
		var b internalBehavior
		if err := decodeAnnotation(BehaviorSpecsAnnotation, enc, &b); err != nil {
			return err
		}
		out.Spec.Behavior = b.toV2()
	}
	return nil
}

// decodeAnnotation decodes the JSON of annotation key into v, refusing
// more than maxAnnotationBytes.
func decodeAnnotation(key, enc string, v any) error {
	if len(enc) > maxAnnotationBytes {
		return fmt.Errorf("annotation %s: %d bytes, more than %d", key, len(enc), maxAnnotationBytes)
	}
	if err := json.Unmarshal([]byte(enc), v); err != nil {
		return fmt.Errorf("annotation %s: %w", key, err)
	}
	return nil
}

// withoutRoundTrip returns ann without the round-trip annotations: ann
// itself when it has none, else a copy (nil when nothing is left).
func withoutRoundTrip(ann map[string]string) map[string]string {
	has := false
	for _, k := range roundTripAnnotations {
		if _, ok := ann[k]; ok {
			has = true
		}
	}
	if !has {
		return ann
	}
	out := make(map[string]string, len(ann))
	for k, v := range ann {
		out[k] = v
	}
	for _, k := range roundTripAnnotations {
		delete(out, k)
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// ToV1 converts an autoscaling/v2 autoscaler to autoscaling/v1 as upstream
// does: the first CPU Resource metric gives targetCPUUtilizationPercentage,
// and every metric but those targeting CPU utilization, every current
// metric, the conditions and the behavior travel in the round-trip
// annotations. in is not changed or kept.
func ToV1(in *autoscalingv2.HorizontalPodAutoscaler) (*autoscalingv1.HorizontalPodAutoscaler, error) {
	in = in.DeepCopy()
	out := &autoscalingv1.HorizontalPodAutoscaler{
		TypeMeta:   typeMeta(autoscalingv1.SchemeGroupVersion.String()),
		ObjectMeta: in.ObjectMeta,
		Spec: autoscalingv1.HorizontalPodAutoscalerSpec{
			ScaleTargetRef: autoscalingv1.CrossVersionObjectReference(in.Spec.ScaleTargetRef),
			MinReplicas:    in.Spec.MinReplicas,
			MaxReplicas:    in.Spec.MaxReplicas,
		},
		Status: autoscalingv1.HorizontalPodAutoscalerStatus{
			ObservedGeneration: in.Status.ObservedGeneration,
			LastScaleTime:      in.Status.LastScaleTime,
			CurrentReplicas:    in.Status.CurrentReplicas,
			DesiredReplicas:    in.Status.DesiredReplicas,
		},
	}
	out.Annotations = withoutRoundTrip(out.Annotations)
	for _, m := range in.Spec.Metrics {
		if isCPU(m.Type, m.Resource) {
			out.Spec.TargetCPUUtilizationPercentage = m.Resource.Target.AverageUtilization
			break
		}
	}
	for _, m := range in.Status.CurrentMetrics {
		if m.Type == autoscalingv2.ResourceMetricSourceType && m.Resource != nil && m.Resource.Name == corev1.ResourceCPU && m.Resource.Current.AverageUtilization != nil {
			out.Status.CurrentCPUUtilizationPercentage = m.Resource.Current.AverageUtilization
		}
	}
	ann, err := toAnnotations(in)
	if err != nil {
		return nil, err
	}
	if len(ann) > 0 {
		if out.Annotations == nil {
			out.Annotations = make(map[string]string, len(ann))
		}
		for k, v := range ann {
			out.Annotations[k] = v
		}
	}
	return out, nil
}

// isCPU reports whether a metric of type t and resource source r is a
// Resource metric of CPU.
func isCPU(t autoscalingv2.MetricSourceType, r *autoscalingv2.ResourceMetricSource) bool {
	return t == autoscalingv2.ResourceMetricSourceType && r != nil && r.Name == corev1.ResourceCPU
}

// toAnnotations returns the round-trip annotations of a v2 autoscaler:
// what its v1 form cannot otherwise say.
func toAnnotations(in *autoscalingv2.HorizontalPodAutoscaler) (map[string]string, error) {
	var others []autoscalingv1.MetricSpec
	for i := range in.Spec.Metrics {
		m := &in.Spec.Metrics[i]
		if isCPU(m.Type, m.Resource) && m.Resource.Target.AverageUtilization != nil {
			continue
		}
		others = append(others, metricSpecToV1(m))
	}
	values := map[string]any{}
	if len(others) > 0 {
		values[MetricSpecsAnnotation] = others
	}
	if n := len(in.Status.CurrentMetrics); n > 0 {
		current := make([]autoscalingv1.MetricStatus, n)
		for i := range in.Status.CurrentMetrics {
			current[i] = metricStatusToV1(&in.Status.CurrentMetrics[i])
		}
		values[MetricStatusesAnnotation] = current
	}
	if n := len(in.Status.Conditions); n > 0 {
		conds := make([]autoscalingv1.HorizontalPodAutoscalerCondition, n)
		for i, c := range in.Status.Conditions {
			conds[i] = autoscalingv1.HorizontalPodAutoscalerCondition{
				Type: autoscalingv1.HorizontalPodAutoscalerConditionType(c.Type), Status: c.Status, LastTransitionTime: c.LastTransitionTime,
				Reason: c.Reason, Message: c.Message, ObservedGeneration: c.ObservedGeneration,
			}
		}
		values[ConditionsAnnotation] = conds
	}
	if b := in.Spec.Behavior; b != nil {
		values[BehaviorSpecsAnnotation] = behaviorFromV2(b)
	}
	ann := make(map[string]string, len(values))
	for k, v := range values {
		enc, err := json.Marshal(v)
		if err != nil {
			return nil, fmt.Errorf("annotation %s: %w", k, err)
		}
		ann[k] = string(enc)
	}
	return ann, nil
}

// typeMeta is the TypeMeta of an autoscaler of apiVersion.
func typeMeta(apiVersion string) metav1.TypeMeta {
	return metav1.TypeMeta{APIVersion: apiVersion, Kind: "HorizontalPodAutoscaler"}
}

// v1ToStorage and v1FromStorage are ToV2 and ToV1 as the ToStorage and
// FromStorage of the autoscaling/v1 resource's apiserver.Conversion.
func v1ToStorage(obj runtime.Object) (runtime.Object, error) {
	hpa, ok := obj.(*autoscalingv1.HorizontalPodAutoscaler)
	if !ok {
		return nil, fmt.Errorf("convert %T to autoscaling/v2: not an autoscaling/v1 HorizontalPodAutoscaler", obj)
	}
	return ToV2(hpa)
}

func v1FromStorage(obj runtime.Object) (runtime.Object, error) {
	hpa, ok := obj.(*autoscalingv2.HorizontalPodAutoscaler)
	if !ok {
		return nil, fmt.Errorf("convert %T to autoscaling/v1: not an autoscaling/v2 HorizontalPodAutoscaler", obj)
	}
	return ToV1(hpa)
}

// quantityOrZero returns *q, or zero for nil, as upstream's conversions
// fill v1's non-pointer quantities.
func quantityOrZero(q *resource.Quantity) resource.Quantity {
	if q == nil {
		return resource.Quantity{}
	}
	return *q
}
