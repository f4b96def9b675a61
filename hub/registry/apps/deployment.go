package apps

import (
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/outpost-mesh/outpost/hub/apiserver"
	"github.com/outpost-mesh/outpost/hub/registry/core"
	"github.com/outpost-mesh/outpost/hub/registry/typed"
)

// deploymentRules returns the rules of apps/v1 deployments, with ages
// measured against now (nil is the wall clock).
func deploymentRules(now func() time.Time) *typed.Rules[*appsv1.Deployment] {
	return &typed.Rules[*appsv1.Deployment]{
		Now:           now,
		Defaults:      defaultDeployment,
		PrepareCreate: func(d *appsv1.Deployment) { d.Status = appsv1.DeploymentStatus{} },
		PrepareUpdate: func(d, old *appsv1.Deployment) { d.Status = old.Status },
		Check:         validateDeployment,
		CheckUpdate:   validateDeploymentUpdate,
		CheckStatus:   validateDeploymentStatus,
		// As upstream, a status write may not change the labels.
		PrepareStatus: func(d, old *appsv1.Deployment) { d.Labels = old.Labels },
		TableColumns:  deploymentColumns(),
		TableRow:      deploymentRow,
	}
}

func defaultDeployment(d *appsv1.Deployment) {
	if d.Spec.Replicas == nil {
		d.Spec.Replicas = new(int32(1))
	}
	s := &d.Spec.Strategy
	if s.Type == "" {
		s.Type = appsv1.RollingUpdateDeploymentStrategyType
	}
	if s.Type == appsv1.RollingUpdateDeploymentStrategyType {
		if s.RollingUpdate == nil {
			s.RollingUpdate = &appsv1.RollingUpdateDeployment{}
		}
		if s.RollingUpdate.MaxUnavailable == nil {
			s.RollingUpdate.MaxUnavailable = new(intstr.FromString("25%"))
		}
		if s.RollingUpdate.MaxSurge == nil {
			s.RollingUpdate.MaxSurge = new(intstr.FromString("25%"))
		}
	}
	if d.Spec.RevisionHistoryLimit == nil {
		d.Spec.RevisionHistoryLimit = new(int32(10))
	}
	if d.Spec.ProgressDeadlineSeconds == nil {
		d.Spec.ProgressDeadlineSeconds = new(int32(600))
	}
	core.DefaultPodTemplate(&d.Spec.Template)
}

func validateDeployment(d *appsv1.Deployment) field.ErrorList {
	errs := apivalidation.ValidateObjectMeta(&d.ObjectMeta, true, apivalidation.NameIsDNSSubdomain, metadataPath)
	return append(errs, validateDeploymentSpec(&d.Spec, specPath)...)
}

func validateDeploymentUpdate(d, o *appsv1.Deployment) field.ErrorList {
	errs := apivalidation.ValidateObjectMetaUpdate(&d.ObjectMeta, &o.ObjectMeta, metadataPath)
	errs = append(errs, validateDeploymentSpec(&d.Spec, specPath)...)
	return append(errs, apivalidation.ValidateImmutableField(d.Spec.Selector, o.Spec.Selector, specPath.Child("selector"))...)
}

func validateDeploymentStatus(d, o *appsv1.Deployment) field.ErrorList {
	errs := apivalidation.ValidateObjectMetaUpdate(&d.ObjectMeta, &o.ObjectMeta, metadataPath)
	s := &d.Status
	errs = append(errs, apivalidation.ValidateNonnegativeField(s.ObservedGeneration, statusPath.Child("observedGeneration"))...)
	errs = append(errs, core.ValidateReplicaCounts(statusPath, s.Replicas, s.ReadyReplicas, s.AvailableReplicas, counter{Name: "updatedReplicas", N: s.UpdatedReplicas})...)
	errs = append(errs, apivalidation.ValidateNonnegativeField(int64(s.UnavailableReplicas), statusPath.Child("unavailableReplicas"))...)
	errs = append(errs, nonNegative(s.TerminatingReplicas, statusPath.Child("terminatingReplicas"))...)
	return append(errs, validateCollisionCount(s.CollisionCount, o.Status.CollisionCount, statusPath.Child("collisionCount"))...)
}

