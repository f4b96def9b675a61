package nodelifecycle

import (
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// now is the time of every decision below; times are given relative to
// it.
var now = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func ago(d time.Duration) time.Time { return now.Add(-d) }

func mtime(t time.Time) *metav1.Time { m := metav1.NewTime(t); return &m }

const (
	sec    = time.Second
	minute = time.Minute
)

// cond is a node condition as kubelet posts it.
func cond(t corev1.NodeConditionType, s corev1.ConditionStatus, reason string) corev1.NodeCondition {
	return corev1.NodeCondition{
		Type: t, Status: s, Reason: reason, Message: "as kubelet said",
		LastHeartbeatTime: metav1.NewTime(ago(time.Hour)), LastTransitionTime: metav1.NewTime(ago(2 * time.Hour)),
	}
}

// healthy are the conditions of a node that is well.
func healthy() []corev1.NodeCondition {
	return []corev1.NodeCondition{
		cond(corev1.NodeMemoryPressure, corev1.ConditionFalse, "KubeletHasSufficientMemory"),
		cond(corev1.NodeReady, corev1.ConditionTrue, "KubeletReady"),
		cond(corev1.NodeDiskPressure, corev1.ConditionFalse, "KubeletHasNoDiskPressure"),
		cond(corev1.NodePIDPressure, corev1.ConditionFalse, "KubeletHasSufficientPID"),
	}
}

// stopped is c as the controller sets it once the node is unreachable.
func stopped(c corev1.NodeCondition) corev1.NodeCondition {
	c.Status, c.Reason, c.Message, c.LastTransitionTime = corev1.ConditionUnknown, ReasonNodeStatusUnknown, messageStopped, metav1.NewTime(now)
	return c
}

// unknown are healthy() once the node is unreachable.
func unknown() []corev1.NodeCondition {
	var out []corev1.NodeCondition
	for _, c := range healthy() {
		out = append(out, stopped(c))
	}
	return out
}

// never is the condition of type t the controller adds to a node that
// never posted it.
func never(t corev1.NodeConditionType) corev1.NodeCondition {
	return corev1.NodeCondition{
		Type: t, Status: corev1.ConditionUnknown, Reason: ReasonNodeStatusNeverUpdated, Message: messageNever,
		LastHeartbeatTime: metav1.NewTime(ago(24 * time.Hour)), LastTransitionTime: metav1.NewTime(now),
	}
}

// back is unknown() once the Lease is renewed again.
func back() []corev1.NodeCondition {
	out := unknown()
	for i := range out {
		if out[i].Type == corev1.NodeReady {
			out[i].Status, out[i].Reason, out[i].Message = corev1.ConditionTrue, ReasonKubeletReady, messageBack
		}
	}
	return out
}

func node(conds []corev1.NodeCondition, taints ...corev1.Taint) *corev1.Node {
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "edge-a", UID: "uid-a", CreationTimestamp: metav1.NewTime(ago(24 * time.Hour))},
		Spec:       corev1.NodeSpec{Taints: taints},
		Status:     corev1.NodeStatus{Conditions: conds},
	}
}

func tolerant(n *corev1.Node, v string) *corev1.Node {
	n.Annotations = map[string]string{AnnotationOfflineTolerance: v}
	return n
}

func lease(renewed time.Time) *coordinationv1.Lease {
	holder, dur := "edge-a", int32(40)
	return &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: "edge-a", Namespace: corev1.NamespaceNodeLease, CreationTimestamp: metav1.NewTime(ago(24 * time.Hour))},
		Spec:       coordinationv1.LeaseSpec{HolderIdentity: &holder, LeaseDurationSeconds: &dur, RenewTime: &metav1.MicroTime{Time: renewed}},
	}
}

var (
	unreachableNoSchedule = corev1.Taint{Key: corev1.TaintNodeUnreachable, Effect: corev1.TaintEffectNoSchedule}
	notReadyNoSchedule    = corev1.Taint{Key: corev1.TaintNodeNotReady, Effect: corev1.TaintEffectNoSchedule}
	userTaint             = corev1.Taint{Key: "dedicated", Value: "gpu", Effect: corev1.TaintEffectNoSchedule}
)

