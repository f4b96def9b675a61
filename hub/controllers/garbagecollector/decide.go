package garbagecollector

import (
	"encoding/json"
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// OwnerState is what the collector found of one owner an object refers
// to.
type OwnerState int

const (
	// OwnerSolid exists with the referenced uid and is not waiting for
	// its dependents: it keeps the object.
	OwnerSolid OwnerState = iota
	// OwnerAbsent is gone, or its name now holds another object (a
	// different uid): the reference dangles.
	OwnerAbsent
	// OwnerWaiting exists and is being deleted in the foreground (it has
	// deletionTimestamp and the foregroundDeletion finalizer): it waits
	// for its dependents to go.
	OwnerWaiting
)

func (s OwnerState) String() string {
	switch s {
	case OwnerSolid:
		return "solid"
	case OwnerAbsent:
		return "absent"
	case OwnerWaiting:
		return "waiting"
	}
	return "unknown"
}

// Item is what Decide is given of one object that is not itself being
// deleted in the foreground.
type Item struct {
	// Owners are the object's ownerReferences as last read, and States
	// the state of each, in the same order.
	Owners []metav1.OwnerReference
	States []OwnerState
	// Finalizers are the object's finalizers as last read.
	Finalizers []string
	// HasDependents reports whether other objects name it as an owner.
	HasDependents bool
	// DependentWaiting reports whether one of those is itself being
	// deleted in the foreground: deleting the object in the foreground
	// too would make a cycle that blocks both.
	DependentWaiting bool
}

// ActionKind is what the collector does with an object.
type ActionKind int

const (
	// Keep leaves the object alone.
	Keep ActionKind = iota
	// RemoveOwners removes Action.Owners from its ownerReferences.
	RemoveOwners
	// Delete deletes it with Action.Policy (uid as a precondition).
	Delete
)

// Action is Decide's answer.
type Action struct {
	Kind ActionKind
	// Owners are the uids of the references to remove (RemoveOwners).
	Owners []types.UID
	// Policy is the propagation of the delete (Delete).
	Policy metav1.DeletionPropagation
	// Unblock asks to set blockOwnerDeletion false on every reference of
	// the object before it is deleted (Delete), which breaks a cycle of
	// foreground deletions.
	Unblock bool
}

// Decide returns what to do with an object given its owners' states, as
// upstream's attemptToDeleteItem decides: an object with a solid owner
// stays, and loses only its references to absent owners and to owners
// waiting for it (those would otherwise wait for it for ever); an object
// with no solid owner goes, in the foreground when an owner waits for it
// and it has dependents of its own (so that the owner waits for them too),
// otherwise with the propagation its own finalizers ask for, background by
// default. An object without owners stays. No I/O.
func Decide(it Item) Action {
	if len(it.Owners) == 0 {
		return Action{Kind: Keep}
	}
	var solid, waiting int
	var remove []types.UID
	for i, o := range it.Owners {
		switch it.States[i] {
		case OwnerSolid:
			solid++
		case OwnerWaiting:
			waiting++
			remove = append(remove, o.UID)
		default:
			remove = append(remove, o.UID)
		}
	}
	switch {
	case solid > 0 && len(remove) == 0:
		return Action{Kind: Keep}
	case solid > 0:
		return Action{Kind: RemoveOwners, Owners: remove}
	case waiting > 0 && it.HasDependents:
		return Action{Kind: Delete, Policy: metav1.DeletePropagationForeground, Unblock: it.DependentWaiting}
	case slices.Contains(it.Finalizers, metav1.FinalizerOrphanDependents):
		return Action{Kind: Delete, Policy: metav1.DeletePropagationOrphan}
	case slices.Contains(it.Finalizers, metav1.FinalizerDeleteDependents):
		return Action{Kind: Delete, Policy: metav1.DeletePropagationForeground}
	}
	return Action{Kind: Delete, Policy: metav1.DeletePropagationBackground}
}

// Dependent is one dependent of an object being deleted in the
// foreground.
type Dependent struct {
	UID types.UID
	// Blocks reports whether its reference to the owner has
	// blockOwnerDeletion true.
	Blocks bool
	// Waiting reports whether it is itself being deleted in the
	// foreground.
	Waiting bool
}

// DecideWaiting returns what to do with an owner being deleted in the
// foreground, as upstream's processDeletingDependentsItem: once no
// dependent blocks it, remove its foregroundDeletion finalizer (done);
// until then, attempt to delete every blocking dependent not already
// being deleted in the foreground (attempt). No I/O.
func DecideWaiting(deps []Dependent) (done bool, attempt []types.UID) {
	blocking := 0
	for _, d := range deps {
		if !d.Blocks {
			continue
		}
		blocking++
		if !d.Waiting {
			attempt = append(attempt, d.UID)
		}
	}
	return blocking == 0, attempt
}

// withoutOwners returns refs less those to the uids, and whether any went.
// The caller owns the returned slice.
func withoutOwners(refs []metav1.OwnerReference, uids []types.UID) ([]metav1.OwnerReference, bool) {
	out := make([]metav1.OwnerReference, 0, len(refs))
	for _, r := range refs {
		if !slices.Contains(uids, r.UID) {
			out = append(out, r)
		}
	}
	return out, len(out) != len(refs)
}

// unblocked returns refs with blockOwnerDeletion false on each reference
// that had it true, and whether any changed. The caller owns the result.
func unblocked(refs []metav1.OwnerReference) ([]metav1.OwnerReference, bool) {
	out := make([]metav1.OwnerReference, len(refs))
	changed := false
	for i, r := range refs {
		r.DeepCopyInto(&out[i])
		if r.BlockOwnerDeletion != nil && *r.BlockOwnerDeletion {
			f := false
			out[i].BlockOwnerDeletion = &f
			changed = true
		}
	}
	return out, changed
}

// withoutFinalizer returns finalizers less f, and whether it was there.
func withoutFinalizer(finalizers []string, f string) ([]string, bool) {
	var out []string
	found := false
	for _, x := range finalizers {
		if x == f {
			found = true
			continue
		}
		out = append(out, x)
	}
	return out, found
}

// ownersPatch is the JSON merge patch that sets an object's
// ownerReferences, guarded by the resourceVersion they were computed
// from, so that a concurrent change makes it fail with 409 rather than be
// lost. It works for every resource, unlike a strategic merge patch.
func ownersPatch(refs []metav1.OwnerReference, rv string) []byte {
	if refs == nil {
		refs = []metav1.OwnerReference{}
	}
	b, _ := json.Marshal(map[string]any{"metadata": map[string]any{"ownerReferences": refs, "resourceVersion": rv}})
	return b
}

// finalizersPatch is the JSON merge patch that sets an object's
// finalizers, guarded by resourceVersion rv.
func finalizersPatch(finalizers []string, rv string) []byte {
	b, _ := json.Marshal(map[string]any{"metadata": map[string]any{"finalizers": finalizers, "resourceVersion": rv}})
	return b
}
