package apiserver

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"

	"github.com/outpost-mesh/outpost/hub/store/badgerstore"
)

const (
	acceptV2      = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
	acceptV2beta1 = "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList"
	acceptV2Proto = "application/vnd.kubernetes.protobuf;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
)

// noReader serves a read-only resource with nothing in it.
type noReader struct{}

func (noReader) Get(ctx context.Context, namespace, name string) (runtime.Object, error) {
	return nil, fmt.Errorf("no %s", name)
}
func (noReader) List(ctx context.Context, namespace string, sel labels.Selector) (runtime.Object, error) {
	return &unstructured.UnstructuredList{}, nil
}

// discoveryTestResources returns resources with every feature discovery
// describes: short names and categories, both scopes, status, scale and
// token subresources, pods' subresources, a read-only resource, and a
// group with two versions given lowest first.
func discoveryTestResources() []Resource {
	widget := func(version string) Resource {
		r := widgetResource()
		r.GroupVersion.Version = version
		r.Categories = []string{"all", "widgets"}
		return r
	}
	return append(tokenResources(),
		Resource{GroupVersion: appsv1.SchemeGroupVersion, Kind: "Deployment", Plural: "deployments", Singular: "deployment", ShortNames: []string{"deploy"}, Categories: []string{"all"}, Namespaced: true,
			New: func() runtime.Object { return &appsv1.Deployment{} }, NewList: func() runtime.Object { return &appsv1.DeploymentList{} }, AddToScheme: appsv1.AddToScheme,
			Status: true, Generation: true, Rules: testRules{},
			Scale: &ScaleRules{
				Get: func(obj runtime.Object) (int32, int32, string) { return 0, 0, "" },
				Set: func(obj runtime.Object, replicas int32) {},
			}},
		widget("v1beta1"), widget("v1"),
		Resource{GroupVersion: schema.GroupVersion{Group: "metrics.example.dev", Version: "v1beta1"}, Kind: "Reading", Plural: "readings", Singular: "reading", Namespaced: true,
			New: func() runtime.Object { return &unstructured.Unstructured{} }, NewList: func() runtime.Object { return &unstructured.UnstructuredList{} },
			Encoding: EncodingJSON, Reader: noReader{}},
	)
}

// exchange is one request a recorder saw.
type exchange struct {
	path, accept, contentType string
	code                      int
}

// recorder serves with h and records every exchange.
type recorder struct {
	h  http.Handler
	mu sync.Mutex
	ex []exchange
}

type codeWriter struct {
	http.ResponseWriter
	code int
}

func (w *codeWriter) WriteHeader(code int) { w.code = code; w.ResponseWriter.WriteHeader(code) }

func (rec *recorder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	cw := &codeWriter{ResponseWriter: w, code: http.StatusOK}
	rec.h.ServeHTTP(cw, r)
	rec.mu.Lock()
	rec.ex = append(rec.ex, exchange{r.URL.Path, r.Header.Get("Accept"), w.Header().Get("Content-Type"), cw.code})
	rec.mu.Unlock()
}

// take returns the exchanges recorded since the last take.
func (rec *recorder) take() []exchange {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	ex := rec.ex
	rec.ex = nil
	return ex
}

