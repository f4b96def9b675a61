package core

// Persistent volumes: the rules of the resource, and the checks of a
// volume spec that volume attachments (storage.k8s.io) share.

import (
	"path"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	apimachineryvalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/outpost-mesh/outpost/hub/apiserver"
	"github.com/outpost-mesh/outpost/hub/registry/typed"
)

func persistentVolumeResource(now func() time.Time) apiserver.Resource {
	return apiserver.Resource{
		GroupVersion: corev1.SchemeGroupVersion,
		Kind:         "PersistentVolume",
		Plural:       "persistentvolumes",
		Singular:     "persistentvolume",
		ShortNames:   []string{"pv"},
		New:          func() runtime.Object { return &corev1.PersistentVolume{} },
		NewList:      func() runtime.Object { return &corev1.PersistentVolumeList{} },
		AddToScheme:  corev1.AddToScheme,
		Status:       true,
		Rules: &typed.Rules[*corev1.PersistentVolume]{
			Now:      now,
			Defaults: defaultPersistentVolume,
			// A new volume is Pending since now, as upstream's strategy
			// makes it.
			PrepareCreate: func(pv *corev1.PersistentVolume) {
				at := metav1.NewTime(now().Truncate(time.Second))
				pv.Status = corev1.PersistentVolumeStatus{Phase: corev1.VolumePending, LastPhaseTransitionTime: &at}
			},
			PrepareUpdate: func(pv, old *corev1.PersistentVolume) { pv.Status = old.Status },
			Check:         validatePersistentVolume,
			CheckUpdate:   validatePersistentVolumeUpdate,
			CheckStatus: func(pv, old *corev1.PersistentVolume) field.ErrorList {
				return validateObjectMetaUpdate(&pv.ObjectMeta, &old.ObjectMeta)
			},
			// Upstream selects volumes by name, a field it keeps "for
			// backward compatibility".
			FieldSet:     func(pv *corev1.PersistentVolume) fields.Set { return fields.Set{"name": pv.Name} },
			TableColumns: persistentVolumeColumns(),
			TableRow:     persistentVolumeRow,
		},
	}
}

// defaultPersistentVolume applies upstream's v1 defaults: reclaim policy
// Retain, volume mode Filesystem, phase Pending, a hostPath's type, and
// capacities rounded to milli precision. (Upstream also defaults fields
// of the iSCSI, RBD, Azure disk and ScaleIO sources; the hub leaves them
// as given, as it does for pods' volumes.)
func defaultPersistentVolume(pv *corev1.PersistentVolume) {
	s := &pv.Spec
	if s.PersistentVolumeReclaimPolicy == "" {
		s.PersistentVolumeReclaimPolicy = corev1.PersistentVolumeReclaimRetain
	}
	if s.VolumeMode == nil {
		s.VolumeMode = ptrTo(corev1.PersistentVolumeFilesystem)
	}
	if s.HostPath != nil && s.HostPath.Type == nil {
		s.HostPath.Type = ptrTo(corev1.HostPathUnset)
	}
	roundResources(s.Capacity)
	if pv.Status.Phase == "" {
		pv.Status.Phase = corev1.VolumePending
	}
}

func validatePersistentVolume(pv *corev1.PersistentVolume) field.ErrorList {
	errs := validateObjectMeta(&pv.ObjectMeta, false, apimachineryvalidation.NameIsDNSSubdomain)
	return append(errs, validatePersistentVolumeSpec(&pv.Spec, false, specPath)...)
}

// ValidateInlineVolumeSpec checks the spec of a persistent volume inlined
// in another object at fldPath (a VolumeAttachment's
// spec.source.inlineVolumeSpec), as upstream checks one: a CSI volume
// without capacity, claim, node affinity or class.
func ValidateInlineVolumeSpec(spec *corev1.PersistentVolumeSpec, fldPath *field.Path) field.ErrorList {
	return validatePersistentVolumeSpec(spec, true, fldPath)
}

var (
	supportedAccessModes = []corev1.PersistentVolumeAccessMode{
		corev1.ReadOnlyMany, corev1.ReadWriteMany, corev1.ReadWriteOnce, corev1.ReadWriteOncePod,
	}
	supportedReclaimPolicies = []corev1.PersistentVolumeReclaimPolicy{
		corev1.PersistentVolumeReclaimDelete, corev1.PersistentVolumeReclaimRecycle, corev1.PersistentVolumeReclaimRetain,
	}
	supportedVolumeModes = []corev1.PersistentVolumeMode{corev1.PersistentVolumeBlock, corev1.PersistentVolumeFilesystem}
)

