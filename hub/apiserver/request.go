package apiserver

import (
	"net/http"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/runtime/schema"
)

// requestInfo is what the URL of an API request names.
type requestInfo struct {
	// Discovery paths: /api, /api/v1, /apis, /apis/G, /apis/G/V.
	discovery bool

	gv          schema.GroupVersion
	namespace   string // "" for cluster-scoped or all namespaces
	resource    string // plural
	name        string
	subresource string
	// watchPath is set for the legacy /api/v1/watch/... form.
	watchPath bool
}

// parsePath splits an API path. It reports false for paths outside /api and
// /apis.
func parsePath(path string) (requestInfo, bool) {
	var ri requestInfo
	parts := splitPath(path)
	if len(parts) == 0 {
		return ri, false
	}
	switch parts[0] {
	case "api":
		if len(parts) < 3 {
			ri.discovery = true
			if len(parts) == 2 {
				ri.gv = schema.GroupVersion{Version: parts[1]}
			}
			return ri, true
		}
		ri.gv = schema.GroupVersion{Version: parts[1]}
		parts = parts[2:]
	case "apis":
		if len(parts) < 4 {
			ri.discovery = true
			if len(parts) >= 2 {
				ri.gv.Group = parts[1]
			}
			if len(parts) == 3 {
				ri.gv.Version = parts[2]
			}
			return ri, true
		}
		ri.gv = schema.GroupVersion{Group: parts[1], Version: parts[2]}
		parts = parts[3:]
	default:
		return ri, false
	}
	if parts[0] == "watch" {
		ri.watchPath = true
		parts = parts[1:]
	}
	// namespaces/NS/RESOURCE/... (but "namespaces/NAME" and
	// "namespaces/NAME/status" name a namespace itself).
	if len(parts) >= 3 && parts[0] == "namespaces" && parts[2] != "status" && parts[2] != "finalize" {
		ri.namespace = parts[1]
		parts = parts[2:]
	}
	if len(parts) == 0 {
		return ri, false
	}
	ri.resource = parts[0]
	if len(parts) > 1 {
		ri.name = parts[1]
	}
	if len(parts) > 2 {
		ri.subresource = parts[2]
	}
	if len(parts) > 3 {
		return ri, false
	}
	return ri, true
}

func splitPath(p string) []string {
	p = strings.Trim(p, "/")
	if p == "" {
		return nil
	}
	return strings.Split(p, "/")
}

// verb maps an HTTP method and the request's shape to a Kubernetes verb.
func verb(r *http.Request, ri requestInfo) string {
	switch r.Method {
	case http.MethodGet, http.MethodHead:
		if ri.watchPath || isTrue(r.URL.Query().Get("watch")) {
			return "watch"
		}
		if ri.name == "" {
			return "list"
		}
		return "get"
	case http.MethodPost:
		return "create"
	case http.MethodPut:
		return "update"
	case http.MethodPatch:
		return "patch"
	case http.MethodDelete:
		if ri.name == "" {
			return "deletecollection"
		}
		return "delete"
	}
	return ""
}

// isTrue parses a boolean query parameter as upstream does.
func isTrue(s string) bool {
	b, err := strconv.ParseBool(s)
	return err == nil && b
}
