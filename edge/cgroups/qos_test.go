package cgroups

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// rr builds requirements from "cpu=100m,memory=1Gi" style requests and
// limits; "" for none.
func rr(req, lim string) corev1.ResourceRequirements {
	return corev1.ResourceRequirements{Requests: rl(req), Limits: rl(lim)}
}

func rl(s string) corev1.ResourceList {
	if s == "" {
		return nil
	}
	out := corev1.ResourceList{}
	for _, kv := range splitComma(s) {
		for i := 0; i < len(kv); i++ {
			if kv[i] == '=' {
				out[corev1.ResourceName(kv[:i])] = resource.MustParse(kv[i+1:])
			}
		}
	}
	return out
}

func splitComma(s string) []string {
	var out []string
	start := 0
	for i := 0; i <= len(s); i++ {
		if i == len(s) || s[i] == ',' {
			out = append(out, s[start:i])
			start = i + 1
		}
	}
	return out
}

func podOf(cs []corev1.ResourceRequirements, inits ...corev1.ResourceRequirements) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "default", UID: "u-1"}}
	for i, r := range cs {
		p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: string(rune('a' + i)), Resources: r})
	}
	for i, r := range inits {
		p.Spec.InitContainers = append(p.Spec.InitContainers, corev1.Container{Name: "init" + string(rune('a'+i)), Resources: r})
	}
	return p
}

func reqs(r ...corev1.ResourceRequirements) []corev1.ResourceRequirements { return r }

func TestComputeQOS(t *testing.T) {
	const g, b, be = corev1.PodQOSGuaranteed, corev1.PodQOSBurstable, corev1.PodQOSBestEffort
	for _, tc := range []struct {
		name string
		pod  *corev1.Pod
		want corev1.PodQOSClass
	}{
		{"nothing", podOf(reqs(rr("", ""))), be},
		{"zero requests", podOf(reqs(rr("cpu=0,memory=0", ""))), be},
		{"only other resources", podOf(reqs(rr("ephemeral-storage=1Gi", "ephemeral-storage=1Gi"))), be},
		{"memory request", podOf(reqs(rr("memory=1Gi", ""))), b},
		{"equal", podOf(reqs(rr("cpu=1,memory=1Gi", "cpu=1,memory=1Gi"))), g},
		{"limits only default requests", podOf(reqs(rr("", "cpu=1,memory=1Gi"))), g},
		{"limits only with other request", podOf(reqs(rr("cpu=1", "cpu=1,memory=1Gi"))), g},
		{"request below limit", podOf(reqs(rr("cpu=500m,memory=1Gi", "cpu=1,memory=1Gi"))), b},
		{"cpu limit only", podOf(reqs(rr("", "cpu=1"))), b},
		{"two containers one without", podOf(reqs(rr("cpu=1,memory=1Gi", "cpu=1,memory=1Gi"), rr("", ""))), b},
		{"two guaranteed", podOf(reqs(rr("cpu=1,memory=1Gi", "cpu=1,memory=1Gi"), rr("", "cpu=2,memory=2Gi"))), g},
		{"init container without limits", podOf(reqs(rr("", "cpu=1,memory=1Gi")), rr("", "")), b},
		{"init container guaranteed", podOf(reqs(rr("", "cpu=1,memory=1Gi")), rr("", "cpu=2,memory=1Gi")), g},
		{"init container burstable", podOf(reqs(rr("", "cpu=1,memory=1Gi")), rr("cpu=100m", "cpu=2,memory=1Gi")), b},
		{"best effort app, requesting init", podOf(reqs(rr("", "")), rr("memory=10Mi", "")), b},
		{"equal in another unit", podOf(reqs(rr("cpu=1000m,memory=1024Mi", "cpu=1,memory=1Gi"))), g},
	} {
		if got := ComputeQOS(tc.pod); got != tc.want {
			t.Errorf("%s: ComputeQOS = %s, want %s", tc.name, got, tc.want)
		}
	}

	p := podOf(reqs(rr("", "")))
	r := rr("", "cpu=1,memory=1Gi")
	p.Spec.Resources = &r
	if got := ComputeQOS(p); got != g {
		t.Errorf("pod-level limits: ComputeQOS = %s, want Guaranteed", got)
	}
	p.Status.QOSClass = b
	if got := QOSClass(p); got != b {
		t.Errorf("QOSClass with status Burstable = %s, want the status's", got)
	}
}

