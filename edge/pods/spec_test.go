package pods

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// TestContainerSpecSecurity: the pod's and the container's security
// contexts, the container's winning, reach the runtime's spec.
func TestContainerSpecSecurity(t *testing.T) {
	pod := &corev1.Pod{Spec: corev1.PodSpec{
		SecurityContext: &corev1.PodSecurityContext{
			RunAsUser: new(int64(1000)), RunAsNonRoot: new(true), FSGroup: new(int64(2000)),
			SupplementalGroups: []int64{3000},
			SeccompProfile:     &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
		},
	}}
	c := &corev1.Container{Name: "main", Image: "busybox:1", SecurityContext: &corev1.SecurityContext{
		RunAsUser:                new(int64(1001)),
		Capabilities:             &corev1.Capabilities{Add: []corev1.Capability{"NET_ADMIN"}, Drop: []corev1.Capability{"ALL"}},
		AllowPrivilegeEscalation: new(false),
		ReadOnlyRootFilesystem:   new(true),
	}, Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("500m")}}}
	s := containerSpec(pod, c)
	switch {
	case s.RunAsUser == nil || *s.RunAsUser != 1001:
		t.Errorf("RunAsUser = %v, want the container's 1001", s.RunAsUser)
	case !s.RunAsNonRoot:
		t.Error("RunAsNonRoot from the pod is lost")
	case !slices.Equal(s.SupplementalGroups, []int64{2000, 3000}):
		t.Errorf("SupplementalGroups = %v, want fsGroup then the pod's", s.SupplementalGroups)
	case !slices.Equal(s.CapAdd, []string{"NET_ADMIN"}) || !slices.Equal(s.CapDrop, []string{"ALL"}):
		t.Errorf("caps add %v drop %v", s.CapAdd, s.CapDrop)
	case !s.NoNewPrivileges || !s.ReadOnlyRootFilesystem || !s.SeccompRuntimeDefault:
		t.Errorf("NoNewPrivileges %v ReadOnlyRootFilesystem %v SeccompRuntimeDefault %v, want all set", s.NoNewPrivileges, s.ReadOnlyRootFilesystem, s.SeccompRuntimeDefault)
	case s.CPURequestMilli != 500 || s.CPULimitMilli != 500:
		t.Errorf("cpu request %d limit %d, want the limit for both", s.CPURequestMilli, s.CPULimitMilli)
	}
	c.SecurityContext.SeccompProfile = &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeUnconfined}
	if containerSpec(pod, c).SeccompRuntimeDefault {
		t.Error("the container's Unconfined seccomp profile does not override the pod's RuntimeDefault")
	}
}
