package agent

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"

	"github.com/outpost-mesh/outpost/edge/objects"
	"github.com/outpost-mesh/outpost/edge/pods"
	"github.com/outpost-mesh/outpost/edge/runtime"
	"github.com/outpost-mesh/outpost/sync/wire"
)

// resolveEnv returns the whole environment of a container as kubelet
// builds it: the variables of envFrom, then those of env in order, literal
// values and valueFrom alike, so that with the runtime's rule (a later
// name overrides an earlier one) env overrides envFrom. It returns nil if
// there is none (or the pod has no such container). ConfigMaps and Secrets
// come from the checkpoint, so they resolve offline. A reference that
// cannot be resolved is an error wrapping pods.ErrContainerConfig.
func (a *Agent) resolveEnv(pod *corev1.Pod, container string) ([]runtime.EnvVar, error) {
	var c *corev1.Container
	for _, cs := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for i := range cs {
			if cs[i].Name == container {
				c = &cs[i]
			}
		}
	}
	if c == nil {
		return nil, nil
	}
	var out []runtime.EnvVar
	for _, from := range c.EnvFrom {
		switch {
		case from.ConfigMapRef != nil:
			data, err := a.configMap(pod.Namespace, from.ConfigMapRef.Name)
			if err != nil {
				if isOptional(from.ConfigMapRef.Optional) {
					continue
				}
				return nil, err
			}
			for k, v := range data {
				out = append(out, runtime.EnvVar{Name: from.Prefix + k, Value: v})
			}
		case from.SecretRef != nil:
			data, err := a.secret(pod.Namespace, from.SecretRef.Name)
			if err != nil {
				if isOptional(from.SecretRef.Optional) {
					continue
				}
				return nil, err
			}
			for k, v := range data {
				out = append(out, runtime.EnvVar{Name: from.Prefix + k, Value: string(v)})
			}
		}
	}
	for _, e := range c.Env {
		if e.ValueFrom == nil {
			out = append(out, runtime.EnvVar{Name: e.Name, Value: e.Value})
			continue
		}
		v, ok, err := a.envValue(pod, e.ValueFrom)
		if err != nil {
			return nil, err
		}
		if ok {
			out = append(out, runtime.EnvVar{Name: e.Name, Value: v})
		}
	}
	return out, nil
}

func isOptional(b *bool) bool { return b != nil && *b }

// envValue resolves one valueFrom; ok is false for an optional reference
// that is missing.
func (a *Agent) envValue(pod *corev1.Pod, src *corev1.EnvVarSource) (string, bool, error) {
	switch {
	case src.ConfigMapKeyRef != nil:
		ref := src.ConfigMapKeyRef
		data, err := a.configMap(pod.Namespace, ref.Name)
		if err != nil {
			return "", false, optionalErr(ref.Optional, err)
		}
		v, ok := data[ref.Key]
		if !ok {
			return "", false, optionalErr(ref.Optional, fmt.Errorf("%w: couldn't find key %s in ConfigMap %s/%s", pods.ErrContainerConfig, ref.Key, pod.Namespace, ref.Name))
		}
		return v, true, nil
	case src.SecretKeyRef != nil:
		ref := src.SecretKeyRef
		data, err := a.secret(pod.Namespace, ref.Name)
		if err != nil {
			return "", false, optionalErr(ref.Optional, err)
		}
		v, ok := data[ref.Key]
		if !ok {
			return "", false, optionalErr(ref.Optional, fmt.Errorf("%w: couldn't find key %s in Secret %s/%s", pods.ErrContainerConfig, ref.Key, pod.Namespace, ref.Name))
		}
		return string(v), true, nil
	case src.FieldRef != nil:
		switch src.FieldRef.FieldPath {
		case "metadata.name":
			return pod.Name, true, nil
		case "metadata.namespace":
			return pod.Namespace, true, nil
		case "metadata.uid":
			return string(pod.UID), true, nil
		case "spec.nodeName":
			return pod.Spec.NodeName, true, nil
		case "spec.serviceAccountName":
			return pod.Spec.ServiceAccountName, true, nil
		case "status.hostIP":
			return a.status.HostIP(), true, nil
		case "status.podIP":
			return pod.Status.PodIP, true, nil
		}
		return "", false, fmt.Errorf("%w: unsupported fieldPath %q", pods.ErrContainerConfig, src.FieldRef.FieldPath)
	}
	return "", false, fmt.Errorf("%w: unsupported env source", pods.ErrContainerConfig)
}

// optionalErr drops err for an optional reference.
func optionalErr(optional *bool, err error) error {
	if isOptional(optional) {
		return nil
	}
	return err
}

func (a *Agent) configMap(ns, name string) (map[string]string, error) {
	o, ok, err := a.cp.Get(wire.Key{Resource: wire.ResourceConfigMaps, Namespace: ns, Name: name})
	if err != nil {
		a.dropCorrupt(err) // the hub sends it again
		return nil, err
	}
	if !ok {
		return nil, fmt.Errorf("%w: configmap %q not found", pods.ErrContainerConfig, name)
	}
	var cm corev1.ConfigMap
	if err := objects.Decode(o.Raw, o.Revision, &cm); err != nil {
		return nil, fmt.Errorf("%w: %w", pods.ErrContainerConfig, err)
	}
	return cm.Data, nil
}

func (a *Agent) secret(ns, name string) (map[string][]byte, error) {
	o, ok, err := a.cp.Get(wire.Key{Resource: wire.ResourceSecrets, Namespace: ns, Name: name})
	if err != nil {
		a.dropCorrupt(err) // the hub sends it again
		return nil, err
	}
	if !ok {
		return nil, fmt.Errorf("%w: secret %q not found", pods.ErrContainerConfig, name)
	}
	var s corev1.Secret
	if err := objects.Decode(o.Raw, o.Revision, &s); err != nil {
		return nil, fmt.Errorf("%w: %w", pods.ErrContainerConfig, err)
	}
	return s.Data, nil
}

// env is the agent as the pod workers' podworker.Env.
type env struct{ a *Agent }

func (e env) ResolveEnv(pod *corev1.Pod, container string) ([]runtime.EnvVar, error) {
	return e.a.resolveEnv(pod, container)
}
