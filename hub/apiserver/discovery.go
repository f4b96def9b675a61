package apiserver

import (
	"net/http"
	"sort"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var (
	allVerbs    = metav1.Verbs{"create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"}
	subVerbs    = metav1.Verbs{"get", "patch", "update"}
	createVerbs = metav1.Verbs{"create"}
)

// serveDiscovery serves /api, /api/v1, /apis, /apis/G and /apis/G/V in the
// legacy (unaggregated) form, which every kubectl falls back to, and /api
// and /apis in the aggregated form to clients that ask for it
// (discovery_aggregated.go).
func (s *Server) serveDiscovery(w http.ResponseWriter, r *http.Request, ri requestInfo) {
	if r.Method != http.MethodGet {
		s.writeError(w, r, apierrors.NewMethodNotSupported(schema.GroupResource{}, r.Method))
		return
	}
	switch r.URL.Path {
	case "/api", "/api/":
		if s.serveAggregated(w, r, true) {
			return
		}
	case "/apis", "/apis/":
		if s.serveAggregated(w, r, false) {
			return
		}
	}
	legacy := ri.gv.Group == "" && (r.URL.Path == "/api" || r.URL.Path == "/api/" || ri.gv.Version != "")
	switch {
	case r.URL.Path == "/api" || r.URL.Path == "/api/":
		s.writeObject(w, r, http.StatusOK, &metav1.APIVersions{
			TypeMeta:                   metav1.TypeMeta{Kind: "APIVersions"},
			Versions:                   []string{"v1"},
			ServerAddressByClientCIDRs: []metav1.ServerAddressByClientCIDR{{ClientCIDR: "0.0.0.0/0", ServerAddress: r.Host}},
		}, nil)
	case legacy || (ri.gv.Group != "" && ri.gv.Version != ""):
		list := s.resourceList(s.res(), ri.gv)
		if list == nil {
			s.writeError(w, r, apierrors.NewNotFound(schema.GroupResource{}, ri.gv.String()))
			return
		}
		s.writeObject(w, r, http.StatusOK, list, nil)
	case ri.gv.Group != "":
		g := s.res().group(ri.gv.Group)
		if g == nil {
			s.writeError(w, r, apierrors.NewNotFound(schema.GroupResource{}, ri.gv.Group))
			return
		}
		s.writeObject(w, r, http.StatusOK, g, nil)
	default: // /apis
		list := &metav1.APIGroupList{TypeMeta: metav1.TypeMeta{Kind: "APIGroupList", APIVersion: "v1"}}
		set := s.res()
		for i, gv := range set.groups {
			// Once per group: its versions are together in groups.
			if gv.Group != "" && (i == 0 || set.groups[i-1].Group != gv.Group) {
				list.Groups = append(list.Groups, *set.group(gv.Group))
			}
		}
		s.writeObject(w, r, http.StatusOK, list, nil)
	}
}

func (set *resourceSet) group(name string) *metav1.APIGroup {
	var g *metav1.APIGroup
	for _, gv := range set.groups {
		if gv.Group != name {
			continue
		}
		v := metav1.GroupVersionForDiscovery{GroupVersion: gv.String(), Version: gv.Version}
		if g == nil {
			g = &metav1.APIGroup{TypeMeta: metav1.TypeMeta{Kind: "APIGroup", APIVersion: "v1"}, Name: name, PreferredVersion: v}
		}
		g.Versions = append(g.Versions, v)
	}
	return g
}

// resourceList returns the APIResourceList of gv, or nil when not served.
func (s *Server) resourceList(set *resourceSet, gv schema.GroupVersion) *metav1.APIResourceList {
	if list := set.remoteResourceList(gv); list != nil {
		return list
	}
	var rs []*resourceInfo
	for _, res := range set.byGVR {
		if res.GroupVersion == gv {
			rs = append(rs, res)
		}
	}
	if len(rs) == 0 {
		return nil
	}
	sort.Slice(rs, func(i, j int) bool { return rs[i].Plural < rs[j].Plural })
	list := &metav1.APIResourceList{TypeMeta: metav1.TypeMeta{Kind: "APIResourceList", APIVersion: "v1"}, GroupVersion: gv.String()}
	for _, res := range rs {
		verbs := allVerbs
		switch {
		case res.Reader != nil:
			verbs = readOnlyVerbs
		case res.Creator != nil:
			verbs = createOnlyVerbs
		}
		list.APIResources = append(list.APIResources, metav1.APIResource{
			Name: res.Plural, SingularName: res.Singular, Namespaced: res.Namespaced, Kind: res.Kind,
			Verbs: verbs, ShortNames: res.ShortNames, Categories: res.Categories,
		})
		if res.Status {
			list.APIResources = append(list.APIResources, metav1.APIResource{
				Name: res.Plural + "/status", Namespaced: res.Namespaced, Kind: res.Kind, Verbs: subVerbs,
			})
		}
		if res.Scale != nil {
			list.APIResources = append(list.APIResources, metav1.APIResource{
				Name: res.Plural + "/scale", Namespaced: res.Namespaced, Group: "autoscaling", Version: "v1", Kind: "Scale", Verbs: subVerbs,
			})
		}
		for _, sub := range res.Subresources {
			list.APIResources = append(list.APIResources, metav1.APIResource{
				Name: res.Plural + "/" + sub.Name, Namespaced: res.Namespaced, Kind: res.Kind, Verbs: subVerbs,
			})
		}
		if res.Token != nil && s.cfg.Tokens != nil {
			list.APIResources = append(list.APIResources, metav1.APIResource{
				Name: res.Plural + "/token", Namespaced: res.Namespaced, Group: "authentication.k8s.io", Version: "v1", Kind: "TokenRequest", Verbs: createVerbs,
			})
		}
		if res.gvr.Resource == "pods" && gv.Group == "" {
			list.APIResources = append(list.APIResources,
				metav1.APIResource{Name: "pods/binding", Namespaced: true, Kind: "Binding", Verbs: createVerbs},
				metav1.APIResource{Name: "pods/eviction", Namespaced: true, Group: "policy", Version: "v1", Kind: "Eviction", Verbs: createVerbs},
			)
			if s.cfg.PodStreams != nil {
				// As kube-apiserver lists them.
				list.APIResources = append(list.APIResources,
					metav1.APIResource{Name: "pods/attach", Namespaced: true, Kind: "PodAttachOptions", Verbs: metav1.Verbs{"create", "get"}},
					metav1.APIResource{Name: "pods/exec", Namespaced: true, Kind: "PodExecOptions", Verbs: metav1.Verbs{"create", "get"}},
					metav1.APIResource{Name: "pods/log", Namespaced: true, Kind: "Pod", Verbs: metav1.Verbs{"get"}},
					metav1.APIResource{Name: "pods/portforward", Namespaced: true, Kind: "PodPortForwardOptions", Verbs: metav1.Verbs{"create", "get"}},
				)
			}
		}
	}
	return list
}
