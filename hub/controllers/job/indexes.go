package job

import (
	"slices"
	"sort"
	"strconv"
	"strings"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
)

// noIndex is the completion index of a pod that has none, or one that
// does not parse.
const noIndex = -1

// interval is a run of completion indexes, First to Last included.
type interval struct{ First, Last int }

// intervals is a sorted set of completion indexes as disjoint, non-adjacent
// runs: what status.completedIndexes and status.failedIndexes print as
// "1,3-5,7".
type intervals []interval

// parseIntervals parses s as status.completedIndexes holds it, dropping
// what does not parse and indexes at or above completions, as upstream
// does when completions shrink.
func parseIntervals(s string, completions int) intervals {
	var out intervals
	if s == "" {
		return out
	}
	for _, part := range strings.Split(s, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		first, err := strconv.Atoi(lo)
		if err != nil || first < 0 || first >= completions {
			continue
		}
		last := first
		if isRange {
			if last, err = strconv.Atoi(hi); err != nil || last < first {
				continue
			}
			last = min(last, completions-1)
		}
		out = out.add(interval{first, last})
	}
	return out
}

// add returns o with in merged; o must be sorted and in must come at or
// after o's last run, as parsing and withIndexes ensure.
func (o intervals) add(in interval) intervals {
	if n := len(o); n > 0 && in.First <= o[n-1].Last+1 {
		o[n-1].Last = max(o[n-1].Last, in.Last)
		return o
	}
	return append(o, in)
}

// withIndexes returns the union of o and the indexes in add, which need
// not be sorted. o is not modified.
func (o intervals) withIndexes(add []int) intervals {
	add = slices.Clone(add)
	sort.Ints(add)
	all := make(intervals, 0, len(o)+len(add))
	i := 0
	for _, in := range o {
		for ; i < len(add) && add[i] < in.First; i++ {
			all = all.add(interval{add[i], add[i]})
		}
		all = all.add(in)
	}
	for ; i < len(add); i++ {
		all = all.add(interval{add[i], add[i]})
	}
	return all
}

func (o intervals) total() int {
	n := 0
	for _, in := range o {
		n += in.Last - in.First + 1
	}
	return n
}

func (o intervals) has(ix int) bool {
	i := sort.Search(len(o), func(i int) bool { return o[i].Last >= ix })
	return i < len(o) && o[i].First <= ix
}

func (o intervals) String() string {
	var b strings.Builder
	for i, in := range o {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(in.First))
		switch {
		case in.Last == in.First+1: // upstream writes a pair as "1,2"
			b.WriteByte(',')
			b.WriteString(strconv.Itoa(in.Last))
		case in.Last > in.First:
			b.WriteByte('-')
			b.WriteString(strconv.Itoa(in.Last))
		}
	}
	return b.String()
}

// completionIndex is the index a pod of an indexed job runs, from its
// annotation, or noIndex.
func completionIndex(p *corev1.Pod) int {
	v, ok := p.Annotations[batchv1.JobCompletionIndexAnnotation]
	if !ok {
		return noIndex
	}
	ix, err := strconv.Atoi(v)
	if err != nil || ix < 0 {
		return noIndex
	}
	return ix
}

// validIndex is the pod's completion index if it is in [0, completions),
// else noIndex.
func validIndex(p *corev1.Pod, completions int32) int {
	if ix := completionIndex(p); ix != noIndex && ix < int(completions) {
		return ix
	}
	return noIndex
}

// succeededIndexes returns the completed indexes the job's status counts
// and those with the ones of succeeded pods not yet counted added.
func succeededIndexes(j *batchv1.Job, pods []*corev1.Pod) (prev, now intervals) {
	completions := int(*j.Spec.Completions)
	prev = parseIntervals(j.Status.CompletedIndexes, completions)
	var add []int
	for _, p := range pods {
		if p.Status.Phase != corev1.PodSucceeded || !hasTrackingFinalizer(p) {
			continue
		}
		if ix := validIndex(p, *j.Spec.Completions); ix != noIndex && !prev.has(ix) {
			add = append(add, ix)
		}
	}
	return prev, prev.withIndexes(add)
}

// firstPendingIndexes returns up to count indexes below completions, in
// order, that no pod runs and that have neither succeeded nor failed.
// Indexes of terminating pods count as running when only failed pods are
// replaced.
func firstPendingIndexes(s *syncState, count int) []int {
	completions := int(*s.job.Spec.Completions)
	busy := map[int]bool{}
	for _, p := range s.active {
		if ix := validIndex(p, int32(completions)); ix != noIndex {
			busy[ix] = true
		}
	}
	if onlyReplaceFailedPods(s.job) {
		for _, p := range s.pods {
			if isTerminating(p) {
				if ix := validIndex(p, int32(completions)); ix != noIndex {
					busy[ix] = true
				}
			}
		}
	}
	var out []int
	for ix := 0; ix < completions && len(out) < count; ix++ {
		if busy[ix] || s.succeededIndexes.has(ix) || s.failedIndexes.has(ix) {
			continue
		}
		out = append(out, ix)
	}
	return out
}

// duplicateIndexPods splits active pods of an indexed job into those to
// remove, because their index is missing, out of range, or held by another
// pod kept in their place, and the rest. Of pods sharing an index, the one
// furthest along (the last in removal order) is kept.
func duplicateIndexPods(pods []*corev1.Pod, completions int32) (rm, keep []*corev1.Pod) {
	byIndex := map[int][]*corev1.Pod{}
	for _, p := range pods {
		ix := validIndex(p, completions)
		if ix == noIndex {
			rm = append(rm, p)
			continue
		}
		byIndex[ix] = append(byIndex[ix], p)
	}
	indexes := make([]int, 0, len(byIndex))
	for ix := range byIndex {
		indexes = append(indexes, ix)
	}
	sort.Ints(indexes)
	for _, ix := range indexes {
		group := byIndex[ix]
		sortForRemoval(group)
		rm = append(rm, group[:len(group)-1]...)
		keep = append(keep, group[len(group)-1])
	}
	return rm, keep
}