// startDiscoveryServer serves discoveryTestResources, with pod streams and
// a token issuer so that discovery lists their subresources.
func startDiscoveryServer(t *testing.T) (*Server, *recorder, string) {
	t.Helper()
	st, err := badgerstore.Open(badgerstore.DefaultConfig(t.TempDir()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	srv, err := New(Config{Store: st, Resources: discoveryTestResources(), Tokens: &fakeIssuer{}, PodStreams: &heldStreams{},
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	if err != nil {
		t.Fatal(err)
	}
	rec := &recorder{h: srv}
	hs := httptest.NewServer(rec)
	t.Cleanup(hs.Close)
	t.Cleanup(srv.Shutdown)
	return srv, rec, hs.URL
}

func get(t *testing.T, url string, header ...string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, b
}

// TestAggregatedDiscoveryClientGo: client-go's discovery client asks for
// the aggregated form, gets it in two requests, and makes of it exactly
// the groups and resource lists it makes of legacy discovery.
func TestAggregatedDiscoveryClientGo(t *testing.T) {
	_, rec, url := startDiscoveryServer(t)
	discover := func(legacy bool) ([]*metav1.APIGroup, []*metav1.APIResourceList) {
		t.Helper()
		dc, err := discovery.NewDiscoveryClientForConfig(&rest.Config{Host: url, QPS: -1})
		if err != nil {
			t.Fatal(err)
		}
		dc.UseLegacyDiscovery = legacy
		groups, lists, err := dc.ServerGroupsAndResources()
		if err != nil {
			t.Fatalf("ServerGroupsAndResources (legacy %v): %v", legacy, err)
		}
		return groups, lists
	}

	aggGroups, aggLists := discover(false)
	ex := rec.take()
	var paths []string
	for _, e := range ex {
		paths = append(paths, e.path)
		if !strings.Contains(e.accept, acceptV2) || e.contentType != acceptV2 || e.code != 200 {
			t.Errorf("GET %s Accept %q = %d %q, want 200 %q", e.path, e.accept, e.code, e.contentType, acceptV2)
		}
	}
	slices.Sort(paths)
	if want := []string{"/api", "/apis"}; !cmp.Equal(paths, want) {
		t.Errorf("aggregated discovery requested %v, want %v", paths, want)
	}

	legGroups, legLists := discover(true)
	if n := len(rec.take()); n != 2+len(legLists) {
		t.Errorf("legacy discovery made %d requests, want %d (/api, /apis and one per group version)", n, 2+len(legLists))
	}

	// Legacy discovery carries kinds that client-go's conversion of the
	// aggregated form does not, and that form gives subresources their
	// resource's singular name.
	for _, g := range legGroups {
		g.TypeMeta = metav1.TypeMeta{}
	}
	for _, ls := range [][]*metav1.APIResourceList{aggLists, legLists} {
		// In no particular order.
		slices.SortFunc(ls, func(a, b *metav1.APIResourceList) int { return strings.Compare(a.GroupVersion, b.GroupVersion) })
		for _, l := range ls {
			l.TypeMeta = metav1.TypeMeta{}
			for i := range l.APIResources {
				if strings.Contains(l.APIResources[i].Name, "/") {
					l.APIResources[i].SingularName = ""
				}
			}
		}
	}
	if d := cmp.Diff(legGroups, aggGroups); d != "" {
		t.Errorf("groups from aggregated discovery differ from legacy (-legacy +aggregated):\n%s", d)
	}
	if d := cmp.Diff(legLists, aggLists); d != "" {
		t.Errorf("resources from aggregated discovery differ from legacy (-legacy +aggregated):\n%s", d)
	}
	// The group with two versions prefers the higher.
	for _, g := range aggGroups {
		if g.Name == widgetsGVR.Group && (len(g.Versions) != 2 || g.PreferredVersion.Version != "v1" || g.Versions[1].Version != "v1beta1") {
			t.Errorf("group %s: versions %v, preferred %v; want v1 then v1beta1, v1 preferred", g.Name, g.Versions, g.PreferredVersion)
		}
	}
}

// TestAggregatedDiscoveryDocument pins what the aggregated form says of
// resources of each kind, as kube-apiserver says it of its own.
func TestAggregatedDiscoveryDocument(t *testing.T) {
	_, _, url := startDiscoveryServer(t)
	doc := func(path string) apidiscoveryv2.APIGroupDiscoveryList {
		resp, body := get(t, url+path, "Accept", acceptV2)
		var l apidiscoveryv2.APIGroupDiscoveryList
		if _, _, err := discoveryCodecs.UniversalDecoder(apidiscoveryv2.SchemeGroupVersion).Decode(body, nil, &l); err != nil {
			t.Fatalf("GET %s = %d %s: %v", path, resp.StatusCode, body, err)
		}
		return l
	}
	api, apis := doc("/api"), doc("/apis")
	var names []string
	for _, g := range apis.Items {
		for _, v := range g.Versions {
			names = append(names, g.Name+"/"+v.Version)
		}
	}
	if want := []string{"apps/v1", "example.outpost.dev/v1", "example.outpost.dev/v1beta1", "metrics.example.dev/v1beta1"}; !cmp.Equal(names, want) {
		t.Errorf("/apis lists %v, want %v", names, want)
	}
	if len(api.Items) != 1 || api.Items[0].Name != "" || len(api.Items[0].Versions) != 1 || api.Items[0].Versions[0].Version != "v1" {
		t.Fatalf("/api = %+v, want the core group with v1", api)
	}

	for _, g := range append(api.Items, apis.Items...) {
		for _, v := range g.Versions {
			if v.Freshness != apidiscoveryv2.DiscoveryFreshnessCurrent {
				t.Errorf("%s/%s freshness %q, want Current", g.Name, v.Version, v.Freshness)
			}
		}
	}
	find := func(l apidiscoveryv2.APIGroupDiscoveryList, group, version, resource string) *apidiscoveryv2.APIResourceDiscovery {
		for _, g := range l.Items {
			for _, v := range g.Versions {
				for i, r := range v.Resources {
					if g.Name == group && v.Version == version && r.Resource == resource {
						return &v.Resources[i]
					}
				}
			}
		}
		return nil
	}
	kind := func(g, v, k string) *metav1.GroupVersionKind {
		return &metav1.GroupVersionKind{Group: g, Version: v, Kind: k}
	}
	crud := []string{"create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"}
	sub := []string{"get", "patch", "update"}
	for _, want := range []struct {
		group, version string
		res            apidiscoveryv2.APIResourceDiscovery
	}{
		{"", "v1", apidiscoveryv2.APIResourceDiscovery{
			Resource: "namespaces", ResponseKind: kind("", "", "Namespace"), Scope: apidiscoveryv2.ScopeCluster, SingularResource: "namespace",
			Verbs: crud, ShortNames: []string{"ns"},
			Subresources: []apidiscoveryv2.APISubresourceDiscovery{{Subresource: "status", ResponseKind: kind("", "", "Namespace"), Verbs: sub}},
		}},
		{"", "v1", apidiscoveryv2.APIResourceDiscovery{
			Resource: "serviceaccounts", ResponseKind: kind("", "", "ServiceAccount"), Scope: apidiscoveryv2.ScopeNamespace, SingularResource: "serviceaccount",
			Verbs: crud,
			Subresources: []apidiscoveryv2.APISubresourceDiscovery{
				{Subresource: "token", ResponseKind: kind("authentication.k8s.io", "v1", "TokenRequest"), Verbs: []string{"create"}},
			},
		}},
		{"", "v1", apidiscoveryv2.APIResourceDiscovery{
			Resource: "pods", ResponseKind: kind("", "", "Pod"), Scope: apidiscoveryv2.ScopeNamespace, SingularResource: "pod",
			Verbs: crud,
			Subresources: []apidiscoveryv2.APISubresourceDiscovery{
				{Subresource: "binding", ResponseKind: kind("", "", "Binding"), Verbs: []string{"create"}},
				{Subresource: "eviction", ResponseKind: kind("policy", "v1", "Eviction"), Verbs: []string{"create"}},
				{Subresource: "attach", ResponseKind: kind("", "", "PodAttachOptions"), Verbs: []string{"create", "get"}},
				{Subresource: "exec", ResponseKind: kind("", "", "PodExecOptions"), Verbs: []string{"create", "get"}},
				{Subresource: "log", ResponseKind: kind("", "", "Pod"), Verbs: []string{"get"}},
				{Subresource: "portforward", ResponseKind: kind("", "", "PodPortForwardOptions"), Verbs: []string{"create", "get"}},
			},
		}},
		{"apps", "v1", apidiscoveryv2.APIResourceDiscovery{
			Resource: "deployments", ResponseKind: kind("", "", "Deployment"), Scope: apidiscoveryv2.ScopeNamespace, SingularResource: "deployment",
			Verbs: crud, ShortNames: []string{"deploy"}, Categories: []string{"all"},
			Subresources: []apidiscoveryv2.APISubresourceDiscovery{
				{Subresource: "status", ResponseKind: kind("", "", "Deployment"), Verbs: sub},
				{Subresource: "scale", ResponseKind: kind("autoscaling", "v1", "Scale"), Verbs: sub},
			},
		}},
		{"example.outpost.dev", "v1beta1", apidiscoveryv2.APIResourceDiscovery{
			Resource: "widgets", ResponseKind: kind("", "", "Widget"), Scope: apidiscoveryv2.ScopeNamespace, SingularResource: "widget",
			Verbs: crud, Categories: []string{"all", "widgets"},
			Subresources: []apidiscoveryv2.APISubresourceDiscovery{{Subresource: "status", ResponseKind: kind("", "", "Widget"), Verbs: sub}},
		}},
		{"metrics.example.dev", "v1beta1", apidiscoveryv2.APIResourceDiscovery{
			Resource: "readings", ResponseKind: kind("", "", "Reading"), Scope: apidiscoveryv2.ScopeNamespace, SingularResource: "reading",
			Verbs: []string{"get", "list"},
		}},
	} {
		l := apis
		if want.group == "" {
			l = api
		}
		got := find(l, want.group, want.version, want.res.Resource)
		if got == nil {
			t.Errorf("%s/%s lacks %s", want.group, want.version, want.res.Resource)
			continue
		}
		if d := cmp.Diff(want.res, *got); d != "" {
			t.Errorf("%s/%s %s (-want +got):\n%s", want.group, want.version, want.res.Resource, d)
		}
	}
}

// TestAggregatedDiscoveryNegotiation: the Accept header chooses the
// aggregated form's version and media type as upstream's handler does;
// requests that do not name the form get legacy discovery, unchanged.
func TestAggregatedDiscoveryNegotiation(t *testing.T) {
	_, _, url := startDiscoveryServer(t)
	const (
		v2JSON      = acceptV2
		v2beta1JSON = acceptV2beta1
		v2Proto     = acceptV2Proto
		v2YAML      = "application/yaml;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
		legacyJSON  = "application/json"
	)
	for _, tc := range []struct {
		name, path, accept string
		contentType        string // of the response
		kind               string // of the decoded body
	}{
		{"client-go", "/apis", v2JSON + ",application/json", v2JSON, "apidiscovery.k8s.io/v2, Kind=APIGroupDiscoveryList"},
		{"client-go core", "/api", v2JSON + ",application/json", v2JSON, "apidiscovery.k8s.io/v2, Kind=APIGroupDiscoveryList"},
		{"kubectl 1.33", "/apis", v2JSON + "," + v2beta1JSON + ",application/json", v2JSON, "apidiscovery.k8s.io/v2, Kind=APIGroupDiscoveryList"},
		{"kubectl 1.27", "/apis", v2beta1JSON + ",application/json", v2beta1JSON, "apidiscovery.k8s.io/v2beta1, Kind=APIGroupDiscoveryList"},
		{"kubectl 1.27 core", "/api", v2beta1JSON + ",application/json", v2beta1JSON, "apidiscovery.k8s.io/v2beta1, Kind=APIGroupDiscoveryList"},
		{"protobuf", "/apis", v2Proto + "," + v2JSON + ",application/json", v2Proto, "apidiscovery.k8s.io/v2, Kind=APIGroupDiscoveryList"},
		{"yaml", "/api", v2YAML, v2YAML, "apidiscovery.k8s.io/v2, Kind=APIGroupDiscoveryList"},
		{"wildcard", "/apis", "*/*;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList", v2JSON, "apidiscovery.k8s.io/v2, Kind=APIGroupDiscoveryList"},
		{"quality", "/apis", v2JSON + ";q=0.5," + v2beta1JSON, v2beta1JSON, "apidiscovery.k8s.io/v2beta1, Kind=APIGroupDiscoveryList"},
		{"legacy first", "/apis", "application/json," + v2JSON, v2JSON, "apidiscovery.k8s.io/v2, Kind=APIGroupDiscoveryList"},
		{"trailing slash", "/apis/", v2JSON, v2JSON, "apidiscovery.k8s.io/v2, Kind=APIGroupDiscoveryList"},
		{"legacy", "/apis", legacyJSON, legacyJSON, "/v1, Kind=APIGroupList"},
		{"no accept", "/api", "", legacyJSON, "/v1, Kind=APIVersions"},
		{"unknown version", "/apis", "application/json;g=apidiscovery.k8s.io;v=v3;as=APIGroupDiscoveryList,application/json", legacyJSON, "/v1, Kind=APIGroupList"},
		{"unserved media type", "/apis", "application/cbor;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json", legacyJSON, "/v1, Kind=APIGroupList"},
		{"refused", "/apis", v2JSON + ";q=0,application/json", legacyJSON, "/v1, Kind=APIGroupList"},
		{"group version", "/apis/apps/v1", v2JSON + ",application/json", legacyJSON, "/v1, Kind=APIResourceList"},
		{"group", "/apis/apps", v2JSON + ",application/json", legacyJSON, "/v1, Kind=APIGroup"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, body := get(t, url+tc.path, "Accept", tc.accept)
			if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != tc.contentType {
				t.Fatalf("GET %s Accept %q = %d %q, want 200 %q\n%s", tc.path, tc.accept, resp.StatusCode, resp.Header.Get("Content-Type"), tc.contentType, body)
			}
			var gvk *schema.GroupVersionKind
			var err error
			if strings.Contains(tc.kind, "apidiscovery") {
				_, gvk, err = discoveryCodecs.UniversalDeserializer().Decode(body, nil, nil)
			} else {
				var u unstructured.Unstructured
				_, gvk, err = unstructured.UnstructuredJSONScheme.Decode(body, nil, &u)
			}
			if err != nil {
				t.Fatalf("decode %q: %v", body, err)
			}
			if gvk.String() != tc.kind {
				t.Errorf("GET %s Accept %q: body is %s, want %s", tc.path, tc.accept, gvk, tc.kind)
			}
		})
	}
}

// TestAggregatedDiscoveryETag: the documents carry an ETag, the same in
// every version and media type, and a client that names it is answered
// 304; a rebuild after the served resources change makes a new one.
func TestAggregatedDiscoveryETag(t *testing.T) {
	srv, _, url := startDiscoveryServer(t)
	etag := func(path, accept string) string {
		t.Helper()
		resp, body := get(t, url+path, "Accept", accept)
		if resp.StatusCode != 200 {
			t.Fatalf("GET %s = %d %s", path, resp.StatusCode, body)
		}
		if v, c := resp.Header.Get("Vary"), resp.Header.Get("Cache-Control"); v != "Accept" || c != "public" {
			t.Errorf("GET %s: Vary %q, Cache-Control %q; want Accept, public", path, v, c)
		}
		return resp.Header.Get("ETag")
	}
	apis := etag("/apis", acceptV2)
	if len(apis) != 2+128 || apis[0] != '"' {
		t.Errorf("ETag %s, want a quoted hex SHA-512", apis)
	}
	for _, accept := range []string{acceptV2beta1, acceptV2Proto} {
		if e := etag("/apis", accept); e != apis {
			t.Errorf("ETag with Accept %q = %s, want %s as for JSON v2", accept, e, apis)
		}
	}
	api := etag("/api", acceptV2)
	if api == apis {
		t.Errorf("/api and /apis have one ETag %s", api)
	}
	if resp, _ := get(t, url+"/apis", "Accept", "application/json"); resp.Header.Get("ETag") != "" {
		t.Errorf("legacy /apis has ETag %s", resp.Header.Get("ETag"))
	}

	for _, tc := range []struct {
		path, accept, ifNoneMatch string
		code                      int
	}{
		{"/apis", acceptV2, apis, 304},
		{"/apis", acceptV2Proto, apis, 304},
		{"/api", acceptV2beta1, api, 304},
		{"/api", acceptV2, apis, 200},
		{"/apis", acceptV2, `"0"`, 200},
		{"/apis", acceptV2, strings.Trim(apis, `"`), 200}, // unquoted: no match, as upstream
	} {
		resp, body := get(t, url+tc.path, "Accept", tc.accept, "If-None-Match", tc.ifNoneMatch)
		if resp.StatusCode != tc.code {
			t.Errorf("GET %s Accept %q If-None-Match %s = %d, want %d", tc.path, tc.accept, tc.ifNoneMatch, resp.StatusCode, tc.code)
		}
		if tc.code == 304 && (len(body) != 0 || resp.Header.Get("ETag") != tc.ifNoneMatch) {
			t.Errorf("304 for %s: body %q, ETag %s", tc.path, body, resp.Header.Get("ETag"))
		}
	}

	// Stop serving the widgets' v1beta1, as the work on custom resources
	// will: one rebuild, and clients holding the old ETag get the new
	// document.
	gvr := schema.GroupVersionResource{Group: widgetsGVR.Group, Version: "v1beta1", Resource: "widgets"}
	srv.setMu.Lock()
	srv.static = slices.DeleteFunc(srv.static, func(ri *resourceInfo) bool { return ri.gvr == gvr })
	_, err := srv.publish()
	srv.setMu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	resp, body := get(t, url+"/apis", "Accept", acceptV2, "If-None-Match", apis)
	if resp.StatusCode != 200 || resp.Header.Get("ETag") == apis {
		t.Fatalf("after a rebuild: %d, ETag %s (was %s), want 200 and a new ETag", resp.StatusCode, resp.Header.Get("ETag"), apis)
	}
	var l apidiscoveryv2.APIGroupDiscoveryList
	if _, _, err := discoveryCodecs.UniversalDecoder(apidiscoveryv2.SchemeGroupVersion).Decode(body, nil, &l); err != nil {
		t.Fatal(err)
	}
	for _, g := range l.Items {
		if g.Name == gvr.Group && (len(g.Versions) != 1 || g.Versions[0].Version != "v1") {
			t.Errorf("after a rebuild without widgets v1beta1, /apis lists %s: %+v", g.Name, g.Versions)
		}
	}
	if e := etag("/api", acceptV2); e != api {
		t.Errorf("/api ETag changed from %s to %s though the core group did not", api, e)
	}
}

// TestAggregatedDiscoveryConcurrentRebuild: requests are served while the
// documents are rebuilt (run with -race).
func TestAggregatedDiscoveryConcurrentRebuild(t *testing.T) {
	srv, _, url := startDiscoveryServer(t)
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 10 {
				req, _ := http.NewRequest("GET", url+"/apis", nil)
				req.Header.Set("Accept", acceptV2Proto)
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Error(err)
					return
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 {
					t.Errorf("GET /apis = %d", resp.StatusCode)
				}
			}
		})
	}
	for range 10 {
		srv.rebuildDiscovery()
	}
	wg.Wait()
}

