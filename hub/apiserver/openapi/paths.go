package openapi

import (
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/runtime/schema"
)

// param is one operation or path parameter.
type param struct {
	name, in, typ, description string
}

// Parameters of Kubernetes REST operations. Descriptions are short; the
// API conventions document has the long form.
var (
	paramPretty = param{"pretty", "query", "string", "If 'true', the output is pretty-printed."}

	paramDryRun          = param{"dryRun", "query", "string", "When present, the request is validated and admitted but not persisted. The only valid value is All."}
	paramFieldManager    = param{"fieldManager", "query", "string", "Name of the actor making the change, recorded in managedFields. Required for apply patches; at most 128 printable characters."}
	paramFieldValidation = param{"fieldValidation", "query", "string", "How the server treats unknown and duplicate fields in the request body: Ignore drops them silently, Warn (the default) drops them and returns a warning for each, Strict rejects the request with an error listing them."}
	paramForce           = param{"force", "query", "boolean", "Take ownership of fields that other managers own when applying. Only valid for apply patches; must be unset for other patch types."}

	paramAllowWatchBookmarks  = param{"allowWatchBookmarks", "query", "boolean", "Ask for BOOKMARK watch events, which carry only a resourceVersion to resume from. The server may send them at its discretion. Ignored by non-watch requests."}
	paramContinue             = param{"continue", "query", "string", "The continue token from the previous page of a paged list. The other list options must be the same as in the first request. A 410 Gone error means the token has expired and the list must start again."}
	paramFieldSelector        = param{"fieldSelector", "query", "string", "Only return objects whose fields match this selector, e.g. metadata.name=foo. Defaults to everything."}
	paramLabelSelector        = param{"labelSelector", "query", "string", "Only return objects whose labels match this selector, e.g. app=web,tier!=db. Defaults to everything."}
	paramLimit                = param{"limit", "query", "integer", "The most objects to return in one page of a list; the response's metadata.continue then fetches the next page."}
	paramResourceVersion      = param{"resourceVersion", "query", "string", "Which version of the data a list or watch starts from; see resourceVersionMatch. Defaults to the most recent."}
	paramResourceVersionMatch = param{"resourceVersionMatch", "query", "string", "How resourceVersion applies to a list: Exact or NotOlderThan. Defaults to NotOlderThan."}
	paramSendInitialEvents    = param{"sendInitialEvents", "query", "boolean", "With watch=true, start the watch with synthetic ADDED events for the current state followed by a bookmark annotated k8s.io/initial-events-end."}
	paramTimeoutSeconds       = param{"timeoutSeconds", "query", "integer", "Limit on the duration of a list or watch call, in seconds."}
	paramWatch                = param{"watch", "query", "boolean", "Stream changes (add, update, remove) of the matching objects instead of listing them; start from resourceVersion."}

	paramGracePeriodSeconds = param{"gracePeriodSeconds", "query", "integer", "Seconds before the object is deleted; zero deletes immediately. Defaults to the kind's own grace period."}
	paramOrphanDependents   = param{"orphanDependents", "query", "boolean", "Deprecated: use propagationPolicy. Whether dependents are orphaned rather than garbage collected."}
	paramPropagationPolicy  = param{"propagationPolicy", "query", "string", "Whether and how dependents are garbage collected: Orphan, Background or Foreground."}
)

var (
	listParams   = []param{paramAllowWatchBookmarks, paramContinue, paramFieldSelector, paramLabelSelector, paramLimit, paramResourceVersion, paramResourceVersionMatch, paramSendInitialEvents, paramTimeoutSeconds, paramWatch}
	writeParams  = []param{paramDryRun, paramFieldManager, paramFieldValidation}
	patchParams  = []param{paramDryRun, paramFieldManager, paramFieldValidation, paramForce}
	deleteParams = []param{paramDryRun, paramGracePeriodSeconds, paramOrphanDependents, paramPropagationPolicy}
)

// Body and media types.
var (
	patchTypes = []string{
		"application/json-patch+json",
		"application/merge-patch+json",
		"application/strategic-merge-patch+json",
		"application/apply-patch+yaml",
	}
	objectTypes = []string{"application/json", "application/yaml", "application/vnd.kubernetes.protobuf"}
	watchTypes  = []string{"application/json", "application/yaml", "application/vnd.kubernetes.protobuf",
		"application/json;stream=watch", "application/vnd.kubernetes.protobuf;stream=watch"}
)

// response is one response of an operation; ref names the definition of
// its body, or is empty.
type response struct {
	code        string
	description string
	ref         string
}

