package eviction

import (
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

func rl(s string) corev1.ResourceList {
	if s == "" {
		return nil
	}
	out := corev1.ResourceList{}
	for _, kv := range strings.Split(s, ",") {
		k, v, _ := strings.Cut(kv, "=")
		out[corev1.ResourceName(k)] = resource.MustParse(v)
	}
	return out
}

// pod returns a pod named name with one container "c" of requests req and
// limits lim.
func pod(name, req, lim string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID("uid-" + name)},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c",
			Resources: corev1.ResourceRequirements{Requests: rl(req), Limits: rl(lim)}}}},
	}
}

func withPriority(p *corev1.Pod, v int32) *corev1.Pod { p.Spec.Priority = &v; return p }

func mi(n int64) int64 { return n << 20 }

func mustQ(s string) resource.Quantity { return resource.MustParse(s) }
