package hubd

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/pprof"
	"runtime"
	"strings"
	"sync/atomic"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/outpost-mesh/outpost/hub/aggregator"
	"github.com/outpost-mesh/outpost/hub/auth"
	"github.com/outpost-mesh/outpost/hub/store"
	"github.com/outpost-mesh/outpost/internal/version"
)

// The Kubernetes release whose API the hub serves, reported by /version.
const (
	kubeMajor      = "1"
	kubeMinor      = "33"
	kubeGitVersion = "v1.33.0"
)

// readyTimeout bounds the store check of /readyz.
const readyTimeout = 2 * time.Second

// apiHandler serves the hub's HTTP API: the Kubernetes API under /api and
// /apis, OpenAPI, the health endpoints and /version. A request needs the
// authorizer's consent as the user of its client certificate, which must be
// signed by the hub CA, or of its service account token when it presents
// no certificate, or as auth.Anonymous when it presents neither: then
// only health and version are served, and the rest is answered 401.
type apiHandler struct {
	// served counts the requests served, for idleReturn.
	served atomic.Uint64
	store  store.Reader
	authn  *certAuthenticator
	// tokens authenticates bearer tokens; nil refuses them all (401). Set
	// it before serving.
	tokens tokenAuthenticator
	authz  *auth.Authorizer
	log    *slog.Logger
	mux    *http.ServeMux
	// remote, once set, routes the requests for the group versions of
	// service-backed APIServices to their services (see aggregated).
	remote atomic.Pointer[aggregator.Remote]
}

// tokenAuthenticator authenticates the bearer token of a request: errors
// wrapping auth.ErrInvalidToken refuse it, others are failed lookups.
type tokenAuthenticator interface {
	Authenticate(ctx context.Context, token string) (auth.User, error)
}

func newAPIHandler(st store.Reader, roots *x509.CertPool, log *slog.Logger, api http.Handler, spec *openapiDocs, metrics http.Handler) *apiHandler {
	h := &apiHandler{
		store: st,
		authn: newCertAuthenticator(roots, time.Now),
		authz: auth.NewAuthorizer(storePods{st}, nil),
		log:   log,
		mux:   http.NewServeMux(),
	}
	h.mux.Handle("/metrics", metrics)
	for _, p := range []string{"/api", "/api/"} {
		h.mux.Handle(p, api)
	}
	for _, p := range []string{"/apis", "/apis/"} {
		h.mux.Handle(p, h.aggregated(api))
	}
	h.mux.HandleFunc("/openapi/v2", spec.ServeV2)
	h.mux.HandleFunc("/openapi/v3", spec.ServeV3)
	h.mux.HandleFunc("/openapi/v3/", spec.ServeV3)
	h.mux.HandleFunc("/livez", h.health("livez", nil))
	h.mux.HandleFunc("/readyz", h.health("readyz", h.checkStore))
	h.mux.HandleFunc("/healthz", h.health("healthz", h.checkStore))
	h.mux.HandleFunc("/version", h.version)
	// Go's profiles, as kube-apiserver serves them with --profiling (its
	// default), to system:masters only.
	h.mux.HandleFunc("/debug/pprof/", pprof.Index)
	h.mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	h.mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	h.mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	h.mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	h.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeStatus(w, http.StatusNotFound, "NotFound", "the server could not find the requested resource")
	})
	return h
}

func (h *apiHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	rec := &statusRecorder{ResponseWriter: w, code: http.StatusOK}
	user, ok, err := h.authenticate(r)
	switch {
	case err != nil:
		h.log.Warn("authentication failed", "method", r.Method, "path", r.URL.Path, "remote", r.RemoteAddr, "err", err)
		writeStatus(rec, http.StatusInternalServerError, "InternalError", "Internal error occurred: authentication failed")
	case !ok:
		writeStatus(rec, http.StatusUnauthorized, "Unauthorized", "Unauthorized")
	default:
		h.serveAs(rec, r, user)
	}
	h.log.Debug("api request", "method", r.Method, "path", r.URL.Path, "user", user.Name,
		"code", rec.code, "remote", r.RemoteAddr, "duration", time.Since(start))
}

// authenticate returns the user of r: the user its client certificate
// names if that chains to the hub CA for client authentication; else,
// without a certificate, the service account of its bearer token if the
// token holds; else auth.Anonymous. A certificate or token that does not
// hold fails the request (false), as upstream's authenticators fail it,
// rather than making it anonymous. An error is a failed lookup: nothing
// was decided.
func (h *apiHandler) authenticate(r *http.Request) (auth.User, bool, error) {
	if r.TLS == nil || len(r.TLS.PeerCertificates) == 0 {
		token, ok := bearerToken(r)
		if !ok {
			return auth.Anonymous, true, nil
		}
		if h.tokens == nil {
			return auth.User{}, false, nil
		}
		u, err := h.tokens.Authenticate(r.Context(), token)
		switch {
		case errors.Is(err, auth.ErrInvalidToken):
			h.log.Debug("bearer token rejected", "remote", r.RemoteAddr, "err", err)
			return auth.User{}, false, nil
		case err != nil:
			return auth.User{}, false, err
		}
		return u, true, nil
	}
	if err := h.authn.verify(r.TLS.PeerCertificates); err != nil {
		h.log.Debug("client certificate rejected", "remote", r.RemoteAddr, "subject", r.TLS.PeerCertificates[0].Subject.String(), "err", err)
		return auth.User{}, false, nil
	}
	// The leaf just verified (or was remembered whole, by the hash of the
	// chain): its subject is the user and its groups.
	return auth.UserFromCertificate(r.TLS.PeerCertificates[0]), true, nil
}

