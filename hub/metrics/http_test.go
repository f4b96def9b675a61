package metrics

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// testTimeout bounds every wait of these tests, so a broken flush or a
// stuck gauge fails instead of hanging.
const testTimeout = 30 * time.Second

func TestMiddleware(t *testing.T) {
	m := New()

	slowEntered, slowRelease := make(chan struct{}), make(chan struct{})
	api := http.NewServeMux()
	api.HandleFunc("POST /api/v1/namespaces/{ns}/pods", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, `{"kind":"Pod"}`)
	})
	api.HandleFunc("GET /api/v1/namespaces/{ns}/pods/{name}", func(w http.ResponseWriter, r *http.Request) {
		switch r.PathValue("name") {
		case "slow":
			close(slowEntered)
			<-slowRelease
			io.WriteString(w, `{"kind":"Pod"}`)
		default:
			http.Error(w, "not found", http.StatusNotFound)
		}
	})
	api.HandleFunc("GET /api/v1/namespaces/{ns}/pods", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("watch") != "true" {
			io.WriteString(w, `{"kind":"PodList"}`)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		io.WriteString(w, `{"type":"ADDED"}`+"\n")
		// The event must reach the client now, through the middleware's
		// writer, or the client's read below times out.
		if err := http.NewResponseController(w).Flush(); err != nil {
			t.Errorf("flush a watch through the middleware: %v", err)
			return
		}
		<-r.Context().Done()
	})

	h := m.Middleware(api)
	watchDone := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(w, r)
		if r.URL.Query().Get("watch") == "true" {
			close(watchDone) // the middleware is done with the watch
		}
	}))
	defer srv.Close()
	client := srv.Client()
	ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
	defer cancel()

	do := func(method, path string, wantCode int) {
		t.Helper()
		req, err := http.NewRequestWithContext(ctx, method, srv.URL+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != wantCode {
			t.Fatalf("%s %s = %d, want %d", method, path, resp.StatusCode, wantCode)
		}
	}

	// A 404 for pods before the API has ever served pods is not labelled
	// with the resource; after a success it is.
	do("GET", "/api/v1/namespaces/default/pods/missing", http.StatusNotFound)
	do("POST", "/api/v1/namespaces/default/pods", http.StatusCreated)
	do("GET", "/api/v1/namespaces/default/pods/missing", http.StatusNotFound)
	do("GET", "/api/v1/namespaces/default/pods", http.StatusOK)
	do("GET", "/api/v1/namespaces/default/widgets", http.StatusNotFound)
	do("GET", "/api/v1/namespaces/default/widgets-2", http.StatusNotFound)
	do("GET", "/healthz", http.StatusNotFound) // not the API: not recorded

	// A request being served is in flight.
	slowErr := make(chan error, 1)
	go func() {
		req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL+"/api/v1/namespaces/default/pods/slow", nil)
		resp, err := client.Do(req)
		if err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		slowErr <- err
	}()
	select {
	case <-slowEntered:
	case <-ctx.Done():
		t.Fatal("slow request never reached the handler")
	}
	fams := scrape(t, m)
	fams.expect(t, "apiserver_current_inflight_requests", "request_kind=readOnly", 1)
	fams.expect(t, "apiserver_current_inflight_requests", "request_kind=mutating", 0)
	close(slowRelease)
	if err := <-slowErr; err != nil {
		t.Fatalf("slow request: %v", err)
	}

	// An open watch is long-running, not in flight.
	watchCtx, stopWatch := context.WithCancel(ctx)
	req, _ := http.NewRequestWithContext(watchCtx, "GET", srv.URL+"/api/v1/namespaces/default/pods?watch=true", nil)
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	line, err := bufio.NewReader(resp.Body).ReadString('\n')
	if err != nil || line != `{"type":"ADDED"}`+"\n" {
		t.Fatalf("first watch event = %q, %v; want it flushed to the client", line, err)
	}
	fams = scrape(t, m)
	fams.expect(t, "apiserver_longrunning_requests", "verb=WATCH,version=v1,resource=pods", 1)
	fams.expect(t, "apiserver_current_inflight_requests", "request_kind=readOnly", 0)
	fams.expect(t, "apiserver_current_inflight_requests", "request_kind=mutating", 0)

	stopWatch()
	select {
	case <-watchDone:
	case <-ctx.Done():
		t.Fatal("watch handler did not return after the client went away")
	}

	fams = scrape(t, m)
	fams.expect(t, "apiserver_longrunning_requests", "verb=WATCH,version=v1,resource=pods", 0)
	const total = "apiserver_request_total"
	fams.expect(t, total, "verb=GET,scope=resource,code=404", 1) // the first 404
	fams.expect(t, total, "verb=POST,version=v1,resource=pods,scope=resource,code=201", 1)
	fams.expect(t, total, "verb=GET,version=v1,resource=pods,scope=resource,code=404", 1)
	fams.expect(t, total, "verb=GET,version=v1,resource=pods,scope=resource,code=200", 1) // slow
	fams.expect(t, total, "verb=LIST,version=v1,resource=pods,scope=namespace,code=200", 1)
	fams.expect(t, total, "verb=LIST,scope=namespace,code=404", 2) // both widgets
	fams.expect(t, total, "verb=WATCH,version=v1,resource=pods,scope=namespace,code=200", 1)
	if n := len(fams[total].GetMetric()); n != 7 {
		t.Errorf("%s has %d series, want 7:\n\t%s", total, n, fams.series(total))
	}

	const dur = "apiserver_request_duration_seconds"
	fams.expect(t, dur, "verb=POST,version=v1,resource=pods,scope=resource", 1)
	fams.expect(t, dur, "verb=GET,version=v1,resource=pods,scope=resource", 2)
	fams.expect(t, dur, "verb=LIST,version=v1,resource=pods,scope=namespace", 1)
	if _, ok := fams.value(dur, "verb=WATCH,version=v1,resource=pods,scope=namespace"); ok {
		t.Errorf("%s has a WATCH series; watches are not observed", dur)
	}
	if got := bucketBounds(fams, dur); got != len(requestDurationBuckets) || got != 23 {
		t.Errorf("%s has %d buckets, want upstream's 23", dur, got)
	}
}

