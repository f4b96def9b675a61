package job

import (
	"fmt"
	"slices"
	"strconv"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
)

// Limits of one sync, as upstream's.
const (
	// maxUncountedPods caps status.uncountedTerminatedPods, so that the
	// status stays small and one big job does not starve the others.
	maxUncountedPods = 500
	// maxPodCreateDeletePerSync caps the pods one sync creates or deletes.
	maxPodCreateDeletePerSync = 500
)

// The reason and message of the Complete condition, and of the
// SuccessCriteriaMet one before it, when the completions are reached.
const (
	completionsReachedMessage = "Reached expected number of succeeded pods"
	backoffLimitMessage       = "Job has reached the specified backoff limit"
	deadlineMessage           = "Job was active longer than specified deadline"
)

// syncState is one sync of one job: what it read and what it decides as it
// goes. Its methods do no I/O and take the time from now; the shell
// (sync.go) carries out what they decide between calls and reports the
// outcome back by adjusting the counts.
type syncState struct {
	now  time.Time
	job  *batchv1.Job  // the sync's own copy; its status is what is written
	pods []*corev1.Pod // the job's pods, shared with the cache: read only

	active      []*corev1.Pod
	ready       int32
	terminating int32

	uncountedSucceeded, uncountedFailed sets.Set[types.UID]
	// expectedRm are pods whose finalizer an earlier sync removed and the
	// cache does not show yet; they are counted already.
	expectedRm sets.Set[types.UID]

	newSucceeded, newFailed []*corev1.Pod
	succeeded, failed       int32

	// Indexed jobs only.
	prevSucceededIndexes, succeededIndexes intervals
	// With a back-off limit per index only.
	failedIndexes intervals
	delayed       map[int]*corev1.Pod // per index, the failed pod kept until its replacement exists

	backoff  backoffRecord         // including the failures of this sync
	finished *batchv1.JobCondition // the condition the job is to end with, nil while it runs
}

func isIndexed(j *batchv1.Job) bool {
	return j.Spec.CompletionMode != nil && *j.Spec.CompletionMode == batchv1.IndexedCompletion
}

func perIndex(j *batchv1.Job) bool { return isIndexed(j) && j.Spec.BackoffLimitPerIndex != nil }

func isSuspended(j *batchv1.Job) bool { return j.Spec.Suspend != nil && *j.Spec.Suspend }

// newSyncState reads what a sync of j starts from: its pods, the pods whose
// finalizer removal the cache has not shown yet, and the back-off recorded
// after the last sync. j is the sync's own copy.
func newSyncState(j *batchv1.Job, pods []*corev1.Pod, expectedRm sets.Set[types.UID], stored backoffRecord, now time.Time) *syncState {
	if j.Status.UncountedTerminatedPods == nil {
		j.Status.UncountedTerminatedPods = &batchv1.UncountedTerminatedPods{}
	}
	u := j.Status.UncountedTerminatedPods
	s := &syncState{
		now: now, job: j, pods: pods,
		uncountedSucceeded: sets.New(u.Succeeded...),
		uncountedFailed:    sets.New(u.Failed...),
		expectedRm:         expectedRm,
	}
	for _, p := range pods {
		switch {
		case isActive(p):
			s.active = append(s.active, p)
			if isReady(p) {
				s.ready++
			}
		case isTerminating(p):
			s.terminating++
		}
	}
	for _, p := range pods {
		if !s.counts(p) {
			continue
		}
		switch {
		case p.Status.Phase == corev1.PodSucceeded && !s.uncountedSucceeded.Has(p.UID):
			s.newSucceeded = append(s.newSucceeded, p)
		case isFailed(p, j) && !s.uncountedFailed.Has(p.UID):
			s.newFailed = append(s.newFailed, p)
		}
	}
	s.succeeded = j.Status.Succeeded + int32(len(s.newSucceeded)+s.uncountedSucceeded.Len())
	s.failed = j.Status.Failed + int32(s.uncountedFailed.Len())
	for _, p := range s.newFailed {
		if matchPolicy(j.Spec.PodFailurePolicy, p).Counts() {
			s.failed++
		}
	}
	// StartTime is set on the first sync that finds the job not suspended.
	if j.Status.StartTime == nil && !isSuspended(j) {
		j.Status.StartTime = new(metav1.NewTime(now))
	}
	s.backoff = stored.next(s.newSucceeded, s.newFailed)
	return s
}

