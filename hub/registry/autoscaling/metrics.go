package autoscaling

import (
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	"k8s.io/apimachinery/pkg/api/resource"
)

// The conversions of metrics between autoscaling/v2 and the v1 form they
// take in the round-trip annotations, as upstream's (which pass through
// its internal version, shaped as v2). A v1 source has no target type:
// going to v2 it is derived from which of the v1 fields are set.

// metricSpecToV1 converts a v2 metric spec to v1.
func metricSpecToV1(in *autoscalingv2.MetricSpec) autoscalingv1.MetricSpec {
	out := autoscalingv1.MetricSpec{Type: autoscalingv1.MetricSourceType(in.Type)}
	if s := in.Object; s != nil {
		out.Object = &autoscalingv1.ObjectMetricSource{
			Target:       autoscalingv1.CrossVersionObjectReference(s.DescribedObject),
			MetricName:   s.Metric.Name,
			TargetValue:  quantityOrZero(s.Target.Value),
			Selector:     s.Metric.Selector,
			AverageValue: s.Target.AverageValue,
		}
	}
	if s := in.Pods; s != nil {
		out.Pods = &autoscalingv1.PodsMetricSource{MetricName: s.Metric.Name, TargetAverageValue: quantityOrZero(s.Target.AverageValue), Selector: s.Metric.Selector}
	}
	if s := in.Resource; s != nil {
		out.Resource = &autoscalingv1.ResourceMetricSource{Name: s.Name, TargetAverageUtilization: s.Target.AverageUtilization, TargetAverageValue: s.Target.AverageValue}
	}
	if s := in.ContainerResource; s != nil {
		out.ContainerResource = &autoscalingv1.ContainerResourceMetricSource{
			Name: s.Name, TargetAverageUtilization: s.Target.AverageUtilization, TargetAverageValue: s.Target.AverageValue, Container: s.Container,
		}
	}
	if s := in.External; s != nil {
		out.External = &autoscalingv1.ExternalMetricSource{MetricName: s.Metric.Name, MetricSelector: s.Metric.Selector, TargetValue: s.Target.Value, TargetAverageValue: s.Target.AverageValue}
	}
	return out
}

// metricSpecToV2 converts a v1 metric spec to v2.
func metricSpecToV2(in *autoscalingv1.MetricSpec) autoscalingv2.MetricSpec {
	out := autoscalingv2.MetricSpec{Type: autoscalingv2.MetricSourceType(in.Type)}
	if s := in.Object; s != nil {
		t := autoscalingv2.ValueMetricType
		if s.AverageValue != nil {
			t = autoscalingv2.AverageValueMetricType
		}
		out.Object = &autoscalingv2.ObjectMetricSource{
			DescribedObject: autoscalingv2.CrossVersionObjectReference(s.Target),
			Target:          autoscalingv2.MetricTarget{Type: t, Value: new(s.TargetValue), AverageValue: s.AverageValue},
			Metric:          autoscalingv2.MetricIdentifier{Name: s.MetricName, Selector: s.Selector},
		}
	}
	if s := in.Pods; s != nil {
		out.Pods = &autoscalingv2.PodsMetricSource{
			Metric: autoscalingv2.MetricIdentifier{Name: s.MetricName, Selector: s.Selector},
			Target: autoscalingv2.MetricTarget{Type: autoscalingv2.AverageValueMetricType, AverageValue: new(s.TargetAverageValue)},
		}
	}
	if s := in.Resource; s != nil {
		out.Resource = &autoscalingv2.ResourceMetricSource{Name: s.Name, Target: resourceTarget(s.TargetAverageUtilization, s.TargetAverageValue)}
	}
	if s := in.ContainerResource; s != nil {
		out.ContainerResource = &autoscalingv2.ContainerResourceMetricSource{
			Name: s.Name, Target: resourceTarget(s.TargetAverageUtilization, s.TargetAverageValue), Container: s.Container,
		}
	}
	if s := in.External; s != nil {
		t := autoscalingv2.AverageValueMetricType
		if s.TargetValue != nil {
			t = autoscalingv2.ValueMetricType
		}
		out.External = &autoscalingv2.ExternalMetricSource{
			Metric: autoscalingv2.MetricIdentifier{Name: s.MetricName, Selector: s.MetricSelector},
			Target: autoscalingv2.MetricTarget{Type: t, Value: s.TargetValue, AverageValue: s.TargetAverageValue},
		}
	}
	return out
}

// resourceTarget is the v2 target of a v1 resource source: a utilization
// when one is given, else an average value.
func resourceTarget(utilization *int32, average *resource.Quantity) autoscalingv2.MetricTarget {
	t := autoscalingv2.AverageValueMetricType
	if utilization != nil {
		t = autoscalingv2.UtilizationMetricType
	}
	return autoscalingv2.MetricTarget{Type: t, AverageValue: average, AverageUtilization: utilization}
}

