package nodelifecycle

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/outpost-mesh/outpost/sync/wire"
)

// inSite puts n in site and, if mesh, makes it run the mesh holding alive.
func inSite(n *corev1.Node, site string, mesh bool, alive ...string) *corev1.Node {
	n.Labels = map[string]string{wire.SiteLabel: site}
	if mesh {
		if n.Annotations == nil {
			n.Annotations = map[string]string{}
		}
		n.Annotations[wire.AnnotationMeshAlive] = strings.Join(alive, ",")
	}
	return n
}

// peer is a Node of site "store-1" named name whose Lease was renewed at
// renewed (zero: it has none), running the mesh with alive if mesh.
func peer(name string, renewed time.Time, mesh bool, alive ...string) SitePeer {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
	p := SitePeer{Node: inSite(n, "store-1", mesh, alive...)}
	if !renewed.IsZero() {
		p.Lease = &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: corev1.NamespaceNodeLease},
			Spec:       coordinationv1.LeaseSpec{RenewTime: &metav1.MicroTime{Time: renewed}},
		}
	}
	return p
}

// siteCond is a SiteReachable condition beating and changed at the times
// given.
func siteCond(s corev1.ConditionStatus, reason, message string, heartbeat, transition time.Time) corev1.NodeCondition {
	return corev1.NodeCondition{
		Type: ConditionSiteReachable, Status: s, Reason: reason, Message: message,
		LastHeartbeatTime: metav1.NewTime(heartbeat), LastTransitionTime: metav1.NewTime(transition),
	}
}

// withSite is in() of n in site store-1 with peers.
func withSite(n *corev1.Node, renewed time.Time, peers ...SitePeer) Input {
	i := in(n, renewed)
	i.Site = peers
	return i
}

