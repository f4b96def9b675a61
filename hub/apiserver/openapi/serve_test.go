package openapi

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestNegotiate(t *testing.T) {
	for _, tc := range []struct {
		accept string
		want   string // content type served, "" for none
	}{
		{"", mediaJSON},
		{"*/*", mediaJSON},
		{"application/json", mediaJSON},
		{"application/*", mediaJSON},
		{mediaV2ProtoAt, mediaV2Proto},
		{mediaV2Proto, mediaV2Proto},
		{mediaV2ProtoAt + ", application/json", mediaV2Proto},
		{"application/json;q=0.5, " + mediaV2ProtoAt, mediaV2Proto},
		{"application/json;q=0, " + mediaV2ProtoAt + ";q=0.1", mediaV2Proto},
		{"text/html, application/json;q=0.9", mediaJSON},
		{"text/html", ""},
		{"application/json;q=0", ""},
		{mediaV3Proto, ""},
		{"garbage", ""},
	} {
		o, ok := negotiate(tc.accept, v2Offers)
		if got := o.contentType; !ok && got != "" || ok && got != tc.want || ok != (tc.want != "") {
			t.Errorf("negotiate(%q) = %q, %v, want %q", tc.accept, got, ok, tc.want)
		}
	}
}

func TestAcceptsGzip(t *testing.T) {
	for h, want := range map[string]bool{
		"":                    false,
		"gzip":                true,
		"deflate, gzip":       true,
		"gzip;q=0":            false,
		"GZIP;q=0.5":          true,
		"*":                   true,
		"identity":            false,
		"br, gzip;q=0, *;q=0": false,
	} {
		if got := acceptsGzip(h); got != want {
			t.Errorf("acceptsGzip(%q) = %v, want %v", h, got, want)
		}
	}
}

// do serves one request through h with the given headers.
func do(h http.HandlerFunc, method, target string, headers ...string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(method, target, nil)
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	rec := httptest.NewRecorder()
	h(rec, req)
	return rec
}

func TestServeV2Caching(t *testing.T) {
	s := testSpec(t)
	first := do(s.ServeV2, http.MethodGet, "/openapi/v2", "Accept", mediaV2ProtoAt)
	etag := first.Header().Get("ETag")
	if first.Code != http.StatusOK || etag == "" || first.Header().Get("Content-Type") != mediaV2Proto {
		t.Fatalf("GET protobuf = %d, ETag %q, Content-Type %q", first.Code, etag, first.Header().Get("Content-Type"))
	}
	if pb, _, err := s.v2.protobuf(); err != nil || !bytes.Equal(first.Body.Bytes(), pb) {
		t.Error("protobuf body differs from the built document")
	}
	again := do(s.ServeV2, http.MethodGet, "/openapi/v2", "Accept", mediaV2ProtoAt, "If-None-Match", etag)
	if again.Code != http.StatusNotModified || again.Body.Len() != 0 {
		t.Errorf("GET with If-None-Match = %d, %d bytes, want 304 and no body", again.Code, again.Body.Len())
	}
	// The JSON form has its own ETag, so a protobuf ETag does not match it.
	j := do(s.ServeV2, http.MethodGet, "/openapi/v2", "Accept", mediaJSON, "If-None-Match", etag)
	if j.Code != http.StatusOK || j.Header().Get("ETag") == etag || !json.Valid(j.Body.Bytes()) {
		t.Errorf("GET json with the protobuf ETag = %d, ETag %q", j.Code, j.Header().Get("ETag"))
	}

	gz := do(s.ServeV2, http.MethodGet, "/openapi/v2", "Accept-Encoding", "gzip")
	if gz.Header().Get("Content-Encoding") != "gzip" {
		t.Fatalf("gzip: Content-Encoding %q", gz.Header().Get("Content-Encoding"))
	}
	zr, err := gzip.NewReader(gz.Body)
	if err != nil {
		t.Fatal(err)
	}
	plain, err := io.ReadAll(zr)
	if err != nil || !bytes.Equal(plain, s.v2.json) {
		t.Errorf("gunzipped body: %v, equal to JSON %v", err, bytes.Equal(plain, s.v2.json))
	}

	head := do(s.ServeV2, http.MethodHead, "/openapi/v2")
	if head.Code != http.StatusOK || head.Body.Len() != 0 || head.Header().Get("Content-Length") == "" {
		t.Errorf("HEAD = %d, %d bytes, Content-Length %q", head.Code, head.Body.Len(), head.Header().Get("Content-Length"))
	}
}

