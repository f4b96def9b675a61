package metrics

import (
	"fmt"
	"net/http/httptest"
	"testing"
)

func TestParseRequest(t *testing.T) {
	res := func(verb, group, version, resource, subresource, scope string) requestInfo {
		return requestInfo{target: target{group, version, resource, subresource}, verb: verb, scope: scope}
	}
	tests := []struct {
		method, url string
		contentType string
		want        requestInfo
		notAPI      bool
	}{
		// Discovery.
		{method: "GET", url: "/api", want: res("GET", "", "", "", "", "")},
		{method: "GET", url: "/api/", want: res("GET", "", "", "", "", "")},
		{method: "GET", url: "/api/v1", want: res("GET", "", "v1", "", "", "")},
		{method: "GET", url: "/apis", want: res("GET", "", "", "", "", "")},
		{method: "GET", url: "/apis/apps", want: res("GET", "apps", "", "", "", "")},
		{method: "GET", url: "/apis/apps/v1", want: res("GET", "apps", "v1", "", "", "")},

		// Reads.
		{method: "GET", url: "/api/v1/pods", want: res("LIST", "", "v1", "pods", "", "cluster")},
		{method: "HEAD", url: "/api/v1/pods", want: res("LIST", "", "v1", "pods", "", "cluster")},
		{method: "GET", url: "/api/v1/namespaces/default/pods?limit=500", want: res("LIST", "", "v1", "pods", "", "namespace")},
		{method: "GET", url: "/api/v1/namespaces/default/pods/web-1", want: res("GET", "", "v1", "pods", "", "resource")},
		{method: "GET", url: "/api/v1/namespaces/default/pods/web-1/status", want: res("GET", "", "v1", "pods", "status", "resource")},
		{method: "GET", url: "/apis/apps/v1/deployments", want: res("LIST", "apps", "v1", "deployments", "", "cluster")},
		{method: "GET", url: "/apis/apps/v1/namespaces/shop/deployments/web", want: res("GET", "apps", "v1", "deployments", "", "resource")},
		{method: "GET", url: "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases", want: res("LIST", "coordination.k8s.io", "v1", "leases", "", "namespace")},

		// Namespaces name themselves.
		{method: "GET", url: "/api/v1/namespaces", want: res("LIST", "", "v1", "namespaces", "", "cluster")},
		{method: "GET", url: "/api/v1/namespaces/kube-system", want: res("GET", "", "v1", "namespaces", "", "resource")},
		{method: "PUT", url: "/api/v1/namespaces/gone/finalize", want: res("PUT", "", "v1", "namespaces", "finalize", "resource")},
		{method: "PUT", url: "/api/v1/namespaces/gone/status", want: res("PUT", "", "v1", "namespaces", "status", "resource")},

		// Watches.
		{method: "GET", url: "/api/v1/namespaces/default/pods?watch=true", want: res("WATCH", "", "v1", "pods", "", "namespace")},
		{method: "GET", url: "/api/v1/pods?watch=1&resourceVersion=10", want: res("WATCH", "", "v1", "pods", "", "cluster")},
		{method: "GET", url: "/api/v1/pods?watch=True", want: res("WATCH", "", "v1", "pods", "", "cluster")},
		{method: "GET", url: "/api/v1/pods?watch=false", want: res("LIST", "", "v1", "pods", "", "cluster")},
		{method: "GET", url: "/api/v1/pods?watch=0", want: res("LIST", "", "v1", "pods", "", "cluster")},
		{method: "GET", url: "/api/v1/pods?allowWatchBookmarks=true", want: res("LIST", "", "v1", "pods", "", "cluster")},
		{method: "GET", url: "/api/v1/watch/pods", want: res("WATCH", "", "v1", "pods", "", "cluster")},
		{method: "GET", url: "/api/v1/watch/namespaces/default/pods", want: res("WATCH", "", "v1", "pods", "", "namespace")},
		{method: "GET", url: "/api/v1/watch/namespaces/default/pods/web-1", want: res("WATCH", "", "v1", "pods", "", "resource")},
		{method: "GET", url: "/apis/apps/v1/watch/namespaces/shop/deployments", want: res("WATCH", "apps", "v1", "deployments", "", "namespace")},
		{method: "GET", url: "/api/v1/watch/namespaces", want: res("WATCH", "", "v1", "namespaces", "", "cluster")},

		// Writes: a create is scoped to the resource, as upstream reports it.
		{method: "POST", url: "/api/v1/namespaces/default/pods", want: res("POST", "", "v1", "pods", "", "resource")},
		{method: "POST", url: "/api/v1/namespaces", want: res("POST", "", "v1", "namespaces", "", "resource")},
		{method: "POST", url: "/api/v1/namespaces/default/pods/web-1/eviction", want: res("POST", "", "v1", "pods", "eviction", "resource")},
		{method: "PUT", url: "/api/v1/namespaces/default/pods/web-1/status", want: res("PUT", "", "v1", "pods", "status", "resource")},
		{method: "PATCH", url: "/apis/apps/v1/namespaces/shop/deployments/web/scale", contentType: "application/merge-patch+json", want: res("PATCH", "apps", "v1", "deployments", "scale", "resource")},
		{method: "PATCH", url: "/apis/apps/v1/namespaces/shop/deployments/web", contentType: "application/apply-patch+yaml", want: res("APPLY", "apps", "v1", "deployments", "", "resource")},
		{method: "PATCH", url: "/apis/apps/v1/namespaces/shop/deployments/web", contentType: "application/apply-patch+yaml; charset=utf-8", want: res("APPLY", "apps", "v1", "deployments", "", "resource")},
		{method: "DELETE", url: "/api/v1/namespaces/default/pods/web-1", want: res("DELETE", "", "v1", "pods", "", "resource")},
		// deletecollection: upstream reports DELETE; the scope tells them apart.
		{method: "DELETE", url: "/api/v1/namespaces/default/pods", want: res("DELETE", "", "v1", "pods", "", "namespace")},
		{method: "DELETE", url: "/api/v1/nodes", want: res("DELETE", "", "v1", "nodes", "", "cluster")},

		// Connections to pods and nodes.
		{method: "GET", url: "/api/v1/namespaces/default/pods/web-1/log?follow=true", want: res("CONNECT", "", "v1", "pods", "log", "resource")},
		{method: "POST", url: "/api/v1/namespaces/default/pods/web-1/exec?command=sh", want: res("CONNECT", "", "v1", "pods", "exec", "resource")},
		{method: "GET", url: "/api/v1/nodes/edge-1/proxy/metrics/cadvisor", want: res("CONNECT", "", "v1", "nodes", "proxy", "resource")},

		// Other methods stay bounded.
		{method: "OPTIONS", url: "/api/v1/pods", want: res("other", "", "v1", "pods", "", "cluster")},
		{method: "BREW", url: "/api/v1/pods", want: res("other", "", "v1", "pods", "", "cluster")},
		{method: "get", url: "/api/v1/pods", want: res("LIST", "", "v1", "pods", "", "cluster")},

		// Paths that name no resource: an empty target.
		{method: "GET", url: "/api/v1/watch", want: res("GET", "", "", "", "", "")},
		{method: "GET", url: "/api/v1/watch/?watch=true", want: res("WATCH", "", "", "", "", "")},
		{method: "GET", url: "/api/v1/namespaces/default//web-1", want: res("GET", "", "", "", "", "")},
		{method: "POST", url: "/apis//v1/things", want: res("POST", "", "", "", "", "")},

		// Not the API.
		{method: "GET", url: "/", notAPI: true},
		{method: "GET", url: "/apix", notAPI: true},
		{method: "GET", url: "/apiserver/v1/pods", notAPI: true},
		{method: "GET", url: "/healthz", notAPI: true},
		{method: "GET", url: "/openapi/v2", notAPI: true},
		{method: "GET", url: "/metrics", notAPI: true},
	}
	for _, tt := range tests {
		r := httptest.NewRequest(tt.method, tt.url, nil)
		if tt.contentType != "" {
			r.Header.Set("Content-Type", tt.contentType)
		}
		got, ok := parseRequest(r)
		if ok != !tt.notAPI {
			t.Errorf("parseRequest(%s %s) ok = %v, want %v", tt.method, tt.url, ok, !tt.notAPI)
			continue
		}
		if ok && got != tt.want {
			t.Errorf("parseRequest(%s %s) = %+v, want %+v", tt.method, tt.url, got, tt.want)
		}
	}
}

