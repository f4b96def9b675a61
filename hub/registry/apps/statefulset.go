package apps

import (
	"fmt"
	"slices"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/outpost-mesh/outpost/hub/apiserver"
	"github.com/outpost-mesh/outpost/hub/registry/core"
	"github.com/outpost-mesh/outpost/hub/registry/typed"
)

// statefulSetRules returns the rules of apps/v1 statefulsets, with ages
// measured against now (nil is the wall clock).
func statefulSetRules(now func() time.Time) *typed.Rules[*appsv1.StatefulSet] {
	return &typed.Rules[*appsv1.StatefulSet]{
		Now:           now,
		Defaults:      defaultStatefulSet,
		PrepareCreate: func(ss *appsv1.StatefulSet) { ss.Status = appsv1.StatefulSetStatus{} },
		PrepareUpdate: func(ss, old *appsv1.StatefulSet) { ss.Status = old.Status },
		Check:         validateStatefulSet,
		CheckUpdate:   validateStatefulSetUpdate,
		CheckStatus:   validateStatefulSetStatus,
		TableColumns:  statefulSetColumns(),
		TableRow:      statefulSetRow,
	}
}

func defaultStatefulSet(ss *appsv1.StatefulSet) {
	s := &ss.Spec
	if s.PodManagementPolicy == "" {
		s.PodManagementPolicy = appsv1.OrderedReadyPodManagement
	}
	// As upstream: a rollingUpdate is added only when the type is defaulted.
	if s.UpdateStrategy.Type == "" {
		s.UpdateStrategy.Type = appsv1.RollingUpdateStatefulSetStrategyType
		if s.UpdateStrategy.RollingUpdate == nil {
			s.UpdateStrategy.RollingUpdate = &appsv1.RollingUpdateStatefulSetStrategy{}
		}
	}
	if u := s.UpdateStrategy.RollingUpdate; s.UpdateStrategy.Type == appsv1.RollingUpdateStatefulSetStrategyType && u != nil && u.Partition == nil {
		u.Partition = new(int32(0))
	}
	if s.PersistentVolumeClaimRetentionPolicy == nil {
		s.PersistentVolumeClaimRetentionPolicy = &appsv1.StatefulSetPersistentVolumeClaimRetentionPolicy{}
	}
	if p := s.PersistentVolumeClaimRetentionPolicy; p.WhenDeleted == "" {
		p.WhenDeleted = appsv1.RetainPersistentVolumeClaimRetentionPolicyType
	}
	if p := s.PersistentVolumeClaimRetentionPolicy; p.WhenScaled == "" {
		p.WhenScaled = appsv1.RetainPersistentVolumeClaimRetentionPolicyType
	}
	if s.Replicas == nil {
		s.Replicas = new(int32(1))
	}
	if s.RevisionHistoryLimit == nil {
		s.RevisionHistoryLimit = new(int32(10))
	}
	core.DefaultPodTemplate(&s.Template)
	// The claim templates read back as upstream shows them: typed, with
	// the claim defaults.
	for i := range s.VolumeClaimTemplates {
		c := &s.VolumeClaimTemplates[i]
		if c.APIVersion == "" && c.Kind == "" {
			c.APIVersion, c.Kind = "v1", "PersistentVolumeClaim"
		}
		if c.Spec.VolumeMode == nil {
			c.Spec.VolumeMode = new(corev1.PersistentVolumeFilesystem)
		}
		if c.Status.Phase == "" {
			c.Status.Phase = corev1.ClaimPending
		}
	}
}

func validateStatefulSet(ss *appsv1.StatefulSet) field.ErrorList {
	// Pod names and hostnames derive from the name, hence a DNS label.
	errs := apivalidation.ValidateObjectMeta(&ss.ObjectMeta, true, apivalidation.NameIsDNSLabel, metadataPath)
	errs = append(errs, validateStatefulSetSpec(&ss.Spec, specPath)...)
	// Claims need volumes to bind, and the hub has no storage yet. Refused
	// on create only, so that a set stored before stays updatable.
	if len(ss.Spec.VolumeClaimTemplates) > 0 {
		errs = append(errs, field.Forbidden(specPath.Child("volumeClaimTemplates"), volumeClaimTemplatesRefused))
	}
	// The service name becomes the pods' subdomain. It is immutable, so
	// it is checked on create only, as upstream does.
	if n := ss.Spec.ServiceName; n != "" {
		for _, msg := range validation.IsDNS1123Label(n) {
			errs = append(errs, field.Invalid(specPath.Child("serviceName"), n, msg))
		}
	}
	return errs
}