func TestDecideSiteReachable(t *testing.T) {
	cfg := DefaultConfig()
	// a node of store-1 that runs the mesh, holding alive.
	meshNode := func(conds []corev1.NodeCondition, alive ...string) *corev1.Node {
		return inSite(node(conds), "store-1", true, alive...)
	}
	seen2 := siteCond(corev1.ConditionTrue, ReasonSitePeersSeeIt, "alive per 2 of 2 site peers", ago(time.Hour), ago(2*time.Hour))
	for _, tc := range []struct {
		name  string
		in    Input
		want  *corev1.NodeCondition // nil: none
		write bool                  // whether the conditions change
		after time.Duration
	}{
		{name: "no site", in: withSite(node(healthy()), now, peer("edge-b", now, true, "edge-a")), after: 40 * sec},
		{
			name:  "no site: a condition goes",
			in:    withSite(node(append(healthy(), seen2)), now),
			write: true, after: 40 * sec,
		},
		{
			name:  "nobody in the site runs the mesh",
			in:    withSite(inSite(node(append(healthy(), seen2)), "store-1", false), now, peer("edge-b", now, false)),
			write: true, after: 40 * sec,
		},
		{
			name:  "only the node runs the mesh",
			in:    withSite(meshNode(healthy(), "edge-b"), now, peer("edge-b", now, false)),
			want:  new(siteCond(corev1.ConditionUnknown, ReasonNoSitePeerReports, "no site peer connected to the hub reports on it", now, now)),
			write: true, after: 40 * sec,
		},
		{
			name: "reporters not connected: unknown",
			in: withSite(meshNode(healthy()), now,
				peer("edge-b", ago(time.Minute), true, "edge-a"), peer("edge-c", time.Time{}, true, "edge-a")),
			want:  new(siteCond(corev1.ConditionUnknown, ReasonNoSitePeerReports, "no site peer connected to the hub reports on it", now, now)),
			write: true, after: 40 * sec,
		},
		{
			name: "seen by both",
			in: withSite(meshNode(healthy()), now,
				peer("edge-b", ago(30*sec), true, "edge-a", "edge-c"), peer("edge-c", ago(5*sec), true, "edge-a", "edge-b")),
			want:  new(siteCond(corev1.ConditionTrue, ReasonSitePeersSeeIt, "alive per 2 of 2 site peers", now, now)),
			write: true, after: 10 * sec, // when edge-b's Lease lapses
		},
		{
			name: "seen by one of two, a quiet peer and strangers skipped",
			in: withSite(meshNode(healthy()), now,
				peer("edge-b", now, true, "edge-a"), peer("edge-c", now, true, "edge-b"), peer("edge-d", now, false),
				SitePeer{Node: inSite(node(nil), "store-1", true)}, // itself
				SitePeer{Node: inSite(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "far"}}, "store-2", true, "edge-a"), Lease: lease(now)}),
			want:  new(siteCond(corev1.ConditionTrue, ReasonSitePeersSeeIt, "alive per 1 of 2 site peers", now, now)),
			write: true, after: 40 * sec,
		},
		{
			name:  "connected, peers do not see it",
			in:    withSite(meshNode(healthy()), now, peer("edge-b", now, true), peer("edge-c", now, true, "edge-b")),
			want:  new(siteCond(corev1.ConditionFalse, ReasonSitePeersLostIt, "site peers do not see it (0 of 2)", now, now)),
			write: true, after: 40 * sec,
		},
		{
			name:  "a node without the annotation is told of all the same",
			in:    withSite(inSite(node(healthy()), "store-1", false), now, peer("edge-b", now, true, "edge-a")),
			want:  new(siteCond(corev1.ConditionTrue, ReasonSitePeersSeeIt, "alive per 1 of 1 site peers", now, now)),
			write: true, after: 40 * sec,
		},
		{
			name: "uplink down, seen: True, transition kept",
			in: withSite(meshNode(append(healthy(), seen2)), ago(time.Minute),
				peer("edge-b", now, true, "edge-a"), peer("edge-c", now, true, "edge-a")),
			want:  new(siteCond(corev1.ConditionTrue, ReasonUplinkDown, "uplink down; alive per 2 of 2 site peers", now, ago(2*time.Hour))),
			write: true, after: 40 * sec,
		},
		{
			name: "uplink down, lost: False",
			in: withSite(meshNode(append(healthy(), seen2)), ago(time.Minute),
				peer("edge-b", now, true, "edge-c"), peer("edge-c", now, true)),
			want:  new(siteCond(corev1.ConditionFalse, ReasonSitePeersLostIt, "site peers lost it too", now, now)),
			write: true, after: 40 * sec,
		},
		{
			name: "unchanged: not written",
			in: withSite(meshNode(append(healthy(), seen2)), now,
				peer("edge-b", now, true, "edge-a"), peer("edge-c", now, true, "edge-a")),
			want:  &seen2,
			after: 40 * sec,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := tc.in.Node.DeepCopy()
			d := Decide(tc.in, cfg)
			conds := d.Conditions
			if conds == nil {
				conds = tc.in.Node.Status.Conditions
			}
			var got *corev1.NodeCondition
			if i := conditionIndex(conds, ConditionSiteReachable); i >= 0 {
				got = &conds[i]
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("Decide(%s) SiteReachable (-want +got):\n%s", tc.name, diff)
			}
			if (d.Conditions != nil) != tc.write {
				t.Errorf("Decide(%s).Conditions = %v, want written: %v", tc.name, d.Conditions, tc.write)
			}
			if d.After != tc.after {
				t.Errorf("Decide(%s).After = %v, want %v", tc.name, d.After, tc.after)
			}
			if diff := cmp.Diff(before, tc.in.Node); diff != "" {
				t.Errorf("Decide(%s) changed its input node (-before +after):\n%s", tc.name, diff)
			}
		})
	}
}

