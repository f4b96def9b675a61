package core

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// BenchmarkSchedule places 10,000 pods, one at a time as the scheduler
// does (each assumed before the next), on 1,000 nodes spread over 20
// sites, and reports pods/s.
func BenchmarkSchedule(b *testing.B) {
	const numNodes, numPods = 1000, 10000
	nodes := make([]*corev1.Node, numNodes)
	for i := range nodes {
		nodes[i] = &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("node-%04d", i), Labels: map[string]string{
				corev1.LabelHostname:        fmt.Sprintf("node-%04d", i),
				"topology.outpost.dev/site": fmt.Sprintf("site-%02d", i%20),
			}},
			Status: corev1.NodeStatus{
				Allocatable: corev1.ResourceList{
					corev1.ResourceCPU:    resource.MustParse("4"),
					corev1.ResourceMemory: resource.MustParse("16Gi"),
					corev1.ResourcePods:   resource.MustParse("110"),
				},
				Images: []corev1.ContainerImage{{Names: []string{"registry.local/app:v1"}, SizeBytes: 200 * mb}},
			},
		}
	}
	pods := make([]*corev1.Pod, numPods)
	for i := range pods {
		pods[i] = &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{
				Namespace: "default", Name: fmt.Sprintf("web-%05d", i), UID: types.UID(fmt.Sprintf("uid-%05d", i)),
				Labels: map[string]string{"app": fmt.Sprintf("web-%d", i/100)},
			},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{
				Name: "app", Image: "registry.local/app:v1",
				Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
					corev1.ResourceCPU:    resource.MustParse("100m"),
					corev1.ResourceMemory: resource.MustParse("128Mi"),
				}},
			}}},
		}
	}
	b.ResetTimer()
	var elapsed time.Duration
	for range b.N {
		b.StopTimer()
		cache := NewCache()
		for _, n := range nodes {
			cache.SetNode(n)
		}
		s := New(Options{Rand: rand.New(rand.NewPCG(1, 2))})
		b.StartTimer()
		start := time.Now()
		for _, p := range pods {
			res, err := s.Schedule(p, cache.Snapshot(nil))
			if err != nil {
				b.Fatal(err)
			}
			if err := cache.AssumePod(res.Info, res.Node); err != nil {
				b.Fatal(err)
			}
		}
		elapsed += time.Since(start)
	}
	b.ReportMetric(float64(numPods*b.N)/elapsed.Seconds(), "pods/s")
}
