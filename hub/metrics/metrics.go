// Package metrics owns the hub's Prometheus metrics: kube-apiserver's request
// metrics for the API, the store's latency, errors and open watches, the Go
// and process collectors, and the collectors other packages Register, all on
// a registry of the package's own. Only the hub's composition root
// (hub/hubd) should import it.
package metrics

import (
	"fmt"
	"net/http"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// requestDurationBuckets are kube-apiserver's for
// apiserver_request_duration_seconds, so that SLO dashboards and alerts made
// for Kubernetes read the hub's numbers the same way.
var requestDurationBuckets = []float64{0.005, 0.025, 0.05, 0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 1.25, 1.5, 2, 3,
	4, 5, 6, 8, 10, 15, 20, 30, 45, 60}

// storeDurationBuckets span 100µs to 10s: badger answers reads in tens of
// microseconds and a group-committed write costs an fsync, which is
// milliseconds on eMMC and seconds on a worn SD card.
var storeDurationBuckets = []float64{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
	0.1, 0.25, 0.5, 1, 2.5, 5, 10}

// Store operations, the values of the operation label.
const (
	opGet      = "get"
	opList     = "list"
	opCreate   = "create"
	opUpdate   = "update"
	opDelete   = "delete"
	opCompact  = "compact"
	opRevision = "revision"
)

// Values of the request_kind label of apiserver_current_inflight_requests.
const (
	readOnlyKind = "readOnly"
	mutatingKind = "mutating"
)

// Metrics holds the hub's metrics and the registry they are served from.
// New starts nothing; all the methods are safe for concurrent use.
type Metrics struct {
	reg *prometheus.Registry

	requests    *prometheus.CounterVec   // apiserver_request_total
	durations   *prometheus.HistogramVec // apiserver_request_duration_seconds
	inflight    *prometheus.GaugeVec     // apiserver_current_inflight_requests
	longRunning *prometheus.GaugeVec     // apiserver_longrunning_requests

	storeDurations *prometheus.HistogramVec // outpost_store_request_duration_seconds
	storeErrors    *prometheus.CounterVec   // outpost_store_request_errors_total
	storeWatchers  prometheus.Gauge         // outpost_store_watchers

	targets targets
}

// New returns the hub's metrics on a new registry that also holds the Go
// runtime and process collectors. The global prometheus registry is not
// touched, so several hubs can run in one process (tests, `outpost up`).
func New() *Metrics {
	m := &Metrics{
		reg: prometheus.NewRegistry(),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "apiserver_request_total",
			Help: "Counter of apiserver requests broken out for each verb, group, version, resource, subresource, scope and HTTP response code.",
		}, []string{"verb", "group", "version", "resource", "subresource", "scope", "code"}),
		durations: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "apiserver_request_duration_seconds",
			Help:    "Response latency distribution in seconds for each verb, group, version, resource, subresource and scope. Long-running requests (WATCH, CONNECT) are not observed.",
			Buckets: requestDurationBuckets,
		}, []string{"verb", "group", "version", "resource", "subresource", "scope"}),
		inflight: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "apiserver_current_inflight_requests",
			Help: "Number of apiserver requests being served, per request kind; long-running requests (WATCH, CONNECT) are not counted.",
		}, []string{"request_kind"}),
		longRunning: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "apiserver_longrunning_requests",
			Help: "Gauge of open watches broken out by verb, group, version and resource.",
		}, []string{"verb", "group", "version", "resource"}),
		storeDurations: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "outpost_store_request_duration_seconds",
			Help:    "Latency of store calls in seconds, per operation.",
			Buckets: storeDurationBuckets,
		}, []string{"operation"}),
		storeErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "outpost_store_request_errors_total",
			Help: "Store calls that failed, per operation; not-found, conflicts, compacted revisions and cancelled calls are expected outcomes and not counted.",
		}, []string{"operation"}),
		storeWatchers: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "outpost_store_watchers",
			Help: "Number of open store watches.",
		}),
	}
	// Series that exist from the start, so that rate() and absence alerts
	// work before the first request or error.
	for _, kind := range []string{readOnlyKind, mutatingKind} {
		m.inflight.WithLabelValues(kind)
	}
	for _, op := range []string{opGet, opList, opCreate, opUpdate, opDelete, opCompact, opRevision} {
		m.storeErrors.WithLabelValues(op)
	}
	m.reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		m.requests, m.durations, m.inflight, m.longRunning,
		m.storeDurations, m.storeErrors, m.storeWatchers,
	)
	return m
}

// Register adds c, a collector another package owns (the nodes' relay
// counters of hub/usage), to the registry the metrics are served from. It
// fails if c's metrics clash with ones already registered.
func (m *Metrics) Register(c prometheus.Collector) error {
	if err := m.reg.Register(c); err != nil {
		return fmt.Errorf("register metrics: %w", err)
	}
	return nil
}

// Handler serves the metrics in the Prometheus text format (or OpenMetrics
// or protobuf, as the scraper asks).
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
}

// maxTargets caps the distinct (group, version, resource, subresource)
// label values of the request metrics. The hub serves a few dozen; the cap
// only matters if something goes wrong, and keeps the series bounded then.
const maxTargets = 1024

// targets is the set of API targets that may be used as label values: those
// the API has answered with a success. Requests for anything else (a
// resource the hub does not serve, a typo, a scan) are recorded with empty
// group, version, resource and subresource, so a client cannot create series
// by inventing names.
type targets struct {
	mu   sync.RWMutex
	seen map[target]struct{}
}

// label returns t if it may be used as a label value, admitting it first if
// the response's code is a success; otherwise it returns the empty target.
func (s *targets) label(t target, code int) target {
	if t == (target{}) {
		return t
	}
	s.mu.RLock()
	_, ok := s.seen[t]
	s.mu.RUnlock()
	if ok {
		return t
	}
	if code < 200 || code >= 400 {
		return target{}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.seen[t]; ok {
		return t
	}
	if len(s.seen) >= maxTargets {
		return target{}
	}
	if s.seen == nil {
		s.seen = make(map[target]struct{})
	}
	s.seen[t] = struct{}{}
	return t
}