// operation is one HTTP method on one path.
type operation struct {
	method      string // get, put, post, patch, delete
	id          string
	description string
	tag         string
	action      string // x-kubernetes-action
	gvk         *schema.GroupVersionKind
	params      []param
	body        string // definition name of the request body, or ""
	patch       bool   // the body is a patch in one of patchTypes
	watch       bool   // the response is a stream of watch events
	responses   []response
}

// path is one URL path with its operations.
type path struct {
	path   string
	params []param // shared by all operations
	ops    []operation
}

// refs calls fn with every definition the operations of p refer to.
func (p *path) refs(fn func(string)) {
	for _, op := range p.ops {
		if op.body != "" {
			fn(op.body)
		}
		for _, r := range op.responses {
			if r.ref != "" {
				fn(r.ref)
			}
		}
	}
}

// Definition names of the metav1 types that operations refer to.
const (
	defStatus        = "io.k8s.apimachinery.pkg.apis.meta.v1.Status"
	defDeleteOptions = "io.k8s.apimachinery.pkg.apis.meta.v1.DeleteOptions"
	defWatchEvent    = "io.k8s.apimachinery.pkg.apis.meta.v1.WatchEvent"
	defPatch         = "io.k8s.apimachinery.pkg.apis.meta.v1.Patch"
	defResourceList  = "io.k8s.apimachinery.pkg.apis.meta.v1.APIResourceList"
)

// gvPrefix returns the URL path of a group version without the leading
// slash: "api/v1" or "apis/apps/v1".
func gvPrefix(gv schema.GroupVersion) string {
	if gv.Group == "" {
		return "api/" + gv.Version
	}
	return "apis/" + gv.Group + "/" + gv.Version
}

// gvIdent returns the group version as it appears in operation ids, e.g.
// CoreV1, AppsV1, RbacAuthorizationV1.
func gvIdent(gv schema.GroupVersion) string {
	g := strings.TrimSuffix(gv.Group, ".k8s.io")
	if g == "" {
		g = "core"
	}
	var b strings.Builder
	for w := range strings.FieldsFuncSeq(g, func(r rune) bool { return r == '.' || r == '-' }) {
		b.WriteString(strings.ToUpper(w[:1]) + w[1:])
	}
	return b.String() + strings.ToUpper(gv.Version[:1]) + gv.Version[1:]
}

// gvTag returns the tag of a group version's operations, e.g. core_v1.
func gvTag(gv schema.GroupVersion) string {
	id := gvIdent(gv)
	id = strings.TrimSuffix(id, strings.ToUpper(gv.Version[:1])+gv.Version[1:])
	return strings.ToLower(id[:1]) + id[1:] + "_" + gv.Version
}

var defaultVerbs = []string{"get", "list", "watch", "create", "update", "patch", "delete", "deletecollection"}

