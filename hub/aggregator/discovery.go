package aggregator

import (
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math"
	"reflect"
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	apiregistrationv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
)

// MaxDiscoveryBytes bounds the discovery document the hub reads from an
// extension API server: a list of resources, far smaller in practice.
const MaxDiscoveryBytes = 4 << 20

// DiscoveredGroupVersion is the group version of an Available
// service-backed APIService, with the resources its service lists.
type DiscoveredGroupVersion struct {
	Group, Version                        string
	GroupPriorityMinimum, VersionPriority int32
	Resources                             []metav1.APIResource
}

// DiscoverySink lists the group versions of the Available service-backed
// APIServices in the hub's discovery, as kube-aggregator merges them into
// its own, and orders its groups by their APIServices' priorities.
// SetRemoteGroups and SetGroupPriorities replace what was set before;
// they are called from one goroutine at a time and keep nothing passed.
type DiscoverySink interface {
	SetRemoteGroups(gvs []DiscoveredGroupVersion) error
	// SetGroupPriorities orders the groups by priority, highest first.
	SetGroupPriorities(p map[string]int32) error
}

// DecodeResourceList decodes the APIResourceList of group/version (the
// legacy group when group is "") from r, reading at most
// MaxDiscoveryBytes. A list of another group version, or of nothing it
// can read, is an error.
func DecodeResourceList(r io.Reader, group, version string) ([]metav1.APIResource, error) {
	b, err := io.ReadAll(io.LimitReader(r, MaxDiscoveryBytes+1))
	if err != nil {
		return nil, fmt.Errorf("read discovery document: %w", err)
	}
	if len(b) > MaxDiscoveryBytes {
		return nil, fmt.Errorf("discovery document larger than %d bytes", MaxDiscoveryBytes)
	}
	var list metav1.APIResourceList
	if err := json.Unmarshal(b, &list); err != nil {
		return nil, fmt.Errorf("decode discovery document: %w", err)
	}
	want := version
	if group != "" {
		want = group + "/" + version
	}
	if list.GroupVersion != want {
		return nil, fmt.Errorf("discovery document of %q, want %q", list.GroupVersion, want)
	}
	for _, res := range list.APIResources {
		if res.Name == "" || res.Kind == "" {
			return nil, fmt.Errorf("discovery document lists a resource without a name or kind: %+v", res)
		}
	}
	return list.APIResources, nil
}

// discover records what APIService name adds to discovery (nothing when
// s is nil: it is gone or unavailable) and publishes the whole to
// cfg.Discovery when that changed.
func (r *Remote) discover(name string, s *apiregistrationv1.APIService, resources []metav1.APIResource) {
	if r.cfg.Discovery == nil {
		return
	}
	r.dmu.Lock()
	defer r.dmu.Unlock()
	if s == nil {
		delete(r.discovered, name)
	} else {
		r.discovered[name] = DiscoveredGroupVersion{
			Group: s.Spec.Group, Version: s.Spec.Version,
			GroupPriorityMinimum: s.Spec.GroupPriorityMinimum, VersionPriority: s.Spec.VersionPriority,
			Resources: resources,
		}
	}
	r.publishPriorities()
	all := sortedDiscovered(r.discovered)
	if r.published != nil && reflect.DeepEqual(all, r.published) {
		return
	}
	if err := r.cfg.Discovery.SetRemoteGroups(all); err != nil {
		r.cfg.Logger.Warn("aggregated group versions not listed in discovery", "err", err)
		return
	}
	r.published = all
}

// publishPriorities gives cfg.Discovery the priority of every group that
// has an APIService when they changed: the highest groupPriorityMinimum
// of its APIServices, as kube-aggregator ranks a group by its first
// APIService in that order. The caller holds dmu.
func (r *Remote) publishPriorities() {
	all, err := r.apis.List(labels.Everything())
	if err != nil {
		return
	}
	prio := groupPriorities(all)
	if r.priorities != nil && maps.Equal(prio, r.priorities) {
		return
	}
	if err := r.cfg.Discovery.SetGroupPriorities(prio); err != nil {
		r.cfg.Logger.Warn("discovery not ordered by the APIServices' priorities", "err", err)
		return
	}
	r.priorities = prio
}

// groupPriorities returns the highest groupPriorityMinimum of each
// group's APIServices, and apiregistration.k8s.io above all, as
// kube-aggregator always lists its own group first.
func groupPriorities(all []*apiregistrationv1.APIService) map[string]int32 {
	prio := make(map[string]int32, len(all)+1)
	for _, s := range all {
		if p, ok := prio[s.Spec.Group]; !ok || s.Spec.GroupPriorityMinimum > p {
			prio[s.Spec.Group] = s.Spec.GroupPriorityMinimum
		}
	}
	prio[apiregistrationv1.GroupName] = math.MaxInt32
	return prio
}

// sortedDiscovered returns the values of m in a stable order, as
// kube-aggregator orders APIServices: by group priority (highest first),
// group, version priority (highest first), version.
func sortedDiscovered(m map[string]DiscoveredGroupVersion) []DiscoveredGroupVersion {
	all := make([]DiscoveredGroupVersion, 0, len(m))
	for _, gv := range m {
		all = append(all, gv)
	}
	slices.SortFunc(all, func(a, b DiscoveredGroupVersion) int {
		return cmp.Or(cmp.Compare(b.GroupPriorityMinimum, a.GroupPriorityMinimum), cmp.Compare(a.Group, b.Group),
			cmp.Compare(b.VersionPriority, a.VersionPriority), cmp.Compare(a.Version, b.Version))
	})
	return all
}
