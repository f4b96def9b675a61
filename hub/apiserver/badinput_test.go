package apiserver

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/outpost-mesh/outpost/hub/store/badgerstore"
)

// rawServer is a Server reached with plain HTTP requests.
type rawServer struct {
	srv   *Server
	store *badgerstore.Store
	url   string
}

func startRaw(t *testing.T, maxInFlight int) *rawServer {
	t.Helper()
	st, err := badgerstore.Open(badgerstore.DefaultConfig(t.TempDir()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	srv, err := New(Config{Store: st, Resources: testResources(), MaxInFlight: maxInFlight})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv)
	t.Cleanup(hs.Close)
	t.Cleanup(srv.Shutdown)
	rs := &rawServer{srv: srv, store: st, url: hs.URL}
	for _, ns := range []string{`{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"ns1"}}`,
		`{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"dying","finalizers":["example.com/hold"]}}`} {
		if code, body := rs.do(t, "POST", "/api/v1/namespaces", "application/json", ns); code != 201 {
			t.Fatalf("create namespace = %d %s", code, body)
		}
	}
	if code, body := rs.do(t, "DELETE", "/api/v1/namespaces/dying", "", ""); code != 200 {
		t.Fatalf("delete namespace = %d %s", code, body)
	}
	return rs
}

func (rs *rawServer) do(t *testing.T, method, path, contentType, body string) (int, string) {
	t.Helper()
	return doRequest(t, rs.url, method, path, contentType, body)
}

// doRequest sends a request to the server at url and returns the status
// code and body.
func doRequest(t *testing.T, url, method, path, contentType, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestBadInput: every class of bad request gets its code as a
// metav1.Status, and the server keeps serving.
func TestBadInput(t *testing.T) {
	rs := startRaw(t, 0)
	const cm = `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a"},"data":{"k":"v"}}`
	if code, body := rs.do(t, "POST", "/api/v1/namespaces/ns1/configmaps", "application/json", cm); code != 201 {
		t.Fatalf("create = %d %s", code, body)
	}
	stale := strings.Replace(cm, `"name":"a"`, `"name":"a","resourceVersion":"1"`, 1)
	big := `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"big"},"data":{"k":"` + strings.Repeat("x", MaxBodyBytes) + `"}}`
	cur, _ := rs.store.Revision(context.Background())
	if err := rs.store.Compact(context.Background(), cur); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		name, method, path, ct, body string
		code                         int
		reason                       metav1.StatusReason
	}{
		{"malformed JSON", "POST", "/api/v1/namespaces/ns1/configmaps", "application/json", `{"apiVersion":`, 400, metav1.StatusReasonBadRequest},
		{"malformed YAML", "POST", "/api/v1/namespaces/ns1/configmaps", "application/yaml", "a: [b\n c: }", 400, metav1.StatusReasonBadRequest},
		{"empty body", "POST", "/api/v1/namespaces/ns1/configmaps", "application/json", "", 400, metav1.StatusReasonBadRequest},
		{"kind mismatch", "POST", "/api/v1/namespaces/ns1/configmaps", "application/json", `{"apiVersion":"v1","kind":"Secret","metadata":{"name":"s"}}`, 400, metav1.StatusReasonBadRequest},
		{"name mismatch", "PUT", "/api/v1/namespaces/ns1/configmaps/other", "application/json", cm, 400, metav1.StatusReasonBadRequest},
		{"namespace mismatch", "POST", "/api/v1/namespaces/ns1/configmaps", "application/json", strings.Replace(cm, `"name":"a"`, `"name":"b","namespace":"ns2"`, 1), 400, metav1.StatusReasonBadRequest},
		{"unknown field strict", "POST", "/api/v1/namespaces/ns1/configmaps?fieldValidation=Strict", "application/json", strings.Replace(cm, `"data"`, `"bogus":1,"data"`, 1), 400, metav1.StatusReasonBadRequest},
		{"bad label selector", "GET", "/api/v1/configmaps?labelSelector=a%20in%20(", "", "", 400, metav1.StatusReasonBadRequest},
		{"unsupported field selector", "GET", "/api/v1/configmaps?fieldSelector=spec.x%3Dy", "", "", 400, metav1.StatusReasonBadRequest},
		{"bad continue", "GET", "/api/v1/configmaps?limit=1&continue=garbage", "", "", 400, metav1.StatusReasonBadRequest},
		{"terminating namespace", "POST", "/api/v1/namespaces/dying/configmaps", "application/json", cm, 403, metav1.StatusReasonForbidden},
		{"missing object", "GET", "/api/v1/namespaces/ns1/configmaps/nope", "", "", 404, metav1.StatusReasonNotFound},
		{"unknown resource", "GET", "/api/v1/widgets", "", "", 404, metav1.StatusReasonNotFound},
		{"unknown subresource", "GET", "/api/v1/namespaces/ns1/configmaps/a/log", "", "", 404, metav1.StatusReasonNotFound},
		{"unknown group", "GET", "/apis/nogroup/v1/things", "", "", 404, metav1.StatusReasonNotFound},
		{"missing namespace", "POST", "/api/v1/namespaces/none/configmaps", "application/json", cm, 404, metav1.StatusReasonNotFound},
		{"POST to a name", "POST", "/api/v1/namespaces/ns1/configmaps/a", "application/json", cm, 405, metav1.StatusReasonMethodNotAllowed},
		{"already exists", "POST", "/api/v1/namespaces/ns1/configmaps", "application/json", cm, 409, metav1.StatusReasonAlreadyExists},
		{"stale update", "PUT", "/api/v1/namespaces/ns1/configmaps/a", "application/json", stale, 409, metav1.StatusReasonConflict},
		{"unparsable resourceVersion", "PUT", "/api/v1/namespaces/ns1/configmaps/a", "application/json", strings.Replace(cm, `"name":"a"`, `"name":"a","resourceVersion":"zzz"`, 1), 400, metav1.StatusReasonBadRequest},
		{"unparsable resourceVersion in a patch", "PATCH", "/api/v1/namespaces/ns1/configmaps/a", "application/merge-patch+json", `{"metadata":{"resourceVersion":"zzz"}}`, 400, metav1.StatusReasonBadRequest},
		{"compacted exact list", "GET", "/api/v1/configmaps?resourceVersion=1&resourceVersionMatch=Exact", "", "", 410, metav1.StatusReasonExpired},
		{"body over 3 MiB", "POST", "/api/v1/namespaces/ns1/configmaps", "application/json", big, 413, metav1.StatusReasonRequestEntityTooLarge},
		{"unknown content type", "POST", "/api/v1/namespaces/ns1/configmaps", "text/plain", cm, 415, metav1.StatusReasonUnsupportedMediaType},
		{"unknown patch type", "PATCH", "/api/v1/namespaces/ns1/configmaps/a", "application/x-unknown-patch+json", "{}", 415, metav1.StatusReasonUnsupportedMediaType},
		{"patch that cannot apply", "PATCH", "/api/v1/namespaces/ns1/configmaps/a", "application/json-patch+json", `[{"op":"replace","path":"/nope/x","value":1}]`, 422, metav1.StatusReasonInvalid},
		{"invalid object", "POST", "/api/v1/namespaces/ns1/configmaps", "application/json", `{"apiVersion":"v1","kind":"ConfigMap","metadata":{}}`, 422, metav1.StatusReasonInvalid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, body := rs.do(t, tc.method, tc.path, tc.ct, tc.body)
			var st metav1.Status
			if err := json.Unmarshal([]byte(body), &st); err != nil || st.Kind != "Status" {
				t.Fatalf("%s %s = %d with body %.200q, want a Status", tc.method, tc.path, code, body)
			}
			if code != tc.code || int(st.Code) != tc.code || st.Reason != tc.reason {
				t.Fatalf("%s %s = %d (status code %d, reason %s: %s), want %d %s", tc.method, tc.path, code, st.Code, st.Reason, st.Message, tc.code, tc.reason)
			}
		})
	}
	// Still serving.
	if code, body := rs.do(t, "GET", "/api/v1/namespaces/ns1/configmaps/a", "", ""); code != 200 {
		t.Fatalf("get after bad input = %d %s", code, body)
	}
}

