package apps

import (
	"strconv"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/outpost-mesh/outpost/hub/registry/core"
	"github.com/outpost-mesh/outpost/hub/registry/typed"
)

// daemonSetRules returns the rules of apps/v1 daemonsets, with ages
// measured against now (nil is the wall clock).
func daemonSetRules(now func() time.Time) *typed.Rules[*appsv1.DaemonSet] {
	return &typed.Rules[*appsv1.DaemonSet]{
		Now:           now,
		Defaults:      defaultDaemonSet,
		PrepareCreate: prepareDaemonSetCreate,
		PrepareUpdate: prepareDaemonSetUpdate,
		Check:         validateDaemonSet,
		CheckUpdate:   validateDaemonSetUpdate,
		CheckStatus:   validateDaemonSetStatus,
		TableColumns:  daemonSetColumns(),
		TableRow:      daemonSetRow,
	}
}

func defaultDaemonSet(ds *appsv1.DaemonSet) {
	s := &ds.Spec.UpdateStrategy
	if s.Type == "" {
		s.Type = appsv1.RollingUpdateDaemonSetStrategyType
	}
	if s.Type == appsv1.RollingUpdateDaemonSetStrategyType {
		if s.RollingUpdate == nil {
			s.RollingUpdate = &appsv1.RollingUpdateDaemonSet{}
		}
		if s.RollingUpdate.MaxUnavailable == nil {
			s.RollingUpdate.MaxUnavailable = new(intstr.FromInt32(1))
		}
		if s.RollingUpdate.MaxSurge == nil {
			s.RollingUpdate.MaxSurge = new(intstr.FromInt32(0))
		}
	}
	if ds.Spec.RevisionHistoryLimit == nil {
		ds.Spec.RevisionHistoryLimit = new(int32(10))
	}
	core.DefaultPodTemplate(&ds.Spec.Template)
}

// Upstream keeps a template generation, counting the template's changes,
// and shows it in apps/v1 as the annotation
// deprecated.daemonset.template.generation; so do these rules.

func templateGeneration(ds *appsv1.DaemonSet) int64 {
	n, _ := strconv.ParseInt(ds.Annotations[appsv1.DeprecatedTemplateGeneration], 10, 64)
	return n
}

func setTemplateGeneration(ds *appsv1.DaemonSet, n int64) {
	if ds.Annotations == nil {
		ds.Annotations = make(map[string]string)
	}
	ds.Annotations[appsv1.DeprecatedTemplateGeneration] = strconv.FormatInt(n, 10)
}

func prepareDaemonSetCreate(ds *appsv1.DaemonSet) {
	ds.Status = appsv1.DaemonSetStatus{}
	if templateGeneration(ds) < 1 {
		setTemplateGeneration(ds, 1)
	}
}

func prepareDaemonSetUpdate(ds, o *appsv1.DaemonSet) {
	ds.Status = o.Status
	gen := templateGeneration(o)
	if !equality.Semantic.DeepEqual(ds.Spec.Template, o.Spec.Template) {
		gen++
	}
	if _, ok := o.Annotations[appsv1.DeprecatedTemplateGeneration]; ok || gen > 0 {
		setTemplateGeneration(ds, gen)
	} else {
		delete(ds.Annotations, appsv1.DeprecatedTemplateGeneration)
	}
}

func validateDaemonSet(ds *appsv1.DaemonSet) field.ErrorList {
	errs := apivalidation.ValidateObjectMeta(&ds.ObjectMeta, true, apivalidation.NameIsDNSSubdomain, metadataPath)
	return append(errs, validateDaemonSetSpec(&ds.Spec, specPath)...)
}

func validateDaemonSetUpdate(ds, o *appsv1.DaemonSet) field.ErrorList {
	errs := apivalidation.ValidateObjectMetaUpdate(&ds.ObjectMeta, &o.ObjectMeta, metadataPath)
	errs = append(errs, validateDaemonSetSpec(&ds.Spec, specPath)...)
	return append(errs, apivalidation.ValidateImmutableField(ds.Spec.Selector, o.Spec.Selector, specPath.Child("selector"))...)
}

