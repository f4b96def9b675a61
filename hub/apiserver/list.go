package apiserver

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strconv"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
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

// latestContinueRV is the revision of a continue token that continues
// at the latest revision, as upstream's inconsistent continuation (-1
// rather than 0, which a bad token would have).
const latestContinueRV = -1

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
		if err != nil || json.Unmarshal(b, &t) != nil || (t.RV <= 0 && t.RV != latestContinueRV) || t.APIVersion != "meta.k8s.io/v1" {
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
		set := res.fieldSet(obj)
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
	sc, f, err := q.openListResponse(o)
	if err != nil {
		return err
	}
	return q.serveList(sc, f)
}

// openListResponse negotiates the form of the request's list response and
// opens the scan of the objects o selects.
func (q *request) openListResponse(o listOptions) (*listScan, *listForm, error) {
	out, err := negotiate(q.r, q.res.codec, true)
	if err != nil {
		return nil, nil, err
	}
	f, err := q.listForm(out)
	if err != nil {
		return nil, nil, err
	}
	sc, err := q.s.openList(q.ctx(), q.res, q.ri.namespace, o)
	if err != nil {
		return nil, nil, err
	}
	return sc, f, nil
}