// TestTooManyRequests: past MaxInFlight, requests get 429 with
// Retry-After, and the server recovers when the load goes.
func TestTooManyRequests(t *testing.T) {
	rs := startRaw(t, 1)
	rs.srv.inflight <- struct{}{} // one request in flight: the limit
	code, body := rs.do(t, "GET", "/api/v1/namespaces/ns1/configmaps", "", "")
	if code != 429 || !strings.Contains(body, `"reason":"TooManyRequests"`) {
		t.Fatalf("request over the in-flight limit = %d %s, want 429", code, body)
	}
	<-rs.srv.inflight
	if code, _ := rs.do(t, "GET", "/api/v1/namespaces/ns1/configmaps", "", ""); code != 200 {
		t.Fatalf("after the load = %d, want 200", code)
	}
}

// FuzzDecodeRequest: arbitrary bodies in every accepted encoding, on every
// write path, never panic the server or make it answer 5xx, and no request
// makes it allocate more than a bounded multiple of its body and of the
// object it changes.
func FuzzDecodeRequest(f *testing.F) {
	for _, seed := range []string{
		`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a"},"data":{"k":"v"}}`,
		"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: b\n",
		`[{"op":"add","path":"/data/x","value":"1"}]`,
		"k8s\x00\n\x0c\n\x02v1\x12\x06Secret", "{}", "null", "",
		// Amplifiers: copies doubling the document, inserts into an array
		// copying it whole, a keyed list merged element by element.
		copyAmplifier(23),
		`[{"op":"add","path":"/metadata/finalizers","value":[` + repeat(`"a"`, 20_000) + `]},` + repeat(`{"op":"add","path":"/metadata/finalizers/0","value":"b"}`, 1000) + "]",
		`{"metadata":{"finalizers":["x"]}}`,
		`{"metadata":{"finalizers":[` + repeat(`"a"`, 3000) + `]}}`,
	} {
		for op := uint8(0); op < 7; op++ {
			f.Add(op, []byte(seed))
		}
	}
	st, err := badgerstore.Open(badgerstore.DefaultConfig(f.TempDir()))
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { st.Close() })
	srv, err := New(Config{Store: st, Resources: testResources()})
	if err != nil {
		f.Fatal(err)
	}
	serve := func(method, path, ct string, body []byte) int {
		req := httptest.NewRequest(method, path, bytes.NewReader(body))
		req.Header.Set("Content-Type", ct)
		rec := httptest.NewRecorder()
		srv.ServeHTTP(rec, req)
		return rec.Code
	}
	serve("POST", "/api/v1/namespaces", "application/json", []byte(`{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"ns1"}}`))
	serve("POST", "/api/v1/namespaces/ns1/configmaps", "application/json", []byte(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a","finalizers":["example.com/f"]},"data":{"k":"v"}}`))
	ops := []struct{ method, path, ct string }{
		{"POST", "/api/v1/namespaces/ns1/configmaps", "application/json"},
		{"POST", "/api/v1/namespaces/ns1/secrets", "application/yaml"},
		{"POST", "/api/v1/namespaces/ns1/configmaps", "application/vnd.kubernetes.protobuf"},
		{"PUT", "/api/v1/namespaces/ns1/configmaps/a", "application/json"},
		{"PATCH", "/api/v1/namespaces/ns1/configmaps/a", "application/strategic-merge-patch+json"},
		{"PATCH", "/api/v1/namespaces/ns1/configmaps/a", "application/json-patch+json"},
		{"PATCH", "/api/v1/namespaces/ns1/configmaps/a", "application/merge-patch+json"},
	}
	f.Fuzz(func(t *testing.T, op uint8, body []byte) {
		o := ops[int(op)%len(ops)]
		var stored int
		if kv, err := st.Get(context.Background(), "/registry/configmaps/ns1/a", 0); err == nil {
			stored = len(kv.Value)
		}
		var code int
		alloc := allocated(func() { code = serve(o.method, o.path, o.ct, body) })
		if code >= 500 {
			t.Fatalf("%s %s (%s) with %q = %d", o.method, o.path, o.ct, body, code)
		}
		// Decoding costs a few times the JSON of the body and of the
		// object; copies may add maxPatchCopyBytes before they are
		// stopped, and the store's own work is a few MB.
		if limit := allocSlack * (40*uint64(len(body)+stored) + 16*maxPatchCopyBytes); alloc > limit {
			t.Fatalf("%s %s (%s) of %d bytes, on an object of %d, allocated %d MB, over %d MB", o.method, o.path, o.ct, len(body), stored, alloc>>20, limit>>20)
		}
	})
}