// metricStatusToV1 converts a v2 metric status to v1.
func metricStatusToV1(in *autoscalingv2.MetricStatus) autoscalingv1.MetricStatus {
	out := autoscalingv1.MetricStatus{Type: autoscalingv1.MetricSourceType(in.Type)}
	if s := in.Object; s != nil {
		out.Object = &autoscalingv1.ObjectMetricStatus{
			Target:       autoscalingv1.CrossVersionObjectReference(s.DescribedObject),
			MetricName:   s.Metric.Name,
			CurrentValue: quantityOrZero(s.Current.Value),
			Selector:     s.Metric.Selector,
			AverageValue: s.Current.AverageValue,
		}
	}
	if s := in.Pods; s != nil {
		out.Pods = &autoscalingv1.PodsMetricStatus{MetricName: s.Metric.Name, CurrentAverageValue: quantityOrZero(s.Current.AverageValue), Selector: s.Metric.Selector}
	}
	if s := in.Resource; s != nil {
		out.Resource = &autoscalingv1.ResourceMetricStatus{
			Name: s.Name, CurrentAverageUtilization: s.Current.AverageUtilization, CurrentAverageValue: quantityOrZero(s.Current.AverageValue),
		}
	}
	if s := in.ContainerResource; s != nil {
		out.ContainerResource = &autoscalingv1.ContainerResourceMetricStatus{
			Name: s.Name, CurrentAverageUtilization: s.Current.AverageUtilization, CurrentAverageValue: quantityOrZero(s.Current.AverageValue), Container: s.Container,
		}
	}
	if s := in.External; s != nil {
		out.External = &autoscalingv1.ExternalMetricStatus{
			MetricName: s.Metric.Name, MetricSelector: s.Metric.Selector, CurrentValue: quantityOrZero(s.Current.Value), CurrentAverageValue: s.Current.AverageValue,
		}
	}
	return out
}

// metricStatusToV2 converts a v1 metric status to v2.
func metricStatusToV2(in *autoscalingv1.MetricStatus) autoscalingv2.MetricStatus {
	out := autoscalingv2.MetricStatus{Type: autoscalingv2.MetricSourceType(in.Type)}
	if s := in.Object; s != nil {
		out.Object = &autoscalingv2.ObjectMetricStatus{
			Metric:          autoscalingv2.MetricIdentifier{Name: s.MetricName, Selector: s.Selector},
			Current:         autoscalingv2.MetricValueStatus{Value: new(s.CurrentValue), AverageValue: s.AverageValue},
			DescribedObject: autoscalingv2.CrossVersionObjectReference(s.Target),
		}
	}
	if s := in.Pods; s != nil {
		out.Pods = &autoscalingv2.PodsMetricStatus{
			Metric:  autoscalingv2.MetricIdentifier{Name: s.MetricName, Selector: s.Selector},
			Current: autoscalingv2.MetricValueStatus{AverageValue: new(s.CurrentAverageValue)},
		}
	}
	if s := in.Resource; s != nil {
		out.Resource = &autoscalingv2.ResourceMetricStatus{
			Name: s.Name, Current: autoscalingv2.MetricValueStatus{AverageValue: new(s.CurrentAverageValue), AverageUtilization: s.CurrentAverageUtilization},
		}
	}
	if s := in.ContainerResource; s != nil {
		out.ContainerResource = &autoscalingv2.ContainerResourceMetricStatus{
			Name: s.Name, Current: autoscalingv2.MetricValueStatus{AverageValue: new(s.CurrentAverageValue), AverageUtilization: s.CurrentAverageUtilization}, Container: s.Container,
		}
	}
	if s := in.External; s != nil {
		out.External = &autoscalingv2.ExternalMetricStatus{
			Metric:  autoscalingv2.MetricIdentifier{Name: s.MetricName, Selector: s.MetricSelector},
			Current: autoscalingv2.MetricValueStatus{Value: new(s.CurrentValue), AverageValue: s.CurrentAverageValue},
		}
	}
	return out
}

// internalBehavior, internalRules and internalPolicy are shaped as
// upstream's internal HorizontalPodAutoscalerBehavior, whose JSON (field
// names as in Go, null for what is unset) BehaviorSpecsAnnotation holds.
type internalBehavior struct {
	ScaleUp   *internalRules
	ScaleDown *internalRules
}

type internalRules struct {
	StabilizationWindowSeconds *int32
	SelectPolicy               *autoscalingv2.ScalingPolicySelect
	Policies                   []internalPolicy
	Tolerance                  *resource.Quantity
}

type internalPolicy struct {
	Type          autoscalingv2.HPAScalingPolicyType
	Value         int32
	PeriodSeconds int32
}

// behaviorFromV2 is b in the annotation's shape.
func behaviorFromV2(b *autoscalingv2.HorizontalPodAutoscalerBehavior) internalBehavior {
	return internalBehavior{ScaleUp: rulesFromV2(b.ScaleUp), ScaleDown: rulesFromV2(b.ScaleDown)}
}

func rulesFromV2(r *autoscalingv2.HPAScalingRules) *internalRules {
	if r == nil {
		return nil
	}
	out := &internalRules{StabilizationWindowSeconds: r.StabilizationWindowSeconds, SelectPolicy: r.SelectPolicy, Tolerance: r.Tolerance}
	if r.Policies != nil {
		out.Policies = make([]internalPolicy, len(r.Policies))
		for i, p := range r.Policies {
			out.Policies[i] = internalPolicy(p)
		}
	}
	return out
}

// toV2 is the behavior the annotation holds.
func (b internalBehavior) toV2() *autoscalingv2.HorizontalPodAutoscalerBehavior {
	return &autoscalingv2.HorizontalPodAutoscalerBehavior{ScaleUp: b.ScaleUp.toV2(), ScaleDown: b.ScaleDown.toV2()}
}

func (r *internalRules) toV2() *autoscalingv2.HPAScalingRules {
	if r == nil {
		return nil
	}
	out := &autoscalingv2.HPAScalingRules{StabilizationWindowSeconds: r.StabilizationWindowSeconds, SelectPolicy: r.SelectPolicy, Tolerance: r.Tolerance}
	if r.Policies != nil {
		out.Policies = make([]autoscalingv2.HPAScalingPolicy, len(r.Policies))
		for i, p := range r.Policies {
			out.Policies[i] = autoscalingv2.HPAScalingPolicy(p)
		}
	}
	return out
}
