package metrics

import (
	"net/http"
	"net/http/httptest"
	"runtime"
	"sort"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// families is one scrape, by metric name.
type families map[string]*dto.MetricFamily

// scrape fetches m.Handler() and parses the text format.
func scrape(t *testing.T, m *Metrics) families {
	t.Helper()
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("GET /metrics = %d: %s", rec.Code, rec.Body)
	}
	if ct := rec.Header().Get("Content-Type"); !strings.HasPrefix(ct, "text/plain") {
		t.Fatalf("GET /metrics Content-Type = %q, want text/plain", ct)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(rec.Body)
	if err != nil {
		t.Fatalf("parse /metrics: %v", err)
	}
	return fams
}

// value returns the value of the series of name whose labels are exactly
// labels ("k=v,k=v"; labels not given must be empty): a counter's or
// gauge's value, or a histogram's sample count. ok is false when there is
// no such series.
func (f families) value(name, labels string) (v float64, ok bool) {
	want := map[string]string{}
	if labels != "" {
		for _, kv := range strings.Split(labels, ",") {
			k, v, _ := strings.Cut(kv, "=")
			want[k] = v
		}
	}
	fam := f[name]
	if fam == nil {
		return 0, false
	}
next:
	for _, m := range fam.GetMetric() {
		got := map[string]string{}
		for _, lp := range m.GetLabel() {
			got[lp.GetName()] = lp.GetValue()
		}
		for k, v := range got {
			if want[k] != v {
				continue next
			}
		}
		for k, v := range want {
			if got[k] != v {
				continue next
			}
		}
		switch {
		case m.Counter != nil:
			return m.Counter.GetValue(), true
		case m.Gauge != nil:
			return m.Gauge.GetValue(), true
		case m.Histogram != nil:
			return float64(m.Histogram.GetSampleCount()), true
		}
	}
	return 0, false
}

// series lists the label sets of name, for failure messages.
func (f families) series(name string) string {
	var out []string
	for _, m := range f[name].GetMetric() {
		var ls []string
		for _, lp := range m.GetLabel() {
			ls = append(ls, lp.GetName()+"="+lp.GetValue())
		}
		out = append(out, "{"+strings.Join(ls, ",")+"}")
	}
	sort.Strings(out)
	return strings.Join(out, "\n\t")
}

// expect fails t unless the series of name with labels has value want.
func (f families) expect(t *testing.T, name, labels string, want float64) {
	t.Helper()
	got, ok := f.value(name, labels)
	if !ok {
		t.Errorf("%s{%s} is missing; have\n\t%s", name, labels, f.series(name))
		return
	}
	if got != want {
		t.Errorf("%s{%s} = %v, want %v", name, labels, got, want)
	}
}

func TestNewRegistersCollectors(t *testing.T) {
	fams := scrape(t, New())
	want := []string{"go_goroutines", "go_memstats_heap_inuse_bytes"}
	if runtime.GOOS == "linux" {
		want = append(want, "process_resident_memory_bytes", "process_cpu_seconds_total")
	}
	for _, name := range want {
		if fams[name] == nil {
			t.Errorf("scrape has no %s", name)
		}
	}
	// Series that exist before anything happened.
	fams.expect(t, "apiserver_current_inflight_requests", "request_kind=readOnly", 0)
	fams.expect(t, "apiserver_current_inflight_requests", "request_kind=mutating", 0)
	fams.expect(t, "outpost_store_request_errors_total", "operation=get", 0)
	fams.expect(t, "outpost_store_watchers", "", 0)
}

// TestNewIsIndependent: each Metrics has its own registry, so two hubs in
// one process do not collide (MustRegister would panic).
func TestNewIsIndependent(t *testing.T) {
	a, b := New(), New()
	a.requests.WithLabelValues("GET", "", "v1", "pods", "", "resource", "200").Inc()
	if _, ok := scrape(t, b).value("apiserver_request_total", "verb=GET,version=v1,resource=pods,scope=resource,code=200"); ok {
		t.Error("a request counted by one Metrics shows in another's scrape")
	}
}

// constCollector is a collector of one counter of a fixed value, as
// another package's collector.
type constCollector struct{ desc *prometheus.Desc }

func newConstCollector() constCollector {
	return constCollector{prometheus.NewDesc("outpost_test_things_total", "Things, for the test.", []string{"node"}, nil)}
}

func (c constCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }
func (c constCollector) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(c.desc, prometheus.CounterValue, 3, "edge-1")
}

// TestRegister: a collector another package owns is served with the
// hub's metrics, and one whose metrics clash is refused.
func TestRegister(t *testing.T) {
	m := New()
	if err := m.Register(newConstCollector()); err != nil {
		t.Fatal(err)
	}
	scrape(t, m).expect(t, "outpost_test_things_total", "node=edge-1", 3)
	if err := m.Register(newConstCollector()); err == nil {
		t.Error("Register of a collector of the same metrics succeeded, want an error")
	}
}
