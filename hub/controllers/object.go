package controllers

import "k8s.io/client-go/tools/cache"

// Object returns what an informer's notification obj carries, as T: obj
// itself, or, for a delete the watch missed and the relist found, the last
// state its tombstone (cache.DeletedFinalStateUnknown) holds. ok is false
// when it is not a T.
func Object[T any](obj any) (T, bool) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	v, ok := obj.(T)
	return v, ok
}
