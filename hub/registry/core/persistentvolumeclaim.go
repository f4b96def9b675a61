package core

// Persistent volume claims.

import (
	"maps"
	"reflect"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apimachineryvalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/outpost-mesh/outpost/hub/apiserver"
	"github.com/outpost-mesh/outpost/hub/registry/typed"
)

func persistentVolumeClaimResource(now func() time.Time) apiserver.Resource {
	return apiserver.Resource{
		GroupVersion: corev1.SchemeGroupVersion,
		Kind:         "PersistentVolumeClaim",
		Plural:       "persistentvolumeclaims",
		Singular:     "persistentvolumeclaim",
		ShortNames:   []string{"pvc"},
		Namespaced:   true,
		New:          func() runtime.Object { return &corev1.PersistentVolumeClaim{} },
		NewList:      func() runtime.Object { return &corev1.PersistentVolumeClaimList{} },
		AddToScheme:  corev1.AddToScheme,
		Status:       true,
		Rules: &typed.Rules[*corev1.PersistentVolumeClaim]{
			Now:      now,
			Defaults: defaultPersistentVolumeClaim,
			// A new claim is Pending: upstream clears its status on
			// create and defaults the phase when it reads it back.
			PrepareCreate: func(pvc *corev1.PersistentVolumeClaim) {
				pvc.Status = corev1.PersistentVolumeClaimStatus{Phase: corev1.ClaimPending}
			},
			PrepareUpdate: func(pvc, old *corev1.PersistentVolumeClaim) { pvc.Status = old.Status },
			Check:         validatePersistentVolumeClaim,
			CheckUpdate:   validatePersistentVolumeClaimUpdate,
			CheckStatus:   validatePersistentVolumeClaimStatusUpdate,
			// As for volumes, upstream keeps selecting claims by name.
			FieldSet:     func(pvc *corev1.PersistentVolumeClaim) fields.Set { return fields.Set{"name": pvc.Name} },
			TableColumns: persistentVolumeClaimColumns(),
			TableRow:     persistentVolumeClaimRow,
		},
	}
}

func defaultPersistentVolumeClaim(pvc *corev1.PersistentVolumeClaim) {
	defaultClaimSpec(&pvc.Spec)
	if pvc.Status.Phase == "" {
		pvc.Status.Phase = corev1.ClaimPending
	}
}

// defaultClaimSpec applies upstream's defaults to a claim's spec, also
// that of a claim template in an ephemeral volume: volume mode
// Filesystem, quantities rounded to milli precision.
func defaultClaimSpec(s *corev1.PersistentVolumeClaimSpec) {
	if s.VolumeMode == nil {
		s.VolumeMode = ptrTo(corev1.PersistentVolumeFilesystem)
	}
	roundResources(s.Resources.Requests)
	roundResources(s.Resources.Limits)
}

func validatePersistentVolumeClaim(pvc *corev1.PersistentVolumeClaim) field.ErrorList {
	errs := validateObjectMeta(&pvc.ObjectMeta, true, apimachineryvalidation.NameIsDNSSubdomain)
	return append(errs, validateClaimSpec(&pvc.Spec, specPath)...)
}

// validateClaimSpec checks a claim's spec at fldPath, as upstream's
// ValidatePersistentVolumeClaimSpec.
func validateClaimSpec(s *corev1.PersistentVolumeClaimSpec, fldPath *field.Path) field.ErrorList {
	errs := validateAccessModes(s.AccessModes, "at least 1 access mode is required", fldPath.Child("accessModes"))
	if s.Selector != nil {
		errs = append(errs, metav1validation.ValidateLabelSelector(s.Selector, metav1validation.LabelSelectorValidationOptions{}, fldPath.Child("selector"))...)
	}
	storagePath := fldPath.Child("resources").Key(string(corev1.ResourceStorage))
	if q, ok := s.Resources.Requests[corev1.ResourceStorage]; !ok {
		errs = append(errs, field.Required(storagePath, ""))
	} else if e := validatePositiveQuantity(q, storagePath); len(e) > 0 {
		errs = append(errs, e...)
	} else {
		errs = append(errs, validateQuantity(corev1.ResourceStorage, q, storagePath)...)
	}
	if c := s.StorageClassName; c != nil && *c != "" {
		errs = append(errs, validateName(*c, apimachineryvalidation.NameIsDNSSubdomain, fldPath.Child("storageClassName"))...)
	}
	if m := s.VolumeMode; m != nil && !slices.Contains(supportedVolumeModes, *m) {
		errs = append(errs, field.NotSupported(fldPath.Child("volumeMode"), *m, supportedVolumeModes))
	}
	if d := s.DataSource; d != nil {
		errs = append(errs, validateDataSource(d.Name, d.Kind, d.APIGroup, fldPath.Child("dataSource"))...)
	}
	if r := s.DataSourceRef; r != nil {
		p := fldPath.Child("dataSourceRef")
		errs = append(errs, validateDataSource(r.Name, r.Kind, r.APIGroup, p)...)
		if r.Namespace != nil && *r.Namespace != "" {
			errs = append(errs, validateName(*r.Namespace, apimachineryvalidation.ValidateNamespaceName, p.Child("namespace"))...)
		}
	}
	switch d, r := s.DataSource, s.DataSourceRef; {
	case r != nil && r.Namespace != nil && *r.Namespace != "":
		if d != nil {
			errs = append(errs, field.Invalid(fldPath, fldPath.Child("dataSource"), "may not be specified when dataSourceRef.namespace is specified"))
		}
	case d != nil && r != nil:
		if !reflect.DeepEqual(d.APIGroup, r.APIGroup) || d.Kind != r.Kind || d.Name != r.Name {
			errs = append(errs, field.Invalid(fldPath, fldPath.Child("dataSource"), "must match dataSourceRef"))
		}
	}
	if c := s.VolumeAttributesClassName; c != nil && *c != "" {
		errs = append(errs, validateName(*c, apimachineryvalidation.NameIsDNSSubdomain, fldPath.Child("volumeAttributesClassName"))...)
	}
	return errs
}

