// Package deployment is the Deployment controller, as upstream's in
// kube-controller-manager: it rolls a Deployment's pod template out
// through ReplicaSets (RollingUpdate within maxSurge and maxUnavailable,
// or Recreate), scales them in proportion, keeps the revision history
// kubectl rollout reads, and reports status with the Progressing and
// Available conditions. The decisions (the template hash, which
// ReplicaSet to scale to what, which to delete, the status) are pure
// functions of this package; Controller is the client-go shell.
package deployment

import appsv1 "k8s.io/api/apps/v1"

// Kind is the group, version and kind ReplicaSets' controller references
// name.
var Kind = appsv1.SchemeGroupVersion.WithKind("Deployment")