// TestDecideSiteHoldsEviction: an opted-in node whose site peers hold it
// alive is not tainted NoExecute, and its pods stay.
func TestDecideSiteHoldsEviction(t *testing.T) {
	cfg := DefaultConfig()
	away := func(taints ...corev1.Taint) *corev1.Node {
		return inSite(tolerant(node(unknown(), taints...), "10m"), "store-1", true)
	}
	seen := peer("edge-b", now, true, "edge-a")
	lost := peer("edge-b", now, true)
	for _, tc := range []struct {
		name   string
		in     Input
		taints []corev1.Taint // nil: unchanged
		evict  []string
		held   bool
		after  time.Duration
	}{
		{name: "within the tolerance", in: withSite(away(unreachableNoSchedule), ago(5*minute+40*sec), seen), after: 40 * sec}, // edge-b's Lease lapses first
		{name: "tolerance passed, seen: held", in: withSite(away(unreachableNoSchedule), ago(10*minute+40*sec), seen), held: true, after: 40 * sec},
		{
			name:   "tolerance passed, NoExecute already: it goes, held",
			in:     withSite(away(unreachableNoSchedule, unreachableNoExecute(ago(time.Minute))), ago(time.Hour), seen),
			taints: []corev1.Taint{unreachableNoSchedule}, held: true, after: 40 * sec,
		},
		{
			name:   "tolerance passed, lost: evicted",
			in:     withSite(away(unreachableNoSchedule), ago(10*minute+40*sec), lost),
			taints: []corev1.Taint{unreachableNoSchedule, unreachableNoExecute(now)}, evict: []string{"web"}, after: 40 * sec,
		},
		{
			name:   "tolerance passed, no reports: evicted",
			in:     withSite(away(unreachableNoSchedule), ago(10*minute+40*sec), peer("edge-b", ago(time.Hour), true, "edge-a")),
			taints: []corev1.Taint{unreachableNoSchedule, unreachableNoExecute(now)}, evict: []string{"web"},
		},
		{
			name: "not opted in: nothing held",
			in:   withSite(inSite(node(unknown(), unreachableNoSchedule), "store-1", true), ago(time.Hour), seen), after: 40 * sec,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.in.Pods = []*corev1.Pod{pod("web", corev1.ConditionFalse)}
			d := Decide(tc.in, cfg)
			if d.TaintsChanged != (tc.taints != nil) {
				t.Errorf("Decide(%s).TaintsChanged = %v (taints %v), want %v", tc.name, d.TaintsChanged, d.Taints, tc.taints != nil)
			}
			if tc.taints != nil {
				if diff := cmp.Diff(tc.taints, d.Taints); diff != "" {
					t.Errorf("Decide(%s).Taints (-want +got):\n%s", tc.name, diff)
				}
			}
			var evicted []string
			for _, p := range d.Evict {
				evicted = append(evicted, p.Name)
			}
			if diff := cmp.Diff(tc.evict, evicted); diff != "" {
				t.Errorf("Decide(%s).Evict (-want +got):\n%s", tc.name, diff)
			}
			if d.EvictionHeld != tc.held {
				t.Errorf("Decide(%s).EvictionHeld = %v, want %v", tc.name, d.EvictionHeld, tc.held)
			}
			if d.After != tc.after {
				t.Errorf("Decide(%s).After = %v, want %v", tc.name, d.After, tc.after)
			}
		})
	}
}

// TestDecideSiteKeepsPodsReady: an unreachable node's ready pods are
// marked not ready unless its site holds it alive.
func TestDecideSiteKeepsPodsReady(t *testing.T) {
	cfg := DefaultConfig()
	away := inSite(node(unknown(), unreachableNoSchedule), "store-1", true)
	for _, tc := range []struct {
		name string
		in   Input
		want []string
	}{
		{name: "seen", in: withSite(away, ago(time.Hour), peer("edge-b", now, true, "edge-a"))},
		{name: "lost", in: withSite(away, ago(time.Hour), peer("edge-b", now, true)), want: []string{"web"}},
		{name: "no reports", in: withSite(away, ago(time.Hour), peer("edge-b", ago(time.Hour), true, "edge-a")), want: []string{"web"}},
	} {
		tc.in.Pods = []*corev1.Pod{pod("web", corev1.ConditionTrue)}
		var got []string
		for _, p := range Decide(tc.in, cfg).NotReady {
			got = append(got, p.Name)
		}
		if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("Decide(%s).NotReady (-want +got):\n%s", tc.name, diff)
		}
	}
}
