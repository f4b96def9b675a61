package apiserver

import (
	"bytes"
	"crypto/sha512"
	"encoding/json"
	"fmt"
	"mime"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	apidiscoveryv2beta1 "k8s.io/api/apidiscovery/v2beta1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
)

// Aggregated discovery serves, at /api and /apis, every group, version and
// resource in one document (an apidiscovery.k8s.io APIGroupDiscoveryList),
// so that a client learns the whole API in two requests instead of one per
// group version. Clients ask for it in the Accept header, e.g.
//
//	application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json
//
// as client-go 0.30 and later do (kubectl 1.30 to 1.33 also offer v2beta1;
// kubectl 1.27 to 1.29 ask for v2beta1 only); other clients get legacy
// discovery (discovery.go), unchanged. The document is derived from the
// legacy APIResourceLists, as kube-apiserver derives it, so the two always
// agree, and client-go turns either into the same APIResourceLists.

// discoveryCodecs encode the documents: JSON, YAML and protobuf, as
// kube-apiserver serves them (CBOR only behind a feature gate upstream).
var discoveryCodecs = func() serializer.CodecFactory {
	s := runtime.NewScheme()
	utilruntime.Must(apidiscoveryv2.AddToScheme(s))
	utilruntime.Must(apidiscoveryv2beta1.AddToScheme(s))
	return serializer.NewCodecFactory(s)
}()

// The media type parameters that name the aggregated form.
const (
	aggregatedGroup = "apidiscovery.k8s.io"
	aggregatedKind  = "APIGroupDiscoveryList"
)

// discoveryCache holds the aggregated discovery documents. Requests load
// docs without locking; mu serializes rebuilds.
type discoveryCache struct {
	mu   sync.Mutex
	docs atomic.Pointer[aggregatedDocs]
}

// aggregatedDocs are the documents of /api (the core group) and /apis (the
// others). They are never changed once stored: a rebuild stores new ones.
type aggregatedDocs struct {
	api, apis aggregatedDoc
}

// aggregatedDoc is one path's document in each served version.
type aggregatedDoc struct {
	v2      apidiscoveryv2.APIGroupDiscoveryList
	v2beta1 apidiscoveryv2beta1.APIGroupDiscoveryList
	// etag is the quoted hex SHA-512 of v2's JSON form, as upstream
	// computes it: one ETag for every version and media type of the
	// document, which responses tell caches apart by with Vary: Accept.
	etag string
}

// rebuildDiscovery recomputes the aggregated discovery documents from the
// served resources (byGVR and groups, through resourceList) and swaps them
// in whole; requests already served keep the documents they loaded. New
// calls it once. Whatever adds or removes served resources at run time
// (custom resource definitions) must call it after each change is complete:
// that one call is all it takes. It is safe to call concurrently with
// requests and with itself; rebuilds run one at a time, so the last one
// stores the documents of the last change.
func (s *Server) rebuildDiscovery() {
	s.discovery.mu.Lock()
	defer s.discovery.mu.Unlock()
	var api, apis apidiscoveryv2.APIGroupDiscoveryList
	set := s.res()
	for _, gv := range set.groups { // core first, versions of a group together, by priority
		list := s.resourceList(set, gv)
		if list == nil {
			continue
		}
		v := apidiscoveryv2.APIVersionDiscovery{
			Version:   gv.Version,
			Resources: discoveryResources(list.APIResources),
			Freshness: apidiscoveryv2.DiscoveryFreshnessCurrent,
		}
		dst := &apis
		if gv.Group == "" {
			dst = &api
		}
		if n := len(dst.Items); n > 0 && dst.Items[n-1].Name == gv.Group {
			dst.Items[n-1].Versions = append(dst.Items[n-1].Versions, v)
			continue
		}
		dst.Items = append(dst.Items, apidiscoveryv2.APIGroupDiscovery{
			ObjectMeta: metav1.ObjectMeta{Name: gv.Group},
			Versions:   []apidiscoveryv2.APIVersionDiscovery{v},
		})
	}
	s.discovery.docs.Store(&aggregatedDocs{api: newAggregatedDoc(api), apis: newAggregatedDoc(apis)})
}