// counts reports whether p is one of the job's pods not yet accounted
// for: it has the tracking finalizer, no earlier sync removed it, and for
// an indexed job its index is in range.
func (s *syncState) counts(p *corev1.Pod) bool {
	if !hasTrackingFinalizer(p) || s.expectedRm.Has(p.UID) {
		return false
	}
	return !isIndexed(s.job) || validIndex(p, *s.job.Spec.Completions) != noIndex
}

func newCondition(t batchv1.JobConditionType, reason, message string, now time.Time) *batchv1.JobCondition {
	return &batchv1.JobCondition{
		Type:               t,
		Status:             corev1.ConditionTrue,
		LastProbeTime:      metav1.NewTime(now),
		LastTransitionTime: metav1.NewTime(now),
		Reason:             reason,
		Message:            message,
	}
}

func findCondition(cs []batchv1.JobCondition, t batchv1.JobConditionType) *batchv1.JobCondition {
	for i := range cs {
		if cs[i].Type == t {
			return &cs[i]
		}
	}
	return nil
}

func hasTrueCondition(j *batchv1.Job, t batchv1.JobConditionType) bool {
	c := findCondition(j.Status.Conditions, t)
	return c != nil && c.Status == corev1.ConditionTrue
}

// isFinished reports whether j has ended, Complete or Failed.
func isFinished(j *batchv1.Job) bool {
	return hasTrueCondition(j, batchv1.JobComplete) || hasTrueCondition(j, batchv1.JobFailed)
}

// decideFinished decides whether the job is to end and how, into
// s.finished, as upstream does in order: an earlier SuccessCriteriaMet or
// FailureTarget, a pod failure policy's FailJob rule, the back-off limit,
// the active deadline, the per-index limits, the success policy. It
// returns when the active deadline falls, if it is still ahead (0 if
// none).
func (s *syncState) decideFinished() (deadlineIn time.Duration) {
	j := s.job
	if c := findCondition(j.Status.Conditions, batchv1.JobSuccessCriteriaMet); c != nil && c.Status == corev1.ConditionTrue {
		s.finished = c.DeepCopy()
	} else if c := findCondition(j.Status.Conditions, batchv1.JobFailureTarget); c != nil && c.Status == corev1.ConditionTrue {
		s.finished = newCondition(batchv1.JobFailed, c.Reason, c.Message, s.now)
	} else if msg := s.failJobMessage(); msg != "" {
		s.finished = newCondition(batchv1.JobFailureTarget, batchv1.JobReasonPodFailurePolicy, msg, s.now)
	}
	if s.finished == nil {
		switch {
		case s.failed > *j.Spec.BackoffLimit || pastBackoffLimitOnFailure(j, s.pods):
			s.finished = newCondition(batchv1.JobFailureTarget, batchv1.JobReasonBackoffLimitExceeded, backoffLimitMessage, s.now)
		case j.Spec.ActiveDeadlineSeconds != nil && !isSuspended(j):
			left := time.Duration(*j.Spec.ActiveDeadlineSeconds)*time.Second - s.now.Sub(j.Status.StartTime.Time)
			if left <= 0 {
				s.finished = newCondition(batchv1.JobFailureTarget, batchv1.JobReasonDeadlineExceeded, deadlineMessage, s.now)
			} else {
				deadlineIn = left
			}
		}
	}
	if !isIndexed(j) {
		return deadlineIn
	}
	s.prevSucceededIndexes, s.succeededIndexes = succeededIndexes(j, s.pods)
	s.succeeded = int32(s.succeededIndexes.total())
	completions := int(*j.Spec.Completions)
	if perIndex(j) {
		s.failedIndexes = s.calculateFailedIndexes()
		if s.finished == nil {
			switch failed := s.failedIndexes.total(); {
			case j.Spec.MaxFailedIndexes != nil && failed > int(*j.Spec.MaxFailedIndexes):
				s.finished = newCondition(batchv1.JobFailureTarget, batchv1.JobReasonMaxFailedIndexesExceeded,
					"Job has exceeded the specified maximal number of failed indexes", s.now)
			case failed > 0 && failed+s.succeededIndexes.total() >= completions:
				s.finished = newCondition(batchv1.JobFailureTarget, batchv1.JobReasonFailedIndexes, "Job has failed indexes", s.now)
			}
		}
		s.delayed = s.delayedPerIndex()
	}
	if s.finished == nil {
		if msg, ok := matchSuccessPolicy(j.Spec.SuccessPolicy, completions, s.succeededIndexes); ok {
			s.finished = newCondition(batchv1.JobSuccessCriteriaMet, batchv1.JobReasonSuccessPolicy, msg, s.now)
		}
	}
	return deadlineIn
}

