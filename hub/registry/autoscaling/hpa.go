// Package autoscaling holds the hub's rules for HorizontalPodAutoscalers,
// served at autoscaling/v2 and, converted, at autoscaling/v1, as upstream
// Kubernetes serves them: stored at v2, with upstream's defaults,
// validation, status subresource and printer columns. It stores
// autoscalers; the controller that acts on them is not its.
package autoscaling

import (
	"fmt"
	"strings"
	"time"

	autoscalingv1 "k8s.io/api/autoscaling/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/outpost-mesh/outpost/hub/apiserver"
	"github.com/outpost-mesh/outpost/hub/registry/typed"
)

// Resources returns the autoscaling resources, v2 (the stored version)
// first, with ages in printed tables measured against the wall clock.
func Resources() []apiserver.Resource { return ResourcesWithClock(nil) }

// ResourcesWithClock is Resources with ages measured against now, or the
// wall clock if now is nil. Tests use it to get stable Table rows.
func ResourcesWithClock(now func() time.Time) []apiserver.Resource {
	base := apiserver.Resource{
		Kind:       "HorizontalPodAutoscaler",
		Plural:     "horizontalpodautoscalers",
		Singular:   "horizontalpodautoscaler",
		ShortNames: []string{"hpa"},
		Categories: []string{"all"},
		Namespaced: true,
		Status:     true,
	}
	v2, v1 := base, base
	v2.GroupVersion = autoscalingv2.SchemeGroupVersion
	v2.New = func() runtime.Object { return &autoscalingv2.HorizontalPodAutoscaler{} }
	v2.NewList = func() runtime.Object { return &autoscalingv2.HorizontalPodAutoscalerList{} }
	v2.AddToScheme = autoscalingv2.AddToScheme
	v2.Rules = v2Rules(now)
	v1.GroupVersion = autoscalingv1.SchemeGroupVersion
	v1.New = func() runtime.Object { return &autoscalingv1.HorizontalPodAutoscaler{} }
	v1.NewList = func() runtime.Object { return &autoscalingv1.HorizontalPodAutoscalerList{} }
	v1.AddToScheme = autoscalingv1.AddToScheme
	v1.Rules = v1Rules(now)
	v1.Conversion = &apiserver.Conversion{
		StorageVersion: autoscalingv2.SchemeGroupVersion.Version,
		NewStorage:     func() runtime.Object { return &autoscalingv2.HorizontalPodAutoscaler{} },
		ToStorage:      v1ToStorage,
		FromStorage:    v1FromStorage,
	}
	return []apiserver.Resource{v2, v1}
}

// v2Rules are the rules of autoscaling/v2 autoscalers. A PUT does not
// create one, and there are no field selectors beyond metadata's.
func v2Rules(now func() time.Time) *typed.Rules[*autoscalingv2.HorizontalPodAutoscaler] {
	return &typed.Rules[*autoscalingv2.HorizontalPodAutoscaler]{
		Now:      now,
		Defaults: defaultV2,
		PrepareCreate: func(h *autoscalingv2.HorizontalPodAutoscaler) {
			h.Status = autoscalingv2.HorizontalPodAutoscalerStatus{}
		},
		PrepareUpdate: func(h, old *autoscalingv2.HorizontalPodAutoscaler) { h.Status = old.Status },
		Check:         validateHPA,
		CheckUpdate:   validateHPAUpdate,
		CheckStatus:   validateHPAStatusUpdate,
		TableColumns:  columns(),
		TableRow:      row,
	}
}

// Upstream's behavior defaults, in force since before autoscaling/v2:
// scale up by at most 4 pods or 100% each 15 seconds, whichever is more,
// without a stabilization window; scale down by at most 100% each 15
// seconds, with the controller's window (nil here).
const (
	scaleUpPods        int32 = 4
	scalePercent       int32 = 100
	scalePeriodSeconds int32 = 15
)