func TestDefaultRequests(t *testing.T) {
	p := podOf(reqs(rr("cpu=100m", "cpu=1,memory=1Gi")), rr("", "memory=2Gi"))
	d := DefaultRequests(p)
	if d == p {
		t.Fatal("DefaultRequests returned the pod itself for a pod with missing requests")
	}
	if got := d.Spec.Containers[0].Resources.Requests; got.Cpu().MilliValue() != 100 || got.Memory().Value() != 1<<30 {
		t.Errorf("container requests = %v, want cpu 100m (kept) and memory 1Gi (the limit)", got)
	}
	if got := d.Spec.InitContainers[0].Resources.Requests.Memory().Value(); got != 2<<30 {
		t.Errorf("init container memory request = %d, want 2Gi", got)
	}
	if p.Spec.Containers[0].Resources.Requests.Memory().Value() != 0 {
		t.Error("DefaultRequests modified its argument")
	}
	full := podOf(reqs(rr("cpu=1", "cpu=1")))
	if DefaultRequests(full) != full {
		t.Error("DefaultRequests copied a pod with nothing missing")
	}
}

func TestIsCritical(t *testing.T) {
	prio := func(v int32) *int32 { return &v }
	for _, tc := range []struct {
		name string
		ann  map[string]string
		prio *int32
		want bool
	}{
		{"plain", nil, nil, false},
		{"api source", map[string]string{AnnotationConfigSource: "api"}, nil, false},
		{"static", map[string]string{AnnotationConfigSource: "file"}, nil, true},
		{"mirror", map[string]string{AnnotationConfigMirror: "x"}, nil, true},
		{"high priority", nil, prio(SystemCriticalPriority), true},
		{"below critical", nil, prio(SystemCriticalPriority - 1), false},
	} {
		p := podOf(nil)
		p.Annotations, p.Spec.Priority = tc.ann, tc.prio
		if got := IsCritical(p); got != tc.want {
			t.Errorf("%s: IsCritical = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestOOMScoreAdj(t *testing.T) {
	const capacity = 10 << 30 // 10 GiB
	always := corev1.ContainerRestartPolicyAlways
	for _, tc := range []struct {
		name string
		pod  *corev1.Pod
		c    int // container index; -1 for the first init container
		want int
	}{
		{"guaranteed", podOf(reqs(rr("", "cpu=1,memory=1Gi"))), 0, -997},
		{"best effort", podOf(reqs(rr("", ""))), 0, 1000},
		{"burstable 10%", podOf(reqs(rr("memory=1Gi", ""))), 0, 900},
		{"burstable 50%", podOf(reqs(rr("memory=5Gi", "memory=6Gi"))), 0, 500},
		{"burstable tiny request", podOf(reqs(rr("memory=1Ki", ""))), 0, 999},
		{"burstable no memory request", podOf(reqs(rr("cpu=100m", ""))), 0, 999},
		{"burstable over capacity", podOf(reqs(rr("memory=20Gi", ""))), 0, 3},
		{"burstable second container", podOf(reqs(rr("memory=1Gi", ""), rr("memory=2Gi", ""))), 1, 800},
		{"burstable limit stands for request", podOf(reqs(rr("cpu=1", "memory=3Gi"))), 0, 700},
		{"sidecar takes the least app score", func() *corev1.Pod {
			p := podOf(reqs(rr("memory=4Gi", ""), rr("memory=2Gi", "")), rr("memory=1Gi", ""))
			p.Spec.InitContainers[0].RestartPolicy = &always
			return p
		}(), -1, 800},
		{"sidecar keeps its lower score", func() *corev1.Pod {
			p := podOf(reqs(rr("memory=1Gi", "")), rr("memory=5Gi", ""))
			p.Spec.InitContainers[0].RestartPolicy = &always
			return p
		}(), -1, 500},
		{"node critical", func() *corev1.Pod {
			p := podOf(reqs(rr("", "")))
			p.Annotations = map[string]string{AnnotationConfigSource: "file"}
			p.Spec.PriorityClassName = "system-node-critical"
			return p
		}(), 0, -997},
		{"static but not node critical", func() *corev1.Pod {
			p := podOf(reqs(rr("", "")))
			p.Annotations = map[string]string{AnnotationConfigSource: "file"}
			return p
		}(), 0, 1000},
	} {
		c := &tc.pod.Spec.InitContainers
		var ctr *corev1.Container
		if tc.c < 0 {
			ctr = &(*c)[0]
		} else {
			ctr = &tc.pod.Spec.Containers[tc.c]
		}
		if got := OOMScoreAdj(tc.pod, ctr, capacity); got != tc.want {
			t.Errorf("%s: OOMScoreAdj = %d, want %d", tc.name, got, tc.want)
		}
	}
}

func TestCPUConversions(t *testing.T) {
	for _, tc := range []struct {
		milli  int64
		shares uint64
		quota  int64
		period int64
	}{
		{0, 2, 0, 0},
		{1, 2, 1000, 100000},
		{5, 5, 1000, 100000},
		{10, 10, 1000, 100000},
		{100, 102, 10000, 100000},
		{250, 256, 25000, 100000},
		{1000, 1024, 100000, 100000},
		{1500, 1536, 150000, 100000},
		{4000, 4096, 400000, 100000},
		{300000, 262144, 30000000, 100000},
	} {
		if got := MilliCPUToShares(tc.milli); got != tc.shares {
			t.Errorf("MilliCPUToShares(%d) = %d, want %d", tc.milli, got, tc.shares)
		}
		if q, p := MilliCPUToQuota(tc.milli); q != tc.quota || p != tc.period {
			t.Errorf("MilliCPUToQuota(%d) = %d, %d, want %d, %d", tc.milli, q, p, tc.quota, tc.period)
		}
	}
	for _, tc := range []struct{ shares, weight uint64 }{
		{0, 0}, {2, 1}, {1024, 39}, {102, 4}, {262144, 10000}, {1 << 20, 10000},
	} {
		if got := SharesToWeight(tc.shares); got != tc.weight {
			t.Errorf("SharesToWeight(%d) = %d, want %d", tc.shares, got, tc.weight)
		}
	}
}

func TestPodResources(t *testing.T) {
	withOverhead := func(p *corev1.Pod) *corev1.Pod {
		p.Spec.Overhead = rl("cpu=100m,memory=10Mi")
		return p
	}
	for _, tc := range []struct {
		name string
		pod  *corev1.Pod
		pids int64
		want Resources
	}{
		{"best effort", podOf(reqs(rr("", ""))), 0, Resources{CPUShares: 2}},
		{"best effort with pids", podOf(reqs(rr("", ""))), 1024, Resources{CPUShares: 2, PidsLimit: 1024}},
		{"guaranteed", podOf(reqs(rr("", "cpu=500m,memory=64Mi"))), 0,
			Resources{CPUShares: 512, CPUQuota: 50000, CPUPeriod: 100000, MemoryLimit: 64 << 20}},
		{"guaranteed two containers", podOf(reqs(rr("", "cpu=500m,memory=64Mi"), rr("", "cpu=1,memory=1Gi"))), 0,
			Resources{CPUShares: 1536, CPUQuota: 150000, CPUPeriod: 100000, MemoryLimit: 64<<20 + 1<<30}},
		{"burstable no limits", podOf(reqs(rr("cpu=250m,memory=100Mi", ""))), 0, Resources{CPUShares: 256}},
		{"burstable memory limits all", podOf(reqs(rr("cpu=100m", "memory=100Mi"), rr("", "memory=50Mi"))), 0,
			Resources{CPUShares: 102, MemoryLimit: 150 << 20}},
		{"burstable one container unlimited", podOf(reqs(rr("cpu=100m", "cpu=1,memory=100Mi"), rr("cpu=100m", ""))), 0,
			Resources{CPUShares: 204}},
		{"burstable cpu limits all", podOf(reqs(rr("cpu=100m", "cpu=1"))), 0,
			Resources{CPUShares: 102, CPUQuota: 100000, CPUPeriod: 100000}},
		{"init container larger", podOf(reqs(rr("", "cpu=500m,memory=64Mi")), rr("", "cpu=2,memory=1Gi")), 0,
			Resources{CPUShares: 2048, CPUQuota: 200000, CPUPeriod: 100000, MemoryLimit: 1 << 30}},
		{"init container without limits", podOf(reqs(rr("cpu=100m", "cpu=1,memory=64Mi")), rr("", "")), 0,
			Resources{CPUShares: 102}},
		{"overhead", withOverhead(podOf(reqs(rr("", "cpu=500m,memory=64Mi")))), 0,
			Resources{CPUShares: 614, CPUQuota: 60000, CPUPeriod: 100000, MemoryLimit: 74 << 20}},
	} {
		if got := PodResources(tc.pod, tc.pids); got != tc.want {
			t.Errorf("%s: PodResources = %+v, want %+v", tc.name, got, tc.want)
		}
	}
}

func TestBurstableShares(t *testing.T) {
	pods := []*corev1.Pod{
		podOf(reqs(rr("cpu=250m", ""))),                      // burstable
		podOf(reqs(rr("cpu=500m,memory=1Gi", "memory=2Gi"))), // burstable
		podOf(reqs(rr("", "cpu=1,memory=1Gi"))),              // guaranteed: not counted
		podOf(reqs(rr("", ""))),                              // best effort
	}
	if got, want := BurstableShares(pods), MilliCPUToShares(750); got != want {
		t.Errorf("BurstableShares = %d, want %d", got, want)
	}
	if got := BurstableShares(nil); got != MinShares {
		t.Errorf("BurstableShares(nil) = %d, want %d", got, MinShares)
	}
}
