// Package serviceaccount gives every namespace what a pod's API client
// needs there, as upstream's serviceaccounts-controller and
// root-ca-cert-publisher do: the "default" ServiceAccount, and the
// kube-root-ca.crt ConfigMap holding the hub CA (key ca.crt) that
// in-cluster clients verify the API with. Both are re-created when deleted
// and the ConfigMap is repaired when edited. Plan is the pure core; the
// Controller is its client-go shell.
package serviceaccount

import (
	"maps"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Names and keys, as upstream has them.
const (
	// DefaultName is the service account every namespace has.
	DefaultName = "default"
	// RootCAName is the config map of the API's CA in every namespace,
	// and RootCAKey its one key.
	RootCAName = "kube-root-ca.crt"
	RootCAKey  = "ca.crt"
	// DescriptionAnnotation says what RootCAName is for, with
	// rootCADescription.
	DescriptionAnnotation = "kubernetes.io/description"
	rootCADescription     = "Contains a CA bundle that can be used to verify the kube-apiserver when using internal endpoints such as the internal service IP or kubernetes.default.svc. " +
		"No other usage is guaranteed across distributions of Kubernetes clusters."
)

// Plan is what one namespace needs; nil fields need nothing.
type Plan struct {
	// CreateServiceAccount is the default service account to create.
	CreateServiceAccount *corev1.ServiceAccount
	// CreateRootCA is the config map to create, and UpdateRootCA the
	// repaired copy of the one that exists, to update.
	CreateRootCA *corev1.ConfigMap
	UpdateRootCA *corev1.ConfigMap
}

// Empty reports whether p needs nothing.
func (p Plan) Empty() bool {
	return p.CreateServiceAccount == nil && p.CreateRootCA == nil && p.UpdateRootCA == nil
}

// Decide returns what namespace ns needs given its default service
// account sa and its config map cm as they are (nil when missing), for a
// hub whose CA is caPEM. A namespace that is gone (nil) or not Active
// needs nothing: creating in a terminating namespace is refused, and its
// contents are going anyway. A config map whose data is not exactly
// {ca.crt: caPEM}, or lacks the description, is repaired, as upstream's
// publisher does; its other metadata is kept. Decide does not modify its
// arguments. No I/O.
func Decide(ns *corev1.Namespace, sa *corev1.ServiceAccount, cm *corev1.ConfigMap, caPEM []byte) Plan {
	var p Plan
	if ns == nil || ns.DeletionTimestamp != nil || (ns.Status.Phase != "" && ns.Status.Phase != corev1.NamespaceActive) {
		return p
	}
	if sa == nil {
		p.CreateServiceAccount = &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: DefaultName, Namespace: ns.Name}}
	}
	data := map[string]string{RootCAKey: string(caPEM)}
	switch {
	case cm == nil:
		p.CreateRootCA = &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: RootCAName, Namespace: ns.Name, Annotations: map[string]string{DescriptionAnnotation: rootCADescription}},
			Data:       data,
		}
	case !maps.Equal(cm.Data, data) || cm.Annotations[DescriptionAnnotation] == "":
		fixed := cm.DeepCopy()
		fixed.Data = data
		if fixed.Annotations == nil {
			fixed.Annotations = map[string]string{}
		}
		fixed.Annotations[DescriptionAnnotation] = rootCADescription
		p.UpdateRootCA = fixed
	}
	return p
}