// defaultV2 applies upstream's defaults (SetDefaults_HorizontalPodAutoscaler
// of autoscaling/v2): minReplicas 1, a CPU utilization target of 80% when
// no metric is given, and every unset field of a given behavior's rules.
// It first drops the round-trip annotations, which upstream drops when it
// decodes a v2 autoscaler: they belong to v1 and are never stored.
func defaultV2(h *autoscalingv2.HorizontalPodAutoscaler) {
	h.Annotations = withoutRoundTrip(h.Annotations)
	if h.Spec.MinReplicas == nil {
		h.Spec.MinReplicas = new(int32(1))
	}
	if len(h.Spec.Metrics) == 0 {
		h.Spec.Metrics = []autoscalingv2.MetricSpec{cpuUtilizationMetric(defaultCPUUtilization)}
	}
	if b := h.Spec.Behavior; b != nil {
		b.ScaleUp = defaultRules(b.ScaleUp, new(int32(0)), []autoscalingv2.HPAScalingPolicy{
			{Type: autoscalingv2.PodsScalingPolicy, Value: scaleUpPods, PeriodSeconds: scalePeriodSeconds},
			{Type: autoscalingv2.PercentScalingPolicy, Value: scalePercent, PeriodSeconds: scalePeriodSeconds},
		})
		b.ScaleDown = defaultRules(b.ScaleDown, nil, []autoscalingv2.HPAScalingPolicy{
			{Type: autoscalingv2.PercentScalingPolicy, Value: scalePercent, PeriodSeconds: scalePeriodSeconds},
		})
	}
}

// defaultRules returns r with its unset fields taken from the defaults: the
// window, select policy Max and policies.
func defaultRules(r *autoscalingv2.HPAScalingRules, window *int32, policies []autoscalingv2.HPAScalingPolicy) *autoscalingv2.HPAScalingRules {
	out := &autoscalingv2.HPAScalingRules{StabilizationWindowSeconds: window, SelectPolicy: new(autoscalingv2.MaxChangePolicySelect), Policies: policies}
	if r == nil {
		return out
	}
	if r.SelectPolicy != nil {
		out.SelectPolicy = r.SelectPolicy
	}
	if r.StabilizationWindowSeconds != nil {
		out.StabilizationWindowSeconds = r.StabilizationWindowSeconds
	}
	if r.Policies != nil {
		out.Policies = r.Policies
	}
	out.Tolerance = r.Tolerance
	return out
}

// v1Rules are the rules of autoscaling/v1 autoscalers: those of v2, applied
// to the autoscaler converted, as upstream validates and prints the
// internal version a v1 object converts to. Its status is in part in the
// annotations of current metrics and conditions, which creates clear and
// updates keep as they do Status.
func v1Rules(now func() time.Time) *typed.Rules[*autoscalingv1.HorizontalPodAutoscaler] {
	return &typed.Rules[*autoscalingv1.HorizontalPodAutoscaler]{
		Now:      now,
		Defaults: defaultV1,
		PrepareCreate: func(h *autoscalingv1.HorizontalPodAutoscaler) {
			h.Status = autoscalingv1.HorizontalPodAutoscalerStatus{}
			keepStatusAnnotations(h, nil)
		},
		PrepareUpdate: func(h, old *autoscalingv1.HorizontalPodAutoscaler) {
			h.Status = old.Status
			keepStatusAnnotations(h, old)
		},
		Check: func(h *autoscalingv1.HorizontalPodAutoscaler) field.ErrorList {
			v2, err := ToV2(h)
			if err != nil {
				return apivalidation.ValidateObjectMeta(&h.ObjectMeta, true, apivalidation.NameIsDNSSubdomain, metadataPath)
			}
			return validateHPA(v2)
		},
		CheckUpdate: func(h, old *autoscalingv1.HorizontalPodAutoscaler) field.ErrorList {
			return checkV1Pair(h, old, validateHPAUpdate)
		},
		CheckStatus: func(h, old *autoscalingv1.HorizontalPodAutoscaler) field.ErrorList {
			return checkV1Pair(h, old, validateHPAStatusUpdate)
		},
		TableColumns: columns(),
		TableRow: func(h *autoscalingv1.HorizontalPodAutoscaler, now time.Time) []interface{} {
			return row(lenientV2(h), now)
		},
	}
}

