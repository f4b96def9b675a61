package auth

import (
	"net/url"
	"strings"
	"testing"
)

func TestParseAttributes(t *testing.T) {
	res := func(verb, group, version, resource, sub, ns, name string) Attributes {
		return Attributes{ResourceRequest: true, Verb: verb, APIGroup: group, APIVersion: version,
			Resource: resource, Subresource: sub, Namespace: ns, Name: name}
	}
	for _, tc := range []struct {
		method, url string
		want        Attributes
	}{
		// core group
		{"GET", "/api/v1/pods", res("list", "", "v1", "pods", "", "", "")},
		{"GET", "/api/v1/namespaces/default/pods", res("list", "", "v1", "pods", "", "default", "")},
		{"GET", "/api/v1/namespaces/default/pods/web", res("get", "", "v1", "pods", "", "default", "web")},
		{"HEAD", "/api/v1/namespaces/default/pods/web", res("get", "", "v1", "pods", "", "default", "web")},
		{"GET", "/api/v1/namespaces/default/pods/web/log", res("get", "", "v1", "pods", "log", "default", "web")},
		// streams into a pod need create, whatever the method
		{"GET", "/api/v1/namespaces/default/pods/web/exec?command=sh", res("create", "", "v1", "pods", "exec", "default", "web")},
		{"POST", "/api/v1/namespaces/default/pods/web/exec?command=sh", res("create", "", "v1", "pods", "exec", "default", "web")},
		{"GET", "/api/v1/namespaces/default/pods/web/attach", res("create", "", "v1", "pods", "attach", "default", "web")},
		{"POST", "/api/v1/namespaces/default/pods/web/portforward", res("create", "", "v1", "pods", "portforward", "default", "web")},
		{"GET", "/api/v1/namespaces/default/pods/web/portforward", res("create", "", "v1", "pods", "portforward", "default", "web")},
		{"PUT", "/api/v1/namespaces/default/pods/web/exec", res("update", "", "v1", "pods", "exec", "default", "web")},
		{"PUT", "/api/v1/namespaces/default/pods/web/status", res("update", "", "v1", "pods", "status", "default", "web")},
		{"PATCH", "/api/v1/namespaces/default/pods/web/status", res("patch", "", "v1", "pods", "status", "default", "web")},
		{"POST", "/api/v1/namespaces/default/pods", res("create", "", "v1", "pods", "", "default", "")},
		{"POST", "/api/v1/namespaces/default/pods/web/binding", res("create", "", "v1", "pods", "binding", "default", "web")},
		{"DELETE", "/api/v1/namespaces/default/pods/web", res("delete", "", "v1", "pods", "", "default", "web")},
		{"DELETE", "/api/v1/namespaces/default/pods", res("deletecollection", "", "v1", "pods", "", "default", "")},
		{"OPTIONS", "/api/v1/namespaces/default/pods", res("", "", "v1", "pods", "", "default", "")},
		{"GET", "/api/v1/nodes/edge-1", res("get", "", "v1", "nodes", "", "", "edge-1")},
		{"PATCH", "/api/v1/nodes/edge-1/status", res("patch", "", "v1", "nodes", "status", "", "edge-1")},
		// namespaces themselves
		{"GET", "/api/v1/namespaces", res("list", "", "v1", "namespaces", "", "", "")},
		{"GET", "/api/v1/namespaces/default", res("get", "", "v1", "namespaces", "", "default", "default")},
		{"PUT", "/api/v1/namespaces/gone/finalize", res("update", "", "v1", "namespaces", "finalize", "gone", "gone")},
		{"PUT", "/api/v1/namespaces/gone/status", res("update", "", "v1", "namespaces", "status", "gone", "gone")},
		// watches
		{"GET", "/api/v1/pods?watch=true", res("watch", "", "v1", "pods", "", "", "")},
		{"GET", "/api/v1/pods?watch=1", res("watch", "", "v1", "pods", "", "", "")},
		{"GET", "/api/v1/pods?watch=false", res("list", "", "v1", "pods", "", "", "")},
		{"GET", "/api/v1/pods?watch=yes", res("list", "", "v1", "pods", "", "", "")}, // as the API server parses it
		{"GET", "/api/v1/watch/namespaces/default/pods", res("watch", "", "v1", "pods", "", "default", "")},
		{"GET", "/api/v1/watch/namespaces/default/secrets/db", res("watch", "", "v1", "secrets", "", "default", "db")},
		{"GET", "/api/v1/namespaces/default/secrets/db?watch=true", res("watch", "", "v1", "secrets", "", "default", "db")},
		{"POST", "/api/v1/watch/namespaces/default/pods", res("create", "", "v1", "pods", "", "default", "")},
		// names from field selectors
		{"GET", "/api/v1/namespaces/default/secrets?fieldSelector=metadata.name%3Ddb", res("list", "", "v1", "secrets", "", "default", "db")},
		{"GET", "/api/v1/namespaces/default/secrets?watch=1&fieldSelector=metadata.name%3D%3Ddb", res("watch", "", "v1", "secrets", "", "default", "db")},
		{"GET", "/api/v1/namespaces/default/secrets?fieldSelector=metadata.name%21%3Ddb", res("list", "", "v1", "secrets", "", "default", "")},
		{"GET", "/api/v1/pods?fieldSelector=spec.nodeName%3Dedge-1", res("list", "", "v1", "pods", "", "", "")},
		{"GET", "/api/v1/pods?fieldSelector=metadata.name%3D..", res("list", "", "v1", "pods", "", "", "")},
		{"GET", "/api/v1/pods?fieldSelector=%3D%3D%3D", res("list", "", "v1", "pods", "", "", "")},
		// named groups
		{"GET", "/apis/apps/v1/namespaces/default/deployments/web/scale", res("get", "apps", "v1", "deployments", "scale", "default", "web")},
		{"PUT", "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/edge-1", res("update", "coordination.k8s.io", "v1", "leases", "", "kube-node-lease", "edge-1")},
		{"GET", "/apis/discovery.k8s.io/v1/endpointslices?watch=true", res("watch", "discovery.k8s.io", "v1", "endpointslices", "", "", "")},
		// empty segments are kept, as the API server keeps them
		{"GET", "/api/v1/namespaces//secrets/db", res("get", "", "v1", "secrets", "", "", "db")},
	} {
		u, err := url.Parse(tc.url)
		if err != nil {
			t.Fatal(err)
		}
		tc.want.Path = u.Path
		if got := ParseAttributes(tc.method, u.Path, u.Query()); got != tc.want {
			t.Errorf("ParseAttributes(%s %s) = %+v, want %+v", tc.method, tc.url, got, tc.want)
		}
	}
}

