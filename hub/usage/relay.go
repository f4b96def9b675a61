package usage

import (
	"maps"
	"net/netip"
	"slices"

	"github.com/prometheus/client_golang/prometheus"
)

// The relay's metrics, from the counters each node reports of the relay
// it runs for its site peers (wire.RelayUsage): counters since the node's
// relay started, which start again from zero when it restarts, as
// Prometheus's rate() expects of a counter. A node reports at most
// wire.MaxUsageRelayPeers peers, so a node has at most four times that
// many series.
var (
	relayBytesDesc = prometheus.NewDesc("outpost_node_relay_bytes_total",
		"Bytes a node's relay forwarded for a site peer whose uplink is down, toward the hub (direction up) or back (down), as the node last reported.",
		[]string{"node", "peer", "direction"}, nil)
	relayDroppedDesc = prometheus.NewDesc("outpost_node_relay_dropped_datagrams_total",
		"Datagrams of a site peer a node's relay dropped: too large, over the peer's cap, or beyond the relay's clients, as the node last reported.",
		[]string{"node", "peer"}, nil)
	relayCappedDesc = prometheus.NewDesc("outpost_node_relay_capped_datagrams_total",
		"Datagrams of a site peer a node's relay dropped for the cap on the bytes it relays per peer (of the dropped ones), as the node last reported.",
		[]string{"node", "peer"}, nil)
)

// RelayCollector returns a Prometheus collector of the relay counters in
// the nodes' reports that are not older than MaxAge, read from the store
// at each scrape: the series of a node that stopped reporting, or whose
// relay forwards for a peer no more, go with its report.
func (s *Store) RelayCollector() prometheus.Collector { return relayCollector{s} }

// relayCollector is the Store's RelayCollector.
type relayCollector struct{ s *Store }

// Describe implements prometheus.Collector.
func (c relayCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- relayBytesDesc
	ch <- relayDroppedDesc
	ch <- relayCappedDesc
}

// Collect implements prometheus.Collector.
func (c relayCollector) Collect(ch chan<- prometheus.Metric) {
	reports, _ := c.s.fresh()
	for _, node := range slices.Sorted(maps.Keys(reports)) {
		u := reports[node].u
		if u == nil {
			continue
		}
		// The wire decoder takes each peer once; a report put in by other
		// means must not make the scrape fail on a series twice.
		seen := make(map[netip.Addr]bool, len(u.Relay))
		for _, r := range u.Relay {
			if !r.Peer.IsValid() || seen[r.Peer] {
				continue
			}
			seen[r.Peer] = true
			peer := r.Peer.String()
			ch <- prometheus.MustNewConstMetric(relayBytesDesc, prometheus.CounterValue, float64(r.Up), node, peer, "up")
			ch <- prometheus.MustNewConstMetric(relayBytesDesc, prometheus.CounterValue, float64(r.Down), node, peer, "down")
			ch <- prometheus.MustNewConstMetric(relayDroppedDesc, prometheus.CounterValue, float64(r.Dropped), node, peer)
			ch <- prometheus.MustNewConstMetric(relayCappedDesc, prometheus.CounterValue, float64(r.Capped), node, peer)
		}
	}
}