func TestTargetsLabel(t *testing.T) {
	pods := target{version: "v1", resource: "pods"}
	var s targets
	if got := s.label(pods, 404); got != (target{}) {
		t.Errorf("label(pods, 404) before any success = %+v, want the empty target", got)
	}
	if got := s.label(pods, 401); got != (target{}) {
		t.Errorf("label(pods, 401) before any success = %+v, want the empty target", got)
	}
	if got := s.label(pods, 200); got != pods {
		t.Errorf("label(pods, 200) = %+v, want %+v", got, pods)
	}
	if got := s.label(pods, 404); got != pods {
		t.Errorf("label(pods, 404) after a success = %+v, want %+v", got, pods)
	}
	for i := range maxTargets + 10 {
		s.label(target{group: "g", version: "v1", resource: fmt.Sprintf("r%d", i)}, 200)
	}
	if n := len(s.seen); n != maxTargets {
		t.Errorf("targets admitted %d after %d successes, want the cap %d", n, maxTargets+11, maxTargets)
	}
	if got := s.label(pods, 200); got != pods {
		t.Errorf("label(pods, 200) at the cap = %+v, want %+v", got, pods)
	}
	if got := s.label(target{version: "v1", resource: "new"}, 200); got != (target{}) {
		t.Errorf("label(new, 200) at the cap = %+v, want the empty target", got)
	}
}
