package replicaset

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
)

// PodIndex names the index of the shared pod informer that files each
// pod under its controller's uid, or, for a pod without a controller,
// under its namespace's orphan key, so that a controller finds its pods
// and the orphans it may adopt without scanning the namespace (upstream
// keeps the same index).
const PodIndex = "outpost.dev/controller-uid"

// orphanKey is the PodIndex key of the orphans of namespace ns; uids never
// contain a slash.
func orphanKey(ns string) string { return "orphan/" + ns }

// AddPodIndex adds PodIndex to a shared informer of pods, or of any
// objects with ownerReferences, unless it has it already. Call it before
// the informer starts.
func AddPodIndex(inf cache.SharedIndexInformer) error {
	if _, ok := inf.GetIndexer().GetIndexers()[PodIndex]; ok {
		return nil
	}
	return inf.AddIndexers(cache.Indexers{PodIndex: func(obj any) ([]string, error) {
		m, ok := obj.(metav1.Object)
		if !ok {
			return nil, nil
		}
		if ref := metav1.GetControllerOfNoCopy(m); ref != nil {
			return []string{string(ref.UID)}, nil
		}
		return []string{orphanKey(m.GetNamespace())}, nil
	}})
}

// ByController returns the objects of inf, which has PodIndex, that the
// object with uid controls.
func ByController(inf cache.SharedIndexInformer, uid string) ([]any, error) {
	return inf.GetIndexer().ByIndex(PodIndex, uid)
}
