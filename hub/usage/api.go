package usage

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	metricsv1beta1 "k8s.io/metrics/pkg/apis/metrics/v1beta1"

	"github.com/outpost-mesh/outpost/hub/apiserver"
	"github.com/outpost-mesh/outpost/sync/wire"
)

// Labels reads the labels of the hub's nodes and pods, by which metrics
// are selected, as metrics-server takes them from its informers. They
// also say which nodes and pods exist: the metrics of one the hub no
// longer has are not served. Its methods must be safe for concurrent use.
type Labels interface {
	// NodeLabels returns the labels of every node, by name.
	NodeLabels(ctx context.Context) (map[string]map[string]string, error)
	// PodLabels returns the labels of the pods of namespace ("" for
	// all), by namespace and name.
	PodLabels(ctx context.Context, namespace string) (map[types.NamespacedName]map[string]string, error)
}

// Resources returns metrics.k8s.io/v1beta1's nodes and pods, served from
// s with the labels of l.
func Resources(s *Store, l Labels) []apiserver.Resource {
	gv := metricsv1beta1.SchemeGroupVersion
	return []apiserver.Resource{
		{
			GroupVersion: gv, Kind: "NodeMetrics", Plural: "nodes",
			New:         func() runtime.Object { return &metricsv1beta1.NodeMetrics{} },
			NewList:     func() runtime.Object { return &metricsv1beta1.NodeMetricsList{} },
			AddToScheme: metricsv1beta1.AddToScheme,
			Reader:      nodeReader{s, l},
		},
		{
			GroupVersion: gv, Kind: "PodMetrics", Plural: "pods", Namespaced: true,
			New:         func() runtime.Object { return &metricsv1beta1.PodMetrics{} },
			NewList:     func() runtime.Object { return &metricsv1beta1.PodMetricsList{} },
			AddToScheme: metricsv1beta1.AddToScheme,
			Reader:      podReader{s, l},
		},
	}
}

// resourceList returns u as CPU and memory quantities, as metrics-server
// writes them (CPU in nanocores, memory in bytes).
func resourceList(u wire.ResourceUsage) corev1.ResourceList {
	return corev1.ResourceList{
		corev1.ResourceCPU:    *resource.NewScaledQuantity(int64(min(u.CPU, math.MaxInt64)), resource.Nano),
		corev1.ResourceMemory: *resource.NewQuantity(int64(min(u.Memory, math.MaxInt64)), resource.BinarySI),
	}
}

// stamp is the Timestamp and Window of r's metrics: the end of the window
// at the hub's receipt.
func stamp(r report) (metav1.Time, metav1.Duration) {
	return metav1.NewTime(r.got.Truncate(time.Second)), metav1.Duration{Duration: r.u.Window}
}

type nodeReader struct {
	s *Store
	l Labels
}

func (n nodeReader) list(ctx context.Context, sel labels.Selector) ([]metricsv1beta1.NodeMetrics, error) {
	nodes, err := n.l.NodeLabels(ctx)
	if err != nil {
		return nil, fmt.Errorf("read nodes: %w", err)
	}
	reports, now := n.s.fresh()
	var out []metricsv1beta1.NodeMetrics
	for name, r := range reports {
		lbls, ok := nodes[name]
		if !ok || !sel.Matches(labels.Set(lbls)) {
			continue
		}
		ts, win := stamp(r)
		out = append(out, metricsv1beta1.NodeMetrics{
			TypeMeta:   metav1.TypeMeta{APIVersion: metricsv1beta1.SchemeGroupVersion.String(), Kind: "NodeMetrics"},
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: lbls, CreationTimestamp: metav1.NewTime(now.Truncate(time.Second))},
			Timestamp:  ts, Window: win, Usage: resourceList(r.u.Node),
		})
	}
	slices.SortFunc(out, func(a, b metricsv1beta1.NodeMetrics) int { return cmp.Compare(a.Name, b.Name) })
	return out, nil
}

func (n nodeReader) Get(ctx context.Context, _, name string) (runtime.Object, error) {
	all, err := n.list(ctx, labels.Everything())
	if err != nil {
		return nil, err
	}
	for i := range all {
		if all[i].Name == name {
			return &all[i], nil
		}
	}
	return nil, apierrors.NewNotFound(metricsv1beta1.Resource("nodes"), name)
}

func (n nodeReader) List(ctx context.Context, _ string, sel labels.Selector) (runtime.Object, error) {
	items, err := n.list(ctx, sel)
	if err != nil {
		return nil, err
	}
	return &metricsv1beta1.NodeMetricsList{
		TypeMeta: metav1.TypeMeta{APIVersion: metricsv1beta1.SchemeGroupVersion.String(), Kind: "NodeMetricsList"},
		Items:    items,
	}, nil
}

type podReader struct {
	s *Store
	l Labels
}

func (p podReader) list(ctx context.Context, namespace string, sel labels.Selector) ([]metricsv1beta1.PodMetrics, error) {
	pods, err := p.l.PodLabels(ctx, namespace)
	if err != nil {
		return nil, fmt.Errorf("read pods: %w", err)
	}
	reports, now := p.s.fresh()
	// A pod's latest report wins, should two nodes report one name (a
	// pod deleted on one and made again on another).
	latest := map[types.NamespacedName]metricsv1beta1.PodMetrics{}
	got := map[types.NamespacedName]time.Time{}
	for _, r := range reports {
		for _, pu := range r.u.Pods {
			key := types.NamespacedName{Namespace: pu.Namespace, Name: pu.Name}
			lbls, ok := pods[key]
			if !ok || len(pu.Containers) == 0 || !sel.Matches(labels.Set(lbls)) || got[key].After(r.got) {
				continue
			}
			ts, win := stamp(r)
			pm := metricsv1beta1.PodMetrics{
				TypeMeta:   metav1.TypeMeta{APIVersion: metricsv1beta1.SchemeGroupVersion.String(), Kind: "PodMetrics"},
				ObjectMeta: metav1.ObjectMeta{Namespace: pu.Namespace, Name: pu.Name, Labels: lbls, CreationTimestamp: metav1.NewTime(now.Truncate(time.Second))},
				Timestamp:  ts, Window: win,
			}
			for _, c := range pu.Containers {
				pm.Containers = append(pm.Containers, metricsv1beta1.ContainerMetrics{Name: c.Name, Usage: resourceList(c.ResourceUsage)})
			}
			latest[key], got[key] = pm, r.got
		}
	}
	out := make([]metricsv1beta1.PodMetrics, 0, len(latest))
	for _, pm := range latest {
		out = append(out, pm)
	}
	slices.SortFunc(out, func(a, b metricsv1beta1.PodMetrics) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
	})
	return out, nil
}

func (p podReader) Get(ctx context.Context, namespace, name string) (runtime.Object, error) {
	all, err := p.list(ctx, namespace, labels.Everything())
	if err != nil {
		return nil, err
	}
	for i := range all {
		if all[i].Name == name {
			return &all[i], nil
		}
	}
	return nil, apierrors.NewNotFound(metricsv1beta1.Resource("pods"), name)
}

func (p podReader) List(ctx context.Context, namespace string, sel labels.Selector) (runtime.Object, error) {
	items, err := p.list(ctx, namespace, sel)
	if err != nil {
		return nil, err
	}
	return &metricsv1beta1.PodMetricsList{
		TypeMeta: metav1.TypeMeta{APIVersion: metricsv1beta1.SchemeGroupVersion.String(), Kind: "PodMetricsList"},
		Items:    items,
	}, nil
}
