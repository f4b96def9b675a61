// Package history keeps the ControllerRevisions of the daemonset and
// statefulset controllers, as upstream's controller history does: each is
// an immutable snapshot of a workload's pod template, named after its
// owner and a hash of its data, numbered in order, and truncated to the
// owner's revisionHistoryLimit. Only those two controllers import it.
package history

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"slices"
	"strconv"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/rand"
	appsclient "k8s.io/client-go/kubernetes/typed/apps/v1"
)

// HashLabel is the label that carries a revision's hash, on the revision
// itself and on the pods made from it ("controller-revision-hash").
const HashLabel = appsv1.ControllerRevisionHashLabelKey

// maxPrefix is the longest owner name a revision name keeps, so that
// prefix, dash and hash fit a DNS subdomain of 253 characters.
const maxPrefix = 223

// TemplatePatch returns the data a revision of template holds, as
// upstream's controllers store it and `kubectl rollout undo` applies it:
// a strategic merge patch that replaces spec.template whole.
func TemplatePatch(template *corev1.PodTemplateSpec) ([]byte, error) {
	raw, err := json.Marshal(template)
	if err != nil {
		return nil, fmt.Errorf("encode pod template: %w", err)
	}
	var t map[string]any
	if err := json.Unmarshal(raw, &t); err != nil {
		return nil, fmt.Errorf("decode pod template: %w", err)
	}
	t["$patch"] = "replace"
	// Maps marshal with sorted keys, so equal templates give equal bytes.
	return json.Marshal(map[string]any{"spec": map[string]any{"template": t}})
}

// Hash returns the hash of rev's data and collisionCount (nil for none),
// encoded as upstream encodes it, so that it is safe in names and labels.
func Hash(rev *appsv1.ControllerRevision, collisionCount *int32) string {
	h := fnv.New32a()
	if len(rev.Data.Raw) > 0 {
		h.Write(rev.Data.Raw)
	} else if rev.Data.Object != nil {
		if raw, err := json.Marshal(rev.Data.Object); err == nil {
			h.Write(raw)
		}
	}
	if collisionCount != nil {
		var buf [4]byte
		binary.LittleEndian.PutUint32(buf[:], uint32(*collisionCount))
		h.Write(buf[:])
	}
	return rand.SafeEncodeString(strconv.FormatUint(uint64(h.Sum32()), 10))
}

// Name returns the name of a revision of the owner named prefix with hash.
func Name(prefix, hash string) string {
	if len(prefix) > maxPrefix {
		prefix = prefix[:maxPrefix]
	}
	return prefix + "-" + hash
}

// New returns a revision of parent (of kind gvk) numbered revision that
// holds data, with labels (the template's), parent's annotations, a
// controller reference to parent, and the name and hash label that data
// and collisionCount give. It does not create it.
func New(parent metav1.Object, gvk schema.GroupVersionKind, lbls map[string]string, data []byte, revision int64, collisionCount *int32) *appsv1.ControllerRevision {
	rev := &appsv1.ControllerRevision{
		ObjectMeta: metav1.ObjectMeta{
			Namespace:       parent.GetNamespace(),
			Labels:          make(map[string]string, len(lbls)+1),
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(parent, gvk)},
		},
		Data:     runtime.RawExtension{Raw: data},
		Revision: revision,
	}
	for k, v := range lbls {
		rev.Labels[k] = v
	}
	if a := parent.GetAnnotations(); len(a) > 0 {
		rev.Annotations = make(map[string]string, len(a))
		for k, v := range a {
			rev.Annotations[k] = v
		}
	}
	hash := Hash(rev, collisionCount)
	rev.Name = Name(parent.GetName(), hash)
	rev.Labels[HashLabel] = hash
	return rev
}

// Equal reports whether a and b hold the same data.
func Equal(a, b *appsv1.ControllerRevision) bool {
	return bytes.Equal(a.Data.Raw, b.Data.Raw)
}

// Sort orders revs by revision number, oldest first; ties by creation
// time, then name, so that the order is total.
func Sort(revs []*appsv1.ControllerRevision) {
	slices.SortStableFunc(revs, func(a, b *appsv1.ControllerRevision) int {
		switch {
		case a.Revision != b.Revision:
			return cmpInt(a.Revision, b.Revision)
		case !a.CreationTimestamp.Equal(&b.CreationTimestamp):
			if a.CreationTimestamp.Before(&b.CreationTimestamp) {
				return -1
			}
			return 1
		}
		return cmpString(a.Name, b.Name)
	})
}

