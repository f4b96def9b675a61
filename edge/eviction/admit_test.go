package eviction

import (
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/outpost-mesh/outpost/edge/cgroups"
)

func TestAdmit(t *testing.T) {
	alloc := rl("cpu=2,memory=1Gi,ephemeral-storage=10Gi,pods=3,example.com/dongle=1")
	withInit := func(p *corev1.Pod, req string) *corev1.Pod {
		p.Spec.InitContainers = append(p.Spec.InitContainers, corev1.Container{Name: "init",
			Resources: corev1.ResourceRequirements{Requests: rl(req)}})
		return p
	}
	for _, tc := range []struct {
		name     string
		pod      *corev1.Pod
		admitted []*corev1.Pod
		reason   string
		message  string
	}{
		{name: "empty node", pod: pod("a", "cpu=1,memory=512Mi", "")},
		{name: "best effort fits while pods are free", pod: pod("a", "", ""),
			admitted: []*corev1.Pod{pod("x", "cpu=2,memory=1Gi", "")}},
		{name: "exactly full", pod: pod("a", "cpu=1", ""), admitted: []*corev1.Pod{pod("x", "cpu=1", "")}},
		{name: "cpu", pod: pod("a", "cpu=1500m", ""), admitted: []*corev1.Pod{pod("x", "cpu=1", "")},
			reason: "OutOfcpu", message: "Node didn't have enough resource: cpu, requested: 1500, used: 1000, capacity: 2000"},
		{name: "memory", pod: pod("a", "memory=600Mi", ""), admitted: []*corev1.Pod{pod("x", "memory=500Mi", "")},
			reason: "OutOfmemory", message: "Node didn't have enough resource: memory, requested: 629145600, used: 524288000, capacity: 1073741824"},
		{name: "memory from limits of a static pod", pod: pod("a", "", "memory=2Gi"),
			reason: "OutOfmemory", message: "Node didn't have enough resource: memory, requested: 2147483648, used: 0, capacity: 1073741824"},
		{name: "ephemeral storage", pod: pod("a", "ephemeral-storage=11Gi", ""),
			reason: "OutOfephemeral-storage", message: "Node didn't have enough resource: ephemeral-storage, requested: 11811160064, used: 0, capacity: 10737418240"},
		{name: "pods", pod: pod("a", "", ""), admitted: []*corev1.Pod{pod("x", "", ""), pod("y", "", ""), pod("z", "", "")},
			reason: "OutOfpods", message: "Node didn't have enough resource: pods, requested: 1, used: 3, capacity: 3"},
		{name: "pods before cpu", pod: pod("a", "cpu=3", ""), admitted: []*corev1.Pod{pod("x", "", ""), pod("y", "", ""), pod("z", "", "")},
			reason: "OutOfpods", message: "Node didn't have enough resource: pods, requested: 1, used: 3, capacity: 3"},
		{name: "cpu before memory", pod: pod("a", "cpu=3,memory=2Gi", ""),
			reason: "OutOfcpu", message: "Node didn't have enough resource: cpu, requested: 3000, used: 0, capacity: 2000"},
		{name: "init container larger than app", pod: withInit(pod("a", "cpu=500m", ""), "cpu=1500m"),
			admitted: []*corev1.Pod{pod("x", "cpu=1", "")},
			reason:   "OutOfcpu", message: "Node didn't have enough resource: cpu, requested: 1500, used: 1000, capacity: 2000"},
		{name: "init container smaller than app", pod: withInit(pod("a", "cpu=1", ""), "cpu=500m"),
			admitted: []*corev1.Pod{pod("x", "cpu=1", "")}},
		{name: "admitted pod's init container counts", pod: pod("a", "cpu=1", ""),
			admitted: []*corev1.Pod{withInit(pod("x", "cpu=100m", ""), "cpu=1500m")},
			reason:   "OutOfcpu", message: "Node didn't have enough resource: cpu, requested: 1000, used: 1500, capacity: 2000"},
		{name: "overhead", pod: func() *corev1.Pod {
			p := pod("a", "cpu=1", "")
			p.Spec.Overhead = rl("cpu=250m")
			return p
		}(), admitted: []*corev1.Pod{pod("x", "cpu=1", "")},
			reason: "OutOfcpu", message: "Node didn't have enough resource: cpu, requested: 1250, used: 1000, capacity: 2000"},
		{name: "extended resource", pod: pod("a", "example.com/dongle=2", ""),
			reason: "OutOfexample.com/dongle", message: "Node didn't have enough resource: example.com/dongle, requested: 2, used: 0, capacity: 1"},
		{name: "extended resource the node does not know", pod: pod("a", "example.com/gpu=1", "")},
		{name: "hugepages the node lacks", pod: pod("a", "hugepages-2Mi=2Mi", ""),
			reason: "OutOfhugepages-2Mi", message: "Node didn't have enough resource: hugepages-2Mi, requested: 2097152, used: 0, capacity: 0"},
	} {
		got := Admit(tc.pod, tc.admitted, alloc)
		want := AdmitResult{Admit: tc.reason == "", Reason: tc.reason, Message: tc.message}
		if got != want {
			t.Errorf("%s: Admit = %+v, want %+v", tc.name, got, want)
		}
	}
}