// validateDataSource checks a claim's dataSource or dataSourceRef at
// fldPath: named, of a kind, and in the core group only for claims.
func validateDataSource(name, kind string, group *string, fldPath *field.Path) field.ErrorList {
	var errs field.ErrorList
	if name == "" {
		errs = append(errs, field.Required(fldPath.Child("name"), ""))
	}
	if kind == "" {
		errs = append(errs, field.Required(fldPath.Child("kind"), ""))
	}
	g := ""
	if group != nil {
		g = *group
	}
	if g == "" && kind != "PersistentVolumeClaim" {
		errs = append(errs, field.Invalid(fldPath, kind, "must be 'PersistentVolumeClaim' when referencing the default apiGroup"))
	}
	if g != "" {
		errs = append(errs, validateDNS1123Subdomain(g, fldPath.Child("apiGroup"))...)
	}
	return errs
}

// validatePersistentVolumeClaimUpdate checks an update of claim old to
// pvc as upstream: the spec is immutable, except that the volume name
// may be set once, a class may be set where the beta annotation or
// nothing named one, a bound claim's storage request may change (and
// not fall to its status capacity or below), and the volume attributes
// class may change but not be unset.
func validatePersistentVolumeClaimUpdate(pvc, old *corev1.PersistentVolumeClaim) field.ErrorList {
	errs := validateObjectMetaUpdate(&pvc.ObjectMeta, &old.ObjectMeta)
	errs = append(errs, validatePersistentVolumeClaim(pvc)...)
	spec, oldSpec := pvc.Spec.DeepCopy(), old.Spec.DeepCopy()
	if oldSpec.VolumeName == "" {
		oldSpec.VolumeName = spec.VolumeName
	}
	const classKey = corev1.BetaStorageClassAnnotation
	oldClass, oldAnnotated := old.Annotations[classKey]
	newClass, newAnnotated := pvc.Annotations[classKey]
	switch {
	case oldAnnotated && oldSpec.StorageClassName == nil && spec.StorageClassName != nil &&
		*spec.StorageClassName == oldClass && (!newAnnotated || newClass == oldClass):
		// From the beta annotation to the field.
		spec.StorageClassName = nil
	default:
		if newClass != oldClass {
			errs = append(errs, field.Invalid(metadataPath.Child("annotations", classKey), newClass, fieldImmutableErrorMsg))
		}
		if spec.StorageClassName != nil && oldSpec.StorageClassName == nil && (!oldAnnotated || *spec.StorageClassName == oldClass) {
			// From no class to one.
			spec.StorageClassName = nil
		}
	}
	if pvc.Status.Phase == corev1.ClaimBound && spec.Resources.Requests != nil {
		spec.Resources.Requests[corev1.ResourceStorage] = old.Spec.Resources.Requests[corev1.ResourceStorage]
	}
	spec.VolumeAttributesClassName = oldSpec.VolumeAttributesClassName
	if !apiequality.Semantic.DeepEqual(spec, oldSpec) {
		errs = append(errs, field.Forbidden(specPath, "spec is immutable after creation except resources.requests and volumeAttributesClassName for bound claims"))
	}
	newSize := pvc.Spec.Resources.Requests[corev1.ResourceStorage]
	oldSize := old.Spec.Resources.Requests[corev1.ResourceStorage]
	if statusSize := old.Status.Capacity[corev1.ResourceStorage]; newSize.Cmp(oldSize) < 0 && newSize.Cmp(statusSize) <= 0 {
		errs = append(errs, field.Forbidden(specPath.Child("resources", "requests", "storage"), "field can not be less than status.capacity"))
	}
	// Upstream reports this one at a path without "spec".
	errs = append(errs, validateImmutable(pvc.Spec.VolumeMode, old.Spec.VolumeMode, field.NewPath("volumeMode"))...)
	if old.Spec.VolumeAttributesClassName != nil {
		switch c := pvc.Spec.VolumeAttributesClassName; {
		case c == nil:
			errs = append(errs, field.Forbidden(specPath.Child("volumeAttributesClassName"), "update from non-nil value to nil is forbidden"))
		case *c == "":
			errs = append(errs, field.Forbidden(specPath.Child("volumeAttributesClassName"), "update from non-nil value to an empty string is forbidden"))
		}
	}
	return errs
}