// failJobMessage is the message of the first failed pod's FailJob rule,
// or "".
func (s *syncState) failJobMessage() string {
	if s.job.Spec.PodFailurePolicy == nil {
		return ""
	}
	for _, p := range s.pods {
		if isFailed(p, s.job) {
			if v := matchPolicy(s.job.Spec.PodFailurePolicy, p); v.FailJob != "" {
				return v.FailJob
			}
		}
	}
	return ""
}

// pastBackoffLimitOnFailure reports whether the containers of a job whose
// pods restart OnFailure have restarted the back-off limit's times.
func pastBackoffLimitOnFailure(j *batchv1.Job, pods []*corev1.Pod) bool {
	if j.Spec.Template.Spec.RestartPolicy != corev1.RestartPolicyOnFailure {
		return false
	}
	var n int32
	for _, p := range pods {
		if p.Status.Phase != corev1.PodRunning && p.Status.Phase != corev1.PodPending {
			continue
		}
		for _, cs := range [][]corev1.ContainerStatus{p.Status.InitContainerStatuses, p.Status.ContainerStatuses} {
			for _, c := range cs {
				n += c.RestartCount
			}
		}
	}
	if *j.Spec.BackoffLimit == 0 {
		return n > 0
	}
	return n >= *j.Spec.BackoffLimit
}

// matchSuccessPolicy reports whether the succeeded indexes meet a rule of
// the success policy, and the message saying which.
func matchSuccessPolicy(pol *batchv1.SuccessPolicy, completions int, succeeded intervals) (string, bool) {
	if pol == nil || len(succeeded) == 0 {
		return "", false
	}
	for i, r := range pol.Rules {
		switch {
		case r.SucceededIndexes != nil:
			want := parseIntervals(*r.SucceededIndexes, completions)
			if len(want) == 0 {
				continue
			}
			have := overlap(want, succeeded)
			if (r.SucceededCount == nil && have == want.total()) || (r.SucceededCount != nil && have >= int(*r.SucceededCount)) {
				return fmt.Sprintf("Matched rules at index %d", i), true
			}
		case r.SucceededCount != nil && succeeded.total() >= int(*r.SucceededCount):
			return fmt.Sprintf("Matched rules at index %d", i), true
		}
	}
	return "", false
}

// overlap counts the indexes in both a and b.
func overlap(a, b intervals) int {
	n, i, k := 0, 0, 0
	for i < len(a) && k < len(b) {
		if o := min(a[i].Last, b[k].Last) - max(a[i].First, b[k].First) + 1; o > 0 {
			n += o
		}
		if b[k].Last < a[i].Last {
			k++
		} else {
			i++
		}
	}
	return n
}

// indexFailures reads a pod's per-index failure counts from its
// annotations, 0 for what is missing or does not parse.
func indexFailures(p *corev1.Pod) (counted, ignored int32) {
	read := func(key string) int32 {
		v, err := strconv.ParseInt(p.Annotations[key], 10, 32)
		if err != nil || v < 0 {
			return 0
		}
		return int32(v)
	}
	return read(batchv1.JobIndexFailureCountAnnotation), read(batchv1.JobIndexIgnoredFailureCountAnnotation)
}