// serveAs serves r for user, who is authenticated: if the authorizer
// allows it. A request with impersonation headers is served as the user
// they name, if user may impersonate it (see impersonate). The request's
// context carries the user it is served as from here on (see
// auth.WithUser), for admission to know who asked.
func (h *apiHandler) serveAs(w http.ResponseWriter, r *http.Request, user auth.User) {
	h.served.Add(1)
	user, ok := h.impersonate(w, r, user)
	if !ok {
		return
	}
	r = r.WithContext(auth.WithUser(r.Context(), user))
	if h.authorize(w, r, user) {
		h.mux.ServeHTTP(w, r)
	}
}

// authorize reports whether user may make request r; when not, it has
// answered: 403 with upstream's Forbidden Status, 401 Unauthorized instead
// for a request without credentials (it should bring some), 404 for a
// node's request about a pod that does not exist, or 500 when a lookup the
// decision needs failed.
func (h *apiHandler) authorize(w http.ResponseWriter, r *http.Request, user auth.User) bool {
	attrs := auth.ParseAttributes(r.Method, r.URL.Path, r.URL.Query())
	if auth.NeedsCreateName(user, attrs) {
		name, err := createName(r, attrs)
		if err != nil {
			writeStatus(w, http.StatusBadRequest, "BadRequest", err.Error())
			return false
		}
		attrs.Name = name
	}
	if auth.NeedsBoundObject(user, attrs) {
		ref, err := tokenBoundObject(r)
		if err != nil {
			writeStatus(w, http.StatusBadRequest, "BadRequest", err.Error())
			return false
		}
		attrs.BoundObject = ref
	}
	d, err := h.authz.Authorize(r.Context(), user, attrs)
	if err != nil {
		h.log.Warn("authorization failed", "user", user.Name, "method", r.Method, "path", r.URL.Path, "err", err)
		writeStatus(w, http.StatusInternalServerError, "InternalError", "Internal error occurred: authorization failed")
		return false
	}
	if d.Allowed {
		return true
	}
	if user.IsAnonymous() {
		writeStatus(w, http.StatusUnauthorized, "Unauthorized", "Unauthorized")
		return false
	}
	if d.NotFound {
		st := apierrors.NewNotFound(schema.GroupResource{Group: attrs.APIGroup, Resource: attrs.Resource}, attrs.Name).ErrStatus
		st.Kind, st.APIVersion = "Status", "v1"
		writeJSON(w, http.StatusNotFound, st)
		return false
	}
	level := slog.LevelDebug
	if ownComponent(user) {
		// The hub's own controllers, denied by their roles: a gap in
		// the bootstrap policy, which an operator must be able to see.
		level = slog.LevelWarn
	}
	h.log.Log(r.Context(), level, "request forbidden", "user", user.Name, "method", r.Method, "path", r.URL.Path, "reason", d.Reason)
	writeForbidden(w, user, attrs, d.Reason)
	return false
}

// ownComponent reports whether u is (or is named as) one of the hub's
// controllers or its scheduler (see controllerUser).
func ownComponent(u auth.User) bool {
	_, ok := controllerUser(u.Name)
	return ok
}

// impersonate returns the user r is to be served as: user, or whom r's
// impersonation headers name if user may impersonate it, as upstream's
// impersonation filter allows (the verb impersonate on users, groups,
// serviceaccounts, and authentication.k8s.io's userextras and uids), with
// the headers then removed from r. When it returns false it has
// answered: 400 for headers that name no user, 403 when user may not
// impersonate what they name, 500 when a lookup failed.
func (h *apiHandler) impersonate(w http.ResponseWriter, r *http.Request, user auth.User) (auth.User, bool) {
	imp, ok, err := auth.ImpersonationOf(r.Header)
	switch {
	case err != nil:
		writeStatus(w, http.StatusBadRequest, "BadRequest", err.Error())
		return auth.User{}, false
	case !ok:
		return user, true
	}
	for _, a := range imp.Checks {
		d, err := h.authz.Authorize(r.Context(), user, a)
		switch {
		case err != nil:
			h.log.Warn("authorization of impersonation failed", "user", user.Name, "err", err)
			writeStatus(w, http.StatusInternalServerError, "InternalError", "Internal error occurred: authorization failed")
			return auth.User{}, false
		case !d.Allowed:
			h.log.Debug("impersonation forbidden", "user", user.Name, "as", imp.User.Name, "reason", d.Reason)
			writeForbidden(w, user, a, d.Reason)
			return auth.User{}, false
		}
	}
	auth.RemoveImpersonation(r.Header)
	return imp.User, true
}

