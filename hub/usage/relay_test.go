package usage_test

import (
	"fmt"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"

	"github.com/outpost-mesh/outpost/hub/usage"
	"github.com/outpost-mesh/outpost/sync/wire"
)

// TestRelayCollector: the relay counters of the nodes' latest reports are
// the metrics a scrape reads, an Unchanged report keeps them, and they go
// with a report older than MaxAge.
func TestRelayCollector(t *testing.T) {
	clk := &clock{now: time.Date(2026, 12, 6, 7, 0, 0, 0, time.UTC)}
	cfg := usage.DefaultConfig()
	cfg.Now = clk.Now
	s, err := usage.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	c := s.RelayCollector()
	if got := collect(t, c); len(got) != 0 {
		t.Fatalf("an empty store's series: %v, want none", got)
	}
	relayed := report(1e6)
	relayed.Relay = []wire.RelayUsage{
		{Peer: netip.MustParseAddr("192.168.7.9"), Up: 1200},
		{Peer: netip.MustParseAddr("fd00:7::c"), Up: 3 << 20, Down: 5 << 20, Dropped: 40, Capped: 32},
	}
	s.PutUsage("edge-1", relayed)
	s.PutUsage("edge-2", report(1e6)) // relays for none

	want := []string{
		`outpost_node_relay_bytes_total{direction="down",node="edge-1",peer="192.168.7.9"} 0`,
		`outpost_node_relay_bytes_total{direction="down",node="edge-1",peer="fd00:7::c"} 5242880`,
		`outpost_node_relay_bytes_total{direction="up",node="edge-1",peer="192.168.7.9"} 1200`,
		`outpost_node_relay_bytes_total{direction="up",node="edge-1",peer="fd00:7::c"} 3145728`,
		`outpost_node_relay_capped_datagrams_total{node="edge-1",peer="192.168.7.9"} 0`,
		`outpost_node_relay_capped_datagrams_total{node="edge-1",peer="fd00:7::c"} 32`,
		`outpost_node_relay_dropped_datagrams_total{node="edge-1",peer="192.168.7.9"} 0`,
		`outpost_node_relay_dropped_datagrams_total{node="edge-1",peer="fd00:7::c"} 40`,
	}
	if got := collect(t, c); !reflect.DeepEqual(got, want) {
		t.Errorf("scrape:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}

	// A minute on, edge-1 says its usage is unchanged: the counters stay.
	clk.add(time.Minute)
	s.PutUsage("edge-1", &wire.Usage{Time: time.Now(), Unchanged: true})
	if got := collect(t, c); !reflect.DeepEqual(got, want) {
		t.Errorf("after an Unchanged report:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	// Then it reports no more: its series go with its report.
	clk.add(cfg.MaxAge)
	if got := collect(t, c); len(got) != 0 {
		t.Errorf("series once the report is MaxAge old: %v, want none", got)
	}
}

// TestRelayCollectorOnce: a report that names a peer twice, or an
// invalid one, which the wire never decodes, still makes one series per
// peer, so that a scrape does not fail.
func TestRelayCollectorOnce(t *testing.T) {
	s, err := usage.New(usage.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	u := report(1e6)
	peer := netip.MustParseAddr("192.168.7.9")
	u.Relay = []wire.RelayUsage{{Peer: peer, Up: 1}, {Peer: peer, Up: 2}, {Up: 3}}
	s.PutUsage("edge-1", u)
	if got := collect(t, s.RelayCollector()); len(got) != 4 {
		t.Errorf("series %v, want 4: one peer's", got)
	}
}

// collect gathers c on a pedantic registry, which checks what it
// collects against what it describes, lints the metrics as Prometheus's
// promlint does, and returns the series as "name{labels} value", sorted.
func collect(t *testing.T, c prometheus.Collector) []string {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(c); err != nil {
		t.Fatal(err)
	}
	fams, err := reg.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	if problems, err := promlint.NewWithMetricFamilies(fams).Lint(); err != nil || len(problems) > 0 {
		t.Errorf("lint: %v, %v", problems, err)
	}
	var out []string
	for _, f := range fams {
		for _, m := range f.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
			}
			out = append(out, fmt.Sprintf("%s{%s} %.0f", f.GetName(), strings.Join(labels, ","), m.GetCounter().GetValue()))
		}
	}
	slices.Sort(out)
	return out
}
