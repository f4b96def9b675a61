package sandbox

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/outpost-mesh/outpost/edge/cgroups"
	"github.com/outpost-mesh/outpost/edge/runtime"
	"github.com/outpost-mesh/outpost/edge/volumes"
)

// recordingCgroups records the QoS shares set; its pod cgroups are
// nothing. A fake, for the sandbox's bookkeeping.
type recordingCgroups struct{ shares []uint64 }

func (c *recordingCgroups) PodCgroup(*corev1.Pod) string { return "" }
func (c *recordingCgroups) UpdateQoS(shares uint64) error {
	c.shares = append(c.shares, shares)
	return nil
}
func (c *recordingCgroups) EnsurePod(*corev1.Pod) error                { return nil }
func (c *recordingCgroups) RemovePod(context.Context, types.UID) error { return nil }
func (c *recordingCgroups) ListPods() ([]cgroups.PodCgroupInfo, error) { return nil, nil }

// countingVolumes counts the pods whose volumes were set up. A fake.
type countingVolumes struct{ setups map[string]int }

func (v *countingVolumes) Setup(_ context.Context, pod *corev1.Pod, _ volumes.SetupOptions) (*volumes.PodVolumes, error) {
	v.setups[string(pod.UID)]++
	return &volumes.PodVolumes{}, nil
}
func (v *countingVolumes) Teardown(context.Context, string) error             { return nil }
func (v *countingVolumes) Sweep(context.Context, func(uid string) bool) error { return nil }

// TestQoSShares: the burstable cgroup's shares follow the Burstable pods
// the sandbox knows of, from its refreshes and releases, set only when
// they change; and a pod readied before a restart (its directory there)
// has its volumes refreshed, one never readied not.
func TestQoSShares(t *testing.T) {
	dir := t.TempDir()
	cg := &recordingCgroups{}
	vols := &countingVolumes{setups: map[string]int{}}
	s, err := New(Config{Dir: filepath.Join(dir, "pods"), LogDir: filepath.Join(dir, "logs"), Volumes: vols, Cgroups: cg})
	if err != nil {
		t.Fatal(err)
	}
	burstable := func(uid, cpu string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: uid, Namespace: "default", UID: types.UID(uid)}, Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name: "main", Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu)}},
		}}}}
	}
	bestEffort := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "be", Namespace: "default", UID: "be"}, Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "main"}}}}
	ctx := context.Background()
	if err := os.MkdirAll(s.podDir("a"), 0o755); err != nil { // readied before a restart
		t.Fatal(err)
	}
	for _, p := range []*corev1.Pod{burstable("a", "500m"), burstable("b", "250m"), bestEffort, burstable("a", "500m")} {
		if err := s.Refresh(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Release(ctx, runtime.PodRef{UID: "b", Namespace: "default", Name: "b"}); err != nil {
		t.Fatal(err)
	}
	want := []uint64{cgroups.MilliCPUToShares(500), cgroups.MilliCPUToShares(750), cgroups.MilliCPUToShares(500)}
	if !slices.Equal(cg.shares, want) {
		t.Errorf("burstable shares set %v, want %v: once per change", cg.shares, want)
	}
	if vols.setups["a"] != 2 || vols.setups["b"] != 0 || vols.setups["be"] != 0 {
		t.Errorf("volume setups %v: want a's twice (readied before), no other", vols.setups)
	}
}
