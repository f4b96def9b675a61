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
	"sync/atomic"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/util/managedfields"
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
	scheme        *runtime.Scheme
	codecs        serializer.CodecFactory
	storageCodecs map[Encoding]codec
	builtin       func() managedfields.TypeConverter
	// set is what is served now: static (Config.Resources) and dynamic
	// (SetResources by owner), published together.
	set      atomic.Pointer[resourceSet]
	setMu    sync.Mutex
	static   []*resourceInfo
	dynamic  map[string][]*resourceInfo
	remote   []RemoteGroupVersion // SetRemoteGroups; under setMu
	priority map[string]int32     // SetGroupPriorities; under setMu
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
	// gone is closed when the resource stops being served as it is
	// (SetResources removed or replaced it): its watches end.
	gone chan struct{}
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
		dynamic:  map[string][]*resourceInfo{},
		inflight: make(chan struct{}, cfg.MaxInFlight),
		stop:     make(chan struct{}),
		events:   newEventCache(4096, cfg.WatchCacheBytes),
	}
	scheme, err := newScheme(cfg.Resources)
	if err != nil {
		return nil, fmt.Errorf("apiserver: %w", err)
	}
	s.scheme, s.codecs = scheme, serializer.NewCodecFactory(scheme)
	s.storageCodecs = newCodecs(scheme, s.codecs)
	s.builtin = builtinTypes(scheme)
	for _, r := range cfg.Resources {
		ri, err := s.newResourceInfo(r)
		if err != nil {
			return nil, err
		}
		s.static = append(s.static, ri)
	}
	if _, err := s.publish(); err != nil {
		return nil, err
	}
	return s, nil
}

// resourceSet is what the server serves at one time. A set is immutable
// once published: a change publishes a new one (see publish), so that a
// request sees one consistent set without locks.
type resourceSet struct {
	// byGVR finds a resource by group, version and plural.
	byGVR map[schema.GroupVersionResource]*resourceInfo
	// groups lists the served group versions in discovery order, the
	// remote ones among them.
	groups []schema.GroupVersion
	// remote are the group versions other servers serve
	// (SetRemoteGroups), listed in discovery only.
	remote map[schema.GroupVersion]RemoteGroupVersion
}

// res returns the resources served now.
func (s *Server) res() *resourceSet { return s.set.Load() }

// newResourceInfo checks r and derives what the machinery needs of it.
func (s *Server) newResourceInfo(r Resource) (*resourceInfo, error) {
	kinds := 0
	for _, set := range []bool{r.Rules != nil, r.Reader != nil, r.Creator != nil} {
		if set {
			kinds++
		}
	}
	if r.New == nil || r.NewList == nil || kinds != 1 || r.Plural == "" || r.Kind == "" {
		return nil, fmt.Errorf("apiserver: resource %s/%s is incomplete: it needs New, NewList, names and one of Rules, Reader and Creator", r.GroupVersion, r.Plural)
	}
	if (r.Reader != nil || r.Creator != nil) && (r.Status || r.Scale != nil || r.Token != nil || r.Conversion != nil || len(r.Subresources) > 0) {
		return nil, fmt.Errorf("apiserver: read-only or create-only resource %s/%s has subresources or a conversion", r.GroupVersion, r.Plural)
	}
	ri := &resourceInfo{
		Resource: r,
		gvk:      r.GroupVersion.WithKind(r.Kind),
		gvr:      r.GroupVersion.WithResource(r.Plural),
		gr:       schema.GroupResource{Group: r.GroupVersion.Group, Resource: r.Plural},
		fieldKeys: map[string]bool{
			"metadata.name": true,
		},
		gone: make(chan struct{}),
	}
	if r.Namespaced {
		ri.fieldKeys["metadata.namespace"] = true
	}
	if r.Encoding == EncodingProtobuf && (!s.scheme.Recognizes(ri.gvk) || !s.knows(r.New()) || !s.knows(r.NewList())) {
		return nil, fmt.Errorf("apiserver: resource %s: kind %s or Go type %T is not registered: AddToScheme is missing or wrong", ri.gvr, r.Kind, r.New())
	}
	var ok bool
	if ri.codec, ok = s.storageCodecs[r.Encoding]; !ok {
		return nil, fmt.Errorf("apiserver: resource %s: unknown encoding %d", ri.gvr, r.Encoding)
	}
	if c := r.Conversion; c != nil {
		if err := s.checkConversion(ri, c); err != nil {
			return nil, err
		}
	}
	for _, sub := range r.Subresources {
		switch {
		case sub.Name == "" || sub.Update == nil:
			return nil, fmt.Errorf("apiserver: resource %s: subresource %q needs a name and Update", ri.gvr, sub.Name)
		case reservedSubresources[sub.Name]:
			return nil, fmt.Errorf("apiserver: resource %s: subresource %q is the machinery's", ri.gvr, sub.Name)
		}
	}
	ri.admit = s.cfg.Admission != nil && s.cfg.Admission.Handles(ri.gr)
	ri.mutate = s.cfg.Mutation != nil && s.cfg.Mutation.Handles(ri.gr)
	ri.fields = newFieldTracker(ri, s.scheme, s.builtin)
	for k := range ri.fieldSet(r.New()) {
		ri.fieldKeys[k] = true
	}
	ri.prefix = KeyPrefix(ri.gr)
	return ri, nil
}

