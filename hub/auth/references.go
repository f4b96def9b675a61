package auth

import (
	corev1 "k8s.io/api/core/v1"
)

// references reports whether pod refers to the object name of resource
// (secrets, configmaps, serviceaccounts or persistentvolumeclaims) in its
// own namespace, as upstream's node graph records it.
func references(pod *corev1.Pod, resource, name string) bool {
	found := false
	visit := func(n string) bool {
		if n == name {
			found = true
		}
		return !found
	}
	switch resource {
	case "secrets":
		visitSecretNames(pod, visit)
	case "configmaps":
		visitConfigMapNames(pod, visit)
	case "persistentvolumeclaims":
		visitClaimNames(pod, visit)
	case "serviceaccounts":
		found = pod.Spec.ServiceAccountName != "" && pod.Spec.ServiceAccountName == name
	}
	return found
}

// containerEnvs calls visit with the env and envFrom of each container of
// pod (init, regular and ephemeral) until visit returns false.
func containerEnvs(pod *corev1.Pod, visit func(env []corev1.EnvVar, from []corev1.EnvFromSource) bool) {
	for i := range pod.Spec.InitContainers {
		if !visit(pod.Spec.InitContainers[i].Env, pod.Spec.InitContainers[i].EnvFrom) {
			return
		}
	}
	for i := range pod.Spec.Containers {
		if !visit(pod.Spec.Containers[i].Env, pod.Spec.Containers[i].EnvFrom) {
			return
		}
	}
	for i := range pod.Spec.EphemeralContainers {
		c := &pod.Spec.EphemeralContainers[i].EphemeralContainerCommon
		if !visit(c.Env, c.EnvFrom) {
			return
		}
	}
}

// visitSecretNames calls visit with the name of each secret pod refers to
// until visit returns false (upstream's VisitPodSecretNames).
func visitSecretNames(pod *corev1.Pod, visit func(string) bool) {
	for _, s := range pod.Spec.ImagePullSecrets {
		if !visit(s.Name) {
			return
		}
	}
	more := true
	containerEnvs(pod, func(env []corev1.EnvVar, from []corev1.EnvFromSource) bool {
		for _, f := range from {
			if f.SecretRef != nil && !visit(f.SecretRef.Name) {
				more = false
				return false
			}
		}
		for _, e := range env {
			if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil && !visit(e.ValueFrom.SecretKeyRef.Name) {
				more = false
				return false
			}
		}
		return true
	})
	if !more {
		return
	}
	for i := range pod.Spec.Volumes {
		v := &pod.Spec.Volumes[i].VolumeSource
		var names []string
		switch {
		case v.Secret != nil:
			names = append(names, v.Secret.SecretName)
		case v.Projected != nil:
			for _, s := range v.Projected.Sources {
				if s.Secret != nil {
					names = append(names, s.Secret.Name)
				}
			}
		case v.AzureFile != nil:
			names = append(names, v.AzureFile.SecretName)
		case v.CephFS != nil && v.CephFS.SecretRef != nil:
			names = append(names, v.CephFS.SecretRef.Name)
		case v.Cinder != nil && v.Cinder.SecretRef != nil:
			names = append(names, v.Cinder.SecretRef.Name)
		case v.FlexVolume != nil && v.FlexVolume.SecretRef != nil:
			names = append(names, v.FlexVolume.SecretRef.Name)
		case v.RBD != nil && v.RBD.SecretRef != nil:
			names = append(names, v.RBD.SecretRef.Name)
		case v.ScaleIO != nil && v.ScaleIO.SecretRef != nil:
			names = append(names, v.ScaleIO.SecretRef.Name)
		case v.ISCSI != nil && v.ISCSI.SecretRef != nil:
			names = append(names, v.ISCSI.SecretRef.Name)
		case v.StorageOS != nil && v.StorageOS.SecretRef != nil:
			names = append(names, v.StorageOS.SecretRef.Name)
		case v.CSI != nil && v.CSI.NodePublishSecretRef != nil:
			names = append(names, v.CSI.NodePublishSecretRef.Name)
		}
		for _, n := range names {
			if !visit(n) {
				return
			}
		}
	}
}

// visitConfigMapNames calls visit with the name of each config map pod
// refers to until visit returns false (upstream's VisitPodConfigmapNames).
func visitConfigMapNames(pod *corev1.Pod, visit func(string) bool) {
	more := true
	containerEnvs(pod, func(env []corev1.EnvVar, from []corev1.EnvFromSource) bool {
		for _, f := range from {
			if f.ConfigMapRef != nil && !visit(f.ConfigMapRef.Name) {
				more = false
				return false
			}
		}
		for _, e := range env {
			if e.ValueFrom != nil && e.ValueFrom.ConfigMapKeyRef != nil && !visit(e.ValueFrom.ConfigMapKeyRef.Name) {
				more = false
				return false
			}
		}
		return true
	})
	if !more {
		return
	}
	for i := range pod.Spec.Volumes {
		v := &pod.Spec.Volumes[i].VolumeSource
		switch {
		case v.ConfigMap != nil:
			if !visit(v.ConfigMap.Name) {
				return
			}
		case v.Projected != nil:
			for _, s := range v.Projected.Sources {
				if s.ConfigMap != nil && !visit(s.ConfigMap.Name) {
					return
				}
			}
		}
	}
}

// visitClaimNames calls visit with the name of each persistent volume claim
// pod uses, generic ephemeral volumes' included (<pod>-<volume>), until
// visit returns false.
func visitClaimNames(pod *corev1.Pod, visit func(string) bool) {
	for i := range pod.Spec.Volumes {
		v := &pod.Spec.Volumes[i]
		switch {
		case v.PersistentVolumeClaim != nil:
			if !visit(v.PersistentVolumeClaim.ClaimName) {
				return
			}
		case v.Ephemeral != nil:
			if !visit(pod.Name + "-" + v.Name) {
				return
			}
		}
	}
}
