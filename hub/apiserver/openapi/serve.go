package openapi

import (
	"encoding/json"
	"net/http"
	"slices"
	"strconv"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Media types of the gnostic protobuf encodings. Clients ask for the
// deprecated "@" forms (kubectl does, for v2); both are served, and
// responses carry the current form as kube-apiserver's do.
const (
	mediaJSON      = "application/json"
	mediaV2Proto   = "application/com.github.proto-openapi.spec.v2.v1.0+protobuf"
	mediaV2ProtoAt = "application/com.github.proto-openapi.spec.v2@v1.0+protobuf"
	mediaV3Proto   = "application/com.github.proto-openapi.spec.v3.v1.0+protobuf"
	mediaV3ProtoAt = "application/com.github.proto-openapi.spec.v3@v1.0+protobuf"
)

// offer is a media type a handler can produce; proto selects the
// document's protobuf encoding, and contentType is what the response says.
type offer struct {
	media       string
	contentType string
	proto       bool
}

var (
	v2Offers = []offer{{mediaJSON, mediaJSON, false}, {mediaV2Proto, mediaV2Proto, true}, {mediaV2ProtoAt, mediaV2Proto, true}}
	v3Offers = []offer{{mediaJSON, mediaJSON, false}, {mediaV3Proto, mediaV3Proto, true}, {mediaV3ProtoAt, mediaV3Proto, true}}
)

// ServeV2 serves the OpenAPI v2 document at /openapi/v2 as JSON, or as
// gnostic protobuf when the Accept header prefers it, with an ETag and
// gzip when the client accepts it.
func (s *Spec) ServeV2(w http.ResponseWriter, r *http.Request) {
	if !allowRead(w, r) {
		return
	}
	o, ok := negotiate(r.Header.Get("Accept"), v2Offers)
	if !ok {
		writeStatus(w, http.StatusNotAcceptable, metav1.StatusReasonNotAcceptable,
			"only application/json and "+mediaV2Proto+" are served at /openapi/v2")
		return
	}
	serveDocument(w, r, s.v2, o)
}

// ServeV3 serves /openapi/v3, the JSON list of the group versions'
// documents, and /openapi/v3/api/v1 or /openapi/v3/apis/GROUP/VERSION,
// one group version's document as JSON or gnostic protobuf. A request for
// a document with a hash query parameter that is not the current one is
// redirected to the current URL; one with the current hash may be cached
// for good. The request path must start with /openapi/v3, or be the part
// after it when the handler is mounted with http.StripPrefix.
func (s *Spec) ServeV3(w http.ResponseWriter, r *http.Request) {
	if !allowRead(w, r) {
		return
	}
	key := strings.Trim(strings.TrimPrefix(r.URL.Path, "/openapi/v3"), "/")
	if key == "" {
		serveDocument(w, r, s.v3Discovery, v3Offers[0])
		return
	}
	d, ok := s.v3[key]
	if !ok {
		writeStatus(w, http.StatusNotFound, metav1.StatusReasonNotFound,
			"no OpenAPI v3 document for "+strconv.Quote(key)+"; /openapi/v3 lists them")
		return
	}
	o, ok := negotiate(r.Header.Get("Accept"), v3Offers)
	if !ok {
		writeStatus(w, http.StatusNotAcceptable, metav1.StatusReasonNotAcceptable,
			"only application/json and "+mediaV3Proto+" are served at /openapi/v3")
		return
	}
	if h := r.URL.Query().Get("hash"); h != "" {
		if h != d.hash {
			w.Header().Set("Location", v3URL(key, d.hash))
			w.WriteHeader(http.StatusMovedPermanently)
			return
		}
		w.Header().Set("Cache-Control", "public, max-age=31536000, immutable")
	}
	serveDocument(w, r, d, o)
}

func allowRead(w http.ResponseWriter, r *http.Request) bool {
	if r.Method == http.MethodGet || r.Method == http.MethodHead {
		return true
	}
	w.Header().Set("Allow", "GET, HEAD")
	writeStatus(w, http.StatusMethodNotAllowed, metav1.StatusReasonMethodNotAllowed,
		r.Method+" is not allowed; OpenAPI documents are read with GET")
	return false
}

// serveDocument writes d in the encoding o, compressed when the client
// accepts gzip, or 304 Not Modified when the client has it already. Each
// encoding has its own ETag, derived from the document's hash.
func serveDocument(w http.ResponseWriter, r *http.Request, d *document, o offer) {
	body, zbody, etag := d.json, d.jsonGzip, d.hash
	if o.proto {
		var err error
		if body, zbody, err = d.protobuf(); err != nil {
			writeStatus(w, http.StatusInternalServerError, metav1.StatusReasonInternalError,
				"OpenAPI document has no protobuf form ("+err.Error()+"); ask for application/json")
			return
		}
		etag += "-pb"
	}
	gz := acceptsGzip(r.Header.Get("Accept-Encoding"))
	if gz {
		body, etag = zbody, etag+"-gz"
	}
	etag = `"` + etag + `"`
	h := w.Header()
	h.Set("Vary", "Accept, Accept-Encoding")
	h.Set("ETag", etag)
	h.Set("Content-Type", o.contentType)
	if etagMatch(r.Header.Values("If-None-Match"), etag) {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	if gz {
		h.Set("Content-Encoding", "gzip")
	}
	h.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(http.StatusOK)
	if r.Method != http.MethodHead {
		w.Write(body) //nolint:errcheck // the client went away
	}
}

// etagMatch reports whether an If-None-Match header lists etag or "*".
// Weak comparison, as RFC 9110 asks for If-None-Match.
func etagMatch(headers []string, etag string) bool {
	for _, h := range headers {
		for t := range strings.SplitSeq(h, ",") {
			t = strings.TrimPrefix(strings.TrimSpace(t), "W/")
			if t == "*" || t == etag {
				return true
			}
		}
	}
	return false
}

// mediaRange is one clause of an Accept header.
type mediaRange struct {
	typ, sub string
	q        float64
}

// negotiate returns the first of offers that the Accept header admits,
// taking its clauses by descending quality. An empty header admits all.
func negotiate(accept string, offers []offer) (offer, bool) {
	if strings.TrimSpace(accept) == "" {
		return offers[0], true
	}
	var ranges []mediaRange
	for c := range strings.SplitSeq(accept, ",") {
		media, params, _ := strings.Cut(c, ";")
		typ, sub, ok := strings.Cut(strings.ToLower(strings.TrimSpace(media)), "/")
		if !ok {
			continue
		}
		mr := mediaRange{typ: typ, sub: sub, q: 1}
		for p := range strings.SplitSeq(params, ";") {
			k, v, _ := strings.Cut(strings.TrimSpace(p), "=")
			if strings.EqualFold(k, "q") {
				if q, err := strconv.ParseFloat(v, 64); err == nil {
					mr.q = q
				}
			}
		}
		if mr.q > 0 {
			ranges = append(ranges, mr)
		}
	}
	slices.SortStableFunc(ranges, func(a, b mediaRange) int {
		switch {
		case a.q > b.q:
			return -1
		case a.q < b.q:
			return 1
		}
		return 0
	})
	for _, mr := range ranges {
		for _, o := range offers {
			typ, sub, _ := strings.Cut(o.media, "/")
			if (mr.typ == "*" || mr.typ == typ) && (mr.sub == "*" || mr.sub == sub) {
				return o, true
			}
		}
	}
	return offer{}, false
}

// acceptsGzip reports whether an Accept-Encoding header admits gzip.
func acceptsGzip(header string) bool {
	for c := range strings.SplitSeq(header, ",") {
		coding, params, _ := strings.Cut(c, ";")
		coding = strings.ToLower(strings.TrimSpace(coding))
		if coding != "gzip" && coding != "*" {
			continue
		}
		k, v, _ := strings.Cut(strings.TrimSpace(params), "=")
		if strings.EqualFold(k, "q") {
			if q, err := strconv.ParseFloat(v, 64); err == nil && q == 0 {
				continue
			}
		}
		return true
	}
	return false
}

// writeStatus writes an error as a metav1.Status, as the rest of the API
// does.
func writeStatus(w http.ResponseWriter, code int, reason metav1.StatusReason, msg string) {
	b, _ := json.Marshal(&metav1.Status{
		TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
		Status:   metav1.StatusFailure,
		Message:  msg,
		Reason:   reason,
		Code:     int32(code),
	})
	w.Header().Set("Content-Type", mediaJSON)
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(code)
	w.Write(b) //nolint:errcheck // the client went away
}
