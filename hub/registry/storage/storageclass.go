package storage

import (
	"reflect"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/validate/content"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/outpost-mesh/outpost/hub/registry/typed"
)

// The annotations that make a class the default one, as upstream reads
// them: the GA key or, for older clients, the beta one.
const (
	DefaultClassAnnotation     = "storageclass.kubernetes.io/is-default-class"
	betaDefaultClassAnnotation = "storageclass.beta.kubernetes.io/is-default-class"
)

// Limits of a class's parameters, as upstream's.
const (
	maxParameterSize  = 256 * (1 << 10)
	maxParameterCount = 512
)

var (
	provisionerPath       = field.NewPath("provisioner")
	parametersPath        = field.NewPath("parameters")
	reclaimPolicyPath     = field.NewPath("reclaimPolicy")
	volumeBindingModePath = field.NewPath("volumeBindingMode")
)

func storageClassRules(now func() time.Time) *typed.Rules[*storagev1.StorageClass] {
	return &typed.Rules[*storagev1.StorageClass]{
		Now:          now,
		Defaults:     defaultStorageClass,
		Check:        validateStorageClass,
		CheckUpdate:  validateStorageClassUpdate,
		TableColumns: storageClassColumns(),
		TableRow:     storageClassRow,
	}
}

// defaultStorageClass applies upstream's v1 defaults: reclaim policy
// Delete, binding mode Immediate.
func defaultStorageClass(sc *storagev1.StorageClass) {
	if sc.ReclaimPolicy == nil {
		sc.ReclaimPolicy = new(corev1.PersistentVolumeReclaimDelete)
	}
	if sc.VolumeBindingMode == nil {
		sc.VolumeBindingMode = new(storagev1.VolumeBindingImmediate)
	}
}

var (
	supportedClassReclaimPolicies = []corev1.PersistentVolumeReclaimPolicy{corev1.PersistentVolumeReclaimDelete, corev1.PersistentVolumeReclaimRetain}
	supportedBindingModes         = []storagev1.VolumeBindingMode{storagev1.VolumeBindingImmediate, storagev1.VolumeBindingWaitForFirstConsumer}
)

func validateStorageClass(sc *storagev1.StorageClass) field.ErrorList {
	errs := apivalidation.ValidateObjectMeta(&sc.ObjectMeta, false, apivalidation.NameIsDNSSubdomain, metadataPath)
	errs = append(errs, validateProvisioner(sc.Provisioner, provisionerPath)...)
	errs = append(errs, validateParameters(sc.Parameters, parametersPath)...)
	if p := sc.ReclaimPolicy; p != nil && *p != "" && !slices.Contains(supportedClassReclaimPolicies, *p) {
		errs = append(errs, field.NotSupported(reclaimPolicyPath, *p, supportedClassReclaimPolicies))
	}
	switch m := sc.VolumeBindingMode; {
	case m == nil:
		errs = append(errs, field.Required(volumeBindingModePath, ""))
	case !slices.Contains(supportedBindingModes, *m):
		errs = append(errs, field.NotSupported(volumeBindingModePath, *m, supportedBindingModes))
	}
	return append(errs, validateAllowedTopologies(sc.AllowedTopologies, field.NewPath("allowedTopologies"))...)
}

// validateStorageClassUpdate checks an update of class old to sc: what a
// class provisions with (provisioner, parameters, reclaim policy, binding
// mode) may not change, since volumes were made by it.
func validateStorageClassUpdate(sc, old *storagev1.StorageClass) field.ErrorList {
	errs := apivalidation.ValidateObjectMetaUpdate(&sc.ObjectMeta, &old.ObjectMeta, metadataPath)
	errs = append(errs, validateStorageClass(sc)...)
	if !reflect.DeepEqual(old.Parameters, sc.Parameters) {
		errs = append(errs, field.Forbidden(parametersPath, "updates to parameters are forbidden."))
	}
	if sc.Provisioner != old.Provisioner {
		errs = append(errs, field.Forbidden(provisionerPath, "updates to provisioner are forbidden."))
	}
	if !apiequality.Semantic.DeepEqual(sc.ReclaimPolicy, old.ReclaimPolicy) {
		errs = append(errs, field.Forbidden(reclaimPolicyPath, "updates to reclaimPolicy are forbidden."))
	}
	return append(errs, apivalidation.ValidateImmutableField(sc.VolumeBindingMode, old.VolumeBindingMode, volumeBindingModePath)...)
}

