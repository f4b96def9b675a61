package metrics

import (
	"mime"
	"net/http"
	"strings"
)

// target is what an API request addresses, as far as labels go. Names and
// namespaces are never part of it.
type target struct {
	group, version, resource, subresource string
}

// requestInfo is how a request is labelled, as kube-apiserver labels it.
type requestInfo struct {
	target
	// verb is upstream's reported verb: GET, LIST, WATCH, POST, PUT, PATCH,
	// APPLY, DELETE, CONNECT, or "other" for any other method.
	verb string
	// scope is "resource" (a named object, or a create), "namespace",
	// "cluster", or "" for discovery and paths that name no resource.
	scope string
}

// Reported verbs.
const (
	verbGet     = "GET"
	verbList    = "LIST"
	verbWatch   = "WATCH"
	verbApply   = "APPLY"
	verbConnect = "CONNECT"
	verbOther   = "other"
)

// longRunning reports whether the request may stay open indefinitely, as
// kube-apiserver's long-running check decides: watches and connections to a
// pod or node (logs, exec, attach, port-forward, proxy).
func (ri requestInfo) longRunning() bool {
	return ri.verb == verbWatch || ri.verb == verbConnect
}

// kind is the request_kind of apiserver_current_inflight_requests.
func (ri requestInfo) kind() string {
	if ri.verb == verbGet || ri.verb == verbList {
		return readOnlyKind
	}
	return mutatingKind
}

// connectSubresources are reported with the verb CONNECT, as upstream does.
var connectSubresources = map[string]bool{
	"attach": true, "exec": true, "log": true, "portforward": true, "proxy": true,
}

// reportedMethods are the methods reported as themselves; any other is
// reported as "other", so that the verb label stays bounded.
var reportedMethods = map[string]bool{
	http.MethodGet: true, http.MethodHead: true, http.MethodPost: true,
	http.MethodPut: true, http.MethodPatch: true, http.MethodDelete: true,
}

// parseRequest labels an API request following kube-apiserver's
// RequestInfoFactory and metrics.CleanVerb:
//
//	/api, /api/v1, /apis, /apis/G, /apis/G/V                 discovery
//	/api/v1/[watch/][namespaces/NS/]RESOURCE[/NAME[/SUB]]    core group
//	/apis/G/V/[watch/][namespaces/NS/]RESOURCE[/NAME[/SUB]]  named groups
//
// Segments after SUB (a proxy's path) are ignored; a path with an empty
// segment, or nothing after watch/, names no resource and gets an empty
// target. parseRequest reports false for paths outside /api and /apis. No
// I/O.
func parseRequest(r *http.Request) (requestInfo, bool) {
	var ri requestInfo
	path := r.URL.Path
	var gvLen int // path segments naming the group and version
	switch {
	case path == "/api" || strings.HasPrefix(path, "/api/"):
		gvLen = 1
	case path == "/apis" || strings.HasPrefix(path, "/apis/"):
		gvLen = 2
	default:
		return ri, false
	}
	parts := strings.Split(strings.Trim(path, "/"), "/")[1:]

	var (
		resourceRequest bool
		watchPath       bool
		namespace, name string
	)
	switch {
	case hasEmpty(parts):
		// Unknown: an empty target.
	case len(parts) <= gvLen:
		// Discovery.
		if gvLen == 1 {
			ri.version = at(parts, 0)
		} else {
			ri.group, ri.version = at(parts, 0), at(parts, 1)
		}
	default:
		var gv target
		if gvLen == 1 {
			gv.version = parts[0]
		} else {
			gv.group, gv.version = parts[0], parts[1]
		}
		rest := parts[gvLen:]
		watch := rest[0] == "watch"
		if watch {
			rest = rest[1:]
		}
		// namespaces/NS/RESOURCE/...; but namespaces/NS and its status
		// and finalize subresources name the namespace itself.
		ns := ""
		if len(rest) >= 2 && rest[0] == "namespaces" {
			ns = rest[1]
			if len(rest) > 2 && rest[2] != "status" && rest[2] != "finalize" {
				rest = rest[2:]
			}
		}
		if len(rest) == 0 {
			break // unknown: nothing after watch/
		}
		ri.target = gv
		ri.resource = rest[0]
		name = at(rest, 1)
		ri.subresource = at(rest, 2)
		namespace = ns
		watchPath = watch
		resourceRequest = true
	}

	method := strings.ToUpper(r.Method)
	switch {
	case !resourceRequest:
		ri.scope = ""
	case name != "" || method == http.MethodPost:
		ri.scope = "resource"
	case namespace != "":
		ri.scope = "namespace"
	default:
		ri.scope = "cluster"
	}

	switch {
	case !reportedMethods[method]:
		ri.verb = verbOther
	case method == http.MethodGet || method == http.MethodHead:
		if ri.scope == "resource" || ri.scope == "" {
			ri.verb = verbGet
		} else {
			ri.verb = verbList
		}
	default:
		ri.verb = method
	}
	switch {
	case watchPath && (ri.verb == verbGet || ri.verb == verbList):
		ri.verb = verbWatch
		return ri, true
	case method == http.MethodGet && watchQuery(r):
		ri.verb = verbWatch
	case method == http.MethodPatch && isApply(r.Header.Get("Content-Type")):
		ri.verb = verbApply
	}
	if resourceRequest && connectSubresources[ri.subresource] {
		ri.verb = verbConnect
	}
	return ri, true
}

// watchQuery reports whether the query asks for a watch, decoding the
// parameter as Kubernetes decodes booleans: anything but "false" and "0".
func watchQuery(r *http.Request) bool {
	if !strings.Contains(r.URL.RawQuery, "watch") {
		return false
	}
	v, ok := r.URL.Query()["watch"]
	if !ok || len(v) == 0 {
		return false
	}
	s := strings.ToLower(v[0])
	return s != "false" && s != "0"
}

// isApply reports whether a PATCH is a server-side apply.
func isApply(contentType string) bool {
	mt, _, err := mime.ParseMediaType(contentType)
	return err == nil && (mt == "application/apply-patch+yaml" || mt == "application/apply-patch+cbor")
}

func hasEmpty(parts []string) bool {
	for _, p := range parts {
		if p == "" {
			return true
		}
	}
	return false
}

// at returns parts[i], or "" past the end.
func at(parts []string, i int) string {
	if i < len(parts) {
		return parts[i]
	}
	return ""
}
