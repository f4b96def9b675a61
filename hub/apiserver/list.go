package apiserver

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/outpost-mesh/outpost/hub/store"
)

// listOptions are the parsed query parameters of a list or watch.
type listOptions struct {
	label        labels.Selector
	field        fields.Selector
	limit        int64
	cont         *continueToken
	rv           string
	rvMatch      string
	bookmarks    bool
	timeout      int64
	initialEvent bool // sendInitialEvents
}

// continueToken is the opaque continue value, in upstream's shape.
type continueToken struct {
	APIVersion string `json:"v"`
	RV         int64  `json:"rv"`
	Start      string `json:"start"`
}

func encodeContinue(rev int64, start string) string {
	b, _ := json.Marshal(continueToken{APIVersion: "meta.k8s.io/v1", RV: rev, Start: start})
	return base64.RawURLEncoding.EncodeToString(b)
}

func (q *request) parseListOptions() (listOptions, error) {
	v := q.r.URL.Query()
	var o listOptions
	var err error
	if o.label, err = labels.Parse(v.Get("labelSelector")); err != nil {
		return o, apierrors.NewBadRequest(fmt.Sprintf("unable to parse requirement: %v", err))
	}
	fs := v.Get("fieldSelector")
	if q.ri.name != "" { // GET .../pods/NAME?watch=1 watches one object
		if fs != "" {
			fs += ","
		}
		fs += "metadata.name=" + q.ri.name
	}
	if o.field, err = fields.ParseSelector(fs); err != nil {
		return o, apierrors.NewBadRequest(fmt.Sprintf("invalid field selector: %v", err))
	}
	for _, r := range o.field.Requirements() {
		if !q.res.fieldKeys[r.Field] {
			return o, apierrors.NewBadRequest(fmt.Sprintf("field label not supported: %s", r.Field))
		}
	}
	if s := v.Get("limit"); s != "" {
		if o.limit, err = strconv.ParseInt(s, 10, 64); err != nil || o.limit < 0 {
			return o, apierrors.NewBadRequest(fmt.Sprintf("invalid limit %q", s))
		}
	}
	if s := v.Get("continue"); s != "" {
		b, err := base64.RawURLEncoding.DecodeString(s)
		var t continueToken
		if err != nil || json.Unmarshal(b, &t) != nil || t.RV <= 0 || t.APIVersion != "meta.k8s.io/v1" {
			return o, apierrors.NewBadRequest("continue key is not valid: ill-formed continue token")
		}
		o.cont = &t
	}
	o.rv = v.Get("resourceVersion")
	o.rvMatch = v.Get("resourceVersionMatch")
	switch o.rvMatch {
	case "", "Exact", "NotOlderThan":
	default:
		return o, apierrors.NewBadRequest(fmt.Sprintf("resourceVersionMatch %q is not one of Exact, NotOlderThan", o.rvMatch))
	}
	o.initialEvent = isTrue(v.Get("sendInitialEvents"))
	switch {
	case q.verb == "watch" && o.initialEvent:
		// A streaming list (client-go's WatchList): the state now, then
		// a bookmark marking its end, then changes.
		if o.rvMatch != "NotOlderThan" {
			return o, apierrors.NewBadRequest("sendInitialEvents requires resourceVersionMatch=NotOlderThan")
		}
	case q.verb == "watch" && o.rvMatch != "":
		return o, apierrors.NewBadRequest("resourceVersionMatch is forbidden for watch unless sendInitialEvents is set")
	case o.rvMatch != "" && o.rv == "":
		return o, apierrors.NewBadRequest("resourceVersionMatch requires resourceVersion")
	}
	if o.cont != nil && o.rv != "" && o.rv != "0" {
		return o, apierrors.NewBadRequest("specifying resource version is not allowed when using continue")
	}
	if o.rv != "" {
		if n, err := strconv.ParseInt(o.rv, 10, 64); err != nil || n < 0 {
			return o, apierrors.NewBadRequest(fmt.Sprintf("invalid resource version %q", o.rv))
		}
	}
	o.bookmarks = isTrue(v.Get("allowWatchBookmarks"))
	if s := v.Get("timeoutSeconds"); s != "" {
		if o.timeout, err = strconv.ParseInt(s, 10, 64); err != nil || o.timeout < 0 {
			return o, apierrors.NewBadRequest(fmt.Sprintf("invalid timeoutSeconds %q", s))
		}
	}
	return o, nil
}

