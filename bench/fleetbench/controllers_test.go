package fleetbench

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestPodClock(t *testing.T) {
	c := newPodClock()
	pod := func(name, node string, phase corev1.PodPhase) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.PodSpec{NodeName: node}, Status: corev1.PodStatus{Phase: phase}}
	}
	s := time.Second
	c.observe(pod("web-1", "", corev1.PodPending), 1*s)
	c.observe(pod("web-2", "", corev1.PodPending), 1*s)
	c.observe(pod("web-1", "n1", corev1.PodPending), 2*s)
	c.observe(pod("web-2", "n2", corev1.PodPending), 3*s)
	c.observe(pod("web-1", "n1", corev1.PodRunning), 4*s)
	c.observe(pod("web-1", "n1", corev1.PodRunning), 9*s) // not a new sighting
	c.observe(pod("agent-1", "n1", corev1.PodRunning), 5*s)
	seen, bound, running := c.count("web-")
	if seen != 2 || bound != 2 || running != 1 {
		t.Errorf("count(web-) = %d, %d, %d; want 2 seen, 2 bound, 1 Running", seen, bound, running)
	}
	var res WorkloadResult
	c.summarize("web-", 0, &res)
	if res.BoundPerSec != 1 { // 2 bound over the 2 s from 1 s to 3 s
		t.Errorf("BoundPerSec = %v, want 1", res.BoundPerSec)
	}
	if res.AllRunningSeconds != 4 || res.ToRunning.P50 != 3*s || res.ToBound.Max != 2*s {
		t.Errorf("summary = %+v; want all Running at 4s, made to Running 3s, to bound at most 2s", res)
	}
}

func TestEvaluateControllers(t *testing.T) {
	cfg := DefaultControllersConfig()
	res := &ControllersResult{Deployments: WorkloadResult{Pods: 10000, Bound: 10000, Running: 10000, BoundPerSec: 450, AllRunningSeconds: 41, HubPeakRSSBytes: 500 << 20}}
	for _, tg := range evaluateControllers(cfg, res) {
		if tg.Status != TargetMet {
			t.Errorf("target %s = %s (%s), want met", tg.Goal, tg.Status, tg.Detail)
		}
	}
	res.Deployments.Running = 9000
	missed := 0
	for _, tg := range evaluateControllers(cfg, res) {
		if tg.Status == TargetMissed {
			missed++
		}
	}
	if missed != 1 {
		t.Errorf("with 9,000 of 10,000 Running, %d targets missed, want 1 (all Running in time)", missed)
	}
	for _, tg := range evaluateControllers(QuickControllersConfig(), res) {
		if tg.Status != TargetNA {
			t.Errorf("quick run's target %s = %s, want n/a", tg.Goal, tg.Status)
		}
	}
}