var resizeStatuses = []corev1.ClaimResourceStatus{
	corev1.PersistentVolumeClaimControllerResizeInProgress,
	corev1.PersistentVolumeClaimControllerResizeInfeasible,
	corev1.PersistentVolumeClaimNodeResizePending,
	corev1.PersistentVolumeClaimNodeResizeInProgress,
	corev1.PersistentVolumeClaimNodeResizeInfeasible,
}

// validatePersistentVolumeClaimStatusUpdate checks a claim's status:
// capacities and allocated resources are quantities of storage (or of
// a qualified, non-native name) and resize statuses are known ones.
func validatePersistentVolumeClaimStatusUpdate(pvc, old *corev1.PersistentVolumeClaim) field.ErrorList {
	errs := validateObjectMetaUpdate(&pvc.ObjectMeta, &old.ObjectMeta)
	if len(pvc.Spec.AccessModes) == 0 {
		// Upstream's path, capital S included.
		errs = append(errs, field.Required(field.NewPath("Spec", "accessModes"), ""))
	}
	s := &pvc.Status
	capPath := statusPath.Child("capacity")
	for _, name := range sortedResourceNames(s.Capacity) {
		errs = append(errs, validateQuantity(name, s.Capacity[name], capPath.Key(string(name)))...)
	}
	resizePath := statusPath.Child("allocatedResourceStatuses")
	resized := slices.Sorted(maps.Keys(s.AllocatedResourceStatuses))
	for _, name := range resized {
		errs = append(errs, validateClaimResourceKey(string(name), resizePath)...)
		if st := s.AllocatedResourceStatuses[name]; !slices.Contains(resizeStatuses, st) {
			errs = append(errs, field.NotSupported(resizePath, st, resizeStatuses))
		}
	}
	allocPath := statusPath.Child("allocatedResources")
	for _, name := range sortedResourceNames(s.AllocatedResources) {
		if e := validateClaimResourceKey(string(name), allocPath); len(e) > 0 {
			errs = append(errs, e...)
			continue
		}
		errs = append(errs, validateQuantity(corev1.ResourceStorage, s.AllocatedResources[name], allocPath.Key(string(name)))...)
	}
	return errs
}

// validateClaimResourceKey checks a resource name in a claim's status: a
// qualified name, and storage if native.
func validateClaimResourceKey(name string, fldPath *field.Path) field.ErrorList {
	if errs := validateQualifiedName(name, fldPath); len(errs) > 0 {
		return errs
	}
	if isNativeResource(corev1.ResourceName(name)) && name != string(corev1.ResourceStorage) {
		return field.ErrorList{field.NotSupported(fldPath, name, []corev1.ResourceName{corev1.ResourceStorage})}
	}
	return nil
}

func persistentVolumeClaimColumns() []metav1.TableColumnDefinition {
	spec := corev1.PersistentVolumeClaimSpec{}.SwaggerDoc()
	status := corev1.PersistentVolumeClaimStatus{}.SwaggerDoc()
	return []metav1.TableColumnDefinition{
		nameColumn,
		{Name: "Status", Type: "string", Description: status["phase"]},
		{Name: "Volume", Type: "string", Description: spec["volumeName"]},
		{Name: "Capacity", Type: "string", Description: status["capacity"]},
		{Name: "Access Modes", Type: "string", Description: status["accessModes"]},
		{Name: "StorageClass", Type: "string", Description: "StorageClass of the pvc"},
		{Name: "VolumeAttributesClass", Type: "string", Description: "VolumeAttributesClass of the pvc"},
		ageColumn,
		{Name: "VolumeMode", Type: "string", Priority: 1, Description: spec["volumeMode"]},
	}
}

// persistentVolumeClaimRow shows capacity and access modes only for a
// claim bound to a volume, as upstream's printer does.
func persistentVolumeClaimRow(pvc *corev1.PersistentVolumeClaim, now time.Time) []interface{} {
	phase := string(pvc.Status.Phase)
	if pvc.DeletionTimestamp != nil {
		phase = "Terminating"
	}
	var capacity, modes string
	if pvc.Spec.VolumeName != "" {
		modes = accessModesCell(pvc.Status.AccessModes)
		q := pvc.Status.Capacity[corev1.ResourceStorage]
		capacity = q.String()
	}
	var class string
	if c, ok := pvc.Annotations[corev1.BetaStorageClassAnnotation]; ok {
		class = c
	} else if pvc.Spec.StorageClassName != nil {
		class = *pvc.Spec.StorageClassName
	}
	return []interface{}{
		pvc.Name,
		phase,
		pvc.Spec.VolumeName,
		capacity,
		modes,
		class,
		orUnset(pvc.Spec.VolumeAttributesClassName),
		age(pvc.CreationTimestamp, now),
		orUnset((*string)(pvc.Spec.VolumeMode)),
	}
}