// writeForbidden answers 403 with upstream's Forbidden Status for user's
// request attrs, denied for reason.
func writeForbidden(w http.ResponseWriter, user auth.User, attrs auth.Attributes, reason string) {
	msg := errors.New(auth.ForbiddenMessage(user, attrs, reason))
	var forbidden *apierrors.StatusError
	if attrs.ResourceRequest {
		forbidden = apierrors.NewForbidden(schema.GroupResource{Group: attrs.APIGroup, Resource: attrs.Resource}, attrs.Name, msg)
	} else {
		forbidden = apierrors.NewForbidden(schema.GroupResource{}, "", msg)
	}
	st := forbidden.ErrStatus
	st.Kind, st.APIVersion = "Status", "v1"
	writeJSON(w, http.StatusForbidden, st)
}

// check reports whether one part of the hub is healthy.
type check func(ctx context.Context) error

// health serves a Kubernetes-style health endpoint: "ok", or with ?verbose
// one line per check.
func (h *apiHandler) health(name string, storeCheck check) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/"+name {
			writeStatus(w, http.StatusNotFound, "NotFound", "the server could not find the requested resource")
			return
		}
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			writeStatus(w, http.StatusMethodNotAllowed, "MethodNotAllowed", fmt.Sprintf("the server does not allow this method on %s", r.URL.Path))
			return
		}
		var b strings.Builder
		failed := false
		b.WriteString("[+]ping ok\n")
		if storeCheck != nil {
			if err := storeCheck(r.Context()); err != nil {
				failed = true
				h.log.Warn(name+" check failed", "check", "store", "err", err)
				b.WriteString("[-]store failed: reason withheld\n")
			} else {
				b.WriteString("[+]store ok\n")
			}
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		switch {
		case failed:
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintf(w, "%s%s check failed\n", b.String(), name)
		case r.URL.Query().Has("verbose"):
			fmt.Fprintf(w, "%s%s check passed\n", b.String(), name)
		default:
			fmt.Fprint(w, "ok")
		}
	}
}

func (h *apiHandler) checkStore(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	_, err := h.store.Revision(ctx)
	return err
}

// versionInfo has the fields of Kubernetes' version.Info.
type versionInfo struct {
	Major        string `json:"major"`
	Minor        string `json:"minor"`
	GitVersion   string `json:"gitVersion"`
	GitCommit    string `json:"gitCommit"`
	GitTreeState string `json:"gitTreeState"`
	BuildDate    string `json:"buildDate"`
	GoVersion    string `json:"goVersion"`
	Compiler     string `json:"compiler"`
	Platform     string `json:"platform"`
}

func currentVersion() versionInfo {
	tree := "clean"
	if strings.HasSuffix(version.Version, "-dirty") {
		tree = "dirty"
	}
	return versionInfo{
		Major:        kubeMajor,
		Minor:        kubeMinor,
		GitVersion:   kubeGitVersion + "-outpost+" + version.Version,
		GitCommit:    version.Commit,
		GitTreeState: tree,
		BuildDate:    version.BuildDate,
		GoVersion:    runtime.Version(),
		Compiler:     runtime.Compiler,
		Platform:     version.Platform(),
	}
}

func (h *apiHandler) version(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/version" {
		writeStatus(w, http.StatusNotFound, "NotFound", "the server could not find the requested resource")
		return
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		writeStatus(w, http.StatusMethodNotAllowed, "MethodNotAllowed", "the server does not allow this method on /version")
		return
	}
	writeJSON(w, http.StatusOK, currentVersion())
}

// status is the shape of a metav1.Status failure.
type status struct {
	Kind       string   `json:"kind"`
	APIVersion string   `json:"apiVersion"`
	Metadata   struct{} `json:"metadata"`
	Status     string   `json:"status"`
	Message    string   `json:"message"`
	Reason     string   `json:"reason"`
	Code       int      `json:"code"`
}

func writeStatus(w http.ResponseWriter, code int, reason, message string) {
	writeJSON(w, code, status{
		Kind:       "Status",
		APIVersion: "v1",
		Status:     "Failure",
		Message:    message,
		Reason:     reason,
		Code:       code,
	})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	data, err := json.Marshal(v)
	if err != nil {
		// Only the fixed types above and metav1.Status are written;
		// they always marshal.
		panic(fmt.Sprintf("marshal %T: %v", v, err))
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(code)
	w.Write(append(data, '\n'))
}

// statusRecorder remembers the status code written, for the request log.
type statusRecorder struct {
	http.ResponseWriter
	code int
}

func (r *statusRecorder) WriteHeader(code int) {
	r.code = code
	r.ResponseWriter.WriteHeader(code)
}

func (r *statusRecorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }
