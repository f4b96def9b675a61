// Package podrefs lists the objects a pod refers to in its own namespace:
// the secrets, config maps, service account and persistent volume claims
// that the node running it needs. The hub's node authorizer lets a node
// read them, and the sync view sends them to the node; one list keeps the
// two in step, as upstream's node graph and kubelet's managers are.
package podrefs

import (
	corev1 "k8s.io/api/core/v1"
)

// The resources a pod refers to, as in API paths.
const (
	Secrets                = "secrets"
	ConfigMaps             = "configmaps"
	ServiceAccounts        = "serviceaccounts"
	PersistentVolumeClaims = "persistentvolumeclaims"
)

// RootCAConfigMap is the config map of each namespace that holds the
// hub's CA (key ca.crt), which the automounted service account volume
// carries.
const RootCAConfigMap = "kube-root-ca.crt"

// DefaultServiceAccount is the service account of a pod that names none,
// as the ServiceAccount admission plugin sets it upstream.
const DefaultServiceAccount = "default"

// Visit calls fn with each object pod refers to, by resource (one of the
// constants above) and name, until fn returns false. A name may come more
// than once; empty names are left out. The objects are:
//   - secrets: image pull secrets, env and envFrom of every container
//     (init, regular and ephemeral), secret and projected volumes, and the
//     secret references of volume plugins (CSI, CephFS, RBD and others),
//     as upstream's VisitPodSecretNames;
//   - config maps: env, envFrom, config map and projected volumes, and
//     RootCAConfigMap unless the pod opts out of the automounted service
//     account token (upstream's admission adds the kube-api-access
//     volume that names it; here the node adds that volume itself);
//   - the service account: serviceAccountName, else the deprecated
//     serviceAccount, else "default";
//   - persistent volume claims: claim volumes, and the claim of each
//     generic ephemeral volume (<pod>-<volume>).
func Visit(pod *corev1.Pod, fn func(resource, name string) bool) {
	v := visitor{fn: fn}
	_ = v.secrets(pod) && v.configMaps(pod) && v.serviceAccount(pod) && v.claims(pod)
}

type visitor struct {
	fn func(resource, name string) bool
}

// visit calls fn unless name is empty, and reports whether to go on.
func (v visitor) visit(resource, name string) bool {
	return name == "" || v.fn(resource, name)
}

// envRef picks, from an envFrom source or an env variable, the name of the
// object of one resource it refers to ("" for none). One of from and env
// is nil.
type envRef func(from *corev1.EnvFromSource, env *corev1.EnvVar) string

func secretEnv(from *corev1.EnvFromSource, env *corev1.EnvVar) string {
	switch {
	case from != nil && from.SecretRef != nil:
		return from.SecretRef.Name
	case env != nil && env.ValueFrom != nil && env.ValueFrom.SecretKeyRef != nil:
		return env.ValueFrom.SecretKeyRef.Name
	}
	return ""
}

func configMapEnv(from *corev1.EnvFromSource, env *corev1.EnvVar) string {
	switch {
	case from != nil && from.ConfigMapRef != nil:
		return from.ConfigMapRef.Name
	case env != nil && env.ValueFrom != nil && env.ValueFrom.ConfigMapKeyRef != nil:
		return env.ValueFrom.ConfigMapKeyRef.Name
	}
	return ""
}

// envs visits the objects of resource that pick finds in the envFrom and
// env of each container of pod (init, regular and ephemeral), and reports
// whether to go on.
func (v visitor) envs(pod *corev1.Pod, resource string, pick envRef) bool {
	container := func(env []corev1.EnvVar, from []corev1.EnvFromSource) bool {
		for i := range from {
			if !v.visit(resource, pick(&from[i], nil)) {
				return false
			}
		}
		for i := range env {
			if !v.visit(resource, pick(nil, &env[i])) {
				return false
			}
		}
		return true
	}
	for i := range pod.Spec.InitContainers {
		if !container(pod.Spec.InitContainers[i].Env, pod.Spec.InitContainers[i].EnvFrom) {
			return false
		}
	}
	for i := range pod.Spec.Containers {
		if !container(pod.Spec.Containers[i].Env, pod.Spec.Containers[i].EnvFrom) {
			return false
		}
	}
	for i := range pod.Spec.EphemeralContainers {
		c := &pod.Spec.EphemeralContainers[i].EphemeralContainerCommon
		if !container(c.Env, c.EnvFrom) {
			return false
		}
	}
	return true
}

