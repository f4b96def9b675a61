package autoscaling

import (
	"testing"

	autoscalingv2 "k8s.io/api/autoscaling/v2"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/outpost-mesh/outpost/hub/registry/typed/typedtest"
)

func TestWrongType(t *testing.T) { typedtest.WrongType(t, Resources()) }

func validHPA() *autoscalingv2.HorizontalPodAutoscaler {
	h := &autoscalingv2.HorizontalPodAutoscaler{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default", ResourceVersion: "3"},
		Spec: autoscalingv2.HorizontalPodAutoscalerSpec{
			ScaleTargetRef: autoscalingv2.CrossVersionObjectReference{Kind: "Deployment", Name: "web", APIVersion: "apps/v1"},
			MaxReplicas:    5,
		},
	}
	defaultV2(h)
	return h
}

func TestValidate(t *testing.T) {
	q := func(s string) *resource.Quantity { return new(resource.MustParse(s)) }
	tests := []struct {
		name string
		edit func(*autoscalingv2.HorizontalPodAutoscaler)
		want []string
	}{
		{"defaults", func(*autoscalingv2.HorizontalPodAutoscaler) {}, nil},
		{"min over max", func(h *autoscalingv2.HorizontalPodAutoscaler) { h.Spec.MinReplicas = new(int32(6)) }, []string{"spec.maxReplicas: Invalid value"}},
		{"min zero", func(h *autoscalingv2.HorizontalPodAutoscaler) { h.Spec.MinReplicas = new(int32(0)) },
			[]string{"spec.minReplicas: Invalid value", "spec.metrics: Forbidden"}},
		{"no target", func(h *autoscalingv2.HorizontalPodAutoscaler) {
			h.Spec.ScaleTargetRef = autoscalingv2.CrossVersionObjectReference{}
		},
			[]string{"spec.scaleTargetRef.kind: Required value", "spec.scaleTargetRef.name: Required value", "spec.scaleTargetRef.apiVersion: Invalid value"}},
		{"core replication controller", func(h *autoscalingv2.HorizontalPodAutoscaler) {
			h.Spec.ScaleTargetRef = autoscalingv2.CrossVersionObjectReference{Kind: "ReplicationController", Name: "rc", APIVersion: "v1"}
		}, nil},
		{"bad apiVersion", func(h *autoscalingv2.HorizontalPodAutoscaler) { h.Spec.ScaleTargetRef.APIVersion = "a/b/c" }, []string{"spec.scaleTargetRef.apiVersion: Invalid value"}},
		{"two sources", func(h *autoscalingv2.HorizontalPodAutoscaler) {
			h.Spec.Metrics[0].Pods = &autoscalingv2.PodsMetricSource{Metric: autoscalingv2.MetricIdentifier{Name: "qps"}, Target: autoscalingv2.MetricTarget{Type: autoscalingv2.AverageValueMetricType, AverageValue: q("1")}}
		}, []string{"spec.metrics[0].pods: Forbidden"}},
		{"unknown type", func(h *autoscalingv2.HorizontalPodAutoscaler) { h.Spec.Metrics[0].Type = "Magic" },
			[]string{"spec.metrics[0].type: Unsupported value", "spec.metrics[0].type: Unsupported value"}},
		{"both targets", func(h *autoscalingv2.HorizontalPodAutoscaler) {
			h.Spec.Metrics[0].Resource.Target.AverageValue = q("100m")
		},
			[]string{"spec.metrics[0].resource.target.averageValue: Forbidden"}},
		{"object metric", func(h *autoscalingv2.HorizontalPodAutoscaler) {
			h.Spec.Metrics = []autoscalingv2.MetricSpec{{Type: autoscalingv2.ObjectMetricSourceType, Object: &autoscalingv2.ObjectMetricSource{
				DescribedObject: autoscalingv2.CrossVersionObjectReference{Kind: "Service", Name: "web", APIVersion: "v1"},
				Metric:          autoscalingv2.MetricIdentifier{Name: "rps"},
				Target:          autoscalingv2.MetricTarget{Type: autoscalingv2.ValueMetricType, Value: q("0")},
			}}}
		}, []string{"spec.metrics[0].object.target.value: Invalid value"}},
		{"external both", func(h *autoscalingv2.HorizontalPodAutoscaler) {
			h.Spec.Metrics = []autoscalingv2.MetricSpec{{Type: autoscalingv2.ExternalMetricSourceType, External: &autoscalingv2.ExternalMetricSource{
				Metric: autoscalingv2.MetricIdentifier{Name: "queue/depth"},
				Target: autoscalingv2.MetricTarget{Type: "Sometimes", Value: q("1"), AverageValue: q("1")},
			}}}
		}, []string{"spec.metrics[0].external.metric.name: Invalid value", "spec.metrics[0].external.target.type: Invalid value", "spec.metrics[0].external.target.value: Forbidden"}},
		{"behavior", func(h *autoscalingv2.HorizontalPodAutoscaler) {
			h.Spec.Behavior = &autoscalingv2.HorizontalPodAutoscalerBehavior{ScaleUp: &autoscalingv2.HPAScalingRules{
				StabilizationWindowSeconds: new(int32(3601)), SelectPolicy: new(autoscalingv2.ScalingPolicySelect("Any")),
				Policies:  []autoscalingv2.HPAScalingPolicy{{Type: "Nodes", Value: 0, PeriodSeconds: 1801}},
				Tolerance: q("-1"),
			}, ScaleDown: &autoscalingv2.HPAScalingRules{Policies: []autoscalingv2.HPAScalingPolicy{}}}
		}, []string{"spec.behavior.scaleUp.stabilizationWindowSeconds: Invalid value", "spec.behavior.scaleUp.selectPolicy: Unsupported value",
			"spec.behavior.scaleUp.policies[0].type: Unsupported value", "spec.behavior.scaleUp.policies[0].value: Invalid value",
			"spec.behavior.scaleUp.policies[0].periodSeconds: Invalid value", "spec.behavior.scaleUp.tolerance: Invalid value",
			"spec.behavior.scaleDown.policies: Required value"}},
		{"name", func(h *autoscalingv2.HorizontalPodAutoscaler) { h.Name = "Web" }, []string{"metadata.name: Invalid value"}},
	}
	for _, tt := range tests {
		h := validHPA()
		tt.edit(h)
		if got := typedtest.ErrStrings(validateHPA(h)); !typedtest.SameErrs(got, tt.want) {
			t.Errorf("validateHPA(%s) = %q, want %q", tt.name, got, tt.want)
		}
	}
}

// TestValidateUpdate: what an update keeps of what was stored before
// upstream checked it.
func TestValidateUpdate(t *testing.T) {
	old := validHPA()
	old.Spec.MinReplicas = new(int32(0))
	old.Spec.ScaleTargetRef.APIVersion = "v1"
	h := old.DeepCopy()
	h.Spec.MaxReplicas = 7
	if got := typedtest.ErrStrings(validateHPAUpdate(h, old)); !typedtest.SameErrs(got, []string{"spec.metrics: Forbidden"}) {
		t.Errorf("update keeping minReplicas 0 and an apiVersion without group = %q, want only the scale-to-zero metric error", got)
	}
	h.Spec.ScaleTargetRef.Kind = "StatefulSet"
	if got := typedtest.ErrStrings(validateHPAUpdate(h, old)); !typedtest.SameErrs(got, []string{"spec.scaleTargetRef.apiVersion: Invalid value", "spec.metrics: Forbidden"}) {
		t.Errorf("update changing the kind = %q", got)
	}
}
