package agent

import (
	"log/slog"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/outpost-mesh/outpost/edge/eviction"
)

// TestNodeResources: allocatable is capacity less --system-reserved and
// the hard eviction thresholds, and the pods' cgroup capacity less the
// reserve alone, as kubelet's.
func TestNodeResources(t *testing.T) {
	pc := DefaultPodsConfig()
	pc.SystemReserved = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("500m"), corev1.ResourceMemory: resource.MustParse("256Mi")}
	ec := eviction.DefaultConfig()
	a := &Agent{cfg: Config{DataDir: t.TempDir(), Capacity: Capacity{CPUMillis: 4000, MemoryBytes: 4 << 30, Pods: 110}, Pods: &pc, Eviction: &ec},
		log: slog.New(slog.DiscardHandler)}
	capacity, alloc, reserved := a.nodeResources()
	fs, err := eviction.StatFs(a.cfg.DataDir)
	if err != nil {
		t.Fatal(err)
	}
	eph := capacity[corev1.ResourceEphemeralStorage]
	if eph.Value() != fs.CapacityBytes {
		t.Errorf("ephemeral-storage capacity %s, want the data dir's file system, %d", eph.String(), fs.CapacityBytes)
	}
	for name, want := range map[corev1.ResourceName]int64{
		corev1.ResourceCPU:    3500,
		corev1.ResourceMemory: 4<<30 - 256<<20 - 100<<20,
		corev1.ResourcePods:   110,
		// nodefs.available<10%, as kubelet takes it (a float32 share)
		corev1.ResourceEphemeralStorage: fs.CapacityBytes - ec.Thresholds[1].Value.Of(fs.CapacityBytes).Value(),
	} {
		q := alloc[name]
		got := q.Value()
		if name == corev1.ResourceCPU {
			got = q.MilliValue()
		}
		if got != want {
			t.Errorf("allocatable %s = %d, want %d", name, got, want)
		}
	}
	if m := reserved[corev1.ResourceMemory]; m.Value() != 4<<30-256<<20 {
		t.Errorf("pods' cgroup memory = %s, want capacity less the reserve", m.String())
	}
}
