package storage

import (
	"fmt"
	"strings"
	"time"

	storagev1 "k8s.io/api/storage/v1"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/outpost-mesh/outpost/hub/registry/core"
	"github.com/outpost-mesh/outpost/hub/registry/typed"
)

func csiDriverRules(now func() time.Time) *typed.Rules[*storagev1.CSIDriver] {
	return &typed.Rules[*storagev1.CSIDriver]{
		Now:          now,
		Defaults:     defaultCSIDriver,
		Check:        validateCSIDriver,
		CheckUpdate:  validateCSIDriverUpdate,
		TableColumns: csiDriverColumns(),
		TableRow:     csiDriverRow,
	}
}

// defaultCSIDriver applies upstream's v1 defaults: attach required,
// no pod info on mount, persistent volumes only, fsGroup applied to
// ReadWriteOnce volumes with an fsType, no republish, no storage
// capacity tracking, no SELinux mount option.
func defaultCSIDriver(d *storagev1.CSIDriver) {
	s := &d.Spec
	if s.AttachRequired == nil {
		s.AttachRequired = new(true)
	}
	if s.PodInfoOnMount == nil {
		s.PodInfoOnMount = new(false)
	}
	if s.StorageCapacity == nil {
		s.StorageCapacity = new(false)
	}
	if s.FSGroupPolicy == nil {
		s.FSGroupPolicy = new(storagev1.ReadWriteOnceWithFSTypeFSGroupPolicy)
	}
	if len(s.VolumeLifecycleModes) == 0 {
		s.VolumeLifecycleModes = []storagev1.VolumeLifecycleMode{storagev1.VolumeLifecyclePersistent}
	}
	if s.RequiresRepublish == nil {
		s.RequiresRepublish = new(false)
	}
	if s.SELinuxMount == nil {
		s.SELinuxMount = new(false)
	}
}

var (
	supportedFSGroupPolicies = sets.New(storagev1.ReadWriteOnceWithFSTypeFSGroupPolicy, storagev1.FileFSGroupPolicy, storagev1.NoneFSGroupPolicy)
	supportedLifecycleModes  = []storagev1.VolumeLifecycleMode{storagev1.VolumeLifecyclePersistent, storagev1.VolumeLifecycleEphemeral}
)

func validateCSIDriver(d *storagev1.CSIDriver) field.ErrorList {
	errs := apivalidation.ValidateObjectMeta(&d.ObjectMeta, false, apivalidation.NameIsDNSSubdomain, metadataPath)
	return append(errs, validateCSIDriverSpec(&d.Spec, specPath)...)
}

// validateCSIDriverUpdate checks an update of driver old to d: whether
// volumes are attached and which lifecycle modes the driver serves may
// not change, as upstream rules; the rest may.
func validateCSIDriverUpdate(d, old *storagev1.CSIDriver) field.ErrorList {
	errs := apivalidation.ValidateObjectMetaUpdate(&d.ObjectMeta, &old.ObjectMeta, metadataPath)
	errs = append(errs, validateCSIDriverSpec(&d.Spec, specPath)...)
	// Upstream's path misspells attachRequired.
	errs = append(errs, apivalidation.ValidateImmutableField(d.Spec.AttachRequired, old.Spec.AttachRequired, specPath.Child("attachedRequired"))...)
	return append(errs, apivalidation.ValidateImmutableField(d.Spec.VolumeLifecycleModes, old.Spec.VolumeLifecycleModes, specPath.Child("volumeLifecycleModes"))...)
}

func validateCSIDriverSpec(s *storagev1.CSIDriverSpec, fld *field.Path) field.ErrorList {
	var errs field.ErrorList
	for _, b := range []struct {
		name string
		v    *bool
	}{{"attachedRequired", s.AttachRequired}, {"podInfoOnMount", s.PodInfoOnMount}, {"storageCapacity", s.StorageCapacity}, {"seLinuxMount", s.SELinuxMount}} {
		if b.v == nil {
			errs = append(errs, field.Required(fld.Child(b.name), ""))
		}
	}
	if p := s.FSGroupPolicy; p != nil && !supportedFSGroupPolicies.Has(*p) {
		errs = append(errs, field.NotSupported(fld.Child("fsGroupPolicy"), *p, sets.List(supportedFSGroupPolicies)))
	}
	errs = append(errs, validateTokenRequests(s.TokenRequests, fld.Child("tokenRequests"))...)
	if s.ServiceAccountTokenInSecrets != nil && len(s.TokenRequests) == 0 {
		errs = append(errs, field.Invalid(fld.Child("serviceAccountTokenInSecrets"), *s.ServiceAccountTokenInSecrets, "may only be set when tokenRequests is configured"))
	}
	for _, m := range s.VolumeLifecycleModes {
		if m != storagev1.VolumeLifecyclePersistent && m != storagev1.VolumeLifecycleEphemeral {
			errs = append(errs, field.NotSupported(fld.Child("volumeLifecycleModes"), m, supportedLifecycleModes))
		}
	}
	if p := s.NodeAllocatableUpdatePeriodSeconds; p != nil && *p < 10 {
		errs = append(errs, field.Invalid(fld.Child("nodeAllocatableUpdatePeriodSeconds"), *p, "must be greater than or equal to 10 seconds"))
	}
	return errs
}

