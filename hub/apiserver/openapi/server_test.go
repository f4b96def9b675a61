package openapi

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/version"
)

// testServer serves the minimal discovery that kubectl and client-go need
// for testKinds, the OpenAPI handlers under test, and a pod create that
// echoes the pod and records the query of each request.
type testServer struct {
	*httptest.Server
	mu      sync.Mutex
	creates []url.Values
}

func (ts *testServer) createQueries() []url.Values {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	return slices.Clone(ts.creates)
}

func newTestServer(t *testing.T) *testServer {
	t.Helper()
	s := testSpec(t)
	mux := http.NewServeMux()
	reply := func(path string, v any) {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatalf("encode %s: %v", path, err)
		}
		mux.HandleFunc("GET "+path, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.Write(b)
		})
	}
	reply("/version", version.Info{Major: "1", Minor: "33", GitVersion: "v1.33.0-outpost", Platform: "linux/amd64"})

	resources := make(map[string]*metav1.APIResourceList)
	var gvs []string
	for _, k := range testKinds() {
		gv := k.GVK.GroupVersion().String()
		l, ok := resources[gv]
		if !ok {
			l = &metav1.APIResourceList{TypeMeta: metav1.TypeMeta{Kind: "APIResourceList", APIVersion: "v1"}, GroupVersion: gv}
			resources[gv] = l
			gvs = append(gvs, gv)
		}
		verbs := k.Verbs
		if verbs == nil {
			verbs = defaultVerbs
		}
		l.APIResources = append(l.APIResources, metav1.APIResource{
			Name: k.Plural, SingularName: strings.ToLower(k.GVK.Kind), Namespaced: k.Namespaced,
			Kind: k.GVK.Kind, Verbs: verbs,
		})
		for _, sub := range k.Subresources {
			l.APIResources = append(l.APIResources, metav1.APIResource{
				Name: k.Plural + "/" + sub, Namespaced: k.Namespaced, Kind: k.GVK.Kind, Verbs: []string{"get", "patch", "update"},
			})
		}
	}
	groups := &metav1.APIGroupList{TypeMeta: metav1.TypeMeta{Kind: "APIGroupList", APIVersion: "v1"}}
	for _, gv := range gvs {
		if !strings.Contains(gv, "/") {
			reply("/api/"+gv, resources[gv])
			continue
		}
		reply("/apis/"+gv, resources[gv])
		group, v, _ := strings.Cut(gv, "/")
		gvd := metav1.GroupVersionForDiscovery{GroupVersion: gv, Version: v}
		groups.Groups = append(groups.Groups, metav1.APIGroup{Name: group, Versions: []metav1.GroupVersionForDiscovery{gvd}, PreferredVersion: gvd})
	}
	reply("/api", &metav1.APIVersions{TypeMeta: metav1.TypeMeta{Kind: "APIVersions"}, Versions: []string{"v1"},
		ServerAddressByClientCIDRs: []metav1.ServerAddressByClientCIDR{{ClientCIDR: "0.0.0.0/0", ServerAddress: "127.0.0.1"}}})
	reply("/apis", groups)

	mux.HandleFunc("/openapi/v2", s.ServeV2)
	mux.HandleFunc("/openapi/v3", s.ServeV3)
	mux.HandleFunc("/openapi/v3/", s.ServeV3)

	ts := &testServer{}
	mux.HandleFunc("POST /api/v1/namespaces/{namespace}/pods", func(w http.ResponseWriter, r *http.Request) {
		ts.mu.Lock()
		ts.creates = append(ts.creates, r.URL.Query())
		ts.mu.Unlock()
		body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		w.Write(body)
	})
	ts.Server = httptest.NewServer(mux)
	t.Cleanup(ts.Close)
	return ts
}
