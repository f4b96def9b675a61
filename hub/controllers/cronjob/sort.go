package cronjob

import (
	"slices"
	"strings"

	batchv1 "k8s.io/api/batch/v1"
)

// sortByStart sorts jobs by start time, those not started last, then by
// name.
func sortByStart(js []*batchv1.Job) {
	slices.SortStableFunc(js, func(a, b *batchv1.Job) int {
		as, bs := a.Status.StartTime, b.Status.StartTime
		switch {
		case as == nil && bs != nil:
			return 1
		case as != nil && bs == nil:
			return -1
		case as != nil && !as.Equal(bs):
			if as.Before(bs) {
				return -1
			}
			return 1
		}
		return strings.Compare(a.Name, b.Name)
	})
}
