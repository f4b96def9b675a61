package garbagecollector

import (
	"encoding/json"
	"reflect"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

func owner(uid string, block bool) metav1.OwnerReference {
	return metav1.OwnerReference{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "rs-" + uid, UID: types.UID(uid), BlockOwnerDeletion: &block}
}

func TestDecide(t *testing.T) {
	a, b := owner("a", true), owner("b", false)
	for _, tc := range []struct {
		name string
		it   Item
		want Action
	}{
		{"no owners", Item{}, Action{Kind: Keep}},
		{"solid owner", Item{Owners: []metav1.OwnerReference{a}, States: []OwnerState{OwnerSolid}}, Action{Kind: Keep}},
		{"owner gone", Item{Owners: []metav1.OwnerReference{a}, States: []OwnerState{OwnerAbsent}},
			Action{Kind: Delete, Policy: metav1.DeletePropagationBackground}},
		{"every owner gone", Item{Owners: []metav1.OwnerReference{a, b}, States: []OwnerState{OwnerAbsent, OwnerAbsent}},
			Action{Kind: Delete, Policy: metav1.DeletePropagationBackground}},
		{"one owner gone, one solid", Item{Owners: []metav1.OwnerReference{a, b}, States: []OwnerState{OwnerAbsent, OwnerSolid}},
			Action{Kind: RemoveOwners, Owners: []types.UID{"a"}}},
		{"one owner waiting, one solid", Item{Owners: []metav1.OwnerReference{a, b}, States: []OwnerState{OwnerSolid, OwnerWaiting}},
			Action{Kind: RemoveOwners, Owners: []types.UID{"b"}}},
		{"owner waiting, no dependents", Item{Owners: []metav1.OwnerReference{a}, States: []OwnerState{OwnerWaiting}, HasDependents: false},
			Action{Kind: Delete, Policy: metav1.DeletePropagationBackground}},
		{"owner waiting, with dependents", Item{Owners: []metav1.OwnerReference{a}, States: []OwnerState{OwnerWaiting}, HasDependents: true},
			Action{Kind: Delete, Policy: metav1.DeletePropagationForeground}},
		{"owner waiting, a dependent waiting too (cycle)", Item{Owners: []metav1.OwnerReference{a}, States: []OwnerState{OwnerWaiting}, HasDependents: true, DependentWaiting: true},
			Action{Kind: Delete, Policy: metav1.DeletePropagationForeground, Unblock: true}},
		{"owner gone, own orphan finalizer", Item{Owners: []metav1.OwnerReference{a}, States: []OwnerState{OwnerAbsent}, Finalizers: []string{metav1.FinalizerOrphanDependents}},
			Action{Kind: Delete, Policy: metav1.DeletePropagationOrphan}},
		{"owner gone, own foreground finalizer", Item{Owners: []metav1.OwnerReference{a}, States: []OwnerState{OwnerAbsent}, Finalizers: []string{"x", metav1.FinalizerDeleteDependents}},
			Action{Kind: Delete, Policy: metav1.DeletePropagationForeground}},
		{"owner gone and one waiting", Item{Owners: []metav1.OwnerReference{a, b}, States: []OwnerState{OwnerAbsent, OwnerWaiting}, HasDependents: true},
			Action{Kind: Delete, Policy: metav1.DeletePropagationForeground}},
	} {
		if got := Decide(tc.it); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: Decide(%+v) = %+v, want %+v", tc.name, tc.it, got, tc.want)
		}
	}
}

func TestDecideWaiting(t *testing.T) {
	for _, tc := range []struct {
		name        string
		deps        []Dependent
		wantDone    bool
		wantAttempt []types.UID
	}{
		{"no dependents", nil, true, nil},
		{"none blocks", []Dependent{{UID: "a"}, {UID: "b", Waiting: true}}, true, nil},
		{"blocking ones are attempted", []Dependent{{UID: "a", Blocks: true}, {UID: "b"}, {UID: "c", Blocks: true}}, false, []types.UID{"a", "c"}},
		{"a blocking one already waits for its own", []Dependent{{UID: "a", Blocks: true, Waiting: true}}, false, nil},
	} {
		done, attempt := DecideWaiting(tc.deps)
		if done != tc.wantDone || !reflect.DeepEqual(attempt, tc.wantAttempt) {
			t.Errorf("%s: DecideWaiting(%+v) = %v, %v; want %v, %v", tc.name, tc.deps, done, attempt, tc.wantDone, tc.wantAttempt)
		}
	}
}

func TestPatches(t *testing.T) {
	a, b := owner("a", true), owner("b", false)
	refs, changed := withoutOwners([]metav1.OwnerReference{a, b}, []types.UID{"a"})
	if !changed || len(refs) != 1 || refs[0].UID != "b" {
		t.Errorf("withoutOwners = %v, %v; want [b], true", refs, changed)
	}
	if _, changed := withoutOwners([]metav1.OwnerReference{b}, []types.UID{"a"}); changed {
		t.Error("withoutOwners of a missing uid changed something")
	}
	un, changed := unblocked([]metav1.OwnerReference{a, b})
	if !changed || *un[0].BlockOwnerDeletion || !*a.BlockOwnerDeletion {
		t.Errorf("unblocked = %v, %v; want a unblocked in a copy", un, changed)
	}
	var p struct {
		Metadata struct {
			OwnerReferences []metav1.OwnerReference `json:"ownerReferences"`
			Finalizers      []string                `json:"finalizers"`
			ResourceVersion string                  `json:"resourceVersion"`
		} `json:"metadata"`
	}
	raw := map[string]map[string]any{}
	if err := json.Unmarshal(ownersPatch(nil, "7"), &raw); err != nil {
		t.Fatal(err)
	}
	if refs, ok := raw["metadata"]["ownerReferences"].([]any); !ok || len(refs) != 0 || raw["metadata"]["resourceVersion"] != "7" {
		t.Errorf("ownersPatch(nil) = %v, want an empty list and the resourceVersion", raw)
	}
	if err := json.Unmarshal(finalizersPatch([]string{"x"}, "9"), &p); err != nil || !reflect.DeepEqual(p.Metadata.Finalizers, []string{"x"}) || p.Metadata.ResourceVersion != "9" {
		t.Errorf("finalizersPatch = %+v %v", p, err)
	}
	rest, found := withoutFinalizer([]string{metav1.FinalizerOrphanDependents, "x"}, metav1.FinalizerOrphanDependents)
	if !found || !reflect.DeepEqual(rest, []string{"x"}) {
		t.Errorf("withoutFinalizer = %v, %v", rest, found)
	}
}