func TestParseNonResource(t *testing.T) {
	for _, tc := range []struct {
		method, path, verb string
	}{
		{"GET", "/", "get"},
		{"GET", "/api", "get"},
		{"GET", "/api/v1", "get"},
		{"GET", "/apis", "get"},
		{"GET", "/apis/apps", "get"},
		{"GET", "/apis/apps/v1", "get"},
		{"HEAD", "/healthz", "get"},
		{"GET", "/readyz", "get"},
		{"GET", "/version", "get"},
		{"GET", "/openapi/v3/apis/apps/v1", "get"},
		{"GET", "/metrics", "get"},
		{"POST", "/debug/pprof/profile", "post"},
		{"GET", "/api/v1/watch", "get"},
		{"GET", "/other/v1/pods", "get"},
	} {
		got := ParseAttributes(tc.method, tc.path, nil)
		want := Attributes{Path: tc.path, Verb: tc.verb}
		if got != want {
			t.Errorf("ParseAttributes(%s %s) = %+v, want %+v", tc.method, tc.path, got, want)
		}
	}
}

// FuzzParseAttributes checks that no URL makes the parser panic, and that
// what it returns is self-consistent.
func FuzzParseAttributes(f *testing.F) {
	for _, s := range []string{
		"/api/v1/namespaces/default/pods/web/status",
		"/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/edge-1",
		"/api/v1/watch/secrets?fieldSelector=metadata.name%3Ddb",
		"/api/v1/namespaces/x?watch=true", "/", "//", "/api//", "/apis/a/b/watch",
	} {
		f.Add("GET", s)
	}
	f.Fuzz(func(t *testing.T, method, rawURL string) {
		u, err := url.Parse(rawURL)
		if err != nil {
			return
		}
		a := ParseAttributes(method, u.Path, u.Query())
		if a.Path != u.Path {
			t.Errorf("Path = %q, want %q", a.Path, u.Path)
		}
		if !a.ResourceRequest {
			if a.Resource != "" || a.Name != "" || a.Namespace != "" {
				t.Errorf("non-resource request with resource fields: %+v", a)
			}
			return
		}
		switch a.Verb {
		case "", "get", "list", "watch", "create", "update", "patch", "delete", "deletecollection":
		default:
			t.Errorf("verb %q", a.Verb)
		}
		if strings.Contains(a.Name, "/") || strings.Contains(a.Resource, "/") {
			t.Errorf("slash in a path segment: %+v", a)
		}
	})
}

func BenchmarkParseAttributes(b *testing.B) {
	u, _ := url.Parse("/api/v1/namespaces/default/pods?labelSelector=app%3Dweb&limit=500")
	for b.Loop() {
		ParseAttributes("GET", u.Path, u.Query())
	}
}