// defaultV1 applies upstream's autoscaling/v1 defaults: minReplicas 1. The
// default CPU target comes with the conversion to v2, which sees the
// metrics of the annotation.
func defaultV1(h *autoscalingv1.HorizontalPodAutoscaler) {
	if h.Spec.MinReplicas == nil {
		h.Spec.MinReplicas = new(int32(1))
	}
}

// statusAnnotations are the round-trip annotations that carry status.
var statusAnnotations = []string{MetricStatusesAnnotation, ConditionsAnnotation}

// keepStatusAnnotations sets h's status annotations to old's, or removes
// them when old is nil.
func keepStatusAnnotations(h, old *autoscalingv1.HorizontalPodAutoscaler) {
	for _, k := range statusAnnotations {
		v, ok := "", false
		if old != nil {
			v, ok = old.Annotations[k]
		}
		switch {
		case ok:
			if h.Annotations == nil {
				h.Annotations = map[string]string{}
			}
			h.Annotations[k] = v
		default:
			delete(h.Annotations, k)
		}
	}
	if len(h.Annotations) == 0 {
		h.Annotations = nil
	}
}

// checkV1Pair applies check to h and old converted to v2. When a
// round-trip annotation of h does not decode, only h's metadata is
// checked: the conversion to storage then refuses the request with 400,
// as upstream refuses a body it cannot convert.
func checkV1Pair(h, old *autoscalingv1.HorizontalPodAutoscaler, check func(h, old *autoscalingv2.HorizontalPodAutoscaler) field.ErrorList) field.ErrorList {
	v2, err := ToV2(h)
	if err != nil {
		return apivalidation.ValidateObjectMetaUpdate(&h.ObjectMeta, &old.ObjectMeta, metadataPath)
	}
	return check(v2, lenientV2(old))
}

// lenientV2 converts h to v2, without the round-trip annotations if they
// do not decode: for the stored object and for printing, which must not
// fail.
func lenientV2(h *autoscalingv1.HorizontalPodAutoscaler) *autoscalingv2.HorizontalPodAutoscaler {
	if v2, err := ToV2(h); err == nil {
		return v2
	}
	c := h.DeepCopy()
	c.Annotations = withoutRoundTrip(c.Annotations)
	v2, _ := ToV2(c) // cannot fail without the annotations
	return v2
}

func columns() []metav1.TableColumnDefinition {
	spec := autoscalingv2.HorizontalPodAutoscalerSpec{}.SwaggerDoc()
	return []metav1.TableColumnDefinition{
		typed.NameColumn,
		{Name: "Reference", Type: "string", Description: spec["scaleTargetRef"]},
		{Name: "Targets", Type: "string", Description: spec["metrics"]},
		{Name: "MinPods", Type: "string", Description: spec["minReplicas"]},
		{Name: "MaxPods", Type: "string", Description: spec["maxReplicas"]},
		{Name: "Replicas", Type: "string", Description: autoscalingv2.HorizontalPodAutoscalerStatus{}.SwaggerDoc()["currentReplicas"]},
		typed.AgeColumn,
	}
}

// row is an autoscaler's row, as upstream prints it.
func row(h *autoscalingv2.HorizontalPodAutoscaler, now time.Time) []interface{} {
	minPods := "<unset>"
	if h.Spec.MinReplicas != nil {
		minPods = fmt.Sprintf("%d", *h.Spec.MinReplicas)
	}
	ref := h.Spec.ScaleTargetRef.Kind + "/" + h.Spec.ScaleTargetRef.Name
	return []interface{}{h.Name, ref, formatMetrics(h.Spec.Metrics, h.Status.CurrentMetrics), minPods,
		int64(h.Spec.MaxReplicas), int64(h.Status.CurrentReplicas), typed.Age(now, h.CreationTimestamp)}
}

// maxShownMetrics is how many metrics the Targets cell shows before
// "+ N more...".
const maxShownMetrics = 2

