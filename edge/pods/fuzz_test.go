package pods

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// maxFuzzPod bounds the encoded pods the fuzzer decodes, as the agent's
// checkpoint bounds its objects.
const maxFuzzPod = 64 << 10

// FuzzPodLifecycle: whatever a pod's spec says, planning, running it on
// the fake runtime, observing the outcomes and computing its status never
// panics, and Plan stays pure (checkedPlan), through starts, exits, time
// passing and the pod's deletion.
func FuzzPodLifecycle(f *testing.F) {
	grace := int64(3)
	seeds := []*corev1.Pod{
		{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: "nginx"}}}},
		{Spec: corev1.PodSpec{
			RestartPolicy:                 corev1.RestartPolicyOnFailure,
			TerminationGracePeriodSeconds: &grace,
			InitContainers: []corev1.Container{
				{Name: "init", Image: "exit:0"},
				{Name: "side", Image: "nginx", RestartPolicy: new(corev1.ContainerRestartPolicyAlways), StartupProbe: &corev1.Probe{PeriodSeconds: 1}},
			},
			Containers: []corev1.Container{
				{Name: "a", Image: "crash:1", Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Mi")}}},
				{Name: "b", Image: "pullfail:x", ReadinessProbe: &corev1.Probe{InitialDelaySeconds: 5}, Env: []corev1.EnvVar{{Name: "X", ValueFrom: &corev1.EnvVarSource{}}}},
			},
			Volumes: []corev1.Volume{{Name: "v", VolumeSource: corev1.VolumeSource{ISCSI: &corev1.ISCSIVolumeSource{}}}},
		}},
		{Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever, HostNetwork: true, Containers: []corev1.Container{{Name: "", Image: ""}, {Name: "", Image: "exit:1"}}}},
	}
	for _, p := range seeds {
		b, err := p.Marshal()
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b, uint8(3))
	}
	f.Fuzz(func(t *testing.T, data []byte, steps uint8) {
		if len(data) > maxFuzzPod {
			return
		}
		var pod corev1.Pod
		if pod.Unmarshal(data) != nil {
			return
		}
		pod.ObjectMeta = metav1.ObjectMeta{Name: "fuzz", Namespace: "default", UID: types.UID("uid-fuzz")}
		d := newDriver()
		d.pods = []*corev1.Pod{&pod}
		for i := range int(steps % 8) {
			d.plan(t)
			d.now = d.now.Add(7 * time.Second)
			if i == 4 { // the hub deletes it
				now := metav1.NewTime(d.now)
				pod.DeletionTimestamp = &now
			}
		}
		d.plan(t)
	})
}
