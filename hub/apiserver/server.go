package apiserver

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sort"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/version"

	"github.com/outpost-mesh/outpost/hub/store"
)

var schemaGR0 = schema.GroupResource{}

// MaxBodyBytes is the largest request body accepted (upstream's 3 MiB).
const MaxBodyBytes = 3 << 20

// Config configures a Server.
type Config struct {
	// Store keeps the objects; non-nil.
	Store store.Store
	// Resources are the served resources; at least one.
	Resources []Resource
	// Logger receives the server's logs; nil discards them.
	Logger *slog.Logger
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// MaxInFlight caps concurrent requests but watches and the streaming
	// subresources of pods (log, exec, attach, portforward): more get 429.
	// Default 400.
	MaxInFlight int
	// BookmarkInterval is how often a watch that allows bookmarks gets
	// one: default one minute.
	BookmarkInterval time.Duration
	// WatchFlushInterval is the least time between two flushes of one
	// watch's stream while events keep coming: an event after a quiet
	// spell is flushed at once, and those that follow within the interval
	// go out together at its end. Fewer, larger writes cut the CPU both
	// the hub and every watcher spend per event (TLS records, HTTP/2
	// frames, window updates, syscalls) at the price of at most this much
	// delay under load. Default 10ms; negative flushes after every batch.
	WatchFlushInterval time.Duration
	// Admission is asked about every create and update before it is
	// written; nil admits them all.
	Admission Admission
	// Mutation is asked about every create and update before it is
	// prepared and validated, and may change the object; nil changes
	// nothing.
	Mutation MutatingAdmission
	// Tokens signs the tokens of the serviceaccounts/token subresource;
	// nil serves no such subresource (404), as without a signing key.
	Tokens TokenIssuer
	// WatchCacheBytes bounds the encoded watch events kept to share
	// between watchers (see eventCache): default 16 MiB, at most 4,096
	// events.
	WatchCacheBytes int
	// PodStreams serves pods/log, pods/exec, pods/attach and
	// pods/portforward; nil serves none of them (404).
	PodStreams PodStreams
}

// Server serves the Kubernetes API for its resources. Its methods are safe
// for concurrent use.
type Server struct {
	cfg   Config
	store store.Store
	log   *slog.Logger
	now   func() time.Time

	// scheme knows the Go types of the served resources and of the
	// machinery; codecs encode and decode with it.
	scheme *runtime.Scheme
	codecs serializer.CodecFactory
	// byGVR finds a resource by group, version and plural.
	byGVR map[schema.GroupVersionResource]*resourceInfo
	// groups lists the served group versions in discovery order.
	groups   []schema.GroupVersion
	inflight chan struct{}
	// events shares encoded watch events between watchers.
	events *eventCache
	// stop ends every watch when Shutdown closes it.
	stop     chan struct{}
	stopOnce sync.Once

	// discovery holds the aggregated discovery documents, derived from
	// byGVR and groups by rebuildDiscovery.
	discovery discoveryCache
}

// Shutdown ends every open watch (clients re-watch elsewhere or later),
// so that an http.Server's Shutdown does not wait for them. Safe to call
// more than once.
func (s *Server) Shutdown() { s.stopOnce.Do(func() { close(s.stop) }) }

// resourceInfo is a Resource with what the machinery derives from it.
type resourceInfo struct {
	Resource
	gvk    schema.GroupVersionKind
	gvr    schema.GroupVersionResource
	gr     schema.GroupResource
	prefix string // store prefix, ending in /
	// codec writes and reads the resource's objects.
	codec codec
	// admit is set when Config.Admission handles the resource.
	admit bool
	// mutate is set when Config.Mutation handles the resource.
	mutate bool
	// fieldKeys are the field labels selectors may use.
	fieldKeys map[string]bool
	// fields keeps managedFields (managedfields.go).
	fields *fieldTracker
}