// kindPaths returns the paths serving one kind, in the order upstream
// lists them: collection, item, subresources, all namespaces, watches.
func kindPaths(k *Kind, objDef, listDef, scaleDef string) []path {
	gv := k.GVK.GroupVersion()
	verbs := k.Verbs
	if len(verbs) == 0 {
		verbs = defaultVerbs
	}
	has := func(v string) bool { return slices.Contains(verbs, v) }
	gvk := k.GVK
	id := gvIdent(gv)
	tag := gvTag(gv)
	scope, base, scopeParams := "", "/"+gvPrefix(gv), []param(nil)
	if k.Namespaced {
		scope = "Namespaced"
		base += "/namespaces/{namespace}"
		scopeParams = []param{{"namespace", "path", "string", "object name and auth scope, such as for teams and projects"}}
	}
	nameParam := param{"name", "path", "string", "name of the " + k.GVK.Kind}
	op := func(method, verb, action, desc string, params []param, body string, resps ...response) operation {
		return operation{
			method: method, id: verb + id + scope + k.GVK.Kind, description: desc, tag: tag,
			action: action, gvk: &gvk, params: params, body: body, responses: resps,
		}
	}
	ok := func(ref string) response { return response{"200", "OK", ref} }
	created := response{"201", "Created", objDef}
	accepted := response{"202", "Accepted", objDef}
	unauthorized := response{"401", "Unauthorized", ""}

	var out []path
	coll := path{path: base + "/" + k.Plural, params: append(slices.Clone(scopeParams), paramPretty)}
	if has("list") {
		coll.ops = append(coll.ops, op("get", "list", "list", "list or watch objects of kind "+k.GVK.Kind, listParams, "", ok(listDef), unauthorized))
		coll.ops[len(coll.ops)-1].watch = true
	}
	if has("create") {
		coll.ops = append(coll.ops, op("post", "create", "post", "create a "+k.GVK.Kind, writeParams, objDef, ok(objDef), created, accepted, unauthorized))
	}
	if has("deletecollection") {
		o := op("delete", "delete", "deletecollection", "delete collection of "+k.GVK.Kind,
			append(slices.Clone(deleteParams), listParams...), defDeleteOptions, ok(defStatus), unauthorized)
		o.id = "delete" + id + "Collection" + scope + k.GVK.Kind
		coll.ops = append(coll.ops, o)
	}
	if len(coll.ops) > 0 {
		out = append(out, coll)
	}

	item := path{path: coll.path + "/{name}", params: append(slices.Clone(scopeParams), nameParam, paramPretty)}
	if has("get") {
		item.ops = append(item.ops, op("get", "read", "get", "read the specified "+k.GVK.Kind, nil, "", ok(objDef), unauthorized))
	}
	if has("update") {
		item.ops = append(item.ops, op("put", "replace", "put", "replace the specified "+k.GVK.Kind, writeParams, objDef, ok(objDef), created, unauthorized))
	}
	if has("patch") {
		o := op("patch", "patch", "patch", "partially update the specified "+k.GVK.Kind, patchParams, defPatch, ok(objDef), created, unauthorized)
		o.patch = true
		item.ops = append(item.ops, o)
	}
	if has("delete") {
		item.ops = append(item.ops, op("delete", "delete", "delete", "delete a "+k.GVK.Kind, deleteParams, defDeleteOptions,
			ok(defStatus), response{"202", "Accepted", defStatus}, unauthorized))
	}
	if len(item.ops) > 0 {
		out = append(out, item)
	}

	for _, sub := range k.Subresources {
		subDef, subGVK := objDef, gvk
		switch sub {
		case "status":
		case "scale":
			subDef, subGVK = scaleDef, scaleGVK
		default:
			continue // not described; see Kind.Subresources
		}
		title := strings.ToUpper(sub[:1]) + sub[1:]
		p := path{path: item.path + "/" + sub, params: item.params}
		sop := func(method, verb, action, desc string, params []param, body string, resps ...response) operation {
			o := op(method, verb, action, desc, params, body, resps...)
			o.id += title
			o.gvk = &subGVK
			return o
		}
		subOK := ok(subDef)
		subCreated := response{"201", "Created", subDef}
		if has("get") {
			p.ops = append(p.ops, sop("get", "read", "get", "read "+sub+" of the specified "+k.GVK.Kind, nil, "", subOK, unauthorized))
		}
		if has("update") {
			p.ops = append(p.ops, sop("put", "replace", "put", "replace "+sub+" of the specified "+k.GVK.Kind, writeParams, subDef, subOK, subCreated, unauthorized))
		}
		if has("patch") {
			o := sop("patch", "patch", "patch", "partially update "+sub+" of the specified "+k.GVK.Kind, patchParams, defPatch, subOK, subCreated, unauthorized)
			o.patch = true
			p.ops = append(p.ops, o)
		}
		if len(p.ops) > 0 {
			out = append(out, p)
		}
	}

	if k.Namespaced && has("list") {
		o := op("get", "list", "list", "list or watch objects of kind "+k.GVK.Kind, listParams, "", ok(listDef), unauthorized)
		o.id = "list" + id + k.GVK.Kind + "ForAllNamespaces"
		o.watch = true
		out = append(out, path{path: "/" + gvPrefix(gv) + "/" + k.Plural, params: []param{paramPretty}, ops: []operation{o}})
	}

	if has("watch") {
		watchBase := "/" + gvPrefix(gv) + "/watch"
		if k.Namespaced {
			watchBase += "/namespaces/{namespace}"
		}
		w := func(p string, params []param, verb, action, desc string) path {
			o := op("get", "watch", action, desc, listParams, "", ok(defWatchEvent), unauthorized)
			o.id = verb
			o.watch = true
			return path{path: p, params: append(params, paramPretty), ops: []operation{o}}
		}
		out = append(out,
			w(watchBase+"/"+k.Plural, slices.Clone(scopeParams), "watch"+id+scope+k.GVK.Kind+"List", "watchlist",
				"watch individual changes to a list of "+k.GVK.Kind+". deprecated: use the 'watch' parameter with a list operation instead."),
			w(watchBase+"/"+k.Plural+"/{name}", append(slices.Clone(scopeParams), nameParam), "watch"+id+scope+k.GVK.Kind, "watch",
				"watch changes to an object of kind "+k.GVK.Kind+". deprecated: use the 'watch' parameter with a list operation instead, filtered to a single item with the 'fieldSelector' parameter."))
		if k.Namespaced {
			out = append(out, w("/"+gvPrefix(gv)+"/watch/"+k.Plural, nil, "watch"+id+k.GVK.Kind+"ListForAllNamespaces", "watchlist",
				"watch individual changes to a list of "+k.GVK.Kind+". deprecated: use the 'watch' parameter with a list operation instead."))
		}
	}
	return out
}