const inlineForbidden = "may not be specified in the context of inline volumes"

// validatePersistentVolumeSpec checks a volume's spec at fldPath, as
// upstream's ValidatePersistentVolumeSpec; inline marks a spec inlined in
// another object.
func validatePersistentVolumeSpec(s *corev1.PersistentVolumeSpec, inline bool, fldPath *field.Path) field.ErrorList {
	var errs field.ErrorList
	if inline {
		if s.ClaimRef != nil {
			errs = append(errs, field.Forbidden(fldPath.Child("claimRef"), inlineForbidden))
		}
		if len(s.Capacity) != 0 {
			errs = append(errs, field.Forbidden(fldPath.Child("capacity"), inlineForbidden))
		}
		if s.CSI == nil {
			errs = append(errs, field.Required(fldPath.Child("csi"), "has to be specified in the context of inline volumes"))
		}
	}
	errs = append(errs, validateAccessModes(s.AccessModes, "", fldPath.Child("accessModes"))...)
	if !inline {
		errs = append(errs, validateCapacity(s.Capacity, fldPath.Child("capacity"))...)
	}
	if p := s.PersistentVolumeReclaimPolicy; p != "" {
		switch {
		case inline && p != corev1.PersistentVolumeReclaimRetain:
			errs = append(errs, field.Forbidden(fldPath.Child("persistentVolumeReclaimPolicy"), "may only be "+string(corev1.PersistentVolumeReclaimRetain)+" in the context of inline volumes"))
		case !inline && !slices.Contains(supportedReclaimPolicies, p):
			errs = append(errs, field.NotSupported(fldPath.Child("persistentVolumeReclaimPolicy"), p, supportedReclaimPolicies))
		}
	}
	affinity := false
	if s.NodeAffinity != nil {
		if inline {
			errs = append(errs, field.Forbidden(fldPath.Child("nodeAffinity"), inlineForbidden))
		} else {
			affinity = true
			errs = append(errs, validateVolumeNodeAffinity(s.NodeAffinity, fldPath.Child("nodeAffinity"))...)
		}
	}
	errs = append(errs, validatePersistentVolumeSource(&s.PersistentVolumeSource, affinity, fldPath)...)
	if s.HostPath != nil && path.Clean(s.HostPath.Path) == "/" && s.PersistentVolumeReclaimPolicy == corev1.PersistentVolumeReclaimRecycle {
		errs = append(errs, field.Forbidden(fldPath.Child("persistentVolumeReclaimPolicy"), "may not be 'recycle' for a hostPath mount of '/'"))
	}
	if s.StorageClassName != "" {
		if inline {
			errs = append(errs, field.Forbidden(fldPath.Child("storageClassName"), inlineForbidden))
		} else {
			errs = append(errs, validateName(s.StorageClassName, apimachineryvalidation.NameIsDNSSubdomain, fldPath.Child("storageClassName"))...)
		}
	}
	if m := s.VolumeMode; m != nil {
		switch {
		case inline && *m != corev1.PersistentVolumeFilesystem:
			errs = append(errs, field.Forbidden(fldPath.Child("volumeMode"), "may not specify volumeMode other than "+string(corev1.PersistentVolumeFilesystem)+" in the context of inline volumes"))
		case !inline && !slices.Contains(supportedVolumeModes, *m):
			errs = append(errs, field.NotSupported(fldPath.Child("volumeMode"), *m, supportedVolumeModes))
		}
	}
	if c := s.VolumeAttributesClassName; c != nil {
		if *c == "" {
			errs = append(errs, field.Required(fldPath.Child("volumeAttributesClassName"), "an empty string is disallowed"))
		} else {
			errs = append(errs, validateName(*c, apimachineryvalidation.NameIsDNSSubdomain, fldPath.Child("volumeAttributesClassName"))...)
		}
		if s.CSI == nil {
			errs = append(errs, field.Required(fldPath.Child("csi"), "has to be specified when using volumeAttributesClassName"))
		}
	}
	return errs
}

// validateAccessModes checks the access modes of a volume or claim at
// fldPath; required is the message when there are none.
func validateAccessModes(modes []corev1.PersistentVolumeAccessMode, required string, fldPath *field.Path) field.ErrorList {
	if len(modes) == 0 {
		return field.ErrorList{field.Required(fldPath, required)}
	}
	var errs field.ErrorList
	once, others := false, false
	for _, m := range modes {
		switch {
		case !slices.Contains(supportedAccessModes, m):
			errs = append(errs, field.NotSupported(fldPath, m, supportedAccessModes))
		case m == corev1.ReadWriteOncePod:
			once = true
		default:
			others = true
		}
	}
	if once && others {
		errs = append(errs, field.Forbidden(fldPath, "may not use ReadWriteOncePod with other access modes"))
	}
	return errs
}

