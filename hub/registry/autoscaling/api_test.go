package autoscaling_test

import (
	"context"
	"net/http/httptest"
	"slices"
	"testing"

	autoscalingv1 "k8s.io/api/autoscaling/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/outpost-mesh/outpost/hub/apiserver"
	"github.com/outpost-mesh/outpost/hub/registry/autoscaling"
	"github.com/outpost-mesh/outpost/hub/registry/core"
	"github.com/outpost-mesh/outpost/hub/registry/typed/typedtest"
	"github.com/outpost-mesh/outpost/hub/store/badgerstore"
)

// startAPI serves the core and autoscaling resources over a fresh store,
// with the default namespace.
func startAPI(t *testing.T) kubernetes.Interface {
	t.Helper()
	st, err := badgerstore.Open(badgerstore.DefaultConfig(t.TempDir()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	srv, err := apiserver.New(apiserver.Config{Store: st, Resources: append(core.Resources(), autoscaling.Resources()...)})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv)
	t.Cleanup(hs.Close)
	t.Cleanup(srv.Shutdown)
	ns := &corev1.Namespace{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Namespace"}, ObjectMeta: metav1.ObjectMeta{Name: "default"}}
	if err := srv.Ensure(context.Background(), []runtime.Object{ns}...); err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(&rest.Config{Host: hs.URL, QPS: -1})
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

func target() autoscalingv2.CrossVersionObjectReference {
	return autoscalingv2.CrossVersionObjectReference{Kind: "Deployment", Name: "web", APIVersion: "apps/v1"}
}

// TestAPI serves autoscalers through a real server and client-go: a v2
// autoscaler is defaulted and stored without the status its client sent,
// bad ones are refused with 422 and the field at fault, the status
// subresource changes only the status, v1 clients see the same object
// with the rest in annotations and write it back without loss, and
// kubectl's table has upstream's columns at both versions.
func TestAPI(t *testing.T) {
	cs := startAPI(t)
	ctx := context.Background()
	v2 := cs.AutoscalingV2().HorizontalPodAutoscalers("default")
	v1 := cs.AutoscalingV1().HorizontalPodAutoscalers("default")

	pods := autoscalingv2.MetricSpec{Type: autoscalingv2.PodsMetricSourceType, Pods: &autoscalingv2.PodsMetricSource{
		Metric: autoscalingv2.MetricIdentifier{Name: "qps"},
		Target: autoscalingv2.MetricTarget{Type: autoscalingv2.AverageValueMetricType, AverageValue: new(resource.MustParse("10"))},
	}}
	h, err := v2.Create(ctx, &autoscalingv2.HorizontalPodAutoscaler{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Annotations: map[string]string{autoscaling.MetricSpecsAnnotation: "[]"}},
		Spec: autoscalingv2.HorizontalPodAutoscalerSpec{
			ScaleTargetRef: target(), MaxReplicas: 5, Metrics: []autoscalingv2.MetricSpec{pods},
			Behavior: &autoscalingv2.HorizontalPodAutoscalerBehavior{ScaleDown: &autoscalingv2.HPAScalingRules{StabilizationWindowSeconds: new(int32(60))}},
		},
		Status: autoscalingv2.HorizontalPodAutoscalerStatus{CurrentReplicas: 9},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	if h.Spec.MinReplicas == nil || *h.Spec.MinReplicas != 1 || h.Status.CurrentReplicas != 0 || len(h.Annotations) != 0 {
		t.Errorf("created: minReplicas %v, status %+v, annotations %v; want 1, empty, none", h.Spec.MinReplicas, h.Status, h.Annotations)
	}
	if up := h.Spec.Behavior.ScaleUp; up == nil || len(up.Policies) != 2 || *h.Spec.Behavior.ScaleDown.StabilizationWindowSeconds != 60 {
		t.Errorf("created behavior %+v, want upstream's scale-up defaults and the given window", h.Spec.Behavior)
	}

	for _, tt := range []struct {
		name  string
		edit  func(*autoscalingv2.HorizontalPodAutoscaler)
		field string
	}{
		{"max-zero", func(h *autoscalingv2.HorizontalPodAutoscaler) { h.Spec.MaxReplicas = 0 }, "spec.maxReplicas"},
		{"no-group", func(h *autoscalingv2.HorizontalPodAutoscaler) { h.Spec.ScaleTargetRef.APIVersion = "v1" }, "spec.scaleTargetRef.apiVersion"},
		{"min-zero", func(h *autoscalingv2.HorizontalPodAutoscaler) { h.Spec.MinReplicas = new(int32(0)) }, "spec.minReplicas"},
		{"bad-metric", func(h *autoscalingv2.HorizontalPodAutoscaler) {
			h.Spec.Metrics = []autoscalingv2.MetricSpec{{Type: autoscalingv2.PodsMetricSourceType}}
		}, "spec.metrics[0].pods"},
	} {
		bad := &autoscalingv2.HorizontalPodAutoscaler{ObjectMeta: metav1.ObjectMeta{Name: tt.name}, Spec: autoscalingv2.HorizontalPodAutoscalerSpec{ScaleTargetRef: target(), MaxReplicas: 3}}
		tt.edit(bad)
		_, err := v2.Create(ctx, bad, metav1.CreateOptions{})
		if got := typedtest.Causes(t, "create "+tt.name, err); !slices.Contains(got, tt.field) {
			t.Errorf("create %s: causes %v, want %s", tt.name, got, tt.field)
		}
	}

	// The controller's write: status only.
	h.Status = autoscalingv2.HorizontalPodAutoscalerStatus{
		CurrentReplicas: 2, DesiredReplicas: 3,
		CurrentMetrics: []autoscalingv2.MetricStatus{{Type: autoscalingv2.PodsMetricSourceType, Pods: &autoscalingv2.PodsMetricStatus{
			Metric: autoscalingv2.MetricIdentifier{Name: "qps"}, Current: autoscalingv2.MetricValueStatus{AverageValue: new(resource.MustParse("7"))}}}},
		Conditions: []autoscalingv2.HorizontalPodAutoscalerCondition{{Type: autoscalingv2.AbleToScale, Status: corev1.ConditionTrue, Reason: "ReadyForNewScale"}},
	}
	h.Spec.MaxReplicas = 50 // ignored on the status subresource
	if h, err = v2.UpdateStatus(ctx, h, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("update status: %v", err)
	}
	if h.Spec.MaxReplicas != 5 || h.Status.CurrentReplicas != 2 {
		t.Errorf("after status update: maxReplicas %d, status %+v; want 5 and the new status", h.Spec.MaxReplicas, h.Status)
	}
	neg := h.DeepCopy()
	neg.Status.DesiredReplicas = -1
	_, err = v2.UpdateStatus(ctx, neg, metav1.UpdateOptions{})
	if got := typedtest.Causes(t, "negative desired replicas", err); !slices.Contains(got, "status.desiredReplicas") {
		t.Errorf("negative desired replicas: causes %v", got)
	}

	// A v1 client sees the same autoscaler, the rest in annotations.
	old, err := v1.Get(ctx, "web", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get v1: %v", err)
	}
	if old.Spec.TargetCPUUtilizationPercentage != nil || old.Spec.MaxReplicas != 5 || old.Status.DesiredReplicas != 3 {
		t.Errorf("v1 autoscaler spec %+v status %+v", old.Spec, old.Status)
	}
	for _, k := range []string{autoscaling.MetricSpecsAnnotation, autoscaling.MetricStatusesAnnotation, autoscaling.ConditionsAnnotation, autoscaling.BehaviorSpecsAnnotation} {
		if old.Annotations[k] == "" {
			t.Errorf("v1 autoscaler lacks annotation %s: %v", k, old.Annotations)
		}
	}
	// It changes what it knows of and writes back what it read: nothing
	// else is lost, and the status it sent in annotations is not taken.
	old.Spec.MaxReplicas = 8
	old.Annotations[autoscaling.ConditionsAnnotation] = "[]"
	if _, err := v1.Update(ctx, old, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("update v1: %v", err)
	}
	got, err := v2.Get(ctx, "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.Spec.MaxReplicas != 8 || len(got.Spec.Metrics) != 1 || got.Spec.Metrics[0].Pods == nil || got.Spec.Behavior == nil ||
		len(got.Status.Conditions) != 1 || len(got.Status.CurrentMetrics) != 1 || len(got.Annotations) != 0 {
		t.Errorf("after a v1 update, v2 reads spec %+v status %+v annotations %v", got.Spec, got.Status, got.Annotations)
	}

	// A v1 create: the CPU default, and the annotation's metrics first.
	created, err := v1.Create(ctx, &autoscalingv1.HorizontalPodAutoscaler{
		ObjectMeta: metav1.ObjectMeta{Name: "api"},
		Spec:       autoscalingv1.HorizontalPodAutoscalerSpec{ScaleTargetRef: autoscalingv1.CrossVersionObjectReference(target()), MaxReplicas: 4},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create v1: %v", err)
	}
	// Upstream answers a create with the object as stored, and so reads
	// it back.
	if p := created.Spec.TargetCPUUtilizationPercentage; p == nil || *p != 80 || *created.Spec.MinReplicas != 1 {
		t.Errorf("created v1: target %v, minReplicas %v; want 80 and 1", p, created.Spec.MinReplicas)
	}
	if created, err = v1.Get(ctx, created.Name, metav1.GetOptions{}); err != nil {
		t.Fatalf("get v1: %v", err)
	}
	if p := created.Spec.TargetCPUUtilizationPercentage; p == nil || *p != 80 || *created.Spec.MinReplicas != 1 {
		t.Errorf("read v1: target %v, minReplicas %v; want 80 and 1", p, created.Spec.MinReplicas)
	}
	bad := &autoscalingv1.HorizontalPodAutoscaler{
		ObjectMeta: metav1.ObjectMeta{Name: "bad", Annotations: map[string]string{autoscaling.MetricSpecsAnnotation: "{"}},
		Spec:       autoscalingv1.HorizontalPodAutoscalerSpec{ScaleTargetRef: autoscalingv1.CrossVersionObjectReference(target()), MaxReplicas: 4},
	}
	if _, err := v1.Create(ctx, bad, metav1.CreateOptions{}); !apierrors.IsBadRequest(err) {
		t.Errorf("create v1 with an undecodable annotation: %v, want upstream's 400", err)
	}
	bad.Annotations = nil
	bad.Spec.TargetCPUUtilizationPercentage = new(int32(0))
	_, err = v1.Create(ctx, bad, metav1.CreateOptions{})
	if got := typedtest.Causes(t, "create v1 with a zero target", err); !slices.Contains(got, "spec.metrics[0].resource.target.averageUtilization") {
		t.Errorf("create v1 with a zero target: causes %v", got)
	}

	for _, version := range []string{"v2", "v1"} {
		tbl := typedtest.Table(t, cs.AutoscalingV2().RESTClient(), "/apis/autoscaling/"+version+"/namespaces/default/horizontalpodautoscalers")
		if names, want := typedtest.ColumnNames(tbl), []string{"Name", "Reference", "Targets", "MinPods", "MaxPods", "Replicas", "Age"}; !slices.Equal(names, want) {
			t.Errorf("%s table columns %q, want %q", version, names, want)
		}
		if len(tbl.Rows) != 2 {
			t.Fatalf("%s table rows %v, want two", version, tbl.Rows)
		}
		// Rows in name order; JSON numbers decode as float64.
		wantRows := [][]interface{}{
			{"api", "Deployment/web", "cpu: <unknown>/80%", "1", float64(4), float64(0)},
			{"web", "Deployment/web", "7/10", "1", float64(8), float64(2)},
		}
		for i, want := range wantRows {
			if cells := tbl.Rows[i].Cells[:6]; !slices.Equal(cells, want) {
				t.Errorf("%s table row %d %v, want %v and an age", version, i, tbl.Rows[i].Cells, want)
			}
		}
	}
}
