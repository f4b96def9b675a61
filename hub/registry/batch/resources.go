package batch

import (
	"time"

	batchv1 "k8s.io/api/batch/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/outpost-mesh/outpost/hub/apiserver"
)

// Resources returns the batch/v1 resources, with ages in printed tables
// measured against the wall clock.
func Resources() []apiserver.Resource { return ResourcesWithClock(nil) }

// ResourcesWithClock is Resources with ages and job durations measured
// against now, or the wall clock if now is nil. Tests use it to get stable
// Table rows.
func ResourcesWithClock(now func() time.Time) []apiserver.Resource {
	gv := batchv1.SchemeGroupVersion
	return []apiserver.Resource{
		{
			GroupVersion: gv,
			Kind:         "Job",
			Plural:       "jobs",
			Singular:     "job",
			Categories:   []string{"all"},
			Namespaced:   true,
			New:          func() runtime.Object { return &batchv1.Job{} },
			NewList:      func() runtime.Object { return &batchv1.JobList{} },
			AddToScheme:  batchv1.AddToScheme,
			Status:       true,
			Generation:   true,
			Rules:        jobRules(now),
		},
		{
			GroupVersion: gv,
			Kind:         "CronJob",
			Plural:       "cronjobs",
			Singular:     "cronjob",
			ShortNames:   []string{"cj"},
			Categories:   []string{"all"},
			Namespaced:   true,
			New:          func() runtime.Object { return &batchv1.CronJob{} },
			NewList:      func() runtime.Object { return &batchv1.CronJobList{} },
			AddToScheme:  batchv1.AddToScheme,
			Status:       true,
			Generation:   true,
			Rules:        cronJobRules(now),
		},
	}
}
