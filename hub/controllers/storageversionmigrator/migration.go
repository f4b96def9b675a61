// Package storageversionmigrator is the StorageVersionMigration
// controller, as upstream's in kube-controller-manager: for each
// storagemigration.k8s.io/v1 migration it records the resourceVersion of
// a list of the resource, rewrites every object no newer than that list
// with a no-op patch, so that the hub stores it again in the resource's
// current storage version (a custom resource's may have changed), and
// reports Running, then Succeeded or Failed. Like upstream's migration
// runner, it runs the migrations of one resource one at a time, marks a
// CRD whose objects it migrates StorageMigrating, and once a migration
// succeeded trims the CRD's status.storedVersions to its storage
// version. The decisions are pure functions of this package; Controller
// is the client-go shell.
package storageversionmigrator

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	svmv1 "k8s.io/api/storagemigration/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/resourceversion"
)

// Condition reasons, as upstream's.
const (
	ReasonRunning   = "MigrationRunning"
	ReasonSucceeded = "StorageVersionMigrationSucceeded"
	ReasonFailed    = "StorageVersionMigrationFailed"
)

// DiscoveryGrace is how long after its creation a migration of a resource
// the hub does not serve waits for it to appear before it fails, as
// upstream's: a CustomResourceDefinition created with the migration may
// not be served yet.
const DiscoveryGrace = time.Minute

// migrationVerbs are the verbs a resource must have to be migrated.
var migrationVerbs = []string{"list", "patch", "update"}

// Step is what a sync does next with a migration.
type Step int

const (
	// Finished: the migration succeeded or failed; nothing to do.
	Finished Step = iota
	// Start: record the resource's current resourceVersion and mark the
	// migration Running.
	Start
	// Migrate: rewrite the objects as of status.resourceVersion and mark
	// the migration Succeeded.
	Migrate
)

func (s Step) String() string {
	switch s {
	case Finished:
		return "Finished"
	case Start:
		return "Start"
	case Migrate:
		return "Migrate"
	}
	return fmt.Sprintf("Step(%d)", int(s))
}

// Next returns the step m is at. No I/O.
func Next(m *svmv1.StorageVersionMigration) Step {
	switch {
	case isTrue(m, svmv1.MigrationSucceeded), isTrue(m, svmv1.MigrationFailed):
		return Finished
	case m.Status.ResourceVersion == "":
		return Start
	}
	return Migrate
}

func isTrue(m *svmv1.StorageVersionMigration, t svmv1.MigrationConditionType) bool {
	return meta.IsStatusConditionTrue(m.Status.Conditions, string(t))
}

// Resource is a served resource that migrations may name.
type Resource struct {
	GVR        schema.GroupVersionResource
	Kind       string
	Namespaced bool
	Verbs      []string
}

// Migratable reports whether r has the verbs a migration needs.
func (r Resource) Migratable() bool {
	for _, v := range migrationVerbs {
		if !slices.Contains(r.Verbs, v) {
			return false
		}
	}
	return true
}

// PreferredVersion returns the version of group that groups (a discovery
// document) prefers, false if the group is not served.
func PreferredVersion(groups *metav1.APIGroupList, group string) (string, bool) {
	for _, g := range groups.Groups {
		if g.Name != group {
			continue
		}
		if v := g.PreferredVersion.Version; v != "" {
			return v, true
		}
		if len(g.Versions) > 0 {
			return g.Versions[0].Version, true
		}
	}
	return "", false
}

// FindResource returns the resource named resource (not a subresource) of
// list, a discovery document of one group version, false if there is none.
func FindResource(list *metav1.APIResourceList, resource string) (Resource, bool) {
	gv, err := schema.ParseGroupVersion(list.GroupVersion)
	if err != nil {
		return Resource{}, false
	}
	for _, r := range list.APIResources {
		if r.Name == resource && !strings.Contains(r.Name, "/") {
			return Resource{GVR: gv.WithResource(resource), Kind: r.Kind, Namespaced: r.Namespaced, Verbs: r.Verbs}, true
		}
	}
	return Resource{}, false
}

// ToRewrite reports whether an object at resourceVersion rv is to be
// rewritten by a migration as of listRV: it is no newer than that list
// (a newer one was written in the current storage version already).
func ToRewrite(rv, listRV string) (bool, error) {
	cmp, err := resourceversion.CompareResourceVersion(rv, listRV)
	if err != nil {
		return false, err
	}
	return cmp <= 0, nil
}

// PatchBody is the JSON merge patch that rewrites an object of kind gvk
// unchanged, as upstream's: it names the object's resourceVersion rv, so
// that it fails with a conflict if the object was written since (and so
// is in the current storage version already).
func PatchBody(gvk schema.GroupVersionKind, rv string) []byte {
	apiVersion, kind := gvk.ToAPIVersionAndKind()
	b, _ := json.Marshal(map[string]any{
		"apiVersion": apiVersion,
		"kind":       kind,
		"metadata":   map[string]any{"resourceVersion": rv},
	})
	return b
}

// Started returns m with status.resourceVersion rv and the Running
// condition set at now. The caller owns the result; m is unchanged.
func Started(m *svmv1.StorageVersionMigration, rv string, now time.Time) *svmv1.StorageVersionMigration {
	m = m.DeepCopy()
	m.Status.ResourceVersion = rv
	setCondition(m, svmv1.MigrationRunning, ReasonRunning, RunningMessage(0, 0), now)
	return m
}

// Succeeded returns m marked Succeeded at now, with Running's message
// saying that total objects were verified migrated, as upstream leaves it.
// The caller owns the result; m is unchanged.
func Succeeded(m *svmv1.StorageVersionMigration, total int, now time.Time) *svmv1.StorageVersionMigration {
	m = m.DeepCopy()
	setCondition(m, svmv1.MigrationRunning, ReasonRunning, RunningMessage(0, total), now)
	setCondition(m, svmv1.MigrationSucceeded, ReasonSucceeded, "Migration completed", now)
	return m
}

// Failed returns m marked Failed at now with message. The caller owns the
// result; m is unchanged.
func Failed(m *svmv1.StorageVersionMigration, message string, now time.Time) *svmv1.StorageVersionMigration {
	m = m.DeepCopy()
	setCondition(m, svmv1.MigrationFailed, ReasonFailed, message, now)
	return m
}

// RunningMessage is the Running condition's message, as upstream's: how
// many of total objects are still to be rewritten.
func RunningMessage(toPatch, total int) string {
	msg := "The migration is running"
	if total > 0 {
		if toPatch > 0 {
			msg += fmt.Sprintf(", %d/%d objects not yet migrated", toPatch, total)
		} else {
			msg += fmt.Sprintf(", %d objects verified migrated", total)
		}
	}
	return msg
}

func setCondition(m *svmv1.StorageVersionMigration, t svmv1.MigrationConditionType, reason, message string, now time.Time) {
	meta.SetStatusCondition(&m.Status.Conditions, metav1.Condition{
		Type:               string(t),
		Status:             metav1.ConditionTrue,
		Reason:             reason,
		Message:            message,
		LastTransitionTime: metav1.NewTime(now.Truncate(time.Second)),
	})
}