// volumeClaimTemplatesRefused says why a set with claim templates is
// refused, and what to do instead.
const volumeClaimTemplatesRefused = "volume claim templates are not supported until the hub has storage; " +
	"use emptyDir or hostPath volumes in the pod template instead"

// statefulSetMutable lists the spec fields an update may change.
const statefulSetMutable = "'replicas', 'ordinals', 'template', 'updateStrategy', 'persistentVolumeClaimRetentionPolicy' and 'minReadySeconds'"

func validateStatefulSetUpdate(ss, o *appsv1.StatefulSet) field.ErrorList {
	// Not ValidateObjectMeta: a name valid once stays valid.
	errs := apivalidation.ValidateObjectMetaUpdate(&ss.ObjectMeta, &o.ObjectMeta, metadataPath)
	errs = append(errs, validateStatefulSetSpec(&ss.Spec, specPath)...)

	rest := ss.Spec.DeepCopy()
	rest.Replicas = o.Spec.Replicas
	rest.Template = o.Spec.Template
	rest.UpdateStrategy = o.Spec.UpdateStrategy
	rest.PersistentVolumeClaimRetentionPolicy = o.Spec.PersistentVolumeClaimRetentionPolicy
	rest.MinReadySeconds = o.Spec.MinReadySeconds
	rest.Ordinals = o.Spec.Ordinals
	if !equality.Semantic.DeepEqual(*rest, o.Spec) {
		errs = append(errs, field.Forbidden(specPath, "updates to statefulset spec for fields other than "+statefulSetMutable+" are forbidden"))
	}
	return errs
}

func validateStatefulSetStatus(ss, o *appsv1.StatefulSet) field.ErrorList {
	errs := apivalidation.ValidateObjectMetaUpdate(&ss.ObjectMeta, &o.ObjectMeta, metadataPath)
	s := &ss.Status
	errs = append(errs, core.ValidateReplicaCounts(statusPath, s.Replicas, s.ReadyReplicas, s.AvailableReplicas,
		counter{Name: "currentReplicas", N: s.CurrentReplicas}, counter{Name: "updatedReplicas", N: s.UpdatedReplicas})...)
	errs = append(errs, apivalidation.ValidateNonnegativeField(s.ObservedGeneration, statusPath.Child("observedGeneration"))...)
	return append(errs, validateCollisionCount(s.CollisionCount, o.Status.CollisionCount, statusPath.Child("collisionCount"))...)
}

func validateStatefulSetSpec(s *appsv1.StatefulSetSpec, fld *field.Path) field.ErrorList {
	var errs field.ErrorList
	switch p := s.PodManagementPolicy; p {
	case appsv1.OrderedReadyPodManagement, appsv1.ParallelPodManagement:
	case "":
		errs = append(errs, field.Required(fld.Child("podManagementPolicy"), ""))
	default:
		errs = append(errs, field.Invalid(fld.Child("podManagementPolicy"), p,
			fmt.Sprintf("must be '%s' or '%s'", appsv1.OrderedReadyPodManagement, appsv1.ParallelPodManagement)))
	}

	us, usPath := &s.UpdateStrategy, fld.Child("updateStrategy")
	switch us.Type {
	case appsv1.RollingUpdateStatefulSetStrategyType:
		if u := us.RollingUpdate; u != nil {
			p := usPath.Child("rollingUpdate")
			errs = append(errs, nonNegative(u.Partition, p.Child("partition"))...)
			if u.MaxUnavailable != nil {
				mu := p.Child("maxUnavailable")
				errs = append(errs, ValidateIntOrPercent(u.MaxUnavailable, mu)...)
				if intOrPercent(u.MaxUnavailable) == 0 {
					errs = append(errs, field.Invalid(mu, u.MaxUnavailable, "cannot be 0"))
				}
				errs = append(errs, NotOver100Percent(u.MaxUnavailable, mu)...)
			}
		}
	case appsv1.OnDeleteStatefulSetStrategyType:
		if us.RollingUpdate != nil {
			errs = append(errs, field.Invalid(usPath.Child("rollingUpdate"), us.RollingUpdate, "only allowed for updateStrategy 'RollingUpdate'"))
		}
	case "":
		errs = append(errs, field.Required(usPath, ""))
	default:
		errs = append(errs, field.Invalid(usPath.Child("type"), us.Type, "must be 'RollingUpdate' or 'OnDelete'"))
	}

	if p := s.PersistentVolumeClaimRetentionPolicy; p != nil {
		pp := fld.Child("persistentVolumeClaimRetentionPolicy")
		errs = append(errs, validateRetentionPolicyType(p.WhenDeleted, pp.Child("whenDeleted"))...)
		errs = append(errs, validateRetentionPolicyType(p.WhenScaled, pp.Child("whenScaled"))...)
	}
	if s.Ordinals != nil {
		errs = append(errs, apivalidation.ValidateNonnegativeField(int64(s.Ordinals.Start), fld.Child("ordinals", "start"))...)
	}
	errs = append(errs, nonNegative(s.Replicas, fld.Child("replicas"))...)
	errs = append(errs, apivalidation.ValidateNonnegativeField(int64(s.MinReadySeconds), fld.Child("minReadySeconds"))...)
	errs = append(errs, nonNegative(s.RevisionHistoryLimit, fld.Child("revisionHistoryLimit"))...)
	errs = append(errs, validateSelector(s.Selector, "statefulset", fld.Child("selector"))...)
	return append(errs, validateReplicaTemplate(s.Selector, withClaimVolumes(s), "StatefulSet", fld.Child("template"))...)
}

