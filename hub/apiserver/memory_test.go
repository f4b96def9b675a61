package apiserver

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/outpost-mesh/outpost/internal/wait"
)

// liveHeap returns the bytes of live heap after a full collection.
func liveHeap() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// peakWriter is a ResponseWriter that measures the server's live heap at
// every write of the response, and can end the request once the body
// holds enough.
type peakWriter struct {
	header http.Header
	code   int
	n      int    // bytes written
	peak   uint64 // of the live heap at a write
	// With marker set, the request is canceled once the body holds
	// marker want times.
	marker []byte
	want   int
	seen   int
	carry  []byte // the end of the last write, where a marker may start
	cancel context.CancelFunc
}

func (w *peakWriter) Header() http.Header  { return w.header }
func (w *peakWriter) WriteHeader(code int) { w.code = code }
func (w *peakWriter) Flush()               {}
func (w *peakWriter) Write(b []byte) (int, error) {
	if w.code == 0 {
		w.code = 200
	}
	w.n += len(b)
	w.peak = max(w.peak, liveHeap())
	if w.marker != nil {
		joined := append(w.carry, b...)
		w.seen += bytes.Count(joined, w.marker)
		w.carry = append(w.carry[:0], joined[max(len(joined)-len(w.marker)+1, 0):]...)
		if w.seen >= w.want {
			w.cancel()
		}
	}
	return len(b), nil
}

// createBig creates n config maps of size bytes of data in ns1.
func createBig(t *testing.T, rs *rawServer, n, size int) {
	t.Helper()
	data := strings.Repeat("x", size)
	for i := range n {
		body := fmt.Sprintf(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"big-%02d"},"data":{"k":%q}}`, i, data)
		if code, resp := rs.do(t, "POST", "/api/v1/namespaces/ns1/configmaps", "application/json", body); code != 201 {
			t.Fatalf("create = %d %.200s", code, resp)
		}
	}
}

// TestListMemory: a list costs the server a bounded buffer whatever its
// size: while it writes a list of 48 MB, in any form, its live heap stays
// within a few MB of what it was before, where building the list whole
// held several times the list.
func TestListMemory(t *testing.T) {
	rs := startRaw(t, 0)
	const objects, size = 48, 1 << 20
	createBig(t, rs, objects, size)
	for _, tc := range []struct{ name, query, accept string }{
		{"JSON", "", "application/json"},
		{"protobuf", "", "application/vnd.kubernetes.protobuf"},
		{"JSON, limit 500", "?limit=500", "application/json"},
		{"YAML", "", "application/yaml"},
		{"Table with objects", "?includeObject=Object", "application/json;as=Table;g=meta.k8s.io;v=v1"},
		{"watch from now", "?watch=1", "application/json"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			req := httptest.NewRequest("GET", "/api/v1/namespaces/ns1/configmaps"+tc.query, nil).WithContext(ctx)
			req.Header.Set("Accept", tc.accept)
			w := &peakWriter{header: http.Header{}, cancel: cancel}
			if strings.Contains(tc.query, "watch") {
				// A watch goes on: end it once every object was sent.
				w.marker, w.want = []byte(`{"type":"ADDED"`), objects
			}
			base := liveHeap()
			rs.srv.ServeHTTP(w, req)
			if w.code != 200 || w.n < objects*size {
				t.Fatalf("GET = %d with %d bytes, want 200 with over %d", w.code, w.n, objects*size)
			}
			// A store page (about 4 MB), an object decoded and encoded
			// (a few MB), the writer's buffers.
			if grew := int64(w.peak) - int64(base); grew > 24<<20 {
				t.Errorf("live heap grew by %d MB while writing a %d MB list, want under 24 MB", grew>>20, w.n>>20)
			}
		})
	}
}

// TestWatchCacheMemory: the events watchers share are kept up to
// WatchCacheBytes, not by number: after 40 MB of changes to a watched
// collection, the server holds no more than the cache's worth of them.
func TestWatchCacheMemory(t *testing.T) {
	rs := startRaw(t, 0)
	req, _ := http.NewRequest("GET", rs.url+"/api/v1/namespaces/ns1/configmaps?watch=1&resourceVersion=1", nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	resp, err := http.DefaultClient.Do(req.WithContext(ctx))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	base := liveHeap()
	const objects = 40
	createBig(t, rs, objects, 1<<20)
	// Read every event, holding none.
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 4<<20)
	for seen := 0; seen < objects && sc.Scan(); {
		if bytes.HasPrefix(sc.Bytes(), []byte(`{"type":"ADDED"`)) {
			seen++
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	// The store buffers writes too: badger's memtables of the last
	// writes stay live until it has flushed them, which on a busy machine
	// takes a while. So the heap must settle within the bound, not be
	// within it at once; a cache that kept every event never would.
	var grew int64
	wait.For(t, 60*time.Second, "the live heap to settle within the watch cache's 16 MB and a little", func() (bool, string) {
		grew = int64(liveHeap()) - int64(base)
		return grew <= 16<<20+8<<20, fmt.Sprintf("live heap grew by %d MB after %d MB of watched changes", grew>>20, objects)
	})
}