// TestAggregatedDiscoveryKubectl runs real kubectl of the oldest and
// newest minor versions the hub supports (1.27 asks for v2beta1, 1.33 for
// v2) against the server: api-resources and get work from the aggregated
// form alone, without a request per group version.
func TestAggregatedDiscoveryKubectl(t *testing.T) {
	const kubectlDir = "/usr/lib/google-cloud-sdk/bin"
	_, rec, url := startDiscoveryServer(t)
	for _, p := range []struct{ path, body string }{
		{"/api/v1/namespaces", `{"metadata":{"name":"ns1"}}`},
		{"/api/v1/namespaces/ns1/configmaps", `{"metadata":{"name":"web"},"data":{"k":"v"}}`},
	} {
		resp, err := http.Post(url+p.path, "application/json", strings.NewReader(p.body))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 201 {
			t.Fatalf("POST %s = %d", p.path, resp.StatusCode)
		}
	}
	for _, tc := range []struct{ version, discoveryVersion string }{{"1.27", "v2beta1"}, {"1.33", "v2"}} {
		t.Run(tc.version, func(t *testing.T) {
			bin := filepath.Join(kubectlDir, "kubectl."+tc.version)
			if _, err := os.Stat(bin); err != nil {
				t.Skipf("kubectl %s is not installed at %s: %v", tc.version, bin, err)
			}
			cache := t.TempDir() // a discovery cache of its own
			kubectl := func(args ...string) string {
				t.Helper()
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				cmd := exec.CommandContext(ctx, bin, append([]string{"--server", url, "--cache-dir", cache}, args...)...)
				cmd.Env = []string{"HOME=" + cache, "PATH=/usr/bin:/bin"}
				out, err := cmd.CombinedOutput()
				if err != nil {
					t.Fatalf("kubectl.%s %s: %v\n%s", tc.version, strings.Join(args, " "), err, out)
				}
				return string(out)
			}
			rec.take()
			out := kubectl("api-resources")
			for _, want := range []string{
				"configmaps cm v1 true ConfigMap",
				"namespaces ns v1 false Namespace",
				"pods v1 true Pod",
				"deployments deploy apps/v1 true Deployment",
				"widgets example.outpost.dev/v1 true Widget",
				"readings metrics.example.dev/v1beta1 true Reading",
			} {
				if !hasLine(out, want) {
					t.Errorf("kubectl.%s api-resources lacks the line %q:\n%s", tc.version, want, out)
				}
			}
			want := "application/json;g=apidiscovery.k8s.io;v=" + tc.discoveryVersion + ";as=APIGroupDiscoveryList"
			for _, e := range rec.take() {
				if e.path != "/api" && e.path != "/apis" {
					t.Errorf("kubectl.%s api-resources requested %s: discovery was not aggregated", tc.version, e.path)
				} else if e.contentType != want {
					t.Errorf("kubectl.%s GET %s Accept %q = %q, want %q", tc.version, e.path, e.accept, e.contentType, want)
				}
			}

			out = kubectl("get", "configmaps", "-n", "ns1")
			if !hasLine(out, "web") { // testRules print names only
				t.Errorf("kubectl.%s get configmaps:\n%s", tc.version, out)
			}
			out = kubectl("get", "cm/web", "-n", "ns1", "-o", "jsonpath={.data.k}")
			if out != "v" {
				t.Errorf("kubectl.%s get cm/web -o jsonpath = %q, want v", tc.version, out)
			}
		})
	}
}

// hasLine reports whether a line of out has the space-separated fields of
// want, however wide its columns; a field "*" matches any one.
func hasLine(out, want string) bool {
	w := strings.Fields(want)
	for _, l := range strings.Split(out, "\n") {
		if slices.EqualFunc(strings.Fields(l), w, func(got, want string) bool { return want == "*" || got == want }) {
			return true
		}
	}
	return false
}