func (v visitor) secrets(pod *corev1.Pod) bool {
	for _, s := range pod.Spec.ImagePullSecrets {
		if !v.visit(Secrets, s.Name) {
			return false
		}
	}
	if !v.envs(pod, Secrets, secretEnv) {
		return false
	}
	for i := range pod.Spec.Volumes {
		for _, name := range volumeSecrets(&pod.Spec.Volumes[i].VolumeSource) {
			if !v.visit(Secrets, name) {
				return false
			}
		}
	}
	return true
}

// volumeSecrets returns the names of the secrets volume source s refers to.
func volumeSecrets(s *corev1.VolumeSource) []string {
	switch {
	case s.Secret != nil:
		return []string{s.Secret.SecretName}
	case s.Projected != nil:
		var names []string
		for _, p := range s.Projected.Sources {
			if p.Secret != nil {
				names = append(names, p.Secret.Name)
			}
		}
		return names
	case s.AzureFile != nil:
		return []string{s.AzureFile.SecretName}
	case s.CephFS != nil && s.CephFS.SecretRef != nil:
		return []string{s.CephFS.SecretRef.Name}
	case s.Cinder != nil && s.Cinder.SecretRef != nil:
		return []string{s.Cinder.SecretRef.Name}
	case s.FlexVolume != nil && s.FlexVolume.SecretRef != nil:
		return []string{s.FlexVolume.SecretRef.Name}
	case s.RBD != nil && s.RBD.SecretRef != nil:
		return []string{s.RBD.SecretRef.Name}
	case s.ScaleIO != nil && s.ScaleIO.SecretRef != nil:
		return []string{s.ScaleIO.SecretRef.Name}
	case s.ISCSI != nil && s.ISCSI.SecretRef != nil:
		return []string{s.ISCSI.SecretRef.Name}
	case s.StorageOS != nil && s.StorageOS.SecretRef != nil:
		return []string{s.StorageOS.SecretRef.Name}
	case s.CSI != nil && s.CSI.NodePublishSecretRef != nil:
		return []string{s.CSI.NodePublishSecretRef.Name}
	}
	return nil
}

func (v visitor) configMaps(pod *corev1.Pod) bool {
	if !v.envs(pod, ConfigMaps, configMapEnv) {
		return false
	}
	for i := range pod.Spec.Volumes {
		s := &pod.Spec.Volumes[i].VolumeSource
		switch {
		case s.ConfigMap != nil:
			if !v.visit(ConfigMaps, s.ConfigMap.Name) {
				return false
			}
		case s.Projected != nil:
			for _, p := range s.Projected.Sources {
				if p.ConfigMap != nil && !v.visit(ConfigMaps, p.ConfigMap.Name) {
					return false
				}
			}
		}
	}
	if a := pod.Spec.AutomountServiceAccountToken; a == nil || *a {
		return v.visit(ConfigMaps, RootCAConfigMap)
	}
	return true
}

func (v visitor) serviceAccount(pod *corev1.Pod) bool {
	return v.visit(ServiceAccounts, serviceAccountName(&pod.Spec))
}

// serviceAccountName returns the name of the service account a pod with
// spec runs as.
func serviceAccountName(spec *corev1.PodSpec) string {
	switch {
	case spec.ServiceAccountName != "":
		return spec.ServiceAccountName
	case spec.DeprecatedServiceAccount != "":
		return spec.DeprecatedServiceAccount
	}
	return DefaultServiceAccount
}

func (v visitor) claims(pod *corev1.Pod) bool {
	for i := range pod.Spec.Volumes {
		vol := &pod.Spec.Volumes[i]
		switch {
		case vol.PersistentVolumeClaim != nil:
			if !v.visit(PersistentVolumeClaims, vol.PersistentVolumeClaim.ClaimName) {
				return false
			}
		case vol.Ephemeral != nil:
			if !v.visit(PersistentVolumeClaims, pod.Name+"-"+vol.Name) {
				return false
			}
		}
	}
	return true
}