// New checks cfg and returns a server; it starts nothing.
func New(cfg Config) (*Server, error) {
	if cfg.Store == nil {
		return nil, errors.New("apiserver: Store is nil")
	}
	if len(cfg.Resources) == 0 {
		return nil, errors.New("apiserver: no resources")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.MaxInFlight <= 0 {
		cfg.MaxInFlight = 400
	}
	if cfg.BookmarkInterval <= 0 {
		cfg.BookmarkInterval = time.Minute
	}
	if cfg.WatchFlushInterval == 0 {
		cfg.WatchFlushInterval = 10 * time.Millisecond
	}
	if cfg.WatchCacheBytes <= 0 {
		cfg.WatchCacheBytes = 16 << 20
	}
	s := &Server{
		cfg: cfg, store: cfg.Store, log: cfg.Logger, now: cfg.Now,
		byGVR:    map[schema.GroupVersionResource]*resourceInfo{},
		inflight: make(chan struct{}, cfg.MaxInFlight),
		stop:     make(chan struct{}),
		events:   newEventCache(4096, cfg.WatchCacheBytes),
	}
	scheme, err := newScheme(cfg.Resources)
	if err != nil {
		return nil, fmt.Errorf("apiserver: %w", err)
	}
	s.scheme, s.codecs = scheme, serializer.NewCodecFactory(scheme)
	codecs := newCodecs(scheme, s.codecs)
	builtin := builtinTypes(scheme)
	seen := map[schema.GroupVersion]bool{}
	for i := range cfg.Resources {
		r := cfg.Resources[i]
		kinds := 0
		for _, set := range []bool{r.Rules != nil, r.Reader != nil, r.Creator != nil} {
			if set {
				kinds++
			}
		}
		if r.New == nil || r.NewList == nil || kinds != 1 || r.Plural == "" || r.Kind == "" {
			return nil, fmt.Errorf("apiserver: resource %s/%s is incomplete: it needs New, NewList, names and one of Rules, Reader and Creator", r.GroupVersion, r.Plural)
		}
		if (r.Reader != nil || r.Creator != nil) && (r.Status || r.Scale != nil || r.Token != nil) {
			return nil, fmt.Errorf("apiserver: read-only or create-only resource %s/%s has subresources", r.GroupVersion, r.Plural)
		}
		ri := &resourceInfo{
			Resource: r,
			gvk:      r.GroupVersion.WithKind(r.Kind),
			gvr:      r.GroupVersion.WithResource(r.Plural),
			gr:       schema.GroupResource{Group: r.GroupVersion.Group, Resource: r.Plural},
			fieldKeys: map[string]bool{
				"metadata.name": true,
			},
		}
		if r.Namespaced {
			ri.fieldKeys["metadata.namespace"] = true
		}
		if r.Encoding == EncodingProtobuf && (!scheme.Recognizes(ri.gvk) || !s.knows(r.New()) || !s.knows(r.NewList())) {
			return nil, fmt.Errorf("apiserver: resource %s: kind %s or Go type %T is not registered: AddToScheme is missing or wrong", ri.gvr, r.Kind, r.New())
		}
		var ok bool
		if ri.codec, ok = codecs[r.Encoding]; !ok {
			return nil, fmt.Errorf("apiserver: resource %s: unknown encoding %d", ri.gvr, r.Encoding)
		}
		ri.admit = cfg.Admission != nil && cfg.Admission.Handles(ri.gr)
		ri.mutate = cfg.Mutation != nil && cfg.Mutation.Handles(ri.gr)
		ri.fields = newFieldTracker(ri, scheme, builtin)
		for k := range ri.fieldSet(r.New()) {
			ri.fieldKeys[k] = true
		}
		ri.prefix = KeyPrefix(schema.GroupResource{Group: r.GroupVersion.Group, Resource: r.Plural})
		if _, dup := s.byGVR[ri.gvr]; dup {
			return nil, fmt.Errorf("apiserver: resource %s served twice", ri.gvr)
		}
		s.byGVR[ri.gvr] = ri
		if !seen[r.GroupVersion] {
			seen[r.GroupVersion] = true
			s.groups = append(s.groups, r.GroupVersion)
		}
	}
	// Core first, then groups by name, as kube-apiserver lists them; the
	// versions of a group by priority, as upstream sorts them (v1 before
	// v1beta1 before v1alpha1), the first being the preferred one.
	sort.SliceStable(s.groups, func(i, j int) bool {
		a, b := s.groups[i], s.groups[j]
		if (a.Group == "") != (b.Group == "") {
			return a.Group == ""
		}
		if a.Group != b.Group {
			return a.Group < b.Group
		}
		return version.CompareKubeAwareVersionStrings(a.Version, b.Version) > 0
	})
	s.rebuildDiscovery()
	return s, nil
}

// ServeHTTP serves /api and /apis; other paths get 404.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	ri, ok := parsePath(r.URL.Path)
	if !ok {
		s.writeError(w, r, apierrors.NewNotFound(schemaGR0, r.URL.Path))
		return
	}
	if ri.discovery {
		s.serveDiscovery(w, r, ri)
		return
	}
	res := s.byGVR[ri.gv.WithResource(ri.resource)]
	if res == nil {
		s.writeError(w, r, apierrors.NewNotFound(schema.GroupResource{Group: ri.gv.Group, Resource: ri.resource}, ""))
		return
	}
	if ri.namespace != "" && !res.Namespaced {
		s.writeError(w, r, apierrors.NewNotFound(res.gr, ri.name))
		return
	}
	v := verb(r, ri)
	if v != "watch" && !(isPodStream(ri) && s.cfg.PodStreams != nil) {
		select {
		case s.inflight <- struct{}{}:
			defer func() { <-s.inflight }()
		default:
			w.Header().Set("Retry-After", "1")
			s.writeError(w, r, apierrors.NewTooManyRequests("too many requests in flight, please try again later", 1))
			return
		}
	}
	req := &request{s: s, w: w, r: r, ri: ri, res: res, verb: v}
	switch {
	case res.Reader != nil:
		req.serveReader()
		return
	case res.Creator != nil:
		req.serveCreator()
		return
	}
	req.serve()
}