// calculateFailedIndexes is status.failedIndexes with the indexes that
// failed since added: those a FailIndex rule matched, and those whose
// counted failures reach the back-off limit per index.
func (s *syncState) calculateFailedIndexes() intervals {
	j := s.job
	var prev intervals
	if j.Status.FailedIndexes != nil {
		prev = parseIntervals(*j.Status.FailedIndexes, int(*j.Spec.Completions))
	}
	var add []int
	for _, p := range s.pods {
		ix := validIndex(p, *j.Spec.Completions)
		if ix == noIndex || !hasTrackingFinalizer(p) || !isFailed(p, j) {
			continue
		}
		v := matchPolicy(j.Spec.PodFailurePolicy, p)
		counted, _ := indexFailures(p)
		if v.Rule == batchv1.PodFailurePolicyActionFailIndex || (v.Counts() && counted >= *j.Spec.BackoffLimitPerIndex) {
			add = append(add, ix)
		}
	}
	return prev.withIndexes(add)
}

// delayedPerIndex picks, for each index still to run and not running, the
// latest failed pod: its finalizer stays until the replacement is created
// with its failure counts, as upstream's.
func (s *syncState) delayedPerIndex() map[int]*corev1.Pod {
	running := map[int]bool{}
	for _, p := range s.active {
		if ix := completionIndex(p); ix != noIndex {
			running[ix] = true
		}
	}
	out := map[int]*corev1.Pod{}
	for _, p := range s.pods {
		if !s.counts(p) || !isFailed(p, s.job) {
			continue
		}
		ix := completionIndex(p)
		if s.succeededIndexes.has(ix) || s.failedIndexes.has(ix) || running[ix] {
			continue
		}
		last, ok := out[ix]
		if !ok {
			out[ix] = p
			continue
		}
		lc, li := indexFailures(last)
		pc, pi := indexFailures(p)
		if lc+li <= pc+pi && !finishedAt(p).Before(finishedAt(last)) {
			out[ix] = p
		}
	}
	return out
}

// replacementFailures are the failure counts the pod replacing the failed
// pod prev of an index starts with; zeros when there was none.
func (s *syncState) replacementFailures(prev *corev1.Pod) (counted, ignored int32) {
	if prev == nil {
		return 0, 0
	}
	counted, ignored = indexFailures(prev)
	if matchPolicy(s.job.Spec.PodFailurePolicy, prev).Counts() {
		counted++
	} else {
		ignored++
	}
	return counted, ignored
}

// plan is what a sync does to the job's pods: delete some, or create some
// (each an index, noIndex for a non-indexed job), or wait out a back-off.
// Deletion and creation never happen in one sync; deletion goes first.
type plan struct {
	delete []*corev1.Pod
	create []int
	wait   time.Duration // > 0: sync again then, pods are not created before
}

// plan decides how the pods of a running job move toward the wanted
// number active: all deleted while suspended; parallelism, but no more
// than the completions left (or, with no completions set, what runs after
// one pod succeeded); created no sooner than the back-off allows.
func (s *syncState) plan() plan {
	j := s.job
	active := int32(len(s.active))
	if isSuspended(j) {
		return plan{delete: podsForRemoval(j, s.active, int(active))}
	}
	var want int32
	switch {
	case j.Spec.Completions == nil && s.succeeded > 0:
		want = active
	case j.Spec.Completions == nil:
		want = *j.Spec.Parallelism
	default:
		want = max(min(*j.Spec.Completions-s.succeeded, *j.Spec.Parallelism), 0)
	}
	if rm := podsForRemoval(j, s.active, int(max(active-want, 0))); len(rm) > 0 {
		return plan{delete: rm[:min(len(rm), maxPodCreateDeletePerSync)]}
	}
	var terminating int32
	if onlyReplaceFailedPods(j) {
		terminating = s.terminating
	}
	diff := min(want-terminating-active, maxPodCreateDeletePerSync)
	if diff <= 0 {
		return plan{}
	}
	if !perIndex(j) {
		if w := s.backoff.remaining(s.now); w > 0 {
			return plan{wait: w}
		}
	}
	if !isIndexed(j) {
		create := make([]int, diff)
		for i := range create {
			create[i] = noIndex
		}
		return plan{create: create}
	}
	pending := firstPendingIndexes(s, int(diff))
	if !perIndex(j) {
		return plan{create: pending}
	}
	var now []int
	var wait time.Duration
	for _, ix := range pending {
		w := time.Duration(0)
		if prev := s.delayed[ix]; prev != nil {
			c, i := indexFailures(prev)
			w = backoffRemaining(c+i+1, finishedAt(prev), s.now)
		}
		switch {
		case w == 0:
			now = append(now, ix)
		case wait == 0 || w < wait:
			wait = w
		}
	}
	if len(now) > 0 {
		return plan{create: now}
	}
	return plan{wait: wait}
}

