package apps

import (
	"strconv"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/outpost-mesh/outpost/hub/apiserver"
	"github.com/outpost-mesh/outpost/hub/registry/core"
	"github.com/outpost-mesh/outpost/hub/registry/typed"
)

// replicaSetRules returns the rules of apps/v1 replicasets, with ages
// measured against now (nil is the wall clock).
func replicaSetRules(now func() time.Time) *typed.Rules[*appsv1.ReplicaSet] {
	return &typed.Rules[*appsv1.ReplicaSet]{
		Now:           now,
		Defaults:      defaultReplicaSet,
		PrepareCreate: func(rs *appsv1.ReplicaSet) { rs.Status = appsv1.ReplicaSetStatus{} },
		PrepareUpdate: func(rs, old *appsv1.ReplicaSet) { rs.Status = old.Status },
		Check:         validateReplicaSet,
		CheckUpdate:   validateReplicaSetUpdate,
		CheckStatus:   validateReplicaSetStatus,
		FieldSet:      replicaSetFields,
		TableColumns:  replicaSetColumns(),
		TableRow:      replicaSetRow,
	}
}

func defaultReplicaSet(rs *appsv1.ReplicaSet) {
	if rs.Spec.Replicas == nil {
		rs.Spec.Replicas = new(int32(1))
	}
	core.DefaultPodTemplate(&rs.Spec.Template)
}

func validateReplicaSet(rs *appsv1.ReplicaSet) field.ErrorList {
	errs := apivalidation.ValidateObjectMeta(&rs.ObjectMeta, true, apivalidation.NameIsDNSSubdomain, metadataPath)
	return append(errs, validateReplicaSetSpec(&rs.Spec, specPath)...)
}

func validateReplicaSetUpdate(rs, o *appsv1.ReplicaSet) field.ErrorList {
	errs := apivalidation.ValidateObjectMetaUpdate(&rs.ObjectMeta, &o.ObjectMeta, metadataPath)
	errs = append(errs, validateReplicaSetSpec(&rs.Spec, specPath)...)
	return append(errs, apivalidation.ValidateImmutableField(rs.Spec.Selector, o.Spec.Selector, specPath.Child("selector"))...)
}

func validateReplicaSetStatus(rs, o *appsv1.ReplicaSet) field.ErrorList {
	errs := apivalidation.ValidateObjectMetaUpdate(&rs.ObjectMeta, &o.ObjectMeta, metadataPath)
	s := &rs.Status
	errs = append(errs, core.ValidateReplicaCounts(statusPath, s.Replicas, s.ReadyReplicas, s.AvailableReplicas, counter{Name: "fullyLabeledReplicas", N: s.FullyLabeledReplicas})...)
	errs = append(errs, nonNegative(s.TerminatingReplicas, statusPath.Child("terminatingReplicas"))...)
	return append(errs, apivalidation.ValidateNonnegativeField(s.ObservedGeneration, statusPath.Child("observedGeneration"))...)
}

func validateReplicaSetSpec(s *appsv1.ReplicaSetSpec, fld *field.Path) field.ErrorList {
	errs := nonNegative(s.Replicas, fld.Child("replicas"))
	errs = append(errs, apivalidation.ValidateNonnegativeField(int64(s.MinReadySeconds), fld.Child("minReadySeconds"))...)
	// Upstream names deployments in this message for replicasets too.
	errs = append(errs, validateSelector(s.Selector, "deployment", fld.Child("selector"))...)
	return append(errs, validateReplicaTemplate(s.Selector, &s.Template, "ReplicaSet", fld.Child("template"))...)
}

// replicaSetFields adds status.replicas, which upstream selects
// replicasets by.
func replicaSetFields(rs *appsv1.ReplicaSet) fields.Set {
	return fields.Set{"status.replicas": strconv.Itoa(int(rs.Status.Replicas))}
}

func replicaSetColumns() []metav1.TableColumnDefinition {
	status := appsv1.ReplicaSetStatus{}.SwaggerDoc()
	spec := appsv1.ReplicaSetSpec{}.SwaggerDoc()
	return []metav1.TableColumnDefinition{
		nameColumn,
		{Name: "Desired", Type: "integer", Description: spec["replicas"]},
		{Name: "Current", Type: "integer", Description: status["replicas"]},
		{Name: "Ready", Type: "integer", Description: status["readyReplicas"]},
		ageColumn,
		containersColumn,
		imagesColumn,
		{Name: "Selector", Type: "string", Priority: 1, Description: spec["selector"]},
	}
}

func replicaSetRow(rs *appsv1.ReplicaSet, now time.Time) []interface{} {
	names, images := containerCells(rs.Spec.Template.Spec.Containers)
	return []interface{}{
		rs.Name,
		int64(replicas(rs.Spec.Replicas)),
		int64(rs.Status.Replicas),
		int64(rs.Status.ReadyReplicas),
		age(now, rs.CreationTimestamp),
		names,
		images,
		selectorCell(rs.Spec.Selector),
	}
}

var replicaSetScale = &apiserver.ScaleRules{
	Get: func(obj runtime.Object) (int32, int32, string) {
		rs := obj.(*appsv1.ReplicaSet)
		return replicas(rs.Spec.Replicas), rs.Status.Replicas, scaleSelector(rs.Spec.Selector)
	},
	Set: func(obj runtime.Object, n int32) { obj.(*appsv1.ReplicaSet).Spec.Replicas = new(n) },
}