func newAggregatedDoc(v2 apidiscoveryv2.APIGroupDiscoveryList) aggregatedDoc {
	b, err := json.Marshal(v2)
	if err != nil {
		// Plain structs of strings and slices: Marshal cannot fail.
		panic(fmt.Sprintf("apiserver: marshal discovery document: %v", err))
	}
	return aggregatedDoc{v2: v2, v2beta1: toV2beta1(v2), etag: strconv.Quote(fmt.Sprintf("%X", sha512.Sum512(b)))}
}

// discoveryResources turns the APIResources of one group version, as legacy
// discovery lists them (a subresource as "parent/sub"), into the aggregated
// form, as kube-apiserver does: each resource with its subresources, and
// each responseKind as the APIResource has it (group and version empty for
// the resource's own, set for another group's such as autoscaling/v1 Scale).
// Upstream sets no acceptedTypes for built-in resources, so neither does
// this. The result shares the slices of list.
func discoveryResources(list []metav1.APIResource) []apidiscoveryv2.APIResourceDiscovery {
	var out []apidiscoveryv2.APIResourceDiscovery
	index := map[string]int{} // resource name -> index in out
	for _, r := range list {
		if strings.Contains(r.Name, "/") {
			continue
		}
		index[r.Name] = len(out)
		out = append(out, apidiscoveryv2.APIResourceDiscovery{
			Resource:         r.Name,
			ResponseKind:     &metav1.GroupVersionKind{Group: r.Group, Version: r.Version, Kind: r.Kind},
			Scope:            discoveryScope(r.Namespaced),
			SingularResource: r.SingularName,
			Verbs:            r.Verbs,
			ShortNames:       r.ShortNames,
			Categories:       r.Categories,
		})
	}
	for _, r := range list {
		parent, sub, ok := strings.Cut(r.Name, "/")
		if !ok {
			continue
		}
		i, ok := index[parent]
		if !ok {
			// A subresource without its resource; upstream lists it
			// under a stub, whose responseKind must not be nil for
			// client-go 0.26.0 to 0.26.3.
			i = len(out)
			index[parent] = i
			out = append(out, apidiscoveryv2.APIResourceDiscovery{Resource: parent, ResponseKind: &metav1.GroupVersionKind{}, Scope: discoveryScope(r.Namespaced)})
		}
		out[i].Subresources = append(out[i].Subresources, apidiscoveryv2.APISubresourceDiscovery{
			Subresource:  sub,
			ResponseKind: &metav1.GroupVersionKind{Group: r.Group, Version: r.Version, Kind: r.Kind},
			Verbs:        r.Verbs,
		})
	}
	return out
}

func discoveryScope(namespaced bool) apidiscoveryv2.ResourceScope {
	if namespaced {
		return apidiscoveryv2.ScopeNamespace
	}
	return apidiscoveryv2.ScopeCluster
}

// toV2beta1 returns l in apidiscovery.k8s.io/v2beta1, whose types are
// v2's field for field. The result shares l's slices.
func toV2beta1(l apidiscoveryv2.APIGroupDiscoveryList) apidiscoveryv2beta1.APIGroupDiscoveryList {
	out := apidiscoveryv2beta1.APIGroupDiscoveryList{ListMeta: l.ListMeta}
	for _, g := range l.Items {
		bg := apidiscoveryv2beta1.APIGroupDiscovery{ObjectMeta: g.ObjectMeta}
		for _, v := range g.Versions {
			bv := apidiscoveryv2beta1.APIVersionDiscovery{Version: v.Version, Freshness: apidiscoveryv2beta1.DiscoveryFreshness(v.Freshness)}
			for _, r := range v.Resources {
				br := apidiscoveryv2beta1.APIResourceDiscovery{
					Resource: r.Resource, ResponseKind: r.ResponseKind, Scope: apidiscoveryv2beta1.ResourceScope(r.Scope),
					SingularResource: r.SingularResource, Verbs: r.Verbs, ShortNames: r.ShortNames, Categories: r.Categories,
				}
				for _, sub := range r.Subresources {
					br.Subresources = append(br.Subresources, apidiscoveryv2beta1.APISubresourceDiscovery(sub))
				}
				bv.Resources = append(bv.Resources, br)
			}
			bg.Versions = append(bg.Versions, bv)
		}
		out.Items = append(out.Items, bg)
	}
	return out
}