// complete reports whether the job has all it needs with active pods
// left running: its completions, or, without them, a success and nothing
// running.
func (s *syncState) complete(active int32) bool {
	if c := s.job.Spec.Completions; c != nil {
		return s.succeeded >= *c && active == 0
	}
	return s.succeeded > 0 && active == 0
}

// setSuspended keeps the Suspended condition in step with spec.suspend
// and returns the event's reason, "Suspended" or "Resumed", if it
// changed. Resuming restarts the active deadline: StartTime is reset.
func (s *syncState) setSuspended() (event string) {
	j := s.job
	c := findCondition(j.Status.Conditions, batchv1.JobSuspended)
	if isSuspended(j) {
		if c != nil && c.Status == corev1.ConditionTrue && c.Reason == "JobSuspended" && c.Message == "Job suspended" {
			return ""
		}
		nc := newCondition(batchv1.JobSuspended, "JobSuspended", "Job suspended", s.now)
		if c != nil {
			*c = *nc
		} else {
			j.Status.Conditions = append(j.Status.Conditions, *nc)
		}
		return "Suspended"
	}
	if c == nil || (c.Status == corev1.ConditionFalse && c.Reason == "JobResumed" && c.Message == "Job resumed") {
		return ""
	}
	*c = *newCondition(batchv1.JobSuspended, "JobResumed", "Job resumed", s.now)
	c.Status = corev1.ConditionFalse
	j.Status.StartTime = new(metav1.NewTime(s.now))
	return "Resumed"
}

// canRemoveFinalizer reports whether p's tracking finalizer may go: the
// job is deleted or ending, p succeeded, or p failed and is not the pod
// kept until its index is replaced.
func (s *syncState) canRemoveFinalizer(p *corev1.Pod, failed bool) bool {
	if s.job.DeletionTimestamp != nil || s.finished != nil || p.Status.Phase == corev1.PodSucceeded {
		return true
	}
	if !failed {
		return false
	}
	if ix := completionIndex(p); perIndex(s.job) && ix != noIndex {
		if d, ok := s.delayed[ix]; ok && d.UID == p.UID {
			return false
		}
	}
	return true
}