// validateProvisioner checks a provisioner's name: required, and a
// qualified name once lowercased.
func validateProvisioner(p string, fld *field.Path) field.ErrorList {
	if p == "" {
		return field.ErrorList{field.Required(fld, p)}
	}
	return qualifiedName(strings.ToLower(p), fld)
}

func qualifiedName(v string, fld *field.Path) field.ErrorList {
	var errs field.ErrorList
	for _, msg := range content.IsQualifiedName(v) {
		errs = append(errs, field.Invalid(fld, v, msg))
	}
	return errs
}

// validateParameters checks a class's parameters: no empty key, at most
// 512 of them and 256 KiB in all.
func validateParameters(params map[string]string, fld *field.Path) field.ErrorList {
	if len(params) > maxParameterCount {
		return field.ErrorList{field.TooLong(fld, "", maxParameterCount)}
	}
	var errs field.ErrorList
	size := 0
	for k, v := range params {
		if k == "" {
			errs = append(errs, field.Invalid(fld, k, "field can not be empty."))
		}
		size += len(k) + len(v)
	}
	if size > maxParameterSize {
		errs = append(errs, field.TooLong(fld, "", maxParameterSize))
	}
	return errs
}

// validateAllowedTopologies checks a class's topology terms: label keys
// with at least one value each, no key or value twice in a term, and no
// term twice.
func validateAllowedTopologies(terms []corev1.TopologySelectorTerm, fld *field.Path) field.ErrorList {
	var errs field.ErrorList
	var seen []map[string]sets.Set[string]
	for i, term := range terms {
		p := fld.Index(i).Child("matchLabelExpressions")
		exprs := map[string]sets.Set[string]{}
		for j, req := range term.MatchLabelExpressions {
			rp := p.Index(j)
			values := sets.New[string]()
			if len(req.Values) == 0 {
				errs = append(errs, field.Required(rp.Child("values"), ""))
			}
			for k, v := range req.Values {
				if values.Has(v) {
					errs = append(errs, field.Duplicate(rp.Child("values").Index(k), v))
				}
				values.Insert(v)
			}
			errs = append(errs, metav1validation.ValidateLabelName(req.Key, rp.Child("key"))...)
			if _, dup := exprs[req.Key]; dup {
				errs = append(errs, field.Duplicate(rp.Child("key"), req.Key))
			}
			exprs[req.Key] = values
		}
		for _, s := range seen {
			if reflect.DeepEqual(s, exprs) {
				errs = append(errs, field.Duplicate(p, ""))
			}
		}
		seen = append(seen, exprs)
	}
	return errs
}

func storageClassColumns() []metav1.TableColumnDefinition {
	doc := storagev1.StorageClass{}.SwaggerDoc()
	return []metav1.TableColumnDefinition{
		typed.NameColumn,
		{Name: "Provisioner", Type: "string", Description: doc["provisioner"]},
		{Name: "ReclaimPolicy", Type: "string", Description: doc["reclaimPolicy"]},
		{Name: "VolumeBindingMode", Type: "string", Description: doc["volumeBindingMode"]},
		{Name: "AllowVolumeExpansion", Type: "string", Description: doc["allowVolumeExpansion"]},
		typed.AgeColumn,
	}
}

// IsDefaultClass reports whether sc is marked as the default class, by
// either annotation.
func IsDefaultClass(sc *storagev1.StorageClass) bool {
	return sc.Annotations[DefaultClassAnnotation] == "true" || sc.Annotations[betaDefaultClassAnnotation] == "true"
}

func storageClassRow(sc *storagev1.StorageClass, now time.Time) []interface{} {
	name := sc.Name
	if IsDefaultClass(sc) {
		name += " (default)"
	}
	policy := string(corev1.PersistentVolumeReclaimDelete)
	if sc.ReclaimPolicy != nil {
		policy = string(*sc.ReclaimPolicy)
	}
	mode := string(storagev1.VolumeBindingImmediate)
	if sc.VolumeBindingMode != nil {
		mode = string(*sc.VolumeBindingMode)
	}
	expand := sc.AllowVolumeExpansion != nil && *sc.AllowVolumeExpansion
	return []interface{}{name, sc.Provisioner, policy, mode, expand, typed.Age(now, sc.CreationTimestamp)}
}
