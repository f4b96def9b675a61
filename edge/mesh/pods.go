package mesh

import (
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/memberlist"
)

// Pod readiness. Each node tells its site the readiness of its own pods,
// as its runtime and probes see them (SetPods), so that the other nodes
// can stop routing to a pod that is not ready even while the hub, whose
// EndpointSlices say otherwise, is away. A node speaks only for itself:
// what others say about it is ignored. Whether a node may claim a pod at
// all (the pod's endpoints name that node) is for the reader to check
// against its EndpointSlices; the mesh only carries the claims.

// PodReady is one pod of a node and whether it is ready.
type PodReady struct {
	UID   string // the pod's metadata.uid
	Ready bool
}

// NodePods is what a node last said of its pods.
type NodePods struct {
	Node string
	// Seq orders what the node says: a higher one is newer. A node's
	// seq grows with the wall clock, so that it keeps growing across
	// the node's restarts.
	Seq  uint64
	Pods []PodReady // by UID
}

// podTable is the pods the node knows: its own and its peers'.
type podTable struct {
	self string
	now  func() time.Time

	mu    sync.Mutex
	nodes map[string]*podsOf
}

type podsOf struct {
	seq  uint64
	pods map[string]bool // UID: ready
}

func newPodTable(self string) *podTable {
	return &podTable{self: self, now: time.Now, nodes: map[string]*podsOf{}}
}

// nextSeq returns the node's next seq: past the last, and at least the
// wall clock in nanoseconds.
func (t *podTable) nextSeq(last uint64) uint64 {
	return max(last+1, uint64(t.now().UnixNano()))
}