// validateCapacity checks a volume's capacity: storage, alone, and more
// than zero.
func validateCapacity(capacity corev1.ResourceList, fldPath *field.Path) field.ErrorList {
	var errs field.ErrorList
	if len(capacity) == 0 {
		errs = append(errs, field.Required(fldPath, ""))
	}
	if _, ok := capacity[corev1.ResourceStorage]; !ok || len(capacity) > 1 {
		errs = append(errs, field.NotSupported(fldPath, capacity, []corev1.ResourceName{corev1.ResourceStorage}))
	}
	for _, name := range sortedResourceNames(capacity) {
		errs = append(errs, validatePositiveQuantity(capacity[name], fldPath.Key(string(name)))...)
	}
	return errs
}

// validatePositiveQuantity checks that q is more than zero.
func validatePositiveQuantity(q resource.Quantity, fldPath *field.Path) field.ErrorList {
	if q.Sign() <= 0 {
		return field.ErrorList{field.Invalid(fldPath, q.String(), "must be greater than zero")}
	}
	return nil
}

// validatePersistentVolumeSource checks that s has exactly one source
// and checks it; a local volume needs node affinity (affinity).
func validatePersistentVolumeSource(s *corev1.PersistentVolumeSource, affinity bool, fldPath *field.Path) field.ErrorList {
	// The sources in upstream's order; those without a check here are
	// counted, so that two sources in one volume are still refused.
	sources := []volumeSource{
		{"hostPath", s.HostPath != nil, func(p *field.Path) field.ErrorList { return validateHostPathVolume(s.HostPath, p) }},
		{"gcePersistentDisk", s.GCEPersistentDisk != nil, nil},
		{"awsElasticBlockStore", s.AWSElasticBlockStore != nil, nil},
		{"glusterfs", s.Glusterfs != nil, nil},
		{"flocker", s.Flocker != nil, nil},
		{"nfs", s.NFS != nil, func(p *field.Path) field.ErrorList { return validateNFSVolume(s.NFS, p) }},
		{"rbd", s.RBD != nil, nil},
		{"quobyte", s.Quobyte != nil, nil},
		{"cephFS", s.CephFS != nil, nil},
		{"iscsi", s.ISCSI != nil, nil},
		{"cinder", s.Cinder != nil, nil},
		{"fc", s.FC != nil, nil},
		{"flexVolume", s.FlexVolume != nil, nil},
		{"azureFile", s.AzureFile != nil, nil},
		{"vsphereVolume", s.VsphereVolume != nil, nil},
		{"photonPersistentDisk", s.PhotonPersistentDisk != nil, nil},
		{"portworxVolume", s.PortworxVolume != nil, nil},
		{"azureDisk", s.AzureDisk != nil, nil},
		{"scaleIO", s.ScaleIO != nil, nil},
		{"local", s.Local != nil, func(p *field.Path) field.ErrorList {
			var errs field.ErrorList
			if s.Local.Path == "" {
				errs = append(errs, field.Required(p.Child("path"), ""))
			} else {
				errs = append(errs, validatePathNoBacksteps(s.Local.Path, p.Child("path"))...)
			}
			if !affinity {
				errs = append(errs, field.Required(fldPath.Child("nodeAffinity"), "Local volume requires node affinity"))
			}
			return errs
		}},
		{"storageos", s.StorageOS != nil, nil},
		{"csi", s.CSI != nil, func(p *field.Path) field.ErrorList { return validateCSIPersistentVolume(s.CSI, p) }},
	}
	return oneVolumeSource(sources, fldPath)
}

func validateCSIPersistentVolume(csi *corev1.CSIPersistentVolumeSource, fldPath *field.Path) field.ErrorList {
	errs := ValidateCSIDriverName(csi.Driver, fldPath.Child("driver"))
	if csi.VolumeHandle == "" {
		errs = append(errs, field.Required(fldPath.Child("volumeHandle"), ""))
	}
	for _, ref := range []struct {
		name string
		ref  *corev1.SecretReference
	}{
		{"controllerPublishSecretRef", csi.ControllerPublishSecretRef},
		{"controllerExpandSecretRef", csi.ControllerExpandSecretRef},
		{"nodePublishSecretRef", csi.NodePublishSecretRef},
		{"nodeExpandSecretRef", csi.NodeExpandSecretRef},
		{"nodeStageSecretRef", csi.NodeStageSecretRef},
	} {
		if ref.ref != nil {
			errs = append(errs, validateSecretReference(ref.ref, fldPath.Child(ref.name))...)
		}
	}
	return errs
}