func unreachableNoExecute(added time.Time) corev1.Taint {
	return corev1.Taint{Key: corev1.TaintNodeUnreachable, Effect: corev1.TaintEffectNoExecute, TimeAdded: mtime(added)}
}

// in is the Input of n with a Lease renewed at renewed, watched for an
// hour.
func in(n *corev1.Node, renewed time.Time, pods ...*corev1.Pod) Input {
	return Input{Node: n, Lease: lease(renewed), Pods: pods, Now: now, Since: ago(time.Hour)}
}

func TestDecideConditions(t *testing.T) {
	cfg := DefaultConfig()
	for _, tc := range []struct {
		name  string
		in    Input
		conds []corev1.NodeCondition // nil: unchanged
		event string
		after time.Duration
	}{
		{name: "renewed just now", in: in(node(healthy()), now), after: 40 * sec},
		{name: "renewed 39s ago", in: in(node(healthy()), ago(39*sec)), after: sec},
		{name: "lease expires now", in: in(node(healthy()), ago(40*sec)), conds: unknown(), event: EventNodeNotReady},
		{name: "lease expired long ago", in: in(node(healthy()), ago(time.Hour)), conds: unknown(), event: EventNodeNotReady},
		{name: "already unknown", in: in(node(unknown(), unreachableNoSchedule), ago(time.Hour))},
		{
			name:  "node said not ready: unknown, no event",
			in:    in(node([]corev1.NodeCondition{cond(corev1.NodeReady, corev1.ConditionFalse, "KubeletNotReady")}, notReadyNoSchedule), ago(time.Minute)),
			conds: []corev1.NodeCondition{stopped(cond(corev1.NodeReady, corev1.ConditionFalse, "KubeletNotReady")), never(corev1.NodeMemoryPressure), never(corev1.NodeDiskPressure), never(corev1.NodePIDPressure)},
		},
		{
			name:  "never posted status",
			in:    in(node(nil), ago(time.Minute)),
			conds: []corev1.NodeCondition{never(corev1.NodeReady), never(corev1.NodeMemoryPressure), never(corev1.NodeDiskPressure), never(corev1.NodePIDPressure)},
		},
		{
			name:  "other conditions kept",
			in:    in(node(append(healthy(), cond(corev1.NodeNetworkUnavailable, corev1.ConditionFalse, "RouteCreated"))), ago(time.Minute)),
			conds: append(unknown(), cond(corev1.NodeNetworkUnavailable, corev1.ConditionFalse, "RouteCreated")),
			event: EventNodeNotReady,
		},
		{name: "renewed again: Ready again", in: in(node(unknown(), unreachableNoSchedule), ago(sec)), conds: back(), event: EventNodeReady, after: 39 * sec},
		{
			name:  "renewed again, Ready unknown for another reason: not ours to flip",
			in:    in(node([]corev1.NodeCondition{cond(corev1.NodeReady, corev1.ConditionUnknown, "SomethingElse")}, unreachableNoSchedule), now),
			after: 40 * sec,
		},
		{name: "renewed again, never posted: not ours to flip", in: in(node([]corev1.NodeCondition{never(corev1.NodeReady)}, unreachableNoSchedule), now), after: 40 * sec},
		{name: "no lease, new node", in: Input{Node: node(nil), Now: now, Since: ago(time.Hour)}, after: 0},
		{
			name:  "no lease, node of a day",
			in:    Input{Node: node(healthy()), Now: now, Since: ago(time.Hour)},
			conds: unknown(), event: EventNodeNotReady,
		},
		{name: "lease without renew time: its acquire time", in: func() Input {
			i := in(node(healthy()), now)
			i.Lease.Spec.RenewTime, i.Lease.Spec.AcquireTime = nil, &metav1.MicroTime{Time: ago(10 * sec)}
			return i
		}(), after: 30 * sec},
		{name: "lease without times: its creation", in: func() Input {
			i := in(node(healthy()), now)
			i.Lease.Spec.RenewTime = nil
			return i
		}(), conds: unknown(), event: EventNodeNotReady},
		{name: "hub just started: silent node left alone", in: func() Input {
			i := in(node(healthy()), ago(time.Hour))
			i.Since = ago(10 * sec)
			return i
		}(), after: 30 * sec},
		{name: "hub just started: unknown node not flipped", in: func() Input {
			i := in(node(unknown(), unreachableNoSchedule), ago(time.Hour))
			i.Since = ago(10 * sec)
			return i
		}(), after: 30 * sec},
		{name: "hub started a grace ago", in: func() Input {
			i := in(node(healthy()), ago(time.Hour))
			i.Since = ago(40 * sec)
			return i
		}(), conds: unknown(), event: EventNodeNotReady},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.name == "no lease, new node" {
				tc.in.Node.CreationTimestamp = metav1.NewTime(ago(20 * sec))
				tc.after = 40 * sec // the startup grace, 60s
			}
			before := tc.in.Node.DeepCopy()
			d := Decide(tc.in, cfg)
			if diff := cmp.Diff(tc.conds, d.Conditions); diff != "" {
				t.Errorf("Decide(%s).Conditions (-want +got):\n%s", tc.name, diff)
			}
			if d.StatusEvent != tc.event {
				t.Errorf("Decide(%s).StatusEvent = %q, want %q", tc.name, d.StatusEvent, tc.event)
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

func TestDecideTaints(t *testing.T) {
	cfg := DefaultConfig()
	memoryPressure := func() []corev1.NodeCondition {
		c := healthy()
		c[0].Status = corev1.ConditionTrue
		return c
	}
	cordoned := func(n *corev1.Node) *corev1.Node { n.Spec.Unschedulable = true; return n }
	for _, tc := range []struct {
		name   string
		in     Input
		taints []corev1.Taint // nil: unchanged
		bad    bool           // a BadTolerance
		after  time.Duration
	}{
		{name: "healthy", in: in(node(healthy()), now), after: 40 * sec},
		{name: "unreachable", in: in(node(healthy()), ago(time.Minute)), taints: []corev1.Taint{unreachableNoSchedule}},
		{name: "unreachable, user taint kept first", in: in(node(healthy(), userTaint), ago(time.Minute)), taints: []corev1.Taint{userTaint, unreachableNoSchedule}},
		{name: "unreachable, not-ready replaced", in: in(node(healthy(), notReadyNoSchedule, userTaint), ago(time.Minute)), taints: []corev1.Taint{userTaint, unreachableNoSchedule}},
		{name: "already tainted", in: in(node(unknown(), unreachableNoSchedule), ago(time.Minute))},
		{name: "back: taints go", in: in(node(unknown(), userTaint, unreachableNoSchedule, unreachableNoExecute(ago(time.Minute))), now), taints: []corev1.Taint{userTaint}, after: 40 * sec},
		{name: "reported not ready", in: in(node([]corev1.NodeCondition{cond(corev1.NodeReady, corev1.ConditionFalse, "KubeletNotReady")}), now), taints: []corev1.Taint{notReadyNoSchedule}, after: 40 * sec},
		{
			name:   "memory pressure",
			in:     in(node(memoryPressure()), now),
			taints: []corev1.Taint{{Key: corev1.TaintNodeMemoryPressure, Effect: corev1.TaintEffectNoSchedule}},
			after:  40 * sec,
		},
		{
			name:   "pressure over, cordoned",
			in:     in(cordoned(node(healthy(), corev1.Taint{Key: corev1.TaintNodeDiskPressure, Effect: corev1.TaintEffectNoSchedule})), now),
			taints: []corev1.Taint{{Key: corev1.TaintNodeUnschedulable, Effect: corev1.TaintEffectNoSchedule}},
			after:  40 * sec,
		},
		{
			name:   "a managed key of another effect is not ours",
			in:     in(node(healthy(), corev1.Taint{Key: corev1.TaintNodeNotReady, Effect: corev1.TaintEffectPreferNoSchedule}, unreachableNoSchedule, unreachableNoSchedule), now),
			taints: []corev1.Taint{{Key: corev1.TaintNodeNotReady, Effect: corev1.TaintEffectPreferNoSchedule}},
			after:  40 * sec,
		},
		{name: "duplicates go", in: in(node(unknown(), unreachableNoSchedule, unreachableNoSchedule), ago(time.Minute)), taints: []corev1.Taint{unreachableNoSchedule}},

		// Offline tolerance.
		{name: "tolerance, reachable", in: in(tolerant(node(healthy()), "10m"), now), after: 40 * sec},
		{name: "tolerance, unreachable for 5m", in: in(tolerant(node(unknown(), unreachableNoSchedule), "10m"), ago(5*minute+40*sec)), after: 5 * minute},
		{
			name:   "tolerance, unreachable for 10m",
			in:     in(tolerant(node(unknown(), unreachableNoSchedule), "10m"), ago(10*minute+40*sec)),
			taints: []corev1.Taint{unreachableNoSchedule, unreachableNoExecute(now)},
		},
		{
			name:   "tolerance 0s: at once",
			in:     in(tolerant(node(healthy()), "0s"), ago(40*sec)),
			taints: []corev1.Taint{unreachableNoSchedule, unreachableNoExecute(now)},
		},
		{name: "tolerance, already NoExecute", in: in(tolerant(node(unknown(), unreachableNoSchedule, unreachableNoExecute(ago(time.Minute))), "10m"), ago(time.Hour))},
		{
			name:   "tolerance, back",
			in:     in(tolerant(node(unknown(), unreachableNoSchedule, unreachableNoExecute(ago(time.Minute))), "10m"), now),
			taints: []corev1.Taint{}, after: 40 * sec,
		},
		{
			name:   "tolerance removed while away: NoExecute goes",
			in:     in(node(unknown(), unreachableNoSchedule, unreachableNoExecute(ago(time.Minute))), ago(time.Hour)),
			taints: []corev1.Taint{unreachableNoSchedule},
		},
		{name: "bad tolerance", in: in(tolerant(node(unknown(), unreachableNoSchedule), "soon"), ago(time.Hour)), bad: true},
		{name: "negative tolerance", in: in(tolerant(node(unknown(), unreachableNoSchedule), "-10m"), ago(time.Hour)), bad: true},
		{name: "bad tolerance, reachable: said all the same", in: in(tolerant(node(healthy()), "10"), now), bad: true, after: 40 * sec},
		{
			name:   "bad tolerance: NoExecute goes",
			in:     in(tolerant(node(unknown(), unreachableNoSchedule, unreachableNoExecute(ago(time.Minute))), "ten minutes"), ago(time.Hour)),
			taints: []corev1.Taint{unreachableNoSchedule},
			bad:    true,
		},
		{name: "tolerance, hub just started: NoExecute kept", in: func() Input {
			i := in(tolerant(node(unknown(), unreachableNoSchedule, unreachableNoExecute(ago(time.Hour))), "10m"), ago(2*time.Hour))
			i.Since = ago(sec)
			return i
		}(), after: 39 * sec},
		{name: "tolerance, hub just started: no NoExecute yet", in: func() Input {
			i := in(tolerant(node(unknown(), unreachableNoSchedule), "1m"), ago(2*time.Hour))
			i.Since = ago(sec)
			return i
		}(), after: 39 * sec},
		{name: "tolerance, hub started 1m40s ago", in: func() Input {
			i := in(tolerant(node(unknown(), unreachableNoSchedule), "1m"), ago(2*time.Hour))
			i.Since = ago(100 * sec)
			return i
		}(), taints: []corev1.Taint{unreachableNoSchedule, unreachableNoExecute(now)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := tc.in.Node.DeepCopy()
			d := Decide(tc.in, cfg)
			if d.TaintsChanged != (tc.taints != nil) {
				t.Errorf("Decide(%s).TaintsChanged = %v (taints %v), want %v", tc.name, d.TaintsChanged, d.Taints, tc.taints != nil)
			}
			if tc.taints != nil {
				if diff := cmp.Diff(tc.taints, d.Taints); diff != "" {
					t.Errorf("Decide(%s).Taints (-want +got):\n%s", tc.name, diff)
				}
			}
			if (d.BadTolerance != nil) != tc.bad {
				t.Errorf("Decide(%s).BadTolerance = %v, want an error: %v", tc.name, d.BadTolerance, tc.bad)
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

func pod(name string, ready corev1.ConditionStatus, tols ...corev1.Toleration) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, UID: types.UID("uid-" + name)},
		Spec:       corev1.PodSpec{NodeName: "edge-a", Tolerations: tols},
		Status:     corev1.PodStatus{Phase: corev1.PodRunning},
	}
	if ready != "" {
		p.Status.Conditions = []corev1.PodCondition{
			{Type: corev1.PodScheduled, Status: corev1.ConditionTrue},
			{Type: corev1.PodReady, Status: ready, Reason: "r", Message: "m", LastTransitionTime: metav1.NewTime(ago(time.Hour))},
		}
	}
	return p
}

func tolerate(key string, effect corev1.TaintEffect, seconds ...int64) corev1.Toleration {
	t := corev1.Toleration{Key: key, Operator: corev1.TolerationOpExists, Effect: effect}
	if len(seconds) > 0 {
		t.TolerationSeconds = &seconds[0]
	}
	return t
}

func TestDecidePods(t *testing.T) {
	cfg := DefaultConfig()
	elsewhere := pod("elsewhere", corev1.ConditionTrue)
	elsewhere.Spec.NodeName = "edge-b"
	deleting := pod("deleting", corev1.ConditionTrue)
	deleting.DeletionTimestamp = mtime(ago(sec))
	dedicated := corev1.Taint{Key: "dedicated", Value: "db", Effect: corev1.TaintEffectNoExecute, TimeAdded: mtime(ago(100 * sec))}
	untimed := corev1.Taint{Key: "dedicated", Value: "db", Effect: corev1.TaintEffectNoExecute}
	withUntimed := func(i Input, since time.Time) Input { i.UntimedSince = since; return i }
	forever := tolerate(corev1.TaintNodeUnreachable, corev1.TaintEffectNoExecute)
	all := corev1.Toleration{Operator: corev1.TolerationOpExists} // as DaemonSets may
	for _, tc := range []struct {
		name     string
		in       Input
		notReady []string
		evict    []string
		after    time.Duration
	}{
		{
			name:  "reachable: pods alone",
			in:    in(node(healthy()), now, pod("a", corev1.ConditionTrue), pod("b", corev1.ConditionFalse)),
			after: 40 * sec,
		},
		{
			name:     "unreachable: Ready pods not ready",
			in:       in(node(healthy()), ago(time.Minute), pod("a", corev1.ConditionTrue), pod("b", corev1.ConditionFalse), pod("c", ""), elsewhere, deleting),
			notReady: []string{"a"},
		},
		{
			name:     "unreachable, already marked: still marks what is Ready",
			in:       in(node(unknown(), unreachableNoSchedule), ago(time.Hour), pod("a", corev1.ConditionFalse), pod("new", corev1.ConditionTrue)),
			notReady: []string{"new"},
		},
		{
			name:  "back: pods alone",
			in:    in(node(unknown(), unreachableNoSchedule), now, pod("a", corev1.ConditionFalse), pod("b", corev1.ConditionTrue)),
			after: 40 * sec,
		},
		{
			name: "no tolerance: never evicted",
			in:   in(node(unknown(), unreachableNoSchedule), ago(30*24*time.Hour), pod("a", corev1.ConditionFalse)),
		},
		{
			name: "tolerance passed: evicted but for those that tolerate it",
			in: in(tolerant(node(unknown(), unreachableNoSchedule), "10m"), ago(10*minute+40*sec),
				pod("plain", corev1.ConditionFalse),
				pod("forever", corev1.ConditionFalse, forever),
				pod("all", corev1.ConditionTrue, all),
				pod("noschedule-only", corev1.ConditionFalse, tolerate(corev1.TaintNodeUnreachable, corev1.TaintEffectNoSchedule)),
				pod("five-minutes", corev1.ConditionFalse, tolerate(corev1.TaintNodeUnreachable, corev1.TaintEffectNoExecute, 300)),
				pod("zero", corev1.ConditionFalse, tolerate(corev1.TaintNodeUnreachable, corev1.TaintEffectNoExecute, 0)),
				pod("negative", corev1.ConditionFalse, tolerate(corev1.TaintNodeUnreachable, corev1.TaintEffectNoExecute, -5)),
				pod("huge", corev1.ConditionFalse, tolerate(corev1.TaintNodeUnreachable, corev1.TaintEffectNoExecute, 1<<62)),
				deleting,
			),
			notReady: []string{"all"},
			evict:    []string{"plain", "noschedule-only", "zero", "negative"},
			after:    300 * sec,
		},
		{
			name: "tolerationSeconds counted from the taint's timeAdded",
			in: in(tolerant(node(unknown(), unreachableNoSchedule, unreachableNoExecute(ago(200*sec))), "10m"), ago(time.Hour),
				pod("five-minutes", corev1.ConditionFalse, tolerate(corev1.TaintNodeUnreachable, corev1.TaintEffectNoExecute, 300)),
				pod("three-minutes", corev1.ConditionFalse, tolerate(corev1.TaintNodeUnreachable, corev1.TaintEffectNoExecute, 180)),
				pod("first-match-wins", corev1.ConditionFalse, tolerate("", corev1.TaintEffectNoExecute, 600), tolerate(corev1.TaintNodeUnreachable, corev1.TaintEffectNoExecute, 100)),
			),
			evict: []string{"three-minutes"},
			after: 100 * sec,
		},
		{
			name: "back before the pods' time: pods alone",
			in: in(tolerant(node(unknown(), unreachableNoSchedule, unreachableNoExecute(ago(200*sec))), "10m"), now,
				pod("five-minutes", corev1.ConditionFalse, tolerate(corev1.TaintNodeUnreachable, corev1.TaintEffectNoExecute, 300)),
			),
			after: 40 * sec,
		},
		{
			name: "tolerance not yet passed: pods alone",
			in: in(tolerant(node(unknown(), unreachableNoSchedule), "10m"), ago(time.Minute+40*sec),
				pod("plain", corev1.ConditionFalse)),
			after: 9 * minute,
		},

		// NoExecute taints of someone else's, as upstream's taint manager.
		{
			name: "a reachable node's own NoExecute taint",
			in: in(node(healthy(), dedicated), now,
				pod("plain", corev1.ConditionTrue),
				pod("db", corev1.ConditionTrue, corev1.Toleration{Key: "dedicated", Operator: corev1.TolerationOpEqual, Value: "db", Effect: corev1.TaintEffectNoExecute}),
				pod("web", corev1.ConditionTrue, corev1.Toleration{Key: "dedicated", Operator: corev1.TolerationOpEqual, Value: "web", Effect: corev1.TaintEffectNoExecute}),
				pod("two-minutes", corev1.ConditionTrue, tolerate("dedicated", corev1.TaintEffectNoExecute, 120)),
				pod("one-minute", corev1.ConditionTrue, tolerate("dedicated", "", 60)),
			),
			evict: []string{"plain", "web", "one-minute"},
			after: 20 * sec,
		},
		{
			name:  "an untimed taint: from when the controller saw it",
			in:    withUntimed(in(node(healthy(), untimed), now, pod("two-minutes", corev1.ConditionTrue, tolerate("dedicated", corev1.TaintEffectNoExecute, 120))), ago(100*sec)),
			after: 20 * sec,
		},
		{
			name:  "an untimed taint just seen",
			in:    in(node(healthy(), untimed), now, pod("two-minutes", corev1.ConditionTrue, tolerate("dedicated", corev1.TaintEffectNoExecute, 120))),
			after: 40 * sec, // the lease first
		},
		{
			name: "two NoExecute taints: both tolerated, from the earliest",
			in: in(tolerant(node(unknown(), unreachableNoSchedule, unreachableNoExecute(ago(10*sec)), dedicated), "1m"), ago(time.Hour),
				pod("both", corev1.ConditionFalse, tolerate("dedicated", corev1.TaintEffectNoExecute, 120), tolerate(corev1.TaintNodeUnreachable, corev1.TaintEffectNoExecute)),
				pod("one", corev1.ConditionFalse, tolerate(corev1.TaintNodeUnreachable, corev1.TaintEffectNoExecute)),
			),
			evict: []string{"one"},
			after: 20 * sec,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if len(tc.notReady) > 0 {
				off := cfg
				off.MarkPodsNotReady = false
				if d := Decide(tc.in, off); len(d.NotReady) != 0 {
					t.Errorf("Decide(%s) with MarkPodsNotReady off: NotReady = %d pods, want none", tc.name, len(d.NotReady))
				}
			}
			var before []*corev1.Pod
			for _, p := range tc.in.Pods {
				before = append(before, p.DeepCopy())
			}
			d := Decide(tc.in, cfg)
			var notReady, evict []string
			for _, p := range d.NotReady {
				notReady = append(notReady, p.Name)
				i := slices.IndexFunc(p.Status.Conditions, func(c corev1.PodCondition) bool { return c.Type == corev1.PodReady })
				want := corev1.PodCondition{Type: corev1.PodReady, Status: corev1.ConditionFalse, Reason: "r", Message: "m", LastTransitionTime: metav1.NewTime(now)}
				if diff := cmp.Diff(want, p.Status.Conditions[i]); diff != "" {
					t.Errorf("Decide(%s): pod %s's Ready (-want +got):\n%s", tc.name, p.Name, diff)
				}
			}
			for _, p := range d.Evict {
				evict = append(evict, p.Name)
			}
			if !slices.Equal(notReady, tc.notReady) {
				t.Errorf("Decide(%s).NotReady = %v, want %v", tc.name, notReady, tc.notReady)
			}
			if !slices.Equal(evict, tc.evict) {
				t.Errorf("Decide(%s).Evict = %v, want %v", tc.name, evict, tc.evict)
			}
			if d.After != tc.after {
				t.Errorf("Decide(%s).After = %v, want %v", tc.name, d.After, tc.after)
			}
			if diff := cmp.Diff(before, tc.in.Pods); diff != "" {
				t.Errorf("Decide(%s) changed its input pods (-before +after):\n%s", tc.name, diff)
			}
		})
	}
}

func TestConfigValidate(t *testing.T) {
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatalf("DefaultConfig().Validate() = %v, want nil", err)
	}
	for name, mod := range map[string]func(*Config){
		"no grace":         func(c *Config) { c.GracePeriod = 0 },
		"no startup grace": func(c *Config) { c.StartupGracePeriod = -sec },
		"no workers":       func(c *Config) { c.Workers = 0 },
	} {
		c := DefaultConfig()
		mod(&c)
		if err := c.Validate(); err == nil {
			t.Errorf("Validate(%s) = nil, want an error", name)
		}
	}
}

func TestTolerates(t *testing.T) {
	taint := &corev1.Taint{Key: "k", Value: "v", Effect: corev1.TaintEffectNoExecute}
	for _, tc := range []struct {
		tol  corev1.Toleration
		want bool
	}{
		{corev1.Toleration{Key: "k", Value: "v", Effect: corev1.TaintEffectNoExecute}, true},
		{corev1.Toleration{Key: "k", Operator: corev1.TolerationOpEqual, Value: "v"}, true},
		{corev1.Toleration{Key: "k", Operator: corev1.TolerationOpEqual, Value: "w"}, false},
		{corev1.Toleration{Key: "k", Operator: corev1.TolerationOpExists}, true},
		{corev1.Toleration{Operator: corev1.TolerationOpExists}, true},
		{corev1.Toleration{Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}, false},
		{corev1.Toleration{Key: "j", Operator: corev1.TolerationOpExists}, false},
		{corev1.Toleration{Key: "k", Operator: corev1.TolerationOpGt, Value: "1"}, false},
	} {
		if got := tolerates(tc.tol, taint); got != tc.want {
			t.Errorf("tolerates(%+v, %v) = %v, want %v", tc.tol, taint, got, tc.want)
		}
	}
}
