package garbagecollector

import (
	"fmt"
	"strings"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
)

// ignored are the resources the collector never watches, as upstream's
// DefaultIgnoredResources: events are many and own nothing.
var ignored = map[schema.GroupResource]bool{
	{Group: "", Resource: "events"}:              true,
	{Group: "events.k8s.io", Resource: "events"}: true,
}

// resource is one resource the collector watches.
type resource struct {
	gvr        schema.GroupVersionResource
	kind       string
	namespaced bool
}

// mapper maps the kinds ownerReferences name to resources, from
// discovery. It is safe for concurrent use.
type mapper struct {
	mu     sync.RWMutex
	byGVK  map[schema.GroupVersionKind]resource
	byKind map[schema.GroupKind]resource // the preferred version of each kind
}

// errUnknownKind is returned by mapper.lookup for a kind discovery did not
// list; it may appear later (a new resource), so callers retry.
type errUnknownKind struct{ apiVersion, kind string }

func (e *errUnknownKind) Error() string {
	return fmt.Sprintf("no resource of kind %q in %q is served", e.kind, e.apiVersion)
}

// lookup returns the resource of kind in apiVersion. A version the server
// does not serve maps to the served version of the same group and kind:
// the object is the same whatever version names it.
func (m *mapper) lookup(apiVersion, kind string) (resource, error) {
	gv, err := schema.ParseGroupVersion(apiVersion)
	if err != nil {
		return resource{}, fmt.Errorf("ownerReference apiVersion %q: %w", apiVersion, err)
	}
	m.mu.RLock()
	defer m.mu.RUnlock()
	if r, ok := m.byGVK[gv.WithKind(kind)]; ok {
		return r, nil
	}
	if r, ok := m.byKind[schema.GroupKind{Group: gv.Group, Kind: kind}]; ok {
		return r, nil
	}
	return resource{}, &errUnknownKind{apiVersion: apiVersion, kind: kind}
}

// set replaces the mapping with every resource of lists (all served
// versions, from ServerGroupsAndResources) and returns those of the
// groups' preferred versions that the collector watches: listable,
// watchable, deletable, not subresources, not ignored.
func (m *mapper) set(groups []*metav1.APIGroup, lists []*metav1.APIResourceList) []resource {
	pref := map[string]bool{}
	for _, g := range groups {
		pref[g.PreferredVersion.GroupVersion] = true
	}
	all := lists
	var preferred []*metav1.APIResourceList
	for _, l := range lists {
		if pref[l.GroupVersion] {
			preferred = append(preferred, l)
		}
	}
	byGVK := map[schema.GroupVersionKind]resource{}
	byKind := map[schema.GroupKind]resource{}
	for _, r := range watchable(all) {
		byGVK[r.gvr.GroupVersion().WithKind(r.kind)] = r
	}
	watch := watchable(preferred)
	for _, r := range watch {
		byKind[schema.GroupKind{Group: r.gvr.Group, Kind: r.kind}] = r
		byGVK[r.gvr.GroupVersion().WithKind(r.kind)] = r
	}
	m.mu.Lock()
	m.byGVK, m.byKind = byGVK, byKind
	m.mu.Unlock()
	var out []resource
	for _, r := range watch {
		if !ignored[r.gvr.GroupResource()] {
			out = append(out, r)
		}
	}
	return out
}

// watchable returns the resources of lists that support list, watch and
// delete (subresources have a "/" and are left out).
func watchable(lists []*metav1.APIResourceList) []resource {
	lists = discovery.FilteredBy(discovery.SupportsAllVerbs{Verbs: []string{"list", "watch", "delete"}}, lists)
	var out []resource
	for _, l := range lists {
		gv, err := schema.ParseGroupVersion(l.GroupVersion)
		if err != nil {
			continue
		}
		for _, r := range l.APIResources {
			if r.Kind == "" || strings.Contains(r.Name, "/") {
				continue
			}
			out = append(out, resource{gvr: gv.WithResource(r.Name), kind: r.Kind, namespaced: r.Namespaced})
		}
	}
	return out
}