// readBody reads a request body up to MaxBodyBytes.
func readBody(r *http.Request) ([]byte, error) {
	if r.ContentLength > MaxBodyBytes {
		return nil, apierrors.NewRequestEntityTooLargeError(fmt.Sprintf("limit is %d bytes", MaxBodyBytes))
	}
	b, err := io.ReadAll(io.LimitReader(r.Body, MaxBodyBytes+1))
	if err != nil {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("read request body: %v", err))
	}
	if len(b) > MaxBodyBytes {
		return nil, apierrors.NewRequestEntityTooLargeError(fmt.Sprintf("limit is %d bytes", MaxBodyBytes))
	}
	return b, nil
}

// writeObject encodes obj in the negotiated form (JSON when negotiation
// fails) with status code.
func (s *Server) writeObject(w http.ResponseWriter, r *http.Request, code int, obj runtime.Object, out *output) {
	all := s.machineryCodec()
	o := output{info: all.json()}
	if out != nil {
		o = *out
	} else if n, err := negotiate(r, all, false); err == nil {
		o = n
	}
	var buf bytes.Buffer
	enc := s.encoderFor(o.info.Serializer, s.versionOf(obj))
	if err := enc.Encode(obj, &buf); err != nil {
		s.log.Error("encode response", "err", err)
		http.Error(w, "encode response: "+err.Error(), http.StatusInternalServerError)
		return
	}
	ct := o.info.MediaType + o.asParam()
	w.Header().Set("Content-Type", ct)
	w.WriteHeader(code)
	w.Write(buf.Bytes())
}

// versionOf returns the version an object is encoded in: its own kind's
// when set, else the one the scheme knows it by.
func (s *Server) versionOf(obj runtime.Object) runtime.GroupVersioner {
	if gv := obj.GetObjectKind().GroupVersionKind().GroupVersion(); !gv.Empty() {
		return gv
	}
	if gvks, _, err := s.scheme.ObjectKinds(obj); err == nil && len(gvks) > 0 {
		return gvks[0].GroupVersion()
	}
	return schema.GroupVersion{Version: "v1"}
}

// statusOK is the Status returned by successful deletes.
func statusOK(res *resourceInfo, name string, uid string) *metav1.Status {
	return &metav1.Status{
		TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
		Status:   metav1.StatusSuccess,
		Details:  &metav1.StatusDetails{Name: name, Group: res.gr.Group, Kind: res.Plural, UID: typesUID(uid)},
	}
}