func validateDaemonSetStatus(ds, o *appsv1.DaemonSet) field.ErrorList {
	errs := apivalidation.ValidateObjectMetaUpdate(&ds.ObjectMeta, &o.ObjectMeta, metadataPath)
	s := &ds.Status
	for _, c := range []counter{
		{Name: "currentNumberScheduled", N: s.CurrentNumberScheduled},
		{Name: "numberMisscheduled", N: s.NumberMisscheduled},
		{Name: "desiredNumberScheduled", N: s.DesiredNumberScheduled},
		{Name: "numberReady", N: s.NumberReady},
		{Name: "updatedNumberScheduled", N: s.UpdatedNumberScheduled},
		{Name: "numberAvailable", N: s.NumberAvailable},
		{Name: "numberUnavailable", N: s.NumberUnavailable},
	} {
		errs = append(errs, apivalidation.ValidateNonnegativeField(int64(c.N), statusPath.Child(c.Name))...)
	}
	errs = append(errs, apivalidation.ValidateNonnegativeField(s.ObservedGeneration, statusPath.Child("observedGeneration"))...)
	return append(errs, validateCollisionCount(s.CollisionCount, o.Status.CollisionCount, statusPath.Child("collisionCount"))...)
}

func validateDaemonSetSpec(s *appsv1.DaemonSetSpec, fld *field.Path) field.ErrorList {
	errs := validateSelector(s.Selector, "daemonset", fld.Child("selector"))
	errs = append(errs, validateReplicaTemplate(s.Selector, &s.Template, "DaemonSet", fld.Child("template"))...)
	errs = append(errs, apivalidation.ValidateNonnegativeField(int64(s.MinReadySeconds), fld.Child("minReadySeconds"))...)
	errs = append(errs, validateDaemonSetUpdateStrategy(&s.UpdateStrategy, fld.Child("updateStrategy"))...)
	return append(errs, nonNegative(s.RevisionHistoryLimit, fld.Child("revisionHistoryLimit"))...)
}

func validateDaemonSetUpdateStrategy(s *appsv1.DaemonSetUpdateStrategy, fld *field.Path) field.ErrorList {
	switch s.Type {
	case appsv1.OnDeleteDaemonSetStrategyType:
		return nil
	case appsv1.RollingUpdateDaemonSetStrategyType:
	default:
		return field.ErrorList{field.NotSupported(fld.Child("type"), s.Type, []appsv1.DaemonSetUpdateStrategyType{
			appsv1.RollingUpdateDaemonSetStrategyType, appsv1.OnDeleteDaemonSetStrategyType})}
	}
	fld = fld.Child("rollingUpdate")
	u := s.RollingUpdate
	if u == nil {
		return field.ErrorList{field.Required(fld, "")}
	}
	errs := ValidateIntOrPercent(u.MaxUnavailable, fld.Child("maxUnavailable"))
	errs = append(errs, ValidateIntOrPercent(u.MaxSurge, fld.Child("maxSurge"))...)
	errs = append(errs, NotOver100Percent(u.MaxUnavailable, fld.Child("maxUnavailable"))...)
	errs = append(errs, NotOver100Percent(u.MaxSurge, fld.Child("maxSurge"))...)
	unavailable, surge := intOrPercent(u.MaxUnavailable) != 0, intOrPercent(u.MaxSurge) != 0
	switch {
	case unavailable && surge:
		errs = append(errs, field.Invalid(fld.Child("maxSurge"), u.MaxSurge, "may not be set when maxUnavailable is non-zero"))
	case !unavailable && !surge:
		errs = append(errs, field.Required(fld.Child("maxUnavailable"), "cannot be 0 when maxSurge is 0"))
	}
	return errs
}

func daemonSetColumns() []metav1.TableColumnDefinition {
	status := appsv1.DaemonSetStatus{}.SwaggerDoc()
	return []metav1.TableColumnDefinition{
		nameColumn,
		{Name: "Desired", Type: "integer", Description: status["desiredNumberScheduled"]},
		{Name: "Current", Type: "integer", Description: status["currentNumberScheduled"]},
		{Name: "Ready", Type: "integer", Description: status["numberReady"]},
		{Name: "Up-to-date", Type: "integer", Description: status["updatedNumberScheduled"]},
		{Name: "Available", Type: "integer", Description: status["numberAvailable"]},
		{Name: "Node Selector", Type: "string", Description: corev1.PodSpec{}.SwaggerDoc()["nodeSelector"]},
		ageColumn,
		containersColumn,
		imagesColumn,
		{Name: "Selector", Type: "string", Priority: 1, Description: appsv1.DaemonSetSpec{}.SwaggerDoc()["selector"]},
	}
}

func daemonSetRow(ds *appsv1.DaemonSet, now time.Time) []interface{} {
	names, images := containerCells(ds.Spec.Template.Spec.Containers)
	s := &ds.Status
	return []interface{}{
		ds.Name,
		int64(s.DesiredNumberScheduled),
		int64(s.CurrentNumberScheduled),
		int64(s.NumberReady),
		int64(s.UpdatedNumberScheduled),
		int64(s.NumberAvailable),
		labels.FormatLabels(ds.Spec.Template.Spec.NodeSelector),
		age(now, ds.CreationTimestamp),
		names,
		images,
		selectorCell(ds.Spec.Selector),
	}
}