// validateTokenRequests checks a driver's token requests: distinct
// audiences and lifetimes between 10 minutes and 2^32 seconds.
func validateTokenRequests(reqs []storagev1.TokenRequest, fld *field.Path) field.ErrorList {
	var errs field.ErrorList
	audiences := sets.New[string]()
	for i, r := range reqs {
		p := fld.Index(i)
		if audiences.Has(r.Audience) {
			errs = append(errs, field.Duplicate(p.Child("audience"), r.Audience))
			continue
		}
		audiences.Insert(r.Audience)
		switch e := r.ExpirationSeconds; {
		case e == nil:
		case *e < 600:
			errs = append(errs, field.Invalid(p.Child("expirationSeconds"), *e, "may not specify a duration less than 10 minutes"))
		case *e > 1<<32:
			errs = append(errs, field.Invalid(p.Child("expirationSeconds"), *e, "may not specify a duration larger than 2^32 seconds"))
		}
	}
	return errs
}

func csiDriverColumns() []metav1.TableColumnDefinition {
	doc := storagev1.CSIDriverSpec{}.SwaggerDoc()
	return []metav1.TableColumnDefinition{
		typed.NameColumn,
		{Name: "AttachRequired", Type: "boolean", Description: doc["attachRequired"]},
		{Name: "PodInfoOnMount", Type: "boolean", Description: doc["podInfoOnMount"]},
		{Name: "StorageCapacity", Type: "boolean", Description: doc["storageCapacity"]},
		{Name: "TokenRequests", Type: "string", Description: doc["tokenRequests"]},
		{Name: "RequiresRepublish", Type: "boolean", Description: doc["requiresRepublish"]},
		{Name: "Modes", Type: "string", Description: doc["volumeLifecycleModes"]},
		typed.AgeColumn,
	}
}

func csiDriverRow(d *storagev1.CSIDriver, now time.Time) []interface{} {
	s := &d.Spec
	or := func(v *bool, def bool) bool {
		if v == nil {
			return def
		}
		return *v
	}
	modes := make([]string, len(s.VolumeLifecycleModes))
	for i, m := range s.VolumeLifecycleModes {
		modes[i] = string(m)
	}
	modesCell := strings.Join(modes, ",")
	if modesCell == "" {
		modesCell = "<none>"
	}
	tokens := "<unset>"
	if s.TokenRequests != nil {
		audiences := make([]string, len(s.TokenRequests))
		for i, t := range s.TokenRequests {
			audiences[i] = t.Audience
		}
		tokens = strings.Join(audiences, ",")
	}
	return []interface{}{d.Name, or(s.AttachRequired, true), or(s.PodInfoOnMount, false), or(s.StorageCapacity, false),
		tokens, or(s.RequiresRepublish, false), modesCell, typed.Age(now, d.CreationTimestamp)}
}

func csiNodeRules(now func() time.Time) *typed.Rules[*storagev1.CSINode] {
	return &typed.Rules[*storagev1.CSINode]{
		Now:         now,
		Check:       validateCSINode,
		CheckUpdate: validateCSINodeUpdate,
		TableColumns: []metav1.TableColumnDefinition{
			typed.NameColumn,
			{Name: "Drivers", Type: "integer", Description: "Drivers indicates the number of CSI drivers registered on the node"},
			typed.AgeColumn,
		},
		TableRow: func(n *storagev1.CSINode, now time.Time) []interface{} {
			return []interface{}{n.Name, int64(len(n.Spec.Drivers)), typed.Age(now, n.CreationTimestamp)}
		},
	}
}

// maxNodeIDLength is the longest node ID a CSI driver may report.
const maxNodeIDLength = 192

func validateCSINode(n *storagev1.CSINode) field.ErrorList {
	errs := apivalidation.ValidateObjectMeta(&n.ObjectMeta, false, apivalidation.NameIsDNSSubdomain, metadataPath)
	driversPath := specPath.Child("drivers")
	names := sets.New[string]()
	for i, d := range n.Spec.Drivers {
		p := driversPath.Index(i)
		errs = append(errs, core.ValidateCSIDriverName(d.Name, p.Child("name"))...)
		if d.NodeID == "" {
			errs = append(errs, field.Required(p.Child("nodeID"), d.NodeID))
		}
		if len(d.NodeID) > maxNodeIDLength {
			errs = append(errs, field.Invalid(p.Child("nodeID"), d.NodeID, fmt.Sprintf("must be %d characters or less", maxNodeIDLength)))
		}
		if a := d.Allocatable; a != nil && a.Count != nil {
			errs = append(errs, apivalidation.ValidateNonnegativeField(int64(*a.Count), p.Child("allocatable", "count"))...)
		}
		if names.Has(d.Name) {
			errs = append(errs, field.Duplicate(p.Child("name"), d.Name))
		}
		names.Insert(d.Name)
		keys := sets.New[string]()
		for _, k := range d.TopologyKeys {
			if k == "" {
				errs = append(errs, field.Required(p, k))
			}
			if keys.Has(k) {
				errs = append(errs, field.Duplicate(p, k))
			}
			keys.Insert(k)
			errs = append(errs, qualifiedName(k, p)...)
		}
	}
	return errs
}

// validateCSINodeUpdate checks an update of node old to n: a driver
// registered in both may change only its allocatable count.
func validateCSINodeUpdate(n, old *storagev1.CSINode) field.ErrorList {
	errs := apivalidation.ValidateObjectMetaUpdate(&n.ObjectMeta, &old.ObjectMeta, metadataPath)
	errs = append(errs, validateCSINode(n)...)
	for _, o := range old.Spec.Drivers {
		for _, d := range n.Spec.Drivers {
			if o.Name != d.Name {
				continue
			}
			o.Allocatable, d.Allocatable = nil, nil
			errs = append(errs, apivalidation.ValidateImmutableField(d, o, specPath.Child("drivers"))...)
		}
	}
	return errs
}
