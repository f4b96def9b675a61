package resourcequota

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/outpost-mesh/outpost/hub/quota"
)

// list parses "name=quantity" pairs into a ResourceList.
func list(pairs ...string) corev1.ResourceList {
	out := corev1.ResourceList{}
	for _, p := range pairs {
		n, q, _ := strings.Cut(p, "=")
		out[corev1.ResourceName(n)] = resource.MustParse(q)
	}
	return out
}

func rq(hard, statusHard, used corev1.ResourceList) *corev1.ResourceQuota {
	return &corev1.ResourceQuota{Spec: corev1.ResourceQuotaSpec{Hard: hard}, Status: corev1.ResourceQuotaStatus{Hard: statusHard, Used: used}}
}

func TestStatus(t *testing.T) {
	tests := []struct {
		name          string
		q             *corev1.ResourceQuota
		counted       corev1.ResourceList
		hard, wantUse corev1.ResourceList
	}{
		{"new quota", rq(list("pods=5", "cpu=1"), nil, nil), list("pods=2", "cpu=500m"), list("pods=5", "cpu=1"), list("pods=2", "cpu=500m")},
		{"uncounted resource keeps its used", rq(list("pods=5", "example.com/x=3"), nil, list("example.com/x=1")), list("pods=0"),
			list("pods=5", "example.com/x=3"), list("pods=0", "example.com/x=1")},
		{"limit removed", rq(list("pods=5"), list("pods=5", "cpu=1"), list("pods=1", "cpu=1")), list("pods=1"), list("pods=5"), list("pods=1")},
	}
	for _, tt := range tests {
		st := Status(tt.q, tt.counted)
		if !quota.Equal(st.Hard, tt.hard) || !quota.Equal(st.Used, tt.wantUse) {
			t.Errorf("%s: Status = hard %s used %s, want %s and %s", tt.name, quota.Format(st.Hard), quota.Format(st.Used), quota.Format(tt.hard), quota.Format(tt.wantUse))
		}
	}
}

func TestNeedsCount(t *testing.T) {
	tests := []struct {
		name string
		q    *corev1.ResourceQuota
		want bool
	}{
		{"new", rq(list("pods=5"), nil, nil), true},
		{"counted", rq(list("pods=5"), list("pods=5"), list("pods=1")), false},
		{"limit changed", rq(list("pods=6"), list("pods=5"), list("pods=1")), true},
		{"status hard written by hand", rq(list("cpu=1"), list("cpu=2"), list("cpu=0")), true},
		{"used lacks a resource", rq(list("pods=5", "cpu=1"), list("pods=5", "cpu=1"), list("pods=1")), true},
	}
	for _, tt := range tests {
		if got := NeedsCount(tt.q); got != tt.want {
			t.Errorf("%s: NeedsCount = %v, want %v", tt.name, got, tt.want)
		}
	}
}

func TestFrees(t *testing.T) {
	now := time.Now()
	running := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Resources: corev1.ResourceRequirements{Requests: list("cpu=1")}}}}}
	running.Status.Phase = corev1.PodRunning
	done := running.DeepCopy()
	done.Status.Phase = corev1.PodSucceeded
	labelled := running.DeepCopy()
	labelled.Labels = map[string]string{"a": "b"}
	np := &corev1.Service{Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort, Ports: []corev1.ServicePort{{Port: 80}}}}
	cip := &corev1.Service{Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP, Ports: []corev1.ServicePort{{Port: 80}}}}
	if !Frees(quota.Pods, running, done, now) {
		t.Error("Frees(pod finished) = false, want true")
	}
	if Frees(quota.Pods, running, labelled, now) {
		t.Error("Frees(pod labelled) = true, want false")
	}
	if !Frees(quota.Services, np, cip, now) {
		t.Error("Frees(NodePort to ClusterIP) = false, want true")
	}
	if Frees(quota.Services, cip, np, now) {
		t.Error("Frees(ClusterIP to NodePort) = true, want false")
	}
}
