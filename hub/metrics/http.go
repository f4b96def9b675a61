package metrics

import (
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Middleware records kube-apiserver's request metrics for every request
// under /api and /apis and passes all requests on to next:
// apiserver_request_total and apiserver_request_duration_seconds when the
// request ends, apiserver_current_inflight_requests while a short request
// is served, and apiserver_longrunning_requests while a watch streams (from
// its 2xx header until next returns). Other paths are passed on untouched.
//
// The ResponseWriter next receives unwraps (http.ResponseController) to the
// one Middleware was given and flushes through to it. A request whose
// handler panics is not counted, but leaves no gauge raised.
func (m *Metrics) Middleware(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ri, ok := parseRequest(r)
		if !ok {
			next.ServeHTTP(w, r)
			return
		}
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w}
		if ri.verb == verbWatch {
			var open prometheus.Gauge
			sw.commit = func(code int) {
				if code >= 200 && code < 300 {
					t := m.targets.label(ri.target, code)
					open = m.longRunning.WithLabelValues(verbWatch, t.group, t.version, t.resource)
					open.Inc()
				}
			}
			defer func() {
				if open != nil {
					open.Dec()
				}
			}()
		}
		if !ri.longRunning() {
			g := m.inflight.WithLabelValues(ri.kind())
			g.Inc()
			defer g.Dec()
		}

		next.ServeHTTP(sw, r)

		code := sw.code
		if code == 0 {
			code = http.StatusOK // what net/http sends for a handler that wrote nothing
		}
		t := m.targets.label(ri.target, code)
		m.requests.WithLabelValues(ri.verb, t.group, t.version, t.resource, t.subresource, ri.scope, strconv.Itoa(code)).Inc()
		if !ri.longRunning() {
			m.durations.WithLabelValues(ri.verb, t.group, t.version, t.resource, t.subresource, ri.scope).Observe(time.Since(start).Seconds())
		}
	})
}

// statusWriter remembers the status code of a response. It adds nothing
// else to the ResponseWriter it wraps, so that http.ResponseController
// reaches the wrapped writer's Flush, Hijack and deadlines through Unwrap;
// it also implements http.Flusher itself for handlers that assert it.
// Like any ResponseWriter, it is used by one goroutine at a time.
type statusWriter struct {
	http.ResponseWriter
	code   int            // the final status, 0 until the header is sent
	commit func(code int) // called when the final status is known; may be nil
}

func (w *statusWriter) committed(code int) {
	w.code = code
	if w.commit != nil {
		w.commit(code)
	}
}

func (w *statusWriter) WriteHeader(code int) {
	w.ResponseWriter.WriteHeader(code) // panics on an invalid code, before we record it
	// 1xx headers other than 101 Switching Protocols are informational:
	// the final status is still to come.
	if w.code == 0 && (code >= 200 || code == http.StatusSwitchingProtocols) {
		w.committed(code)
	}
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.code == 0 {
		w.committed(http.StatusOK)
	}
	return w.ResponseWriter.Write(b)
}

// FlushError flushes the wrapped writer, which sends the header with 200
// if none was sent yet.
func (w *statusWriter) FlushError() error {
	err := http.NewResponseController(w.ResponseWriter).Flush()
	if w.code == 0 && !errors.Is(err, http.ErrNotSupported) {
		w.committed(http.StatusOK)
	}
	return err
}

// Flush is FlushError for handlers that assert http.Flusher.
func (w *statusWriter) Flush() { _ = w.FlushError() }

// Unwrap returns the wrapped writer, for http.ResponseController.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