// matches reports whether obj passes the selectors.
func (res *resourceInfo) matches(obj runtime.Object, o listOptions) bool {
	m, err := meta.Accessor(obj)
	if err != nil {
		return false
	}
	if !o.label.Empty() && !o.label.Matches(labels.Set(m.GetLabels())) {
		return false
	}
	if !o.field.Empty() {
		set := res.Rules.Fields(obj)
		if set == nil {
			set = fields.Set{}
		}
		set["metadata.name"] = m.GetName()
		if res.Namespaced {
			set["metadata.namespace"] = m.GetNamespace()
		}
		if !o.field.Matches(set) {
			return false
		}
	}
	return true
}

func (q *request) list() error {
	o, err := q.parseListOptions()
	if err != nil {
		return err
	}
	list, err := q.s.listObjects(q.r, q.res, q.ri.namespace, o)
	if err != nil {
		return err
	}
	return q.respond(http.StatusOK, list)
}

// listObjects reads one page of the objects under namespace that pass the
// selectors, consistent at one revision.
func (s *Server) listObjects(r *http.Request, res *resourceInfo, ns string, o listOptions) (runtime.Object, error) {
	ctx := r.Context()
	prefix := res.listPrefix(ns)
	var rev int64
	start := ""
	switch {
	case o.cont != nil:
		rev, start = o.cont.RV, o.cont.Start
		if len(start) < len(prefix) || start[:len(prefix)] != prefix {
			return nil, apierrors.NewBadRequest("continue key is not valid: it is for another list")
		}
	case o.rvMatch == "Exact":
		rev, _ = strconv.ParseInt(o.rv, 10, 64)
	case o.rv != "" && o.rv != "0":
		// NotOlderThan: the latest state is never older, unless the
		// client has seen a revision this store has not.
		want, _ := strconv.ParseInt(o.rv, 10, 64)
		cur, err := s.store.Revision(ctx)
		if err != nil {
			return nil, storeError(err, res.gr, "")
		}
		if want > cur {
			return nil, apierrors.NewTimeoutError(fmt.Sprintf("Too large resource version: %d, current: %d", want, cur), 1)
		}
	}
	var items []runtime.Object
	more, next := false, ""
	batch := int64(500)
	if o.limit > 0 && o.limit < batch && o.label.Empty() && o.field.Empty() {
		batch = o.limit + 1
	}
	for {
		page, err := s.store.List(ctx, prefix, store.ListOptions{Revision: rev, Limit: batch, Continue: start})
		if err != nil {
			if errors.Is(err, store.ErrCompacted) && o.cont != nil {
				return nil, apierrors.NewResourceExpired("The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter, or use the continue token in this response to retrieve the remainder of the results. Continuing with the provided token results in an inconsistent list - objects that were created, modified, or deleted between the time the first chunk was returned and now may show up in the list.")
			}
			if errors.Is(err, store.ErrCompacted) {
				return nil, apierrors.NewResourceExpired(fmt.Sprintf("too old resource version: %d", rev))
			}
			return nil, storeError(err, res.gr, "")
		}
		rev = page.Revision
		for _, kv := range page.KVs {
			if o.limit > 0 && int64(len(items)) == o.limit {
				more, next = true, kv.Key
				break
			}
			obj, err := res.decode(kv)
			if err != nil {
				return nil, apierrors.NewInternalError(err)
			}
			if res.matches(obj, o) {
				items = append(items, obj)
			}
		}
		if more || !page.More {
			if !more && o.limit > 0 && int64(len(items)) == o.limit && page.More {
				more, next = true, page.Continue
			}
			break
		}
		start = page.Continue
	}
	list := res.NewList()
	if err := meta.SetList(list, items); err != nil {
		return nil, apierrors.NewInternalError(err)
	}
	lm, err := meta.ListAccessor(list)
	if err != nil {
		return nil, apierrors.NewInternalError(err)
	}
	lm.SetResourceVersion(strconv.FormatInt(rev, 10))
	if more {
		lm.SetContinue(encodeContinue(rev, next))
	}
	list.GetObjectKind().SetGroupVersionKind(res.GroupVersion.WithKind(res.Kind + "List"))
	return list, nil
}