func TestAdmitUnderPressure(t *testing.T) {
	mem := []corev1.NodeConditionType{corev1.NodeMemoryPressure}
	disk := []corev1.NodeConditionType{corev1.NodeDiskPressure}
	both := []corev1.NodeConditionType{corev1.NodeDiskPressure, corev1.NodeMemoryPressure}
	tolerating := pod("t", "", "")
	tolerating.Spec.Tolerations = []corev1.Toleration{{Key: corev1.TaintNodeMemoryPressure, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}}
	static := pod("s", "", "")
	static.Annotations = map[string]string{cgroups.AnnotationConfigSource: "file"}
	for _, tc := range []struct {
		name     string
		pod      *corev1.Pod
		pressure []corev1.NodeConditionType
		message  string // "" when admitted
	}{
		{"no pressure", pod("a", "", ""), nil, ""},
		{"memory, burstable", pod("a", "memory=1Mi", ""), mem, ""},
		{"memory, best effort", pod("a", "", ""), mem, "The node had condition: [MemoryPressure]. "},
		{"memory, best effort tolerating", tolerating, mem, ""},
		{"disk, burstable", pod("a", "memory=1Mi", ""), disk, "The node had condition: [DiskPressure]. "},
		{"disk and memory, tolerating", tolerating, both, "The node had condition: [DiskPressure MemoryPressure]. "},
		{"disk, static", static, disk, ""},
	} {
		got := AdmitUnderPressure(tc.pod, tc.pressure)
		want := AdmitResult{Admit: true}
		if tc.message != "" {
			want = AdmitResult{Reason: "Evicted", Message: tc.message}
		}
		if got != want {
			t.Errorf("%s: AdmitUnderPressure = %+v, want %+v", tc.name, got, want)
		}
	}
}

func TestAllocatable(t *testing.T) {
	r := Readings{MemoryTotal: 4 << 30, Signals: map[Signal]Observation{SignalNodeFsAvailable: {Available: 1, Capacity: 100 << 30}}}
	capa := Capacity(4, r, 110)
	for name, want := range map[corev1.ResourceName]string{"cpu": "4", "memory": "4Gi", "ephemeral-storage": "100Gi", "pods": "110"} {
		if q := capa[name]; q.String() != want {
			t.Errorf("capacity %s = %s, want %s", name, q.String(), want)
		}
	}
	for _, tc := range []struct {
		name           string
		sys, kube      string
		thresholds     []Threshold
		cpu, mem, disk string
	}{
		// 10% is a float32, as kubelet's: 100Gi less 10737418400.
		{"defaults", "", "", DefaultThresholds(), "4", "3996Mi", "96636764000"},
		{"no thresholds", "", "", nil, "4", "4Gi", "100Gi"},
		{"reserved", "cpu=500m,memory=512Mi", "cpu=250m,memory=256Mi,ephemeral-storage=10Gi", DefaultThresholds(), "3250m", "3228Mi", "85899345760"},
		{"soft threshold not counted", "", "", []Threshold{{Signal: SignalMemoryAvailable, Value: DefaultThresholds()[0].Value, GracePeriod: 1}}, "4", "4Gi", "100Gi"},
		{"reserved beyond capacity", "cpu=8", "", nil, "0", "4Gi", "100Gi"},
	} {
		a := Allocatable(capa, rl(tc.sys), rl(tc.kube), tc.thresholds)
		for name, want := range map[corev1.ResourceName]string{"cpu": tc.cpu, "memory": tc.mem, "ephemeral-storage": tc.disk, "pods": "110"} {
			if q := a[name]; q.Cmp(mustQ(want)) != 0 {
				t.Errorf("%s: allocatable %s = %s, want %s", tc.name, name, q.String(), want)
			}
		}
	}
	if q := Reserved(capa, rl("memory=1Gi"), nil)[corev1.ResourceMemory]; q.String() != "3Gi" {
		t.Errorf("Reserved memory = %s, want 3Gi (no eviction threshold)", q.String())
	}
}
