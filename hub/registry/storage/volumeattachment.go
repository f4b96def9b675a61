package storage

import (
	"math"
	"time"

	storagev1 "k8s.io/api/storage/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/outpost-mesh/outpost/hub/registry/core"
	"github.com/outpost-mesh/outpost/hub/registry/typed"
)

// Limits of an attachment's status, as upstream's.
const (
	maxAttachmentMetadataSize = 256 * (1 << 10)
	maxVolumeErrorMessageSize = 1024
)

func volumeAttachmentRules(now func() time.Time) *typed.Rules[*storagev1.VolumeAttachment] {
	return &typed.Rules[*storagev1.VolumeAttachment]{
		Now:           now,
		PrepareCreate: func(va *storagev1.VolumeAttachment) { va.Status = storagev1.VolumeAttachmentStatus{} },
		PrepareUpdate: func(va, old *storagev1.VolumeAttachment) { va.Status = old.Status },
		Check:         validateVolumeAttachment,
		CheckUpdate:   validateVolumeAttachmentUpdate,
		CheckStatus:   validateVolumeAttachmentUpdate,
		TableColumns:  volumeAttachmentColumns(),
		TableRow:      volumeAttachmentRow,
	}
}

func validateVolumeAttachment(va *storagev1.VolumeAttachment) field.ErrorList {
	errs := apivalidation.ValidateObjectMeta(&va.ObjectMeta, false, apivalidation.NameIsDNSSubdomain, metadataPath)
	s := &va.Spec
	errs = append(errs, core.ValidateCSIDriverName(s.Attacher, specPath.Child("attacher"))...)
	src := specPath.Child("source")
	switch pv, inline := s.Source.PersistentVolumeName, s.Source.InlineVolumeSpec; {
	case pv == nil && inline == nil:
		errs = append(errs, field.Required(src, "must specify exactly one of inlineVolumeSpec and persistentVolumeName"))
	case pv != nil && inline != nil:
		errs = append(errs, field.Forbidden(src, "must specify exactly one of inlineVolumeSpec and persistentVolumeName"))
	case pv != nil && *pv == "":
		errs = append(errs, field.Required(src.Child("persistentVolumeName"), "must specify non empty persistentVolumeName"))
	case pv != nil:
		for _, msg := range apivalidation.NameIsDNSSubdomain(*pv, false) {
			errs = append(errs, field.Invalid(src.Child("persistentVolumeName"), *pv, msg))
		}
	default:
		errs = append(errs, core.ValidateInlineVolumeSpec(inline, src.Child("inlineVolumeSpec"))...)
	}
	for _, msg := range apivalidation.NameIsDNSSubdomain(s.NodeName, false) {
		errs = append(errs, field.Invalid(specPath.Child("nodeName"), s.NodeName, msg))
	}
	return append(errs, validateAttachmentStatus(&va.Status)...)
}

func validateAttachmentStatus(s *storagev1.VolumeAttachmentStatus) field.ErrorList {
	var errs field.ErrorList
	size := 0
	for k, v := range s.AttachmentMetadata {
		size += len(k) + len(v)
	}
	if size > maxAttachmentMetadataSize {
		errs = append(errs, field.TooLong(statusPath.Child("attachmentMetadata"), "", maxAttachmentMetadataSize))
	}
	for _, ve := range []struct {
		name string
		err  *storagev1.VolumeError
	}{{"attachError", s.AttachError}, {"detachError", s.DetachError}} {
		e := ve.err
		if e == nil {
			continue
		}
		p := statusPath.Child(ve.name)
		if len(e.Message) > maxVolumeErrorMessageSize {
			errs = append(errs, field.TooLong(p.Child("message"), "", maxVolumeErrorMessageSize))
		}
		if e.ErrorCode != nil && *e.ErrorCode < 0 {
			errs = append(errs, field.Invalid(p.Child("errorCode"), *e.ErrorCode, validation.InclusiveRangeError(0, math.MaxInt32)))
		}
	}
	return errs
}

// validateVolumeAttachmentUpdate checks an update, of the main resource
// or of status, of attachment old to va: its spec is read-only.
func validateVolumeAttachmentUpdate(va, old *storagev1.VolumeAttachment) field.ErrorList {
	errs := apivalidation.ValidateObjectMetaUpdate(&va.ObjectMeta, &old.ObjectMeta, metadataPath)
	errs = append(errs, validateVolumeAttachment(va)...)
	if !apiequality.Semantic.DeepEqual(va.Spec, old.Spec) {
		errs = append(errs, field.Invalid(specPath, va.Spec, "field is immutable"))
	}
	return errs
}

func volumeAttachmentColumns() []metav1.TableColumnDefinition {
	spec := storagev1.VolumeAttachmentSpec{}.SwaggerDoc()
	return []metav1.TableColumnDefinition{
		typed.NameColumn,
		{Name: "Attacher", Type: "string", Format: "name", Description: spec["attacher"]},
		{Name: "PV", Type: "string", Description: storagev1.VolumeAttachmentSource{}.SwaggerDoc()["persistentVolumeName"]},
		{Name: "Node", Type: "string", Description: spec["nodeName"]},
		{Name: "Attached", Type: "boolean", Description: storagev1.VolumeAttachmentStatus{}.SwaggerDoc()["attached"]},
		typed.AgeColumn,
	}
}

func volumeAttachmentRow(va *storagev1.VolumeAttachment, now time.Time) []interface{} {
	var pv string
	if p := va.Spec.Source.PersistentVolumeName; p != nil {
		pv = *p
	}
	return []interface{}{va.Name, va.Spec.Attacher, pv, va.Spec.NodeName, va.Status.Attached, typed.Age(now, va.CreationTimestamp)}
}
