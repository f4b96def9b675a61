package view

import (
	"fmt"
	"testing"

	"github.com/outpost-mesh/outpost/sync/wire"
)

// benchFleet is an index of nodes with pods, each session opened and up
// to date.
type benchFleet struct {
	x        *Index
	rev      int64
	sessions []*Session
	podRaw   map[wire.Key][]byte
	nodeRaw  map[string][]byte
	raw      []byte // a secret, for any put but of a pod or Node
}

// newBenchFleet indexes nodes nodes of pods pods each, in sites sites
// (node i in site i%sites; 0: no site); each pod references one of three
// secrets and a configmap of its node, and the default service account.
// There are 50 services and their slices.
func newBenchFleet(b *testing.B, nodes, pods, sites int) *benchFleet {
	f := &benchFleet{podRaw: map[wire.Key][]byte{}, nodeRaw: map[string][]byte{}}
	f.x = NewIndex(DefaultConfig())
	var objs []Object
	add := func(k wire.Key, raw []byte) {
		f.rev++
		objs = append(objs, Object{Key: k, Revision: f.rev, Raw: raw})
	}
	f.raw = storedObject(b, key("secrets/default/s"), nil, 0)
	add(key("serviceaccounts/default/default"), f.raw)
	for i := range 50 {
		add(wire.Key{Resource: wire.ResourceServices, Namespace: "default", Name: fmt.Sprintf("svc-%d", i)}, f.raw)
		add(wire.Key{Resource: wire.ResourceEndpointSlices, Namespace: "default", Name: fmt.Sprintf("svc-%d-1", i)}, f.raw)
	}
	for n := range nodes {
		node := fmt.Sprintf("edge-%04d", n)
		spec := &nodeSpec{}
		if sites > 0 {
			spec.site = fmt.Sprintf("site-%02d", n%sites)
		}
		f.nodeRaw[node] = storedNode(b, node, spec, 0)
		add(nodeKey(node), f.nodeRaw[node])
		add(wire.Key{Resource: wire.ResourceConfigMaps, Namespace: "default", Name: node}, f.raw)
		for s := range 3 {
			add(wire.Key{Resource: wire.ResourceSecrets, Namespace: "default", Name: fmt.Sprintf("%s-%d", node, s)}, f.raw)
		}
		for p := range pods {
			k := wire.Key{Resource: wire.ResourcePods, Namespace: "default", Name: fmt.Sprintf("%s-%d", node, p)}
			spec := &podSpec{node: node, secrets: []string{fmt.Sprintf("%s-%d", node, p%3)}, configMaps: []string{node}}
			f.podRaw[k] = storedObject(b, k, spec, 0)
			add(k, f.podRaw[k])
		}
	}
	if err := f.x.Reset(f.rev, objs); err != nil {
		b.Fatal(err)
	}
	for n := range nodes {
		s, _, _, err := f.x.Resume(fmt.Sprintf("edge-%04d", n), f.rev)
		if err != nil {
			b.Fatal(err)
		}
		f.sessions = append(f.sessions, s)
	}
	return f
}

// BenchmarkApplyWith1000Sessions measures one store change with 1,000
// nodes of 10 pods connected, in 100 sites of 10: Apply, then Next on
// every session, as the hub does on each change. A pod or secret concerns
// one node; a Node's status its site's 10 (node), or its own alone in a
// fleet without sites (node-no-site); a service all of them; an event
// none.
func BenchmarkApplyWith1000Sessions(b *testing.B) {
	const nodes, pods, sites = 1000, 10, 100
	for _, tc := range []string{"pod", "secret", "node", "node-no-site", "service", "event"} {
		b.Run(tc, func(b *testing.B) {
			f := newBenchFleet(b, nodes, pods, sites)
			if tc == "node-no-site" {
				f = newBenchFleet(b, nodes, pods, 0)
			}
			changes, i := 0, 0
			for b.Loop() {
				i++
				node := fmt.Sprintf("edge-%04d", i%nodes)
				ev := Event{Revision: f.rev + 1, Raw: f.raw}
				switch tc {
				case "pod":
					ev.Key = wire.Key{Resource: wire.ResourcePods, Namespace: "default", Name: fmt.Sprintf("%s-%d", node, i%pods)}
					ev.Raw = f.podRaw[ev.Key]
				case "secret":
					ev.Key = wire.Key{Resource: wire.ResourceSecrets, Namespace: "default", Name: node + "-1"}
				case "node", "node-no-site":
					ev.Key, ev.Raw = nodeKey(node), f.nodeRaw[node]
				case "service":
					ev.Key = wire.Key{Resource: wire.ResourceServices, Namespace: "default", Name: fmt.Sprintf("svc-%d", i%50)}
				case "event":
					ev.Key = wire.Key{Resource: wire.ResourceEvents, Namespace: "default", Name: "e"}
				}
				f.rev++
				if err := f.x.Apply([]Event{ev}); err != nil {
					b.Fatal(err)
				}
				for _, s := range f.sessions {
					c, _, err := s.Next()
					if err != nil {
						b.Fatal(err)
					}
					changes += len(c)
				}
			}
			b.ReportMetric(float64(changes)/float64(b.N), "changes/op")
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/nodes, "ns/session")
		})
	}
}

// BenchmarkResume measures resuming one node of the fleet from 1,000
// changes ago (that of other nodes' pods, mostly).
func BenchmarkResume(b *testing.B) {
	const nodes, pods, back = 1000, 10, 1000
	f := newBenchFleet(b, nodes, pods, 100)
	from := f.rev
	for i := range back {
		k := wire.Key{Resource: wire.ResourcePods, Namespace: "default", Name: fmt.Sprintf("edge-%04d-%d", i%nodes, i%pods)}
		f.rev++
		if err := f.x.Apply([]Event{{Revision: f.rev, Key: k, Raw: f.podRaw[k]}}); err != nil {
			b.Fatal(err)
		}
	}
	for b.Loop() {
		s, _, _, err := f.x.Resume("edge-0001", from)
		if err != nil {
			b.Fatal(err)
		}
		s.Close()
	}
}

// BenchmarkNextOfWokenSession measures what the hub does per pod change
// with 1,000 nodes connected, each session woken only by changes that
// concern its node: Apply one pod change, then Next on that node's
// session alone, which last ran 1,000 changes (of other nodes) ago.
func BenchmarkNextOfWokenSession(b *testing.B) {
	const nodes, pods = 1000, 10
	f := newBenchFleet(b, nodes, pods, 100)
	i := 0
	for b.Loop() {
		i++
		n := i % nodes
		k := wire.Key{Resource: wire.ResourcePods, Namespace: "default", Name: fmt.Sprintf("edge-%04d-%d", n, i%pods)}
		f.rev++
		if err := f.x.Apply([]Event{{Revision: f.rev, Key: k, Raw: f.podRaw[k]}}); err != nil {
			b.Fatal(err)
		}
		if _, _, err := f.sessions[n].Next(); err != nil {
			b.Fatal(err)
		}
	}
}
