package apiserver

import "k8s.io/apimachinery/pkg/runtime/schema"

// The store key layout is the API server's: other parts of the hub that
// read the store directly (the sync feed, event expiry, the authorizer's
// lookups) take it from here rather than retyping it.

// KeyRoot is the store prefix under which the API server keeps every
// object, in one revision order.
const KeyRoot = "/registry/"

// KeyPrefix returns the store prefix of the objects of resource gr:
// KeyRoot, then the group and a slash unless it is the core group, then
// the resource and a slash. A namespaced object lies at
// KeyPrefix+namespace+"/"+name, a cluster-scoped one at KeyPrefix+name.
func KeyPrefix(gr schema.GroupResource) string {
	if gr.Group == "" {
		return KeyRoot + gr.Resource + "/"
	}
	return KeyRoot + gr.Group + "/" + gr.Resource + "/"
}
