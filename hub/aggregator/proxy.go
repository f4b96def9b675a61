package aggregator

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apiregistrationv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"

	"github.com/outpost-mesh/outpost/hub/registry/apiregistration"
)

// User is the identity a proxied request is made for, which the hub has
// authenticated and authorized.
type User struct {
	Name   string
	UID    string // "" sends none
	Groups []string
	Extra  map[string][]string
}

// The request headers that carry the user to an aggregated API server,
// as upstream's front proxy sets them (the default
// --requestheader-*-headers).
const (
	HeaderUser        = "X-Remote-User"
	HeaderUID         = "X-Remote-Uid"
	HeaderGroup       = "X-Remote-Group"
	HeaderExtraPrefix = "X-Remote-Extra-"
)

// setUserHeaders replaces h's identity headers with those of u: its
// credentials and impersonation headers go, and the X-Remote-* ones say
// who asked, as upstream's proxy handler does.
func setUserHeaders(h http.Header, u User) {
	h.Del("Authorization")
	for k := range h {
		if strings.HasPrefix(k, "Impersonate-") || strings.HasPrefix(k, "X-Remote-") {
			h.Del(k)
		}
	}
	h.Set(HeaderUser, u.Name)
	if u.UID != "" {
		h.Set(HeaderUID, u.UID)
	}
	for _, g := range u.Groups {
		h.Add(HeaderGroup, g)
	}
	for k, vs := range u.Extra {
		// Keys are escaped, as upstream's transport.SetAuthProxyHeaders.
		key := HeaderExtraPrefix + url.PathEscape(k)
		for _, v := range vs {
			h.Add(key, v)
		}
	}
}

// groupVersionOf returns the group and version of an /apis/GROUP/VERSION
// path (or a path under it), or false.
func groupVersionOf(path string) (group, version string, ok bool) {
	rest, ok := strings.CutPrefix(path, "/apis/")
	if !ok {
		return "", "", false
	}
	parts := strings.SplitN(rest, "/", 3)
	if len(parts) < 2 || parts[0] == "" || parts[1] == "" {
		return "", "", false
	}
	return parts[0], parts[1], true
}

// Proxy returns a handler that serves the requests for the group
// versions of service-backed APIServices by proxying them to their
// services, as the user userOf returns (false means none: 500), and
// passes every other request to next. A service that is not Available
// gets 503, as upstream answers.
//
// The caller has authenticated and authorized each request; Proxy only
// routes it.
func (r *Remote) Proxy(next http.Handler, userOf func(*http.Request) (User, bool)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		s := r.serviceBacked(req.URL.Path)
		if s == nil {
			next.ServeHTTP(w, req)
			return
		}
		if !apiregistration.IsAvailable(s) {
			writeError(w, apierrors.NewServiceUnavailable("service unavailable"))
			return
		}
		u, ok := userOf(req)
		if !ok {
			writeError(w, apierrors.NewInternalError(fmt.Errorf("no user for the request")))
			return
		}
		rt, err := r.transport(s)
		if err != nil {
			writeError(w, apierrors.NewServiceUnavailable(fmt.Sprintf("error trying to reach service: %v", err)))
			return
		}
		target := serviceURL(s.Spec.Service)
		p := &httputil.ReverseProxy{
			Rewrite: func(pr *httputil.ProxyRequest) {
				pr.SetURL(target)
				pr.Out.Host = target.Host
				setUserHeaders(pr.Out.Header, u)
			},
			Transport:     rt,
			FlushInterval: -1, // watches stream
			ErrorHandler: func(w http.ResponseWriter, _ *http.Request, err error) {
				writeError(w, apierrors.NewServiceUnavailable(fmt.Sprintf("error trying to reach service: %v", err)))
			},
		}
		p.ServeHTTP(w, req)
	})
}

// serviceBacked returns the service-backed APIService of path's group
// version, or nil when there is none (the hub serves it, or nobody).
func (r *Remote) serviceBacked(path string) *apiregistrationv1.APIService {
	group, version, ok := groupVersionOf(path)
	if !ok {
		return nil
	}
	s, err := r.apis.Get(version + "." + group)
	if err != nil || s.Spec.Service == nil {
		return nil
	}
	return s
}

// writeError answers with err's Status.
func writeError(w http.ResponseWriter, err *apierrors.StatusError) {
	st := err.ErrStatus
	st.Kind, st.APIVersion = "Status", "v1"
	b, _ := json.Marshal(st) // a Status always marshals
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(int(st.Code))
	w.Write(append(b, '\n'))
}
