package auth

import (
	corev1 "k8s.io/api/core/v1"

	"github.com/outpost-mesh/outpost/internal/podrefs"
)

// references reports whether pod refers to the object name of resource
// (secrets, configmaps, serviceaccounts or persistentvolumeclaims) in its
// own namespace, as upstream's node graph records it; the sync view sends
// a node the same objects.
func references(pod *corev1.Pod, resource, name string) bool {
	found := false
	podrefs.Visit(pod, func(r, n string) bool {
		found = r == resource && n == name
		return !found
	})
	return found
}