// bucketBounds returns the number of finite buckets of the first series of
// histogram name.
func bucketBounds(f families, name string) int {
	ms := f[name].GetMetric()
	if len(ms) == 0 {
		return 0
	}
	n := 0
	for _, b := range ms[0].GetHistogram().GetBucket() {
		if b.GetUpperBound() < 1e300 { // the parser may keep +Inf
			n++
		}
	}
	return n
}

// TestMiddlewareWatchRejected: a watch answered with an error before it
// streams is counted but never open.
func TestMiddlewareWatchRejected(t *testing.T) {
	m := New()
	h := m.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "gone", http.StatusGone)
	}))
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/apis/apps/v1/watch/deployments", nil))
	fams := scrape(t, m)
	fams.expect(t, "apiserver_request_total", "verb=WATCH,scope=cluster,code=410", 1)
	if n := len(fams["apiserver_longrunning_requests"].GetMetric()); n != 0 {
		t.Errorf("apiserver_longrunning_requests has %d series after a rejected watch, want 0", n)
	}
}

// TestMiddlewarePanic: a handler that panics leaves no gauge raised.
func TestMiddlewarePanic(t *testing.T) {
	m := New()
	h := m.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusOK)
		panic(http.ErrAbortHandler)
	}))
	for _, target := range []string{"/api/v1/nodes/n1", "/api/v1/nodes?watch=1"} {
		func() {
			defer func() {
				if r := recover(); r != http.ErrAbortHandler {
					t.Errorf("GET %s: recovered %v, want http.ErrAbortHandler", target, r)
				}
			}()
			h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", target, nil))
		}()
	}
	fams := scrape(t, m)
	fams.expect(t, "apiserver_current_inflight_requests", "request_kind=readOnly", 0)
	fams.expect(t, "apiserver_longrunning_requests", "verb=WATCH,version=v1,resource=nodes", 0)
}

// noFlush is a ResponseWriter that cannot flush.
type noFlush struct{ http.ResponseWriter }

func TestStatusWriter(t *testing.T) {
	t.Run("flush before the header sends 200", func(t *testing.T) {
		rec := httptest.NewRecorder()
		var commits []int
		w := &statusWriter{ResponseWriter: rec, commit: func(code int) { commits = append(commits, code) }}
		if err := http.NewResponseController(w).Flush(); err != nil {
			t.Fatalf("Flush() = %v", err)
		}
		if !rec.Flushed || w.code != 200 || len(commits) != 1 || commits[0] != 200 {
			t.Errorf("after Flush: flushed %v, code %d, commits %v; want true, 200, [200]", rec.Flushed, w.code, commits)
		}
		w.WriteHeader(http.StatusInternalServerError) // superfluous: ignored
		if w.code != 200 || len(commits) != 1 {
			t.Errorf("a second WriteHeader changed the code to %d (commits %v)", w.code, commits)
		}
	})
	t.Run("informational headers are not final", func(t *testing.T) {
		rec := httptest.NewRecorder()
		w := &statusWriter{ResponseWriter: rec}
		w.WriteHeader(http.StatusEarlyHints)
		if w.code != 0 {
			t.Errorf("code after 103 = %d, want 0", w.code)
		}
		w.WriteHeader(http.StatusAccepted)
		w.Write([]byte("x"))
		if w.code != http.StatusAccepted {
			t.Errorf("code = %d, want 202", w.code)
		}
	})
	t.Run("write sends 200", func(t *testing.T) {
		w := &statusWriter{ResponseWriter: httptest.NewRecorder()}
		w.Write([]byte("x"))
		if w.code != http.StatusOK {
			t.Errorf("code = %d, want 200", w.code)
		}
	})
	t.Run("a writer that cannot flush", func(t *testing.T) {
		w := &statusWriter{ResponseWriter: noFlush{httptest.NewRecorder()}}
		if err := http.NewResponseController(w).Flush(); !errors.Is(err, http.ErrNotSupported) {
			t.Errorf("Flush() = %v, want ErrNotSupported", err)
		}
		if w.code != 0 {
			t.Errorf("code after a failed flush = %d, want 0", w.code)
		}
	})
	t.Run("unwrap", func(t *testing.T) {
		rec := httptest.NewRecorder()
		w := &statusWriter{ResponseWriter: rec}
		if w.Unwrap() != rec {
			t.Error("Unwrap() is not the wrapped writer")
		}
	})
}