// reservedSubresources are the subresources the machinery serves itself,
// which Resource.Subresources may not name.
var reservedSubresources = map[string]bool{
	"status": true, "scale": true, "binding": true, "finalize": true, "token": true, "eviction": true,
	"log": true, "exec": true, "attach": true, "portforward": true,
}

// publish makes the static and dynamic resources the served set, sorted
// for discovery, and rebuilds the discovery documents. It returns the
// resources no longer served as they were (removed or replaced). The
// caller holds setMu, or is New.
func (s *Server) publish() ([]*resourceInfo, error) {
	next := &resourceSet{byGVR: map[schema.GroupVersionResource]*resourceInfo{}}
	seen := map[schema.GroupVersion]bool{}
	add := func(ri *resourceInfo) error {
		if _, dup := next.byGVR[ri.gvr]; dup {
			return fmt.Errorf("apiserver: resource %s served twice", ri.gvr)
		}
		next.byGVR[ri.gvr] = ri
		if !seen[ri.GroupVersion] {
			seen[ri.GroupVersion] = true
			next.groups = append(next.groups, ri.GroupVersion)
		}
		return nil
	}
	for _, ri := range s.static {
		if err := add(ri); err != nil {
			return nil, err
		}
	}
	owners := make([]string, 0, len(s.dynamic))
	for o := range s.dynamic {
		owners = append(owners, o)
	}
	sort.Strings(owners)
	for _, o := range owners {
		for _, ri := range s.dynamic[o] {
			if err := add(ri); err != nil {
				return nil, err
			}
		}
	}
	addRemote(next, s.remote, seen)
	// Core first, then groups by the priorities set (highest first), then
	// by name, as kube-aggregator lists them; the versions of a group by
	// priority, as upstream sorts them (v1 before v1beta1 before
	// v1alpha1), the first being the preferred one; the remote versions
	// of a group by their versionPriority first, as kube-aggregator sorts
	// its APIServices.
	sort.SliceStable(next.groups, func(i, j int) bool {
		a, b := next.groups[i], next.groups[j]
		if (a.Group == "") != (b.Group == "") {
			return a.Group == ""
		}
		if a.Group != b.Group {
			pa, oka := s.priority[a.Group]
			pb, okb := s.priority[b.Group]
			if oka != okb || pa != pb {
				return oka && (!okb || pa > pb)
			}
			return a.Group < b.Group
		}
		if pa, pb := next.remote[a].VersionPriority, next.remote[b].VersionPriority; pa != pb {
			return pa > pb
		}
		return version.CompareKubeAwareVersionStrings(a.Version, b.Version) > 0
	})
	var gone []*resourceInfo
	if prev := s.set.Load(); prev != nil {
		for gvr, ri := range prev.byGVR {
			if next.byGVR[gvr] != ri {
				gone = append(gone, ri)
			}
		}
	}
	s.set.Store(next)
	s.rebuildDiscovery()
	return gone, nil
}

// SetResources serves rs, replacing what was served under owner before
// (nil or empty rs stops serving owner's resources), as the hub does for
// the versions of a CustomResourceDefinition, named owner, when it is
// created, changed or deleted. Discovery follows at once. Watches of a
// resource replaced or removed end, as upstream ends them when a CRD
// changes: clients watch again and get the new rules. A resource another
// owner or the static configuration serves already is refused, and
// nothing changes. Objects in the store are never touched.
func (s *Server) SetResources(owner string, rs []Resource) error {
	infos := make([]*resourceInfo, 0, len(rs))
	for _, r := range rs {
		ri, err := s.newResourceInfo(r)
		if err != nil {
			return err
		}
		infos = append(infos, ri)
	}
	s.setMu.Lock()
	defer s.setMu.Unlock()
	prev, had := s.dynamic[owner]
	if len(infos) == 0 {
		delete(s.dynamic, owner)
	} else {
		s.dynamic[owner] = infos
	}
	gone, err := s.publish()
	if err != nil {
		if had {
			s.dynamic[owner] = prev
		} else {
			delete(s.dynamic, owner)
		}
		return err
	}
	for _, ri := range gone {
		close(ri.gone)
	}
	return nil
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
	res := s.res().byGVR[ri.gv.WithResource(ri.resource)]
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