// formatMetrics is the Targets cell: each metric's current value (from the
// status at the same index) over its target, as upstream's
// formatHPAMetrics writes them.
func formatMetrics(specs []autoscalingv2.MetricSpec, statuses []autoscalingv2.MetricStatus) string {
	if len(specs) == 0 {
		return "<none>"
	}
	list := make([]string, 0, len(specs))
	for i := range specs {
		var st *autoscalingv2.MetricStatus
		if i < len(statuses) {
			st = &statuses[i]
		}
		list = append(list, formatMetric(&specs[i], st))
	}
	if len(list) <= maxShownMetrics {
		return strings.Join(list, ", ")
	}
	return fmt.Sprintf("%s + %d more...", strings.Join(list[:maxShownMetrics], ", "), len(list)-maxShownMetrics)
}

// formatMetric is one metric of the Targets cell; st is its status, or nil.
func formatMetric(m *autoscalingv2.MetricSpec, st *autoscalingv2.MetricStatus) string {
	const unknown = "<unknown>"
	switch {
	case m.Type == autoscalingv2.ExternalMetricSourceType && m.External != nil:
		var cur *autoscalingv2.MetricValueStatus
		if st != nil && st.External != nil {
			cur = &st.External.Current
		}
		return formatValueTarget(m.External.Target, cur)
	case m.Type == autoscalingv2.PodsMetricSourceType && m.Pods != nil:
		current := unknown
		if st != nil && st.Pods != nil {
			current = quantityString(st.Pods.Current.AverageValue)
		}
		return current + "/" + quantityString(m.Pods.Target.AverageValue)
	case m.Type == autoscalingv2.ObjectMetricSourceType && m.Object != nil:
		var cur *autoscalingv2.MetricValueStatus
		if st != nil && st.Object != nil {
			cur = &st.Object.Current
		}
		return formatValueTarget(m.Object.Target, cur)
	case m.Type == autoscalingv2.ResourceMetricSourceType && m.Resource != nil:
		var cur *autoscalingv2.MetricValueStatus
		if st != nil && st.Resource != nil {
			cur = &st.Resource.Current
		}
		return formatResourceTarget(m.Resource.Name, m.Resource.Target, cur)
	case m.Type == autoscalingv2.ContainerResourceMetricSourceType && m.ContainerResource != nil:
		var cur *autoscalingv2.MetricValueStatus
		if st != nil && st.ContainerResource != nil {
			cur = &st.ContainerResource.Current
		}
		return formatResourceTarget(m.ContainerResource.Name, m.ContainerResource.Target, cur)
	}
	return "<unknown type>"
}

// formatValueTarget is an Object or External metric: "current/target
// (avg)" for an average value, "current/target" for a value.
func formatValueTarget(t autoscalingv2.MetricTarget, cur *autoscalingv2.MetricValueStatus) string {
	current := "<unknown>"
	if t.AverageValue != nil {
		if cur != nil && cur.AverageValue != nil {
			current = cur.AverageValue.String()
		}
		return fmt.Sprintf("%s/%s (avg)", current, t.AverageValue.String())
	}
	if cur != nil {
		current = quantityString(cur.Value)
	}
	return current + "/" + quantityString(t.Value)
}

// formatResourceTarget is a Resource or ContainerResource metric:
// "name: current/target", in percent for a utilization.
func formatResourceTarget(name corev1.ResourceName, t autoscalingv2.MetricTarget, cur *autoscalingv2.MetricValueStatus) string {
	current := "<unknown>"
	if t.AverageValue != nil {
		if cur != nil {
			current = quantityString(cur.AverageValue)
		}
		return fmt.Sprintf("%s: %s/%s", name, current, t.AverageValue.String())
	}
	if cur != nil && cur.AverageUtilization != nil {
		current = fmt.Sprintf("%d%%", *cur.AverageUtilization)
	}
	target := "<auto>"
	if t.AverageUtilization != nil {
		target = fmt.Sprintf("%d%%", *t.AverageUtilization)
	}
	return fmt.Sprintf("%s: %s/%s", name, current, target)
}

// quantityString is q printed; upstream dereferences the quantities it
// prints unchecked, and a nil one (which validation rules out) is
// "<nil>" here rather than a crash.
func quantityString(q *resource.Quantity) string {
	if q == nil {
		return "<nil>"
	}
	return q.String()
}