func TestServeErrors(t *testing.T) {
	s := testSpec(t)
	for _, tc := range []struct {
		h      http.HandlerFunc
		method string
		target string
		accept string
		code   int
	}{
		{s.ServeV2, http.MethodGet, "/openapi/v2", "text/html", http.StatusNotAcceptable},
		{s.ServeV2, http.MethodPost, "/openapi/v2", "", http.StatusMethodNotAllowed},
		{s.ServeV3, http.MethodGet, "/openapi/v3/apis/batch/v1", "", http.StatusNotFound},
		{s.ServeV3, http.MethodGet, "/openapi/v3/api/v1", mediaV2Proto, http.StatusNotAcceptable},
		{s.ServeV3, http.MethodDelete, "/openapi/v3", "", http.StatusMethodNotAllowed},
	} {
		rec := do(tc.h, tc.method, tc.target, "Accept", tc.accept)
		var st metav1.Status
		if err := json.Unmarshal(rec.Body.Bytes(), &st); err != nil || rec.Code != tc.code || st.Code != int32(tc.code) || st.Kind != "Status" {
			t.Errorf("%s %s (Accept %q) = %d %s, want %d and a Status", tc.method, tc.target, tc.accept, rec.Code, rec.Body, tc.code)
		}
	}
}

func TestServeV3Hash(t *testing.T) {
	s := testSpec(t)
	var disc v3Discovery
	if err := json.Unmarshal(do(s.ServeV3, http.MethodGet, "/openapi/v3").Body.Bytes(), &disc); err != nil {
		t.Fatal(err)
	}
	url := disc.Paths["api/v1"].ServerRelativeURL
	cur := do(s.ServeV3, http.MethodGet, url)
	if cur.Code != http.StatusOK || cur.Header().Get("Cache-Control") == "" || !bytes.Equal(cur.Body.Bytes(), s.v3["api/v1"].json) {
		t.Errorf("GET %s = %d, Cache-Control %q", url, cur.Code, cur.Header().Get("Cache-Control"))
	}
	stale := do(s.ServeV3, http.MethodGet, "/openapi/v3/api/v1?hash=0123", "Accept", mediaV3ProtoAt)
	if stale.Code != http.StatusMovedPermanently || stale.Header().Get("Location") != url {
		t.Errorf("GET with a stale hash = %d, Location %q, want 301 to %q", stale.Code, stale.Header().Get("Location"), url)
	}
	plain := do(s.ServeV3, http.MethodGet, "/openapi/v3/api/v1/")
	if plain.Code != http.StatusOK || plain.Header().Get("Cache-Control") != "" {
		t.Errorf("GET without hash = %d, Cache-Control %q", plain.Code, plain.Header().Get("Cache-Control"))
	}
	// Mounted under http.StripPrefix, the handler sees the rest of the path.
	stripped := do(http.StripPrefix("/openapi/v3", http.HandlerFunc(s.ServeV3)).ServeHTTP, http.MethodGet, "/openapi/v3/apis/apps/v1")
	if stripped.Code != http.StatusOK || !bytes.Equal(stripped.Body.Bytes(), s.v3["apis/apps/v1"].json) {
		t.Errorf("GET under StripPrefix = %d", stripped.Code)
	}
}

// TestDeterministic checks that building twice gives the same documents,
// so ETags and v3 hashes survive a hub restart.
func TestDeterministic(t *testing.T) {
	a := testSpec(t)
	b, err := New(testKinds())
	if err != nil {
		t.Fatal(err)
	}
	pa, _, errA := a.v2.protobuf()
	pb, _, errB := b.v2.protobuf()
	if errA != nil || errB != nil {
		t.Fatalf("protobuf: %v, %v", errA, errB)
	}
	if a.v2.hash != b.v2.hash || !bytes.Equal(pa, pb) || a.v3Discovery.hash != b.v3Discovery.hash {
		t.Error("two builds of the same kinds differ")
	}
}

// TestServeConcurrently serves every document from several goroutines at
// once; run with -race, it checks the handlers only read the Spec.
func TestServeConcurrently(t *testing.T) {
	s := testSpec(t)
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			for _, target := range []string{"/openapi/v3", "/openapi/v3/api/v1", "/openapi/v3/apis/apps/v1"} {
				if rec := do(s.ServeV3, http.MethodGet, target, "Accept-Encoding", []string{"gzip", ""}[i%2]); rec.Code != http.StatusOK {
					t.Errorf("GET %s = %d", target, rec.Code)
				}
			}
			if rec := do(s.ServeV2, http.MethodGet, "/openapi/v2", "Accept", mediaV2ProtoAt); rec.Code != http.StatusOK {
				t.Errorf("GET /openapi/v2 = %d", rec.Code)
			}
		})
	}
	wg.Wait()
}
