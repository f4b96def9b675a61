// Package apps holds the hub's rules for the apps/v1 resources: deployments,
// replicasets, statefulsets, daemonsets and controllerrevisions. It owns
// their defaults, validation, status and scale subresources, field selectors
// and printer columns, as upstream Kubernetes defines them; the generic
// machinery in hub/apiserver serves them.
package apps

import (
	"time"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/outpost-mesh/outpost/hub/apiserver"
)

// Resources returns the apps/v1 resources, with ages in printed tables
// measured against the wall clock.
func Resources() []apiserver.Resource { return ResourcesWithClock(nil) }

// ResourcesWithClock is Resources with ages measured against now, or the
// wall clock if now is nil. Tests use it to get stable Table rows.
func ResourcesWithClock(now func() time.Time) []apiserver.Resource {
	gv := appsv1.SchemeGroupVersion
	return []apiserver.Resource{
		{
			GroupVersion: gv,
			Kind:         "Deployment",
			Plural:       "deployments",
			Singular:     "deployment",
			ShortNames:   []string{"deploy"},
			Categories:   []string{"all"},
			Namespaced:   true,
			New:          func() runtime.Object { return &appsv1.Deployment{} },
			NewList:      func() runtime.Object { return &appsv1.DeploymentList{} },
			AddToScheme:  appsv1.AddToScheme,
			Status:       true,
			Generation:   true,
			Scale:        deploymentScale,
			Rules:        deploymentRules(now),
		},
		{
			GroupVersion: gv,
			Kind:         "ReplicaSet",
			Plural:       "replicasets",
			Singular:     "replicaset",
			ShortNames:   []string{"rs"},
			Categories:   []string{"all"},
			Namespaced:   true,
			New:          func() runtime.Object { return &appsv1.ReplicaSet{} },
			NewList:      func() runtime.Object { return &appsv1.ReplicaSetList{} },
			AddToScheme:  appsv1.AddToScheme,
			Status:       true,
			Generation:   true,
			Scale:        replicaSetScale,
			Rules:        replicaSetRules(now),
		},
		{
			GroupVersion: gv,
			Kind:         "StatefulSet",
			Plural:       "statefulsets",
			Singular:     "statefulset",
			ShortNames:   []string{"sts"},
			Categories:   []string{"all"},
			Namespaced:   true,
			New:          func() runtime.Object { return &appsv1.StatefulSet{} },
			NewList:      func() runtime.Object { return &appsv1.StatefulSetList{} },
			AddToScheme:  appsv1.AddToScheme,
			Status:       true,
			Generation:   true,
			Scale:        statefulSetScale,
			Rules:        statefulSetRules(now),
		},
		{
			GroupVersion: gv,
			Kind:         "DaemonSet",
			Plural:       "daemonsets",
			Singular:     "daemonset",
			ShortNames:   []string{"ds"},
			Categories:   []string{"all"},
			Namespaced:   true,
			New:          func() runtime.Object { return &appsv1.DaemonSet{} },
			NewList:      func() runtime.Object { return &appsv1.DaemonSetList{} },
			AddToScheme:  appsv1.AddToScheme,
			Status:       true,
			Generation:   true,
			Rules:        daemonSetRules(now),
		},
		{
			GroupVersion: gv,
			Kind:         "ControllerRevision",
			Plural:       "controllerrevisions",
			Singular:     "controllerrevision",
			Namespaced:   true,
			New:          func() runtime.Object { return &appsv1.ControllerRevision{} },
			NewList:      func() runtime.Object { return &appsv1.ControllerRevisionList{} },
			AddToScheme:  appsv1.AddToScheme,
			Rules:        controllerRevisionRules(now),
		},
	}
}
