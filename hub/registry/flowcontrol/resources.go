// Package flowcontrol holds the hub's rules for the
// flowcontrol.apiserver.k8s.io/v1 resources flowschemas and
// prioritylevelconfigurations (their defaults, validation, status
// subresources and printer columns, as upstream Kubernetes defines them)
// and upstream's mandatory and suggested objects, which the hub creates
// at start so that clients and charts that read or patch them find them.
//
// The hub stores and serves these objects but does not enforce API
// priority and fairness: requests are neither classified by the flow
// schemas nor queued or rejected by the priority levels, and nothing
// maintains the schemas' Dangling condition.
package flowcontrol

import (
	"time"

	flowcontrolv1 "k8s.io/api/flowcontrol/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/outpost-mesh/outpost/hub/apiserver"
)

// Resources returns the flowcontrol.apiserver.k8s.io/v1 resources, with
// ages in printed tables measured against the wall clock.
func Resources() []apiserver.Resource { return ResourcesWithClock(nil) }

// ResourcesWithClock is Resources with ages measured against now, or the
// wall clock if now is nil. Tests use it to get stable Table rows.
//
// As upstream, generation counts changes of a schema's or a level's
// spec.
func ResourcesWithClock(now func() time.Time) []apiserver.Resource {
	gv := flowcontrolv1.SchemeGroupVersion
	return []apiserver.Resource{
		{
			GroupVersion: gv,
			Kind:         "FlowSchema",
			Plural:       "flowschemas",
			Singular:     "flowschema",
			New:          func() runtime.Object { return &flowcontrolv1.FlowSchema{} },
			NewList:      func() runtime.Object { return &flowcontrolv1.FlowSchemaList{} },
			AddToScheme:  flowcontrolv1.AddToScheme,
			Status:       true,
			// Upstream's status strategy resets the whole ObjectMeta.
			StatusKeepsMetadata: true,
			Generation:          true,
			Rules:               flowSchemaRules(now),
		},
		{
			GroupVersion:        gv,
			Kind:                "PriorityLevelConfiguration",
			Plural:              "prioritylevelconfigurations",
			Singular:            "prioritylevelconfiguration",
			New:                 func() runtime.Object { return &flowcontrolv1.PriorityLevelConfiguration{} },
			NewList:             func() runtime.Object { return &flowcontrolv1.PriorityLevelConfigurationList{} },
			AddToScheme:         flowcontrolv1.AddToScheme,
			Status:              true,
			StatusKeepsMetadata: true,
			Generation:          true,
			Rules:               priorityLevelRules(now),
		},
	}
}

var (
	metadataPath = field.NewPath("metadata")
	specPath     = field.NewPath("spec")
	statusPath   = field.NewPath("status")
)
