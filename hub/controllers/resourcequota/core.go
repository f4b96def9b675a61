// Package resourcequota is upstream's resource quota controller: it keeps
// every ResourceQuota's status, hard as its spec says and used as counted
// from the objects of its namespace (see hub/quota), written only when
// it changed. The ResourceQuota admission plugin charges creates as they
// are admitted; this controller gives back what deletions free, counts a
// quota when it is created or its limits change, and recounts them all
// every Resync, as upstream's does.
package resourcequota

import (
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/outpost-mesh/outpost/hub/quota"
)

// Status returns the status q should have once counted: hard as its spec
// says, used as counted where counted has it and as q's status had it
// otherwise (a resource no evaluator here counts), for the resources of
// hard only. It does not keep or modify q or counted.
func Status(q *corev1.ResourceQuota, counted corev1.ResourceList) corev1.ResourceQuotaStatus {
	hard := quota.Add(corev1.ResourceList{}, q.Spec.Hard)
	used := quota.Add(corev1.ResourceList{}, q.Status.Used)
	for name, v := range counted {
		used[name] = v.DeepCopy()
	}
	return corev1.ResourceQuotaStatus{Hard: hard, Used: quota.Mask(used, quota.Names(hard))}
}

// NeedsCount reports whether q's status does not yet say what its spec
// asks for: hard differs from spec.hard, or a resource of it has no used.
// Such a quota is counted at once; the increments admission writes to
// used are not recounted (the objects they charge for may not have
// reached this controller's caches yet).
func NeedsCount(q *corev1.ResourceQuota) bool {
	if !quota.Equal(q.Spec.Hard, q.Status.Hard) {
		return true
	}
	for name := range q.Spec.Hard {
		if _, ok := q.Status.Used[name]; !ok {
			return true
		}
	}
	return false
}

// Frees reports whether an update of an object of gr from old to cur
// lowers what it uses of some quota resource (a pod that finished, a
// service that is no longer a NodePort), so that its quotas are to be
// recounted to give that back.
func Frees(gr schema.GroupResource, old, cur runtime.Object, now time.Time) bool {
	before, err := quota.Usage(gr, old, now)
	if err != nil {
		return false
	}
	after, err := quota.Usage(gr, cur, now)
	if err != nil {
		return false
	}
	for name, q := range before {
		if a, ok := after[name]; !ok || a.Cmp(q) < 0 {
			return true
		}
	}
	return false
}
