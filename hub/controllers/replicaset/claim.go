package replicaset

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
)

// Claiming is upstream's ControllerRefManager: a controller (a ReplicaSet
// claiming pods, a Deployment claiming ReplicaSets) adopts the orphans its
// selector selects and releases the objects it controls that its selector
// no longer selects. The Deployment controller uses it too.

// ClaimAction is what a controller does with one object it looks at.
type ClaimAction int

const (
	// Ignore: the object is not the controller's and will not be (another
	// controller's, unselected, or not to be adopted now).
	Ignore ClaimAction = iota
	// Keep: the object is the controller's and selected.
	Keep
	// Adopt: the object is a selected orphan; the controller takes it.
	Adopt
	// Release: the object is the controller's but no longer selected.
	Release
)

func (a ClaimAction) String() string {
	switch a {
	case Ignore:
		return "Ignore"
	case Keep:
		return "Keep"
	case Adopt:
		return "Adopt"
	case Release:
		return "Release"
	}
	return fmt.Sprintf("ClaimAction(%d)", int(a))
}

// Claim decides what controller does with obj, which its selector selects
// when selected is true. A controller being deleted neither adopts nor
// releases; an object being deleted or in another namespace is not
// adopted. No I/O.
func Claim(controller, obj metav1.Object, selected bool) ClaimAction {
	if ref := metav1.GetControllerOfNoCopy(obj); ref != nil {
		switch {
		case ref.UID != controller.GetUID():
			return Ignore
		case selected:
			return Keep
		case controller.GetDeletionTimestamp() != nil:
			return Ignore
		default:
			return Release
		}
	}
	switch {
	case !selected, controller.GetDeletionTimestamp() != nil, obj.GetDeletionTimestamp() != nil:
		return Ignore
	case controller.GetNamespace() != "" && controller.GetNamespace() != obj.GetNamespace():
		return Ignore
	}
	return Adopt
}

// AdoptPatch is the strategic merge patch that makes the controller of
// kind gvk the controller of the object with uid: it adds the controller
// reference, and names the object's uid so that a replaced object of the
// same name is not patched.
func AdoptPatch(controller metav1.Object, gvk schema.GroupVersionKind, uid types.UID) []byte {
	ref := metav1.NewControllerRef(controller, gvk)
	b, _ := json.Marshal(map[string]any{"metadata": map[string]any{
		"ownerReferences": []any{ref},
		"uid":             uid,
	}})
	return b
}

// ReleasePatch is the strategic merge patch that removes the reference to
// owner from the object with uid.
func ReleasePatch(owner, uid types.UID) []byte {
	b, _ := json.Marshal(map[string]any{"metadata": map[string]any{
		"ownerReferences": []any{map[string]any{"$patch": "delete", "uid": owner}},
		"uid":             uid,
	}})
	return b
}

// Claimer carries out Claim's decisions for one controller through the
// API. It is not safe for concurrent use; make one per sync.
type Claimer[T metav1.Object] struct {
	// Controller is the claiming object; Kind its kind.
	Controller metav1.Object
	Kind       schema.GroupVersionKind
	Selector   labels.Selector
	// Recheck reads the controller afresh from the API (not a cache) and
	// fails if it is gone or being deleted; Claim calls it once before
	// the first adoption, as upstream does so that a controller deleted
	// since the cache saw it adopts nothing.
	Recheck func(ctx context.Context) error
	// Patch applies a strategic merge patch to obj.
	Patch func(ctx context.Context, obj T, patch []byte) error

	checked error
	once    bool
}

// Claim returns the objects of objs that the controller holds once it has
// adopted and released what Claim decides. Errors other than an object
// gone are joined in the returned error, with what was claimed so far.
func (c *Claimer[T]) Claim(ctx context.Context, objs []T) ([]T, error) {
	var claimed []T
	var errs []error
	for _, o := range objs {
		switch Claim(c.Controller, o, Selects(c.Selector, o)) {
		case Keep:
			claimed = append(claimed, o)
		case Adopt:
			if !c.once {
				c.once = true
				c.checked = c.Recheck(ctx)
			}
			if c.checked != nil {
				errs = append(errs, fmt.Errorf("can't adopt %s/%s: %w", o.GetNamespace(), o.GetName(), c.checked))
				continue
			}
			err := c.Patch(ctx, o, AdoptPatch(c.Controller, c.Kind, o.GetUID()))
			switch {
			case err == nil:
				claimed = append(claimed, o)
			case apierrors.IsNotFound(err):
			default:
				errs = append(errs, fmt.Errorf("adopt %s/%s: %w", o.GetNamespace(), o.GetName(), err))
			}
		case Release:
			// Gone, or no longer referring to us (invalid patch): either
			// way it is released.
			err := c.Patch(ctx, o, ReleasePatch(c.Controller.GetUID(), o.GetUID()))
			if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsInvalid(err) {
				errs = append(errs, fmt.Errorf("release %s/%s: %w", o.GetNamespace(), o.GetName(), err))
			}
		}
	}
	return claimed, errors.Join(errs...)
}

// RecheckDeletion returns a Claimer.Recheck that reads the controller
// with get and fails if it is not the one with uid or is being deleted.
func RecheckDeletion(uid types.UID, get func(ctx context.Context) (metav1.Object, error)) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		fresh, err := get(ctx)
		if err != nil {
			return err
		}
		if fresh.GetUID() != uid {
			return fmt.Errorf("original %s/%s is gone: got uid %v, wanted %v", fresh.GetNamespace(), fresh.GetName(), fresh.GetUID(), uid)
		}
		if t := fresh.GetDeletionTimestamp(); t != nil {
			return fmt.Errorf("%s/%s has just been deleted at %v", fresh.GetNamespace(), fresh.GetName(), t)
		}
		return nil
	}
}
