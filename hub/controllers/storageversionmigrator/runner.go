package storageversionmigrator

import (
	"strings"
	"time"

	svmv1 "k8s.io/api/storagemigration/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The part of upstream's migration runner the controller carries out:
// migrations of one resource run one at a time, oldest first; a CRD
// whose objects are being migrated has the StorageMigrating condition;
// and once a migration ends its Running condition turns False and, if
// it succeeded and the CRD did not change meanwhile, the CRD's
// status.storedVersions is trimmed to its storage version.

// Promotable reports whether m may start now, given all the migrations:
// none of the same resource is running, and none older (by creation,
// then name) waits to start. No I/O.
func Promotable(m *svmv1.StorageVersionMigration, all []*svmv1.StorageVersionMigration) bool {
	for _, o := range all {
		if o.Name == m.Name || o.Spec.Resource != m.Spec.Resource || Next(o) == Finished {
			continue
		}
		if isTrue(o, svmv1.MigrationRunning) || older(o, m) {
			return false
		}
	}
	return true
}

// older reports whether a was created before b, by name when at the same
// second, as upstream orders migrations.
func older(a, b *svmv1.StorageVersionMigration) bool {
	if c := a.CreationTimestamp.Compare(b.CreationTimestamp.Time); c != 0 {
		return c < 0
	}
	return strings.Compare(a.Name, b.Name) < 0
}

// NeedsCleanup reports whether m has ended but is still marked Running.
func NeedsCleanup(m *svmv1.StorageVersionMigration) bool {
	return Next(m) == Finished && isTrue(m, svmv1.MigrationRunning)
}

// Completed returns m with its Running condition False, as upstream's
// runner leaves an ended migration. The caller owns the result.
func Completed(m *svmv1.StorageVersionMigration) *svmv1.StorageVersionMigration {
	m = m.DeepCopy()
	meta.SetStatusCondition(&m.Status.Conditions, metav1.Condition{
		Type:               string(svmv1.MigrationRunning),
		Status:             metav1.ConditionFalse,
		Reason:             "MigrationCompleted",
		Message:            "Migration completed",
		ObservedGeneration: m.Generation,
	})
	return m
}

// CRDName is the name of the CustomResourceDefinition that would define
// gr.
func CRDName(gr metav1.GroupResource) string { return gr.Resource + "." + gr.Group }

// MigratingCondition is the CRD condition that says migration m is
// running.
func MigratingCondition(crd *apiextensionsv1.CustomResourceDefinition, m *svmv1.StorageVersionMigration, now time.Time) apiextensionsv1.CustomResourceDefinitionCondition {
	return apiextensionsv1.CustomResourceDefinitionCondition{
		Type:               apiextensionsv1.StorageMigrating,
		Status:             apiextensionsv1.ConditionTrue,
		LastTransitionTime: metav1.NewTime(now.Truncate(time.Second)),
		Reason:             "MigrationRunning",
		Message:            "Migration " + m.Name + " is running",
		ObservedGeneration: crd.Generation,
	}
}

// FinishedCRD returns the CRD condition that ends a migration of crd's
// objects and, when it succeeded and crd's spec has not changed since it
// started (its StorageMigrating condition observed this generation), the
// stored versions to keep: only the storage version. nil keeps them.
func FinishedCRD(crd *apiextensionsv1.CustomResourceDefinition, success bool, now time.Time) (apiextensionsv1.CustomResourceDefinitionCondition, []string) {
	trim := false
	for _, c := range crd.Status.Conditions {
		if c.Type == apiextensionsv1.StorageMigrating && c.ObservedGeneration == crd.Generation {
			trim = success
		}
	}
	cond := apiextensionsv1.CustomResourceDefinitionCondition{
		Type:               apiextensionsv1.StorageMigrating,
		Status:             apiextensionsv1.ConditionFalse,
		LastTransitionTime: metav1.NewTime(now.Truncate(time.Second)),
		Reason:             "MigrationFailed",
		Message:            "The migration has failed",
		ObservedGeneration: crd.Generation,
	}
	if !success {
		return cond, nil
	}
	cond.Reason, cond.Message = "MigrationSucceeded", "The migration has succeeded"
	if !trim {
		cond.Message += " but the stored versions have not been updated due to a generation mismatch"
		return cond, nil
	}
	cond.Message += " and the stored versions have been updated"
	for _, v := range crd.Spec.Versions {
		if v.Storage {
			return cond, []string{v.Name}
		}
	}
	return cond, nil
}
