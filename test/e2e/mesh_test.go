package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/outpost-mesh/outpost/hub/controllers/nodelifecycle"
	"github.com/outpost-mesh/outpost/internal/netem"
	"github.com/outpost-mesh/outpost/sync/wire"
)

// siteReachableTimeout is how soon after a node goes Ready=Unknown the
// hub must say whether its site peers hold it alive (issue 14: 20 s).
const siteReachableTimeout = 20 * time.Second

// TestSiteMesh: three nodes of one site, each an agent on the fake
// runtime with its uplink through a relay the test can cut and its mesh
// on a loopback address of its own. They find each other from the
// addresses they said on their Nodes, with the key the hub gave their
// site, and say which peers they hold alive. With A's uplink cut, the hub
// shows A Ready=Unknown and then SiteReachable=True ("uplink down"), from
// B's and C's reports; with A killed, SiteReachable=False. Then B is
// killed, and started again with its uplink cut: it rejoins C from its
// checkpoint alone, and C, which is connected, says so.
func TestSiteMesh(t *testing.T) {
	skipShort(t)
	t.Parallel()
	f := newFleet(t)
	h := f.startHub("--node-monitor-grace-period", offlineGrace.String())
	const site = "store-14"
	nodes := []string{"mesh-a", "mesh-b", "mesh-c"}
	// Without relays, a node whose uplink is cut stays cut off
	// (TestSiteRelay has them).
	edges := startMeshSite(f, h, site, "127.14.0", nodes, "--mesh-relay=false")
	f.eventually(joinTimeout, "every node SiteReachable=True", func() (bool, string) {
		for _, node := range nodes {
			n, err := h.node(node)
			if err != nil {
				return false, apiProblem(err)
			}
			if c := siteReachable(n); c == nil || c.Status != corev1.ConditionTrue {
				return false, fmt.Sprintf("%s: SiteReachable %+v, want True", node, c)
			}
		}
		return true, ""
	})

	// A's uplink is cut; the LAN is not.
	edges["mesh-a"].relay.Set(netem.Conditions{Blackhole: true})
	f.logf("mesh-a's uplink cut")
	var unknownAt time.Time
	f.eventually(offlineGrace+30*time.Second, "mesh-a Ready=Unknown", func() (bool, string) {
		n, err := h.node("mesh-a")
		if err != nil {
			return false, apiProblem(err)
		}
		if s := readyStatus(n); s != corev1.ConditionUnknown {
			return false, "Ready " + string(s)
		}
		unknownAt = time.Now()
		return true, ""
	})
	f.eventually(siteReachableTimeout, "mesh-a SiteReachable=True, uplink down", func() (bool, string) {
		n, err := h.node("mesh-a")
		if err != nil {
			return false, apiProblem(err)
		}
		c := siteReachable(n)
		if c == nil || c.Status != corev1.ConditionTrue || c.Reason != nodelifecycle.ReasonUplinkDown {
			return false, fmt.Sprintf("SiteReachable %+v", c)
		}
		f.logf("mesh-a: SiteReachable %s %s %q, %v after Ready=Unknown", c.Status, c.Reason, c.Message, time.Since(unknownAt).Round(time.Millisecond))
		if !strings.Contains(c.Message, "alive per 2 of 2 site peers") {
			return false, fmt.Sprintf("message %q, want both peers holding it alive", c.Message)
		}
		return true, ""
	})

	// A dies: its peers lose it too.
	edges["mesh-a"].kill()
	f.eventually(siteReachableTimeout, "mesh-a SiteReachable=False", func() (bool, string) {
		n, err := h.node("mesh-a")
		if err != nil {
			return false, apiProblem(err)
		}
		c := siteReachable(n)
		if c == nil || c.Status != corev1.ConditionFalse {
			return false, fmt.Sprintf("SiteReachable %+v", c)
		}
		f.logf("mesh-a: SiteReachable %s %s %q", c.Status, c.Reason, c.Message)
		return true, ""
	})

	// B dies, and C, connected, says so; B comes back with no uplink,
	// and finds C from its checkpoint: C says so.
	edges["mesh-b"].kill()
	cHolds := func(want string) func() (bool, string) {
		return func() (bool, string) {
			n, err := h.node("mesh-c")
			if err != nil {
				return false, apiProblem(err)
			}
			got := n.Annotations[wire.AnnotationMeshAlive]
			return got == want, fmt.Sprintf("mesh-c holds %q alive, want %q", got, want)
		}
	}
	f.eventually(siteReachableTimeout, "mesh-c lost mesh-b", cHolds(""))
	edges["mesh-b"].relay.Set(netem.Conditions{Blackhole: true})
	edges["mesh-b"].start()
	f.eventually(siteReachableTimeout, "mesh-c holds mesh-b, restarted offline, alive", cHolds("mesh-b"))
	if n := edges["mesh-b"].connects(); n != 0 {
		t.Errorf("mesh-b connected to the hub %d times through a cut uplink", n)
	}
}

// startMeshSite starts the agents of nodes, of site, each with its uplink
// through a relay of its own and its mesh at the default port of the
// loopback address prefix.N (N from 1; a prefix of the test's own), extra
// being more flags, and waits until each is Ready and holds the others
// alive.
func startMeshSite(f *fleet, h *syncHub, site, prefix string, nodes []string, extra ...string) map[string]*edge {
	f.t.Helper()
	token, caHash := h.createToken(site)
	edges := map[string]*edge{}
	for i, node := range nodes {
		args := append([]string{"--site", site, "--mesh-addr", fmt.Sprintf("%s.%d", prefix, i+1)}, extra...)
		edges[node] = f.startEdge(h, node, token, caHash, args...)
	}
	f.eventually(joinTimeout, "nodes Ready, each holding the others alive", func() (bool, string) {
		for _, node := range nodes {
			n, err := h.node(node)
			if err != nil {
				return false, apiProblem(err)
			}
			if readyStatus(n) != corev1.ConditionTrue {
				return false, node + " not Ready"
			}
			var others []string
			for _, o := range nodes {
				if o != node {
					others = append(others, o)
				}
			}
			if got, want := n.Annotations[wire.AnnotationMeshAlive], strings.Join(others, ","); got != want {
				return false, fmt.Sprintf("%s holds %q alive, want %q", node, got, want)
			}
		}
		return true, ""
	})
	return edges
}

// siteReachable returns n's SiteReachable condition, nil if none.
func siteReachable(n *corev1.Node) *corev1.NodeCondition {
	for i := range n.Status.Conditions {
		if n.Status.Conditions[i].Type == nodelifecycle.ConditionSiteReachable {
			return &n.Status.Conditions[i]
		}
	}
	return nil
}