// track accounts for the pods that finished: it adds them to
// status.uncountedTerminatedPods (or completedIndexes) and returns those
// whose finalizer is to be removed, at most maxUncountedPods of them
// (reachedMax then), and the pods that still have one. It records the
// interim FailureTarget or SuccessCriteriaMet condition, and turns
// s.finished into the final Failed or Complete one. needsFlush reports
// whether the status changed.
func (s *syncState) track() (rm []*corev1.Pod, withFinalizer sets.Set[types.UID], needsFlush, reachedMax bool) {
	j := s.job
	st := &j.Status
	indexed := isIndexed(j)
	pods := s.pods
	if indexed {
		pods = append([]*corev1.Pod(nil), pods...)
		sortByIndex(pods)
	}
	withFinalizer = sets.New[types.UID]()
	for _, p := range pods {
		if hasTrackingFinalizer(p) && !s.expectedRm.Has(p.UID) {
			withFinalizer.Insert(p.UID)
		}
	}
	if countUncounted(st, withFinalizer) {
		needsFlush = true
	}
	u := st.UncountedTerminatedPods
	var newIndexes []int
	for _, p := range pods {
		if !hasTrackingFinalizer(p) || s.expectedRm.Has(p.UID) {
			continue
		}
		failed := isFailed(p, j)
		if !s.canRemoveFinalizer(p, failed) {
			continue
		}
		rm = append(rm, p)
		ix := completionIndex(p)
		switch {
		case p.Status.Phase == corev1.PodSucceeded && !s.uncountedFailed.Has(p.UID):
			if indexed {
				if ix != noIndex && ix < int(*j.Spec.Completions) && !s.prevSucceededIndexes.has(ix) {
					newIndexes = append(newIndexes, ix)
					needsFlush = true
				}
			} else if !s.uncountedSucceeded.Has(p.UID) {
				u.Succeeded = append(u.Succeeded, p.UID)
				needsFlush = true
			}
		case failed || (s.finished != nil && s.finished.Type != batchv1.JobSuccessCriteriaMet && s.finished.Type != batchv1.JobComplete):
			// A job that fails counts every pod not finished as failed.
			if s.uncountedFailed.Has(p.UID) || (indexed && (ix == noIndex || ix >= int(*j.Spec.Completions))) {
				break
			}
			if matchPolicy(j.Spec.PodFailurePolicy, p).Counts() {
				u.Failed = append(u.Failed, p.UID)
				needsFlush = true
			}
		}
		if len(newIndexes)+len(u.Succeeded)+len(u.Failed) >= maxUncountedPods {
			reachedMax = true
			break
		}
	}
	if indexed {
		s.succeededIndexes = s.succeededIndexes.withIndexes(newIndexes)
		if str := s.succeededIndexes.String(); str != st.CompletedIndexes {
			st.CompletedIndexes = str
			needsFlush = true
		}
		st.Succeeded = int32(s.succeededIndexes.total())
		if perIndex(j) {
			str := s.failedIndexes.String()
			if st.FailedIndexes == nil || *st.FailedIndexes != str {
				st.FailedIndexes = &str
				needsFlush = true
			}
		}
	}
	if f := s.finished; f != nil {
		switch f.Type {
		case batchv1.JobFailureTarget:
			st.Conditions = append(st.Conditions, *f)
			needsFlush = true
			s.finished = newCondition(batchv1.JobFailed, f.Reason, f.Message, s.now)
		case batchv1.JobSuccessCriteriaMet:
			if !hasTrueCondition(j, batchv1.JobSuccessCriteriaMet) {
				st.Conditions = append(st.Conditions, *f)
				needsFlush = true
			}
			s.finished = newCondition(batchv1.JobComplete, f.Reason, f.Message, s.now)
		}
	}
	return rm, withFinalizer, needsFlush, reachedMax
}

func sortByIndex(pods []*corev1.Pod) {
	// Stable, so that pods of one index keep the cache's order.
	slices.SortStableFunc(pods, func(a, b *corev1.Pod) int { return completionIndex(a) - completionIndex(b) })
}

// countUncounted moves the uncounted pods that no longer have a finalizer
// into the succeeded and failed counters, and reports whether it moved
// any.
func countUncounted(st *batchv1.JobStatus, withFinalizer sets.Set[types.UID]) bool {
	u := st.UncountedTerminatedPods
	keep := func(uids []types.UID) []types.UID {
		var out []types.UID
		for _, uid := range uids {
			if withFinalizer.Has(uid) {
				out = append(out, uid)
			}
		}
		return out
	}
	changed := false
	if k := keep(u.Succeeded); len(k) != len(u.Succeeded) {
		st.Succeeded += int32(len(u.Succeeded) - len(k))
		u.Succeeded, changed = k, true
	}
	if k := keep(u.Failed); len(k) != len(u.Failed) {
		st.Failed += int32(len(u.Failed) - len(k))
		u.Failed, changed = k, true
	}
	return changed
}

// enactFinished sets the final condition, and the completion time of a
// job that completed, once no pod is left uncounted or terminating. It
// reports whether the job is now finished.
func (s *syncState) enactFinished() bool {
	f := s.finished
	if f == nil {
		return false
	}
	if u := s.job.Status.UncountedTerminatedPods; len(u.Succeeded)+len(u.Failed) > 0 {
		return false
	}
	if s.terminating > 0 {
		return false
	}
	st := &s.job.Status
	if c := findCondition(st.Conditions, f.Type); c != nil {
		if c.Status != f.Status || c.Reason != f.Reason || c.Message != f.Message {
			*c = *f
		}
	} else {
		st.Conditions = append(st.Conditions, *f)
	}
	if f.Type == batchv1.JobComplete {
		st.CompletionTime = new(f.LastTransitionTime)
	}
	return true
}
