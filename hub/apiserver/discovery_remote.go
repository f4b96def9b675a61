package apiserver

import (
	"maps"
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// RemoteGroupVersion is a group version another server serves, behind
// the hub (an aggregated API server): discovery lists it with the
// resources that server lists, as kube-aggregator merges its APIServices
// into /apis, /apis/GROUP and the aggregated document. The Server answers
// /apis/GROUP/VERSION with those resources, and requests for them 404:
// whoever lists a remote group version routes its requests to its server
// before they reach the Server.
type RemoteGroupVersion struct {
	GroupVersion schema.GroupVersion
	// VersionPriority orders the remote versions of one group, highest
	// first (the preferred version), as an APIService's versionPriority.
	VersionPriority int32
	// Resources are what the server lists at /apis/GROUP/VERSION.
	Resources []metav1.APIResource
}

// SetRemoteGroups makes discovery list gvs, replacing the remote group
// versions listed before; nil lists none. A group version the Server
// serves itself is left out. The Server keeps its own copy. Safe for
// concurrent use with requests and SetResources.
func (s *Server) SetRemoteGroups(gvs []RemoteGroupVersion) error {
	remote := make([]RemoteGroupVersion, len(gvs))
	for i, gv := range gvs {
		gv.Resources = slices.Clone(gv.Resources)
		remote[i] = gv
	}
	s.setMu.Lock()
	defer s.setMu.Unlock()
	prev := s.remote
	s.remote = remote
	gone, err := s.publish()
	if err != nil {
		s.remote = prev
		return err
	}
	for _, ri := range gone {
		close(ri.gone)
	}
	return nil
}

// SetGroupPriorities orders the groups of discovery (/apis and the
// aggregated document) as kube-aggregator orders them by their
// APIServices' groupPriorityMinimum: the groups in p by priority, highest
// first, then the others; by name where they tie. The core group stays
// first. nil orders all by name. The Server keeps its own copy. Safe for
// concurrent use with requests and the other setters.
func (s *Server) SetGroupPriorities(p map[string]int32) error {
	s.setMu.Lock()
	defer s.setMu.Unlock()
	prev := s.priority
	s.priority = maps.Clone(p)
	gone, err := s.publish()
	if err != nil {
		s.priority = prev
		return err
	}
	for _, ri := range gone {
		close(ri.gone)
	}
	return nil
}

// addRemote adds the remote group versions not served locally to next,
// before it is sorted.
func addRemote(next *resourceSet, remote []RemoteGroupVersion, seen map[schema.GroupVersion]bool) {
	for _, r := range remote {
		if seen[r.GroupVersion] || r.GroupVersion.Group == "" {
			continue
		}
		seen[r.GroupVersion] = true
		if next.remote == nil {
			next.remote = map[schema.GroupVersion]RemoteGroupVersion{}
		}
		next.remote[r.GroupVersion] = r
		next.groups = append(next.groups, r.GroupVersion)
	}
}

// remoteResourceList is the APIResourceList of remote group version gv,
// or nil when set lists none.
func (set *resourceSet) remoteResourceList(gv schema.GroupVersion) *metav1.APIResourceList {
	r, ok := set.remote[gv]
	if !ok {
		return nil
	}
	return &metav1.APIResourceList{
		TypeMeta:     metav1.TypeMeta{Kind: "APIResourceList", APIVersion: "v1"},
		GroupVersion: gv.String(),
		APIResources: slices.Clone(r.Resources),
	}
}