// withClaimVolumes returns a copy of the pod template of s with the
// volumes its pods get from the claim templates, as the statefulset
// controller gives them: a volume of each claim's name, replacing any of
// the template's. The containers mount these, so the template is checked
// with them. (Upstream does not check a statefulset's pod spec at all, for
// this reason; a TODO there.)
func withClaimVolumes(s *appsv1.StatefulSetSpec) *corev1.PodTemplateSpec {
	if len(s.VolumeClaimTemplates) == 0 {
		return &s.Template
	}
	t := s.Template.DeepCopy()
	for _, c := range s.VolumeClaimTemplates {
		v := corev1.Volume{Name: c.Name, VolumeSource: corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: c.Name},
		}}
		if i := slices.IndexFunc(t.Spec.Volumes, func(v corev1.Volume) bool { return v.Name == c.Name }); i >= 0 {
			t.Spec.Volumes[i] = v
		} else {
			t.Spec.Volumes = append(t.Spec.Volumes, v)
		}
	}
	return t
}

func validateRetentionPolicyType(t appsv1.PersistentVolumeClaimRetentionPolicyType, fld *field.Path) field.ErrorList {
	switch t {
	case appsv1.RetainPersistentVolumeClaimRetentionPolicyType, appsv1.DeletePersistentVolumeClaimRetentionPolicyType:
		return nil
	}
	return field.ErrorList{field.NotSupported(fld, t, []appsv1.PersistentVolumeClaimRetentionPolicyType{
		appsv1.RetainPersistentVolumeClaimRetentionPolicyType, appsv1.DeletePersistentVolumeClaimRetentionPolicyType})}
}

func statefulSetColumns() []metav1.TableColumnDefinition {
	return []metav1.TableColumnDefinition{
		nameColumn,
		{Name: "Ready", Type: "string", Description: "Number of the pod with ready state"},
		ageColumn,
		containersColumn,
		imagesColumn,
	}
}

func statefulSetRow(ss *appsv1.StatefulSet, now time.Time) []interface{} {
	names, images := containerCells(ss.Spec.Template.Spec.Containers)
	return []interface{}{
		ss.Name,
		fmt.Sprintf("%d/%d", ss.Status.ReadyReplicas, replicas(ss.Spec.Replicas)),
		age(now, ss.CreationTimestamp),
		names,
		images,
	}
}

var statefulSetScale = &apiserver.ScaleRules{
	Get: func(obj runtime.Object) (int32, int32, string) {
		ss := obj.(*appsv1.StatefulSet)
		return replicas(ss.Spec.Replicas), ss.Status.Replicas, scaleSelector(ss.Spec.Selector)
	},
	Set: func(obj runtime.Object, n int32) { obj.(*appsv1.StatefulSet).Spec.Replicas = new(n) },
}
