// Package storage holds the hub's rules for the storage.k8s.io/v1
// resources storageclasses, csidrivers, csinodes and volumeattachments:
// their defaults, validation, the volume attachment status subresource
// and printer columns, as upstream Kubernetes defines them. The hub
// stores and serves them; provisioning, attaching and mounting volumes
// is for the CSI drivers and controllers that watch them.
package storage

import (
	"time"

	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/outpost-mesh/outpost/hub/apiserver"
)

// Resources returns the storage.k8s.io/v1 resources, with ages in
// printed tables measured against the wall clock.
func Resources() []apiserver.Resource { return ResourcesWithClock(nil) }

// ResourcesWithClock is Resources with ages measured against now, or the
// wall clock if now is nil. Tests use it to get stable Table rows.
func ResourcesWithClock(now func() time.Time) []apiserver.Resource {
	gv := storagev1.SchemeGroupVersion
	return []apiserver.Resource{
		{
			GroupVersion: gv,
			Kind:         "StorageClass",
			Plural:       "storageclasses",
			Singular:     "storageclass",
			ShortNames:   []string{"sc"},
			New:          func() runtime.Object { return &storagev1.StorageClass{} },
			NewList:      func() runtime.Object { return &storagev1.StorageClassList{} },
			AddToScheme:  storagev1.AddToScheme,
			Rules:        storageClassRules(now),
		},
		{
			GroupVersion: gv,
			Kind:         "CSIDriver",
			Plural:       "csidrivers",
			Singular:     "csidriver",
			New:          func() runtime.Object { return &storagev1.CSIDriver{} },
			NewList:      func() runtime.Object { return &storagev1.CSIDriverList{} },
			AddToScheme:  storagev1.AddToScheme,
			Rules:        csiDriverRules(now),
		},
		{
			GroupVersion: gv,
			Kind:         "CSINode",
			Plural:       "csinodes",
			Singular:     "csinode",
			New:          func() runtime.Object { return &storagev1.CSINode{} },
			NewList:      func() runtime.Object { return &storagev1.CSINodeList{} },
			AddToScheme:  storagev1.AddToScheme,
			Rules:        csiNodeRules(now),
		},
		{
			GroupVersion: gv,
			Kind:         "VolumeAttachment",
			Plural:       "volumeattachments",
			Singular:     "volumeattachment",
			New:          func() runtime.Object { return &storagev1.VolumeAttachment{} },
			NewList:      func() runtime.Object { return &storagev1.VolumeAttachmentList{} },
			AddToScheme:  storagev1.AddToScheme,
			Status:       true,
			// Upstream's status strategy resets the metadata.
			StatusKeepsMetadata: true,
			Rules:               volumeAttachmentRules(now),
		},
	}
}

var (
	metadataPath = field.NewPath("metadata")
	specPath     = field.NewPath("spec")
	statusPath   = field.NewPath("status")
)