// serveAggregated answers a GET of /api (core) or /apis in the aggregated
// form when the Accept header asks for one it serves, and reports whether
// it did; otherwise it writes nothing, for legacy discovery to answer. Like
// kube-apiserver it sets ETag, and answers 304 Not Modified, without a
// body, to an If-None-Match naming the current document.
func (s *Server) serveAggregated(w http.ResponseWriter, r *http.Request, core bool) bool {
	info, gv, ok := negotiateAggregated(r.Header.Get("Accept"), discoveryCodecs.SupportedMediaTypes())
	if !ok {
		return false
	}
	docs := s.discovery.docs.Load()
	doc := &docs.apis
	if core {
		doc = &docs.api
	}
	h := w.Header()
	h.Set("ETag", doc.etag)
	h.Set("Vary", "Accept")
	h.Set("Cache-Control", "public")
	if r.Header.Get("If-None-Match") == doc.etag {
		w.WriteHeader(http.StatusNotModified)
		return true
	}
	// A shallow copy: the encoder sets the copy's kind, not the shared one's.
	var obj runtime.Object
	if gv == apidiscoveryv2beta1.SchemeGroupVersion {
		l := doc.v2beta1
		obj = &l
	} else {
		l := doc.v2
		obj = &l
	}
	var buf bytes.Buffer
	if err := discoveryCodecs.EncoderForVersion(info.Serializer, gv).Encode(obj, &buf); err != nil {
		s.log.Error("encode aggregated discovery", "err", err)
		http.Error(w, "encode response: "+err.Error(), http.StatusInternalServerError)
		return true
	}
	h.Set("Content-Type", info.MediaType+";g="+aggregatedGroup+";v="+gv.Version+";as="+aggregatedKind)
	w.WriteHeader(http.StatusOK)
	w.Write(buf.Bytes())
	return true
}

// negotiateAggregated picks, from an Accept header, the media type and
// apidiscovery.k8s.io version of the aggregated form, as kube-apiserver's
// discovery handler does: among the clauses that name the form
// (as=APIGroupDiscoveryList;g=apidiscovery.k8s.io;v=v2 or v2beta1), by
// quality and then in order, the first whose media type is one of media
// (a type/* or */* wildcard takes the first of media that fits). Clauses
// without the form do not count, wherever they are: the client wants the
// aggregated form if it names it at all. It reports false when no clause
// fits.
func negotiateAggregated(accept string, media []runtime.SerializerInfo) (runtime.SerializerInfo, schema.GroupVersion, bool) {
	type clause struct {
		typ, sub string
		gv       schema.GroupVersion
		q        float64
	}
	var clauses []clause
	for _, part := range strings.Split(accept, ",") {
		mt, params, err := mime.ParseMediaType(strings.TrimSpace(part))
		if err != nil || params["as"] != aggregatedKind || params["g"] != aggregatedGroup {
			continue
		}
		c := clause{q: 1}
		switch params["v"] {
		case apidiscoveryv2.SchemeGroupVersion.Version:
			c.gv = apidiscoveryv2.SchemeGroupVersion
		case apidiscoveryv2beta1.SchemeGroupVersion.Version:
			c.gv = apidiscoveryv2beta1.SchemeGroupVersion
		default:
			continue
		}
		if q, ok := params["q"]; ok {
			if c.q, err = strconv.ParseFloat(q, 64); err != nil || c.q <= 0 {
				continue
			}
		}
		c.typ, c.sub, _ = strings.Cut(mt, "/")
		clauses = append(clauses, c)
	}
	sort.SliceStable(clauses, func(i, j int) bool { return clauses[i].q > clauses[j].q })
	for _, c := range clauses {
		for _, info := range media {
			if (c.typ == "*" && c.sub == "*") || (c.typ == info.MediaTypeType && (c.sub == "*" || c.sub == info.MediaTypeSubType)) {
				return info, c.gv, true
			}
		}
	}
	return runtime.SerializerInfo{}, schema.GroupVersion{}, false
}