// setOwn makes pods the node's own and returns the deltas that tell the
// change, each under maxDeltaSize, with consecutive seqs; none if nothing
// changed.
func (t *podTable) setOwn(pods []PodReady) [][]byte {
	want := make(map[string]bool, len(pods))
	for _, p := range pods {
		if p.UID != "" && len(p.UID) <= maxUID {
			want[p.UID] = p.Ready
		}
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	own := t.nodes[t.self]
	if own == nil {
		own = &podsOf{pods: map[string]bool{}}
		t.nodes[t.self] = own
	}
	var changes []podEntry
	for uid, ready := range want {
		if r, ok := own.pods[uid]; !ok || r != ready {
			changes = append(changes, podEntry{uid: uid, ready: ready})
		}
	}
	for uid := range own.pods {
		if _, ok := want[uid]; !ok {
			changes = append(changes, podEntry{uid: uid, gone: true})
		}
	}
	if len(changes) == 0 {
		return nil
	}
	slices.SortFunc(changes, func(a, b podEntry) int { return strings.Compare(a.uid, b.uid) })
	own.pods = want
	var out [][]byte
	for len(changes) > 0 {
		own.seq = t.nextSeq(own.seq)
		n := nodePods{node: t.self, seq: own.seq}
		// Fill the delta up to its size: an entry takes at most 2 bytes
		// and the UID's length and bytes.
		size := 2 + 1 + len(t.self) + 10 + 3
		for len(changes) > 0 {
			e := changes[0]
			if es := 3 + len(e.uid); len(n.pods) > 0 && size+es > maxDeltaSize {
				break
			} else {
				size += es
			}
			n.pods = append(n.pods, e)
			changes = changes[1:]
		}
		out = append(out, encodeDelta(n))
	}
	return out
}

// applyDelta merges a peer's delta, and reports whether it changed what
// the node knows. Deltas about the node itself, about a node that member
// says is not in the site, or older than what it holds of their node, are
// ignored.
func (t *podTable) applyDelta(n nodePods, member func(string) bool) bool {
	if n.node == t.self || !member(n.node) {
		return false
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	cur := t.nodes[n.node]
	if cur == nil {
		cur = &podsOf{pods: map[string]bool{}}
		t.nodes[n.node] = cur
	} else if n.seq <= cur.seq {
		return false
	}
	cur.seq = n.seq
	changed := false
	for _, e := range n.pods {
		r, ok := cur.pods[e.uid]
		switch {
		case e.gone && ok:
			delete(cur.pods, e.uid)
			changed = true
		case !e.gone && (!ok || r != e.ready):
			cur.pods[e.uid] = e.ready
			changed = true
		}
	}
	return changed
}

// applyState merges a peer's state: each node's pods there replace what
// the node holds of it unless older, and for nodes that member says are
// not in the site. It reports whether anything changed.
func (t *podTable) applyState(nodes []nodePods, member func(string) bool) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	changed := false
	for _, n := range nodes {
		if n.node == t.self || !member(n.node) {
			continue
		}
		cur := t.nodes[n.node]
		if cur != nil && n.seq < cur.seq {
			continue
		}
		pods := make(map[string]bool, len(n.pods))
		for _, e := range n.pods {
			pods[e.uid] = e.ready
		}
		if cur == nil || !maps.Equal(cur.pods, pods) {
			changed = true
		}
		t.nodes[n.node] = &podsOf{seq: n.seq, pods: pods}
	}
	return changed
}

// forget drops what the node holds of a peer that left or died.
func (t *podTable) forget(node string) bool {
	if node == t.self {
		return false
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	_, ok := t.nodes[node]
	delete(t.nodes, node)
	return ok
}

// state returns every node's pods as a state message; nodes past what a
// state may hold (MaxStateSize, maxNodes, maxPodsOfNode) are left out.
func (t *podTable) state() []byte {
	all := t.snapshot()
	nodes := make([]nodePods, 0, len(all))
	size := 2 + 10
	for _, n := range all {
		np := nodePods{node: n.Node, seq: n.Seq, pods: make([]podEntry, len(n.Pods))}
		s := len(n.Node) + 20
		for i, p := range n.Pods {
			np.pods[i] = podEntry{uid: p.UID, ready: p.Ready}
			s += 3 + len(p.UID)
		}
		if size+s > MaxStateSize || len(nodes) == maxNodes || len(np.pods) > maxPodsOfNode {
			continue
		}
		size += s
		nodes = append(nodes, np)
	}
	return encodeState(nodes)
}

// snapshot returns every node's pods, by node, each's by UID.
func (t *podTable) snapshot() []NodePods {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]NodePods, 0, len(t.nodes))
	for node, p := range t.nodes {
		n := NodePods{Node: node, Seq: p.seq, Pods: make([]PodReady, 0, len(p.pods))}
		for uid, ready := range p.pods {
			n.Pods = append(n.Pods, PodReady{UID: uid, Ready: ready})
		}
		slices.SortFunc(n.Pods, func(a, b PodReady) int { return strings.Compare(a.UID, b.UID) })
		out = append(out, n)
	}
	slices.SortFunc(out, func(a, b NodePods) int { return strings.Compare(a.Node, b.Node) })
	return out
}

// broadcast is a delta queued for gossip.
type broadcast []byte

func (b broadcast) Invalidates(memberlist.Broadcast) bool { return false }
func (b broadcast) Message() []byte                       { return b }
func (b broadcast) Finished()                             {}

// delegate is memberlist's view of the node's pod readiness.
type delegate struct{ m *Mesh }

func (d *delegate) NodeMeta(int) []byte {
	d.m.metaMu.Lock()
	defer d.m.metaMu.Unlock()
	return d.m.meta
}

func (d *delegate) NotifyMsg(b []byte) {
	n, err := decodeDelta(b)
	if err != nil {
		d.m.refused(err)
		return
	}
	if d.m.pods.applyDelta(n, d.m.isMember) {
		d.m.changed()
	}
}

func (d *delegate) GetBroadcasts(overhead, limit int) [][]byte {
	return d.m.queue.GetBroadcasts(overhead, limit)
}

func (d *delegate) LocalState(bool) []byte { return d.m.pods.state() }

func (d *delegate) MergeRemoteState(b []byte, _ bool) {
	nodes, err := decodeState(b)
	if err != nil {
		d.m.refused(err)
		return
	}
	if d.m.pods.applyState(nodes, d.m.isMember) {
		d.m.changed()
	}
}