func cmpInt(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func cmpString(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// Next returns the number the next revision after revs gets: one more
// than the highest.
func Next(revs []*appsv1.ControllerRevision) int64 {
	var top int64
	for _, r := range revs {
		top = max(top, r.Revision)
	}
	return top + 1
}

// Claim splits revs (of parent's namespace) into those parent controls
// and the orphans that selector matches, which parent may adopt. The
// caller owns the returned slices, not the revisions in them.
func Claim(revs []*appsv1.ControllerRevision, parent types.UID, selector labels.Selector) (owned, orphans []*appsv1.ControllerRevision) {
	for _, r := range revs {
		ref := metav1.GetControllerOfNoCopy(r)
		switch {
		case ref != nil && ref.UID == parent:
			owned = append(owned, r)
		case ref == nil && r.DeletionTimestamp == nil && selector.Matches(labels.Set(r.Labels)):
			orphans = append(orphans, r)
		}
	}
	return owned, orphans
}

// ToDelete returns the revisions of old to delete so that at most limit
// of them remain: the oldest first, never one whose name live holds (the
// current and update revisions, and those of live pods).
func ToDelete(old []*appsv1.ControllerRevision, limit int, live func(*appsv1.ControllerRevision) bool) []*appsv1.ControllerRevision {
	old = slices.Clone(old)
	Sort(old)
	n := len(old) - max(limit, 0)
	var out []*appsv1.ControllerRevision
	for _, r := range old {
		if n <= 0 {
			break
		}
		if live(r) {
			continue
		}
		out = append(out, r)
		n--
	}
	return out
}

// Client is the API the history needs: the ControllerRevisions of a
// namespace. client-go's AppsV1() serves it.
type Client = appsclient.ControllerRevisionsGetter

// Create creates rev, a revision New made with *collisionCount. When a
// revision of that name exists with other data (a hash collision), it
// increments *collisionCount and tries the next name, as upstream does;
// the caller then stores the new count in its owner's status. When one
// exists with the same data, Create returns that one.
func Create(ctx context.Context, c Client, parent metav1.Object, rev *appsv1.ControllerRevision, collisionCount *int32) (*appsv1.ControllerRevision, error) {
	if collisionCount == nil {
		return nil, fmt.Errorf("create revision of %s: nil collision count", parent.GetName())
	}
	api := c.ControllerRevisions(parent.GetNamespace())
	for range 100 {
		try := rev.DeepCopy()
		hash := Hash(try, collisionCount)
		try.Name = Name(parent.GetName(), hash)
		try.Labels[HashLabel] = hash
		created, err := api.Create(ctx, try, metav1.CreateOptions{})
		if !apierrors.IsAlreadyExists(err) {
			if err != nil {
				return nil, fmt.Errorf("create revision %s: %w", try.Name, err)
			}
			return created, nil
		}
		have, err := api.Get(ctx, try.Name, metav1.GetOptions{})
		if err != nil {
			return nil, fmt.Errorf("get revision %s: %w", try.Name, err)
		}
		if ref := metav1.GetControllerOfNoCopy(have); Equal(have, try) && ref != nil && ref.UID == parent.GetUID() {
			return have, nil
		}
		*collisionCount++
	}
	return nil, fmt.Errorf("create revision of %s: 100 hash collisions in a row", parent.GetName())
}

// SetRevision sets rev's number to n and returns the updated revision.
func SetRevision(ctx context.Context, c Client, rev *appsv1.ControllerRevision, n int64) (*appsv1.ControllerRevision, error) {
	if rev.Revision == n {
		return rev, nil
	}
	up := rev.DeepCopy()
	up.Revision = n
	out, err := c.ControllerRevisions(rev.Namespace).Update(ctx, up, metav1.UpdateOptions{})
	if err != nil {
		return nil, fmt.Errorf("renumber revision %s: %w", rev.Name, err)
	}
	return out, nil
}

// Adopt makes parent (of kind gvk) the controller of the orphan rev, as
// upstream's ControllerRefManager does: a patch that fails if rev has
// since changed hands (its uid is checked).
func Adopt(ctx context.Context, c Client, parent metav1.Object, gvk schema.GroupVersionKind, rev *appsv1.ControllerRevision) (*appsv1.ControllerRevision, error) {
	patch, err := AdoptPatch(parent, gvk, rev.UID)
	if err != nil {
		return nil, err
	}
	out, err := c.ControllerRevisions(rev.Namespace).Patch(ctx, rev.Name, types.StrategicMergePatchType, patch, metav1.PatchOptions{})
	if err != nil {
		return nil, fmt.Errorf("adopt revision %s: %w", rev.Name, err)
	}
	return out, nil
}

// AdoptPatch returns the strategic merge patch that makes parent (of kind
// gvk) the controller of the object whose uid is uid.
func AdoptPatch(parent metav1.Object, gvk schema.GroupVersionKind, uid types.UID) ([]byte, error) {
	return json.Marshal(map[string]any{"metadata": map[string]any{
		"ownerReferences": []metav1.OwnerReference{*metav1.NewControllerRef(parent, gvk)},
		"uid":             uid,
	}})
}

// Delete deletes revs, ignoring those already gone.
func Delete(ctx context.Context, c Client, revs []*appsv1.ControllerRevision) error {
	for _, r := range revs {
		err := c.ControllerRevisions(r.Namespace).Delete(ctx, r.Name, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("delete revision %s: %w", r.Name, err)
		}
	}
	return nil
}

// ReleasePatch returns the strategic merge patch that removes the owner
// reference to the owner whose uid is owner from the object whose uid is
// uid, as upstream's controllers release what their selector no longer
// matches.
func ReleasePatch(owner, uid types.UID) ([]byte, error) {
	return json.Marshal(map[string]any{"metadata": map[string]any{
		"ownerReferences": []map[string]any{{"$patch": "delete", "uid": owner}},
		"uid":             uid,
	}})
}