// validateSecretReference checks a reference to a secret in a namespace.
func validateSecretReference(ref *corev1.SecretReference, fldPath *field.Path) field.ErrorList {
	var errs field.ErrorList
	if ref.Name == "" {
		errs = append(errs, field.Required(fldPath.Child("name"), ""))
	} else {
		errs = append(errs, validateDNS1123Subdomain(ref.Name, fldPath.Child("name"))...)
	}
	if ref.Namespace == "" {
		errs = append(errs, field.Required(fldPath.Child("namespace"), ""))
	} else {
		errs = append(errs, validateDNS1123Label(ref.Namespace, fldPath.Child("namespace"))...)
	}
	return errs
}

func validateVolumeNodeAffinity(a *corev1.VolumeNodeAffinity, fldPath *field.Path) field.ErrorList {
	if a.Required == nil {
		return field.ErrorList{field.Required(fldPath.Child("required"), "must specify required node constraints")}
	}
	return validateNodeSelector(a.Required, fldPath.Child("required"))
}

// validateNodeSelector checks a node selector as upstream's
// ValidateNodeSelector: at least one term, each requirement with an
// operator that fits its values.
func validateNodeSelector(s *corev1.NodeSelector, fldPath *field.Path) field.ErrorList {
	termsPath := fldPath.Child("nodeSelectorTerms")
	if len(s.NodeSelectorTerms) == 0 {
		return field.ErrorList{field.Required(termsPath, "must have at least one node selector term")}
	}
	var errs field.ErrorList
	for i, term := range s.NodeSelectorTerms {
		p := termsPath.Index(i)
		for j, req := range term.MatchExpressions {
			errs = append(errs, validateNodeSelectorRequirement(req, p.Child("matchExpressions").Index(j))...)
		}
		for j, req := range term.MatchFields {
			errs = append(errs, validateNodeFieldSelectorRequirement(req, p.Child("matchFields").Index(j))...)
		}
	}
	return errs
}

func validateNodeSelectorRequirement(req corev1.NodeSelectorRequirement, fldPath *field.Path) field.ErrorList {
	var errs field.ErrorList
	switch req.Operator {
	case corev1.NodeSelectorOpIn, corev1.NodeSelectorOpNotIn:
		if len(req.Values) == 0 {
			errs = append(errs, field.Required(fldPath.Child("values"), "must be specified when `operator` is 'In' or 'NotIn'"))
		}
	case corev1.NodeSelectorOpExists, corev1.NodeSelectorOpDoesNotExist:
		if len(req.Values) > 0 {
			errs = append(errs, field.Forbidden(fldPath.Child("values"), "may not be specified when `operator` is 'Exists' or 'DoesNotExist'"))
		}
	case corev1.NodeSelectorOpGt, corev1.NodeSelectorOpLt:
		if len(req.Values) != 1 {
			errs = append(errs, field.Required(fldPath.Child("values"), "must be specified single value when `operator` is 'Lt' or 'Gt'"))
		}
	default:
		errs = append(errs, field.Invalid(fldPath.Child("operator"), req.Operator, "not a valid selector operator"))
	}
	return append(errs, metav1validation.ValidateLabelName(req.Key, fldPath.Child("key"))...)
}

// validateNodeFieldSelectorRequirement checks a requirement on a node's
// fields, of which upstream knows one: metadata.name.
func validateNodeFieldSelectorRequirement(req corev1.NodeSelectorRequirement, fldPath *field.Path) field.ErrorList {
	var errs field.ErrorList
	switch req.Operator {
	case corev1.NodeSelectorOpIn, corev1.NodeSelectorOpNotIn:
		if len(req.Values) != 1 {
			errs = append(errs, field.Required(fldPath.Child("values"), "must be only one value when `operator` is 'In' or 'NotIn' for node field selector"))
		}
	default:
		errs = append(errs, field.Invalid(fldPath.Child("operator"), req.Operator, "not a valid selector operator"))
	}
	if req.Key != "metadata.name" {
		return append(errs, field.Invalid(fldPath.Child("key"), req.Key, "not a valid field selector key"))
	}
	for i, v := range req.Values {
		errs = append(errs, validateName(v, apimachineryvalidation.NameIsDNSSubdomain, fldPath.Child("values").Index(i))...)
	}
	return errs
}

