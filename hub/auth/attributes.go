package auth

import (
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/fields"
)

// Attributes describe one API request as authorization sees it, the fields
// of upstream's RequestInfo.
type Attributes struct {
	// ResourceRequest is set for requests on a resource under /api/v1 or
	// /apis/<group>/<version>; the rest (discovery, /healthz, /version,
	// /openapi, /metrics, ...) are non-resource requests named by Path.
	ResourceRequest bool
	// Path is the request's URL path.
	Path string
	// Verb is get, list, watch, create, update, patch, delete or
	// deletecollection for resource requests ("" for a method the API does
	// not serve), and the lower-cased HTTP method for non-resource
	// requests, with HEAD as get.
	Verb string
	// APIGroup is "" for the core group.
	APIGroup    string
	APIVersion  string
	Resource    string // plural, such as "pods"
	Subresource string // such as "status"
	// Namespace is "" for cluster-scoped resources and requests across all
	// namespaces.
	Namespace string
	// Name is the object's name from the URL, or for a list or watch the
	// one a metadata.name field selector requires. A create's name is in
	// its body, which ParseAttributes does not read: a caller that needs
	// it (see NeedsCreateName) sets it.
	Name string
	// BoundObject is, for a create of serviceaccounts/token, the object
	// the TokenRequest's spec.boundObjectRef names, which is in the body:
	// a caller that needs it (see NeedsBoundObject) decodes the body as the
	// API server will and sets it. Nil when the request binds none.
	BoundObject *BoundObject
}

// BoundObject is the spec.boundObjectRef of a TokenRequest.
type BoundObject struct {
	APIVersion, Kind, Name, UID string
}

// ParseAttributes returns the attributes of a request with method on path
// (r.URL.Path: already unescaped) and query, the way upstream's
// RequestInfoFactory does, except where the hub's API server serves a
// request differently: a watch=true on a named object is a watch, and a
// method other than GET on a /watch/ path keeps its own verb. Authorizing
// the verb the server will act on matters more than matching upstream's
// quirks. It never fails: what it cannot
// parse is a non-resource request or has an empty verb, which only
// system:masters may make.
func ParseAttributes(method, path string, query url.Values) Attributes {
	a := Attributes{Path: path, Verb: strings.ToLower(method)}
	if method == http.MethodHead {
		a.Verb = "get"
	}
	parts := splitPath(path)
	if len(parts) < 3 || (parts[0] != "api" && parts[0] != "apis") {
		return a
	}
	if parts[0] == "apis" {
		if len(parts) < 4 {
			return a // discovery of a group or group version
		}
		a.APIGroup = parts[1]
		parts = parts[2:]
	} else {
		parts = parts[1:]
	}
	a.ResourceRequest = true
	a.APIVersion = parts[0]
	parts = parts[1:]

	watchPath := false
	if parts[0] == "watch" {
		if len(parts) < 2 {
			// upstream refuses /api/v1/watch; nothing to authorize
			return Attributes{Path: path, Verb: a.Verb}
		}
		watchPath = true
		parts = parts[1:]
	}
	switch method {
	case http.MethodGet, http.MethodHead:
		a.Verb = "get"
	case http.MethodPost:
		a.Verb = "create"
	case http.MethodPut:
		a.Verb = "update"
	case http.MethodPatch:
		a.Verb = "patch"
	case http.MethodDelete:
		a.Verb = "delete"
	default:
		a.Verb = ""
	}

	// namespaces/<ns>/<resource>/..., but namespaces/<name> and
	// namespaces/<name>/{status,finalize} name a namespace itself.
	if parts[0] == "namespaces" && len(parts) > 1 {
		a.Namespace = parts[1]
		if len(parts) > 2 && parts[2] != "status" && parts[2] != "finalize" {
			parts = parts[2:]
		}
	}
	a.Resource = parts[0]
	if len(parts) > 1 {
		a.Name = parts[1]
	}
	if len(parts) > 2 {
		a.Subresource = parts[2]
	}

	if a.Verb == "get" {
		switch watch := watchPath || isTrue(query.Get("watch")); {
		case watch:
			a.Verb = "watch"
		case a.Name == "":
			a.Verb = "list"
		}
		if a.Name == "" && a.Verb != "get" {
			a.Name = selectedName(query.Get("fieldSelector"))
		}
	}
	if a.Verb == "delete" && a.Name == "" {
		a.Verb = "deletecollection"
	}
	if connectCreate(a) && (method == http.MethodGet || method == http.MethodPost) {
		// kubectl asks with POST over SPDY and with GET for a WebSocket
		// upgrade; either opens a stream into the pod, so either needs
		// create, as upstream's AuthorizePodWebsocketUpgradeCreatePermission.
		a.Verb = "create"
	}
	return a
}

// connectCreate reports whether a names a subresource of a pod that
// opens a stream into it: exec, attach and portforward.
func connectCreate(a Attributes) bool {
	if a.APIGroup != "" || a.Resource != "pods" || a.Name == "" {
		return false
	}
	switch a.Subresource {
	case "exec", "attach", "portforward":
		return true
	}
	return false
}

// isTrue parses a boolean query parameter as the hub's API server does, so
// that both see the same verb.
func isTrue(s string) bool {
	b, err := strconv.ParseBool(s)
	return err == nil && b
}

// selectedName returns the name a field selector requires with
// metadata.name=<name>, or "".
func selectedName(selector string) string {
	if selector == "" {
		return ""
	}
	sel, err := fields.ParseSelector(selector)
	if err != nil {
		return ""
	}
	name, ok := sel.RequiresExactMatch("metadata.name")
	if !ok || name == "." || name == ".." || strings.ContainsAny(name, "/%") {
		return ""
	}
	return name
}

func splitPath(p string) []string {
	p = strings.Trim(p, "/")
	if p == "" {
		return nil
	}
	return strings.Split(p, "/")
}