// resourcesPath returns the path that lists a group version's resources.
func resourcesPath(gv schema.GroupVersion) path {
	return path{path: "/" + gvPrefix(gv) + "/", ops: []operation{{
		method: "get", id: "get" + gvIdent(gv) + "APIResources", description: "get available resources",
		tag: gvTag(gv), responses: []response{{"200", "OK", defResourceList}, {"401", "Unauthorized", ""}},
	}}}
}

// renderV2 returns the Swagger 2.0 path item of p.
func (p *path) renderV2() map[string]any {
	item := make(map[string]any, len(p.ops)+1)
	if len(p.params) > 0 {
		item["parameters"] = renderParamsV2(p.params)
	}
	for _, op := range p.ops {
		o := map[string]any{
			"description": op.description,
			"operationId": op.id,
			"tags":        []string{op.tag},
			"schemes":     []string{"https"},
			"consumes":    []string{"*/*"},
			"produces":    objectTypes,
		}
		if op.patch {
			o["consumes"] = patchTypes
		}
		if op.watch {
			o["produces"] = watchTypes
		}
		params := renderParamsV2(op.params)
		if op.body != "" {
			body := map[string]any{"name": "body", "in": "body", "required": op.method != "delete",
				"schema": map[string]any{"$ref": "#/definitions/" + op.body}}
			params = append([]any{body}, params...)
		}
		if len(params) > 0 {
			o["parameters"] = params
		}
		resps := make(map[string]any, len(op.responses))
		for _, r := range op.responses {
			rm := map[string]any{"description": r.description}
			if r.ref != "" {
				rm["schema"] = map[string]any{"$ref": "#/definitions/" + r.ref}
			}
			resps[r.code] = rm
		}
		o["responses"] = resps
		addOpExt(o, &op)
		item[op.method] = o
	}
	return item
}

func renderParamsV2(ps []param) []any {
	out := make([]any, 0, len(ps))
	for _, p := range ps {
		m := map[string]any{"name": p.name, "in": p.in, "type": p.typ, "uniqueItems": true, "description": p.description}
		if p.in == "path" {
			m["required"] = true
		}
		out = append(out, m)
	}
	return out
}

// renderV3 returns the OpenAPI 3.0 path item of p.
func (p *path) renderV3() map[string]any {
	item := make(map[string]any, len(p.ops)+1)
	if len(p.params) > 0 {
		item["parameters"] = renderParamsV3(p.params)
	}
	for _, op := range p.ops {
		o := map[string]any{
			"description": op.description,
			"operationId": op.id,
			"tags":        []string{op.tag},
		}
		if len(op.params) > 0 {
			o["parameters"] = renderParamsV3(op.params)
		}
		if op.body != "" {
			ref := map[string]any{"schema": map[string]any{"$ref": "#/components/schemas/" + op.body}}
			content := map[string]any{"*/*": ref}
			if op.patch {
				content = make(map[string]any, len(patchTypes))
				for _, t := range patchTypes {
					content[t] = ref
				}
			}
			o["requestBody"] = map[string]any{"content": content, "required": op.method != "delete"}
		}
		types := objectTypes
		if op.watch {
			types = watchTypes
		}
		resps := make(map[string]any, len(op.responses))
		for _, r := range op.responses {
			rm := map[string]any{"description": r.description}
			if r.ref != "" {
				content := make(map[string]any, len(types))
				for _, t := range types {
					content[t] = map[string]any{"schema": map[string]any{"$ref": "#/components/schemas/" + r.ref}}
				}
				rm["content"] = content
			}
			resps[r.code] = rm
		}
		o["responses"] = resps
		addOpExt(o, &op)
		item[op.method] = o
	}
	return item
}

func renderParamsV3(ps []param) []any {
	out := make([]any, 0, len(ps))
	for _, p := range ps {
		m := map[string]any{"name": p.name, "in": p.in, "description": p.description,
			"schema": map[string]any{"type": p.typ, "uniqueItems": true}}
		if p.in == "path" {
			m["required"] = true
		}
		out = append(out, m)
	}
	return out
}

func addOpExt(o map[string]any, op *operation) {
	if op.action != "" {
		o[extAction] = op.action
	}
	if op.gvk != nil {
		o[extGVK] = gvkMap(*op.gvk)
	}
}

func gvkMap(gvk schema.GroupVersionKind) map[string]any {
	return map[string]any{"group": gvk.Group, "version": gvk.Version, "kind": gvk.Kind}
}