// validatePersistentVolumeUpdate checks an update of volume old to pv:
// its source, volume mode and node affinity, once set, are immutable,
// except that a CSI volume may gain a controllerExpandSecretRef, and a
// volume attributes class may not be unset.
func validatePersistentVolumeUpdate(pv, old *corev1.PersistentVolume) field.ErrorList {
	errs := validateObjectMetaUpdate(&pv.ObjectMeta, &old.ObjectMeta)
	errs = append(errs, validatePersistentVolumeSpec(&pv.Spec, false, specPath)...)
	src := pv.Spec.PersistentVolumeSource
	if old.Spec.CSI != nil && old.Spec.CSI.ControllerExpandSecretRef == nil && src.CSI != nil && src.CSI.ControllerExpandSecretRef != nil {
		csi := *src.CSI
		csi.ControllerExpandSecretRef = nil
		src.CSI = &csi
	}
	if !apiequality.Semantic.DeepEqual(src, old.Spec.PersistentVolumeSource) {
		errs = append(errs, field.Forbidden(specPath.Child("persistentvolumesource"), "spec.persistentvolumesource is immutable after creation"))
	}
	// Upstream reports these two at paths without "spec".
	errs = append(errs, validateImmutable(pv.Spec.VolumeMode, old.Spec.VolumeMode, field.NewPath("volumeMode"))...)
	if old.Spec.NodeAffinity != nil {
		errs = append(errs, validateImmutable(pv.Spec.NodeAffinity, old.Spec.NodeAffinity, field.NewPath("nodeAffinity"))...)
	}
	if old.Spec.VolumeAttributesClassName != nil && pv.Spec.VolumeAttributesClassName == nil {
		errs = append(errs, field.Forbidden(specPath.Child("volumeAttributesClassName"), "update from non-nil value to nil is forbidden"))
	}
	return errs
}

func persistentVolumeColumns() []metav1.TableColumnDefinition {
	spec := corev1.PersistentVolumeSpec{}.SwaggerDoc()
	status := corev1.PersistentVolumeStatus{}.SwaggerDoc()
	return []metav1.TableColumnDefinition{
		nameColumn,
		{Name: "Capacity", Type: "string", Description: spec["capacity"]},
		{Name: "Access Modes", Type: "string", Description: spec["accessModes"]},
		{Name: "Reclaim Policy", Type: "string", Description: spec["persistentVolumeReclaimPolicy"]},
		{Name: "Status", Type: "string", Description: status["phase"]},
		{Name: "Claim", Type: "string", Description: spec["claimRef"]},
		{Name: "StorageClass", Type: "string", Description: "StorageClass of the pv"},
		{Name: "VolumeAttributesClass", Type: "string", Description: "VolumeAttributesClass of the pv"},
		{Name: "Reason", Type: "string", Description: status["reason"]},
		ageColumn,
		{Name: "VolumeMode", Type: "string", Priority: 1, Description: spec["volumeMode"]},
	}
}

func persistentVolumeRow(pv *corev1.PersistentVolume, now time.Time) []interface{} {
	var claim string
	if r := pv.Spec.ClaimRef; r != nil {
		claim = r.Namespace + "/" + r.Name
	}
	size := pv.Spec.Capacity[corev1.ResourceStorage]
	phase := string(pv.Status.Phase)
	if pv.DeletionTimestamp != nil {
		phase = "Terminating"
	}
	class := pv.Spec.StorageClassName
	if c, ok := pv.Annotations[corev1.BetaStorageClassAnnotation]; ok {
		class = c
	}
	return []interface{}{
		pv.Name,
		size.String(),
		accessModesCell(pv.Spec.AccessModes),
		string(pv.Spec.PersistentVolumeReclaimPolicy),
		phase,
		claim,
		class,
		orUnset(pv.Spec.VolumeAttributesClassName),
		pv.Status.Reason,
		age(pv.CreationTimestamp, now),
		orUnset((*string)(pv.Spec.VolumeMode)),
	}
}

// accessModesCell is access modes as kubectl shows them: abbreviated, in
// a fixed order, without repeats.
func accessModesCell(modes []corev1.PersistentVolumeAccessMode) string {
	var out []string
	for _, m := range []struct {
		mode  corev1.PersistentVolumeAccessMode
		short string
	}{
		{corev1.ReadWriteOnce, "RWO"}, {corev1.ReadOnlyMany, "ROX"}, {corev1.ReadWriteMany, "RWX"}, {corev1.ReadWriteOncePod, "RWOP"},
	} {
		if slices.Contains(modes, m.mode) {
			out = append(out, m.short)
		}
	}
	return strings.Join(out, ",")
}

// orUnset is *s, or "<unset>" for nil.
func orUnset(s *string) string {
	if s == nil {
		return "<unset>"
	}
	return *s
}