func validateDeploymentSpec(s *appsv1.DeploymentSpec, fld *field.Path) field.ErrorList {
	errs := nonNegative(s.Replicas, fld.Child("replicas"))
	errs = append(errs, validateSelector(s.Selector, "deployment", fld.Child("selector"))...)
	errs = append(errs, validateReplicaTemplate(s.Selector, &s.Template, "ReplicaSet", fld.Child("template"))...)
	errs = append(errs, validateDeploymentStrategy(&s.Strategy, fld.Child("strategy"))...)
	errs = append(errs, apivalidation.ValidateNonnegativeField(int64(s.MinReadySeconds), fld.Child("minReadySeconds"))...)
	errs = append(errs, nonNegative(s.RevisionHistoryLimit, fld.Child("revisionHistoryLimit"))...)
	if p := s.ProgressDeadlineSeconds; p != nil {
		errs = append(errs, nonNegative(p, fld.Child("progressDeadlineSeconds"))...)
		if *p <= s.MinReadySeconds {
			errs = append(errs, field.Invalid(fld.Child("progressDeadlineSeconds"), *p, "must be greater than minReadySeconds"))
		}
	}
	return errs
}

func validateDeploymentStrategy(s *appsv1.DeploymentStrategy, fld *field.Path) field.ErrorList {
	switch s.Type {
	case appsv1.RecreateDeploymentStrategyType:
		if s.RollingUpdate != nil {
			return field.ErrorList{field.Forbidden(fld.Child("rollingUpdate"), "may not be specified when strategy `type` is 'Recreate'")}
		}
		return nil
	case appsv1.RollingUpdateDeploymentStrategyType:
		if s.RollingUpdate == nil {
			return field.ErrorList{field.Required(fld.Child("rollingUpdate"), "this should be defaulted and never be nil")}
		}
		u, fld := s.RollingUpdate, fld.Child("rollingUpdate")
		errs := ValidateIntOrPercent(u.MaxUnavailable, fld.Child("maxUnavailable"))
		errs = append(errs, ValidateIntOrPercent(u.MaxSurge, fld.Child("maxSurge"))...)
		if intOrPercent(u.MaxUnavailable) == 0 && intOrPercent(u.MaxSurge) == 0 {
			errs = append(errs, field.Invalid(fld.Child("maxUnavailable"), u.MaxUnavailable, "may not be 0 when `maxSurge` is 0"))
		}
		return append(errs, NotOver100Percent(u.MaxUnavailable, fld.Child("maxUnavailable"))...)
	default:
		// Upstream reports the whole strategy, at spec.strategy.
		return field.ErrorList{field.NotSupported(fld, *s, []appsv1.DeploymentStrategyType{
			appsv1.RecreateDeploymentStrategyType, appsv1.RollingUpdateDeploymentStrategyType})}
	}
}

func deploymentColumns() []metav1.TableColumnDefinition {
	doc := appsv1.DeploymentStatus{}.SwaggerDoc()
	return []metav1.TableColumnDefinition{
		nameColumn,
		{Name: "Ready", Type: "string", Description: "Number of the pod with ready state"},
		{Name: "Up-to-date", Type: "string", Description: doc["updatedReplicas"]},
		{Name: "Available", Type: "string", Description: doc["availableReplicas"]},
		ageColumn,
		containersColumn,
		imagesColumn,
		{Name: "Selector", Type: "string", Priority: 1, Description: appsv1.DeploymentSpec{}.SwaggerDoc()["selector"]},
	}
}

func deploymentRow(d *appsv1.Deployment, now time.Time) []interface{} {
	names, images := containerCells(d.Spec.Template.Spec.Containers)
	selector := "<invalid>"
	if sel, err := metav1.LabelSelectorAsSelector(d.Spec.Selector); err == nil {
		selector = sel.String()
	}
	return []interface{}{
		d.Name,
		fmt.Sprintf("%d/%d", d.Status.ReadyReplicas, replicas(d.Spec.Replicas)),
		int64(d.Status.UpdatedReplicas),
		int64(d.Status.AvailableReplicas),
		age(now, d.CreationTimestamp),
		names,
		images,
		selector,
	}
}

var deploymentScale = &apiserver.ScaleRules{
	Get: func(obj runtime.Object) (int32, int32, string) {
		d := obj.(*appsv1.Deployment)
		return replicas(d.Spec.Replicas), d.Status.Replicas, scaleSelector(d.Spec.Selector)
	},
	Set: func(obj runtime.Object, n int32) { obj.(*appsv1.Deployment).Spec.Replicas = new(n) },
}

// replicas is a workload's spec.replicas, 1 when unset as upstream
// defaults it.
func replicas(n *int32) int32 {
	if n == nil {
		return 1
	}
	return *n
}
