package nodelifecycle

import (
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/outpost-mesh/outpost/sync/wire"
)

// nodeNamed returns what the fake API holds of node name.
func (s *shell) nodeNamed(name string) *corev1.Node {
	s.t.Helper()
	n, err := s.client.CoreV1().Nodes().Get(s.ctx, name, metav1.GetOptions{})
	if err != nil {
		s.t.Fatal(err)
	}
	return n
}

// site returns node name's SiteReachable condition as "Status Reason:
// message", "" if it has none.
func (s *shell) site(name string) string {
	conds := s.nodeNamed(name).Status.Conditions
	if i := conditionIndex(conds, ConditionSiteReachable); i >= 0 {
		c := conds[i]
		return string(c.Status) + " " + c.Reason + ": " + c.Message
	}
	return ""
}

// renewNodes renews the Leases of the nodes named, now.
func (s *shell) renewNodes(names ...string) {
	s.t.Helper()
	leases := s.client.CoordinationV1().Leases(corev1.NamespaceNodeLease)
	for _, name := range names {
		l, err := leases.Get(s.ctx, name, metav1.GetOptions{})
		if err != nil {
			s.t.Fatal(err)
		}
		l.Spec.RenewTime = &metav1.MicroTime{Time: time.Now()}
		if _, err := leases.Update(s.ctx, l, metav1.UpdateOptions{}); err != nil {
			s.t.Fatal(err)
		}
	}
	synctest.Wait()
}

// reports sets the mesh peers node name holds alive, as its status
// report would.
func (s *shell) reports(name string, alive ...string) {
	s.t.Helper()
	n := s.nodeNamed(name)
	n.Annotations[wire.AnnotationMeshAlive] = strings.Join(alive, ",")
	if _, err := s.client.CoreV1().Nodes().Update(s.ctx, n, metav1.UpdateOptions{}); err != nil {
		s.t.Fatal(err)
	}
	synctest.Wait()
}

// siteObjects are three nodes of site store-1 that hold each other alive,
// edge-a opted in to eviction after a minute and running pod web, and
// edge-x in no site; all renewed at now.
func siteObjects(now time.Time) []runtime.Object {
	var objs []runtime.Object
	mesh := map[string][]string{"edge-a": {"edge-b", "edge-c"}, "edge-b": {"edge-a", "edge-c"}, "edge-c": {"edge-a", "edge-b"}, "edge-x": nil}
	for _, name := range []string{"edge-a", "edge-b", "edge-c", "edge-x"} {
		n := node(healthy())
		n.Name, n.UID, n.CreationTimestamp = name, "uid-"+n.UID, metav1.NewTime(now.Add(-time.Hour))
		if name != "edge-x" {
			inSite(n, "store-1", true, mesh[name]...)
		}
		if name == "edge-a" {
			n.Annotations[AnnotationOfflineTolerance] = "1m"
		}
		holder := name
		l := &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: corev1.NamespaceNodeLease},
			Spec:       coordinationv1.LeaseSpec{HolderIdentity: &holder, RenewTime: &metav1.MicroTime{Time: now}},
		}
		objs = append(objs, n, l)
	}
	return append(objs, pod("web", corev1.ConditionTrue))
}

// TestControllerSite: a node whose uplink is down while its site peers
// hold it alive is SiteReachable, and its pods are not evicted; once the
// peers lose it too, it is not, and they are.
func TestControllerSite(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := startShell(t, siteObjects(time.Now())...)
		s.after(time.Second) // the caches synced
		if got, want := s.site("edge-a"), "True SitePeersSeeIt: alive per 2 of 2 site peers"; got != want {
			t.Fatalf("edge-a connected: SiteReachable %q, want %q", got, want)
		}
		if got := s.site("edge-x"); got != "" {
			t.Errorf("edge-x in no site: SiteReachable %q, want none", got)
		}

		// edge-a's uplink is down; its peers stay connected.
		for range 4 {
			s.after(10 * time.Second)
			s.renewNodes("edge-b", "edge-c", "edge-x")
		}
		if got := readyStatus(s.nodeNamed("edge-a").Status.Conditions); got != corev1.ConditionUnknown {
			t.Fatalf("edge-a after its grace: Ready %s, want Unknown", got)
		}
		if got, want := s.site("edge-a"), "True UplinkDown: uplink down; alive per 2 of 2 site peers"; got != want {
			t.Errorf("edge-a uplink down: SiteReachable %q, want %q", got, want)
		}
		if got, want := s.site("edge-b"), "True SitePeersSeeIt: alive per 1 of 1 site peers"; got != want {
			t.Errorf("edge-b, edge-a's report no longer current: SiteReachable %q, want %q", got, want)
		}
		if got := s.site("edge-x"); got != "" {
			t.Errorf("edge-x in no site: SiteReachable %q, want none", got)
		}
		s.recorded()

		// Past its offline tolerance, it keeps its pods: said once.
		for range 9 {
			s.after(10 * time.Second)
			s.renewNodes("edge-b", "edge-c", "edge-x")
		}
		if _, ok := s.podReady("web"); !ok || slices.Contains(s.taints(), "node.kubernetes.io/unreachable:NoExecute") {
			t.Fatalf("edge-a held alive past its tolerance: pod web there %v, taints %v; want there, no NoExecute", ok, s.taints())
		}
		held := 0
		for _, e := range s.recorded() {
			if strings.HasPrefix(e, "Normal "+EventEvictionHeld+" ") {
				held++
			}
		}
		if held != 1 {
			t.Errorf("%s events = %d, want 1", EventEvictionHeld, held)
		}

		// Its peers lose it too: at once, False, and it is evicted.
		s.reports("edge-b", "edge-c")
		s.reports("edge-c", "edge-b")
		if got, want := s.site("edge-a"), "False SitePeersLostIt: site peers lost it too"; got != want {
			t.Errorf("edge-a lost by its peers: SiteReachable %q, want %q", got, want)
		}
		if _, ok := s.podReady("web"); ok {
			t.Errorf("edge-a lost past its tolerance: pod web is there, want it evicted")
		}
	})
}
