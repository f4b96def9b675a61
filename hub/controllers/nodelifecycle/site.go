package nodelifecycle

import (
	"fmt"
	"slices"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/outpost-mesh/outpost/sync/wire"
)

// ConditionSiteReachable is the Node condition in which the hub says
// whether the node's site peers hold it alive, from their
// wire.AnnotationMeshAlive: it tells a node whose uplink to the hub is down
// (Ready Unknown, SiteReachable True) from one that is dead (both lost).
// Only peers connected to the hub now are counted, as only their
// reports are current. A node in no site (no wire.SiteLabel), or in a site
// where no node runs the mesh, has no such condition.
const ConditionSiteReachable corev1.NodeConditionType = "SiteReachable"

// The reasons of the SiteReachable condition.
const (
	// ReasonNoSitePeerReports: no site peer connected to the hub reports
	// what it holds alive (Unknown).
	ReasonNoSitePeerReports = "NoSitePeerReports"
	// ReasonSitePeersSeeIt: the node is connected and site peers hold it
	// alive (True).
	ReasonSitePeersSeeIt = "SitePeersSeeIt"
	// ReasonUplinkDown: the node's session is lost but site peers hold it
	// alive (True).
	ReasonUplinkDown = "UplinkDown"
	// ReasonSitePeersLostIt: no site peer that reports holds the node
	// alive (False).
	ReasonSitePeersLostIt = "SitePeersLostIt"
)

// SitePeer is another Node of a node's site, as the caches hold it.
type SitePeer struct {
	// Node is the peer; non-nil.
	Node *corev1.Node
	// Lease is the peer's Lease in kube-node-lease, nil if it has none.
	Lease *coordinationv1.Lease
}

// siteReport is what a node's site says of it.
type siteReport struct {
	// mesh says some node of the site, the node itself included, runs
	// the mesh (has wire.AnnotationMeshAlive).
	mesh bool
	// reporters are the site peers connected now that run the mesh;
	// alive are those of them that hold the node alive.
	reporters, alive int
	// lapse is when the first of the reporters' Leases lapses, zero if
	// there are no reporters: the report changes then.
	lapse time.Time
}

// siteOf returns the site of node, "" for none.
func siteOf(node *corev1.Node) string { return node.Labels[wire.SiteLabel] }

// meshAlive returns the peers node holds alive and whether it runs the
// mesh at all.
func meshAlive(node *corev1.Node) ([]string, bool) {
	v, ok := node.Annotations[wire.AnnotationMeshAlive]
	if !ok || v == "" {
		return nil, ok
	}
	names := strings.Split(v, ",")
	for i := range names {
		names[i] = strings.TrimSpace(names[i])
	}
	return names, true
}

// leaseRenewed returns when l was last renewed: its renew time, else its
// acquire time, else its creation.
func leaseRenewed(l *coordinationv1.Lease) time.Time {
	switch {
	case l.Spec.RenewTime != nil:
		return l.Spec.RenewTime.Time
	case l.Spec.AcquireTime != nil:
		return l.Spec.AcquireTime.Time
	}
	return l.CreationTimestamp.Time
}

// leaseCurrent reports whether a node with Lease l (nil for none) is
// connected at now, and when its Lease lapses if it is: a node is
// connected while its Lease has been renewed within cfg.GracePeriod. A
// node without a Lease never was.
func leaseCurrent(l *coordinationv1.Lease, now time.Time, cfg Config) (bool, time.Time) {
	if l == nil {
		return false, time.Time{}
	}
	lapse := leaseRenewed(l).Add(cfg.GracePeriod)
	return now.Before(lapse), lapse
}

// siteReports returns what the Nodes of in.Site say of in.Node at in.Now.
// Peers of another site than the node's, and the node itself, are skipped.
func siteReports(in Input, cfg Config) siteReport {
	var r siteReport
	site := siteOf(in.Node)
	if site == "" {
		return r
	}
	_, r.mesh = meshAlive(in.Node)
	for _, p := range in.Site {
		if p.Node == nil || p.Node.Name == in.Node.Name || siteOf(p.Node) != site {
			continue
		}
		alive, runs := meshAlive(p.Node)
		if !runs {
			continue
		}
		r.mesh = true
		connected, lapse := leaseCurrent(p.Lease, in.Now, cfg)
		if !connected {
			continue
		}
		r.reporters++
		if slices.Contains(alive, in.Node.Name) {
			r.alive++
		}
		if r.lapse.IsZero() || lapse.Before(r.lapse) {
			r.lapse = lapse
		}
	}
	return r
}

// siteCondition returns the SiteReachable condition that r says of a node
// that is connected (uplink) or not, without its times; nil if it is to
// have none.
func siteCondition(r siteReport, uplink bool) *corev1.NodeCondition {
	if !r.mesh {
		return nil
	}
	c := &corev1.NodeCondition{Type: ConditionSiteReachable}
	switch {
	case r.reporters == 0:
		c.Status, c.Reason, c.Message = corev1.ConditionUnknown, ReasonNoSitePeerReports, "no site peer connected to the hub reports on it"
	case r.alive > 0 && !uplink:
		c.Status, c.Reason, c.Message = corev1.ConditionTrue, ReasonUplinkDown, fmt.Sprintf("uplink down; alive per %d of %d site peers", r.alive, r.reporters)
	case r.alive > 0:
		c.Status, c.Reason, c.Message = corev1.ConditionTrue, ReasonSitePeersSeeIt, fmt.Sprintf("alive per %d of %d site peers", r.alive, r.reporters)
	case !uplink:
		c.Status, c.Reason, c.Message = corev1.ConditionFalse, ReasonSitePeersLostIt, "site peers lost it too"
	default:
		c.Status, c.Reason, c.Message = corev1.ConditionFalse, ReasonSitePeersLostIt, fmt.Sprintf("site peers do not see it (%d of %d)", r.alive, r.reporters)
	}
	return c
}

// siteStatus returns the status of the SiteReachable condition in conds,
// "" if there is none.
func siteStatus(conds []corev1.NodeCondition) corev1.ConditionStatus {
	if i := conditionIndex(conds, ConditionSiteReachable); i >= 0 {
		return conds[i].Status
	}
	return ""
}

// setSiteCondition returns conds with their SiteReachable condition made
// want (nil: removed), and whether that changed them; conds itself is not
// modified. A condition that changes is heartbeated now; its transition
// time is now only when its status changes (or it is new).
func setSiteCondition(conds []corev1.NodeCondition, want *corev1.NodeCondition, now time.Time) ([]corev1.NodeCondition, bool) {
	i := conditionIndex(conds, ConditionSiteReachable)
	switch {
	case want == nil && i < 0:
		return conds, false
	case want == nil:
		return slices.Delete(slices.Clone(conds), i, i+1), true
	}
	c := *want
	c.LastHeartbeatTime, c.LastTransitionTime = metav1.NewTime(now), metav1.NewTime(now)
	if i < 0 {
		return append(slices.Clone(conds), c), true
	}
	old := conds[i]
	if old.Status == c.Status && old.Reason == c.Reason && old.Message == c.Message {
		return conds, false
	}
	if old.Status == c.Status {
		c.LastTransitionTime = old.LastTransitionTime
	}
	conds = slices.Clone(conds)
	conds[i] = c
	return conds, true
}
