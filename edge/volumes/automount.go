package volumes

import (
	"path"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// The automounted service account volume, as upstream's ServiceAccount
// admission adds it (kube-api-access-<random>): a projected volume of the
// pod's token, the cluster's CA (configMap kube-root-ca.crt, key ca.crt)
// and the pod's namespace, mounted read-only at AutomountPath in every
// init and regular container that has no mount there.
const (
	// AutomountPath is where containers find the automounted volume.
	AutomountPath = "/var/run/secrets/kubernetes.io/serviceaccount"
	// AutomountVolumeName names the automounted volume on disk. No
	// volume of the pod can have it: a pod with a volume named
	// kube-api-access-* gets no automounted one.
	AutomountVolumeName = "kube-api-access-auto"
	// automountPrefix begins the name of the volume upstream's admission
	// adds; a pod that has one (made by an API server that ran it) reads
	// its token from that volume's own projected source.
	automountPrefix = "kube-api-access-"
	// RootCAConfigMap is the configMap the automounted volume's ca.crt
	// comes from, in the pod's namespace.
	RootCAConfigMap = "kube-root-ca.crt"
	// automountTokenSeconds is the life upstream's admission asks for.
	automountTokenSeconds = 3607
)

// Automounts reports whether pod gets the automounted service account
// volume, as upstream's admission decides: the pod's
// automountServiceAccountToken if set, else its service account's
// (serviceAccount, nil when unset), else yes; never for a pod that
// already has a kube-api-access-* volume, nor when every init and regular
// container already mounts something at AutomountPath.
func Automounts(pod *corev1.Pod, serviceAccount *bool) bool {
	switch {
	case pod.Spec.AutomountServiceAccountToken != nil:
		if !*pod.Spec.AutomountServiceAccountToken {
			return false
		}
	case serviceAccount != nil && !*serviceAccount:
		return false
	}
	for i := range pod.Spec.Volumes {
		if strings.HasPrefix(pod.Spec.Volumes[i].Name, automountPrefix) {
			return false
		}
	}
	for _, cs := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for i := range cs {
			if !mountsAt(&cs[i], AutomountPath) {
				return true
			}
		}
	}
	return false
}

// mountsAt reports whether c has a volumeMount at p.
func mountsAt(c *corev1.Container, p string) bool {
	for _, vm := range c.VolumeMounts {
		if path.Clean("/"+vm.MountPath) == p {
			return true
		}
	}
	return false
}

// automountVolume returns the spec of the automounted volume.
func automountVolume() *corev1.Volume {
	mode := int32(defaultMode)
	exp := int64(automountTokenSeconds)
	return &corev1.Volume{
		Name: AutomountVolumeName,
		VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
			DefaultMode: &mode,
			Sources: []corev1.VolumeProjection{
				{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token", ExpirationSeconds: &exp}},
				{ConfigMap: &corev1.ConfigMapProjection{
					LocalObjectReference: corev1.LocalObjectReference{Name: RootCAConfigMap},
					Items:                []corev1.KeyToPath{{Key: "ca.crt", Path: "ca.crt"}},
				}},
				{DownwardAPI: &corev1.DownwardAPIProjection{Items: []corev1.DownwardAPIVolumeFile{{
					Path:     "namespace",
					FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "metadata.namespace"},
				}}}},
			},
		}},
	}
}
