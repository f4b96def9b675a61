package garbagecollector

import (
	"slices"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

func rsRef(uid string) objectRef {
	return objectRef{APIVersion: "apps/v1", Kind: "ReplicaSet", Namespace: "ns", Name: "rs-" + uid, UID: types.UID(uid)}
}

func podRef(uid string) objectRef {
	return objectRef{APIVersion: "v1", Kind: "Pod", Namespace: "ns", Name: "pod-" + uid, UID: types.UID(uid)}
}

func seen(r objectRef, owners ...metav1.OwnerReference) event {
	return event{ref: r, owners: owners}
}

func sorted(uids []types.UID) []types.UID {
	out := slices.Clone(uids)
	slices.Sort(out)
	return slices.Compact(out)
}

// TestGraph replays watch events and checks the work each asks for, as
// upstream's GraphBuilder would queue it.
func TestGraph(t *testing.T) {
	type step struct {
		name       string
		ev         event
		wantDelete []types.UID
		wantOrphan []types.UID
		wantNodes  int
	}
	gone := func(ev event) event { ev.deleted = true; return ev }
	virtualGone := func(r objectRef) event { return event{deleted: true, virtual: true, ref: r} }
	for _, tc := range []struct {
		name  string
		steps []step
	}{
		{"owner seen first, then dependents, then deleted", []step{
			{"rs", seen(rsRef("rs")), nil, nil, 1},
			{"pod", seen(podRef("p1"), owner("rs", true)), nil, nil, 2},
			{"pod 2", seen(podRef("p2"), owner("rs", true)), nil, nil, 3},
			{"rs deleted: its pods are checked", gone(seen(rsRef("rs"))), []types.UID{"p1", "p2"}, nil, 2},
		}},
		{"dependent seen first makes a virtual owner to verify", []step{
			{"pod", seen(podRef("p1"), owner("rs", true)), []types.UID{"rs"}, nil, 2},
			{"rs observed", seen(rsRef("rs")), nil, nil, 2},
		}},
		{"virtual owner found absent", []step{
			{"pod", seen(podRef("p1"), owner("rs", true)), []types.UID{"rs"}, nil, 2},
			{"absent", virtualGone(rsRef("rs")), []types.UID{"p1"}, nil, 1},
		}},
		{"foreground: dependents and the owner are attempted", []step{
			{"rs", seen(rsRef("rs")), nil, nil, 1},
			{"pod", seen(podRef("p1"), owner("rs", true)), nil, nil, 2},
			{"rs deleting in foreground", deleting(seen(rsRef("rs")), metav1.FinalizerDeleteDependents), []types.UID{"p1", "rs"}, nil, 2},
			{"again: no new transition", deleting(seen(rsRef("rs")), metav1.FinalizerDeleteDependents), nil, nil, 2},
			{"pod gone: the waiting owner is attempted", gone(seen(podRef("p1"), owner("rs", true))), []types.UID{"rs"}, nil, 1},
		}},
		{"orphan: the owner is queued once", []step{
			{"rs", seen(rsRef("rs")), nil, nil, 1},
			{"pod", seen(podRef("p1"), owner("rs", true)), nil, nil, 2},
			{"rs deleting, orphan", deleting(seen(rsRef("rs")), metav1.FinalizerOrphanDependents), nil, []types.UID{"rs"}, 2},
			{"again", deleting(seen(rsRef("rs")), metav1.FinalizerOrphanDependents), nil, nil, 2},
		}},
		{"a dependent dropping a blocking reference frees the owner", []step{
			{"rs", seen(rsRef("rs")), nil, nil, 1},
			{"pod", seen(podRef("p1"), owner("rs", true)), nil, nil, 2},
			{"unblocked", seen(podRef("p1"), owner("rs", false)), []types.UID{"rs"}, nil, 2},
			{"removed (not blocking)", seen(podRef("p1")), nil, nil, 2},
		}},
		{"a reference added later", []step{
			{"rs", seen(rsRef("rs")), nil, nil, 1},
			{"pod", seen(podRef("p1")), nil, nil, 2},
			{"adopted", seen(podRef("p1"), owner("rs", true)), nil, nil, 2},
			{"rs deleted", gone(seen(rsRef("rs"))), []types.UID{"p1"}, nil, 1},
		}},
		{"an owner in another namespace is suspect", []step{
			{"rs", seen(rsRef("rs")), nil, nil, 1},
			{"pod elsewhere", seen(objectRef{APIVersion: "v1", Kind: "Pod", Namespace: "other", Name: "p", UID: "p1"}, owner("rs", true)), []types.UID{"p1"}, nil, 2},
		}},
		{"a reference with other coordinates is suspect", []step{
			{"rs", seen(rsRef("rs")), nil, nil, 1},
			{"pod naming it as a Deployment", seen(podRef("p1"), metav1.OwnerReference{APIVersion: "apps/v1", Kind: "Deployment", Name: "rs-rs", UID: "rs"}), []types.UID{"p1"}, nil, 2},
		}},
		{"virtual delete of an observed node with other coordinates keeps it", []step{
			{"rs", seen(rsRef("rs")), nil, nil, 1},
			{"pod naming it as a Deployment", seen(podRef("p1"), metav1.OwnerReference{APIVersion: "apps/v1", Kind: "Deployment", Name: "rs-rs", UID: "rs"}), []types.UID{"p1"}, nil, 2},
			{"that Deployment is absent", virtualGone(objectRef{APIVersion: "apps/v1", Kind: "Deployment", Namespace: "ns", Name: "rs-rs", UID: "rs"}), []types.UID{"p1"}, nil, 2},
		}},
		{"deleting a node nobody saw does nothing", []step{
			{"gone", gone(seen(podRef("p1"))), nil, nil, 0},
		}},
	} {
		g := newGraph()
		for _, s := range tc.steps {
			w := g.process(s.ev)
			if got := sorted(w.attemptToDelete); !slices.Equal(got, sorted(s.wantDelete)) {
				t.Errorf("%s, %s: attemptToDelete %v, want %v", tc.name, s.name, got, s.wantDelete)
			}
			if got := sorted(w.attemptToOrphan); !slices.Equal(got, sorted(s.wantOrphan)) {
				t.Errorf("%s, %s: attemptToOrphan %v, want %v", tc.name, s.name, got, s.wantOrphan)
			}
			if len(g.nodes) != s.wantNodes {
				t.Errorf("%s, %s: %d nodes, want %d", tc.name, s.name, len(g.nodes), s.wantNodes)
			}
		}
	}
}

func TestGraphView(t *testing.T) {
	g := newGraph()
	g.process(seen(rsRef("rs")))
	g.process(seen(podRef("p1"), owner("rs", true)))
	g.process(seen(podRef("p2"), owner("rs", false)))
	g.process(deleting(seen(podRef("p2"), owner("rs", false)), metav1.FinalizerDeleteDependents))
	v, ok := g.view("rs")
	if !ok || v.virtual || len(v.dependents) != 2 {
		t.Fatalf("view = %+v, %v", v, ok)
	}
	for _, d := range v.dependents {
		switch d.UID {
		case "p1":
			if !d.Blocks || d.Waiting {
				t.Errorf("p1 = %+v, want blocking, not waiting", d)
			}
		case "p2":
			if d.Blocks || !d.Waiting {
				t.Errorf("p2 = %+v, want waiting, not blocking", d)
			}
		}
	}
	if _, ok := g.view("nope"); ok {
		t.Error("view of an unknown uid reported a node")
	}
}

func deleting(ev event, finalizers ...string) event {
	ev.deleting, ev.finalizers = true, finalizers
	return ev
}
