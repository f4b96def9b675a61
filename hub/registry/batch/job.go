package batch

import (
	"fmt"
	"maps"
	"math"
	"strconv"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/duration"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/outpost-mesh/outpost/hub/registry/core"
	"github.com/outpost-mesh/outpost/hub/registry/typed"
)

// The unprefixed labels upstream still puts on a job's pods next to the
// batch.kubernetes.io ones, and that its validation requires.
const (
	legacyJobNameLabel       = "job-name"
	legacyControllerUIDLabel = "controller-uid"
)

// Limits of upstream's job validation.
const (
	maxParallelismForIndexedJob         = 100_000
	maxFailedIndexesForBackoffPerIndex  = 100_000
	completionsSoftLimit                = 100_000
	parallelismLimitForHighCompletions  = 10_000
	maxPodFailurePolicyRules            = 20
	maxPodFailurePolicyOnExitCodeValues = 255
	maxPodFailurePolicyOnPodConditions  = 20
	maxSuccessPolicyRules               = 20
	maxManagedByLength                  = 63
)

var (
	metadataPath = field.NewPath("metadata")
	specPath     = field.NewPath("spec")
	statusPath   = field.NewPath("status")
)

// jobRules returns the rules of batch/v1 jobs, with ages and durations in
// their Table rows measured against now (nil is the wall clock).
func jobRules(now func() time.Time) *typed.Rules[*batchv1.Job] {
	return &typed.Rules[*batchv1.Job]{
		Now:           now,
		Defaults:      defaultJob,
		PrepareCreate: prepareJobCreate,
		PrepareUpdate: prepareJobUpdate,
		Check:         validateJob,
		CheckUpdate:   validateJobUpdate,
		CheckStatus:   validateJobStatusUpdate,
		FieldSet:      jobFields,
		TableColumns:  jobColumns(),
		TableRow:      jobRow,
	}
}

// defaultJob applies upstream's defaults of a job.
func defaultJob(j *batchv1.Job) {
	s := &j.Spec
	// A job left without both runs one pod to completion.
	if s.Completions == nil && s.Parallelism == nil {
		s.Completions = new(int32(1))
		s.Parallelism = new(int32(1))
	}
	if s.Parallelism == nil {
		s.Parallelism = new(int32(1))
	}
	if s.BackoffLimit == nil {
		s.BackoffLimit = new(int32(6))
		if s.BackoffLimitPerIndex != nil {
			s.BackoffLimit = new(int32(math.MaxInt32))
		}
	}
	copyTemplateLabels(j)
	if s.CompletionMode == nil {
		s.CompletionMode = new(batchv1.NonIndexedCompletion)
	}
	if s.Suspend == nil {
		s.Suspend = new(false)
	}
	if s.PodFailurePolicy != nil {
		for _, r := range s.PodFailurePolicy.Rules {
			for i := range r.OnPodConditions {
				if r.OnPodConditions[i].Status == "" {
					r.OnPodConditions[i].Status = corev1.ConditionTrue
				}
			}
		}
	}
	if s.PodReplacementPolicy == nil {
		s.PodReplacementPolicy = new(batchv1.TerminatingOrFailed)
		if s.PodFailurePolicy != nil {
			s.PodReplacementPolicy = new(batchv1.Failed)
		}
	}
	core.DefaultPodTemplate(&s.Template)
}

// copyTemplateLabels gives a job without labels its template's labels, as
// upstream's defaulting does.
func copyTemplateLabels(j *batchv1.Job) {
	if j.Spec.Template.Labels != nil && len(j.Labels) == 0 {
		j.Labels = maps.Clone(j.Spec.Template.Labels)
	}
}

// generateSelector gives a job whose selector is not manual the selector
// and pod labels upstream generates: the job's uid under controller-uid and
// its name under job-name, each with and without the batch.kubernetes.io
// prefix; only the prefixed uid label is selected. Labels the user set are
// kept, and validation rejects them if they conflict. It needs the job's
// uid; without one it does nothing.
//
// Upstream generates these in PrepareForCreate, where its uid is already
// set. The machinery here sets the uid after PrepareForCreate, so both
// prepareJobCreate and validateJob call this; it is idempotent.
func generateSelector(j *batchv1.Job) {
	if j.UID == "" || (j.Spec.ManualSelector != nil && *j.Spec.ManualSelector) {
		return
	}
	t := &j.Spec.Template
	if t.Labels == nil {
		t.Labels = make(map[string]string)
	}
	for key, value := range map[string]string{
		legacyJobNameLabel:         j.Name,
		batchv1.JobNameLabel:       j.Name,
		legacyControllerUIDLabel:   string(j.UID),
		batchv1.ControllerUidLabel: string(j.UID),
	} {
		if _, ok := t.Labels[key]; !ok {
			t.Labels[key] = value
		}
	}
	if j.Spec.Selector == nil {
		j.Spec.Selector = &metav1.LabelSelector{}
	}
	if j.Spec.Selector.MatchLabels == nil {
		j.Spec.Selector.MatchLabels = make(map[string]string)
	}
	if _, ok := j.Spec.Selector.MatchLabels[batchv1.ControllerUidLabel]; !ok {
		j.Spec.Selector.MatchLabels[batchv1.ControllerUidLabel] = string(j.UID)
	}
	// Upstream's defaulting, run again when the job is read back, gives a
	// job without labels its template's labels, generated ones included;
	// do it now, since the machinery does not default on read.
	copyTemplateLabels(j)
}

// prepareJobCreate clears the status a client sent and generates the
// selector.
func prepareJobCreate(j *batchv1.Job) {
	j.Status = batchv1.JobStatus{}
	generateSelector(j)
}

// prepareJobUpdate keeps the stored status.
func prepareJobUpdate(j, old *batchv1.Job) { j.Status = old.Status }

// validateJob checks a new job, generating its selector first (see
// generateSelector).
func validateJob(j *batchv1.Job) field.ErrorList {
	generateSelector(j)
	errs := apivalidation.ValidateObjectMeta(&j.ObjectMeta, true, apivalidation.NameIsDNSSubdomain, metadataPath)
	errs = append(errs, validateGeneratedSelector(j, true)...)
	errs = append(errs, validateJobSpec(&j.Spec, specPath)...)
	if s := &j.Spec; s.CompletionMode != nil && *s.CompletionMode == batchv1.IndexedCompletion && s.Completions != nil && *s.Completions > 0 {
		// Pods of an indexed job are named <job>-<index>, a DNS label.
		last := fmt.Sprintf("%s-%d", j.Name, *s.Completions-1)
		if len(validation.IsDNS1123Label(last)) > 0 {
			errs = append(errs, field.Invalid(metadataPath.Child("name"), j.Name, "will not able to create pod with invalid DNS label: "+last))
		}
	}
	return errs
}

// validateJobUpdate checks an update of job o to j.
func validateJobUpdate(j, o *batchv1.Job) field.ErrorList {
	errs := apivalidation.ValidateObjectMetaUpdate(&j.ObjectMeta, &o.ObjectMeta, metadataPath)
	// Jobs created before the prefixed labels keep passing without them.
	_, hadName := o.Spec.Template.Labels[batchv1.JobNameLabel]
	_, hadUID := o.Spec.Template.Labels[batchv1.ControllerUidLabel]
	errs = append(errs, validateGeneratedSelector(j, hadName && hadUID)...)
	errs = append(errs, validateJobSpec(&j.Spec, specPath)...)
	return append(errs, validateJobSpecUpdate(&j.Spec, o, specPath)...)
}

// validateJobStatusUpdate checks an update of job o's status to j's.
func validateJobStatusUpdate(j, o *batchv1.Job) field.ErrorList {
	errs := apivalidation.ValidateObjectMetaUpdate(&j.ObjectMeta, &o.ObjectMeta, metadataPath)
	s := &j.Status
	errs = append(errs, apivalidation.ValidateNonnegativeField(int64(s.Active), statusPath.Child("active"))...)
	errs = append(errs, apivalidation.ValidateNonnegativeField(int64(s.Succeeded), statusPath.Child("succeeded"))...)
	errs = append(errs, apivalidation.ValidateNonnegativeField(int64(s.Failed), statusPath.Child("failed"))...)
	errs = append(errs, nonNegative(s.Ready, statusPath.Child("ready"))...)
	return append(errs, nonNegative(s.Terminating, statusPath.Child("terminating"))...)
}

// validateGeneratedSelector checks that a job whose selector is not manual
// carries the generated labels and selector. prefixed requires the
// batch.kubernetes.io labels too.
func validateGeneratedSelector(j *batchv1.Job, prefixed bool) field.ErrorList {
	if (j.Spec.ManualSelector != nil && *j.Spec.ManualSelector) || j.Spec.Selector == nil {
		return nil // a missing selector is reported with the spec
	}
	var errs field.ErrorList
	if j.UID == "" {
		errs = append(errs, field.Required(metadataPath.Child("uid"), ""))
	}
	want := []struct{ key, value string }{
		{legacyControllerUIDLabel, string(j.UID)},
		{legacyJobNameLabel, j.Name},
	}
	if prefixed {
		want = append(want, struct{ key, value string }{batchv1.ControllerUidLabel, string(j.UID)},
			struct{ key, value string }{batchv1.JobNameLabel, j.Name})
	}
	expected := labels.Set{}
	lp := specPath.Child("template", "metadata", "labels")
	for _, l := range want {
		expected[l.key] = l.value
		switch got, ok := j.Spec.Template.Labels[l.key]; {
		case !ok:
			errs = append(errs, field.Required(lp.Key(l.key), fmt.Sprintf("must be '%s'", l.value)))
		case got != l.value:
			errs = append(errs, field.Invalid(lp.Key(l.key), j.Spec.Template.Labels, fmt.Sprintf("must be '%s'", l.value)))
		}
	}
	if sel, err := metav1.LabelSelectorAsSelector(j.Spec.Selector); err == nil && !sel.Matches(expected) {
		errs = append(errs, field.Invalid(specPath.Child("selector"), j.Spec.Selector, "`selector` not auto-generated"))
	}
	return errs
}

// validateJobSpec checks a job's spec, its selector included.
func validateJobSpec(s *batchv1.JobSpec, fld *field.Path) field.ErrorList {
	errs := validateJobTemplateSpec(s, fld)
	if s.Selector == nil {
		return append(errs, field.Required(fld.Child("selector"), ""))
	}
	errs = append(errs, metav1validation.ValidateLabelSelector(s.Selector, metav1validation.LabelSelectorValidationOptions{}, fld.Child("selector"))...)
	if sel, err := metav1.LabelSelectorAsSelector(s.Selector); err == nil {
		if sel.Empty() {
			errs = append(errs, field.Required(fld.Child("selector"), ""))
		}
		if !sel.Matches(labels.Set(s.Template.Labels)) {
			errs = append(errs, field.Invalid(fld.Child("template", "metadata", "labels"), s.Template.Labels, "`selector` does not match template `labels`"))
		}
	}
	return errs
}

// validateJobTemplateSpec checks the parts of a job's spec that a
// cronjob's job template shares, all but the selector.
func validateJobTemplateSpec(s *batchv1.JobSpec, fld *field.Path) field.ErrorList {
	errs := nonNegative(s.Parallelism, fld.Child("parallelism"))
	errs = append(errs, nonNegative(s.Completions, fld.Child("completions"))...)
	errs = append(errs, nonNegative(s.ActiveDeadlineSeconds, fld.Child("activeDeadlineSeconds"))...)
	errs = append(errs, nonNegative(s.BackoffLimit, fld.Child("backoffLimit"))...)
	errs = append(errs, nonNegative(s.TTLSecondsAfterFinished, fld.Child("ttlSecondsAfterFinished"))...)
	errs = append(errs, nonNegative(s.BackoffLimitPerIndex, fld.Child("backoffLimitPerIndex"))...)
	if s.MaxFailedIndexes != nil {
		errs = append(errs, nonNegative(s.MaxFailedIndexes, fld.Child("maxFailedIndexes"))...)
		if s.BackoffLimitPerIndex == nil {
			errs = append(errs, field.Required(fld.Child("backoffLimitPerIndex"), "when maxFailedIndexes is specified"))
		}
	}
	if s.ManagedBy != nil {
		errs = append(errs, validation.IsDomainPrefixedPath(fld.Child("managedBy"), *s.ManagedBy)...)
		if len(*s.ManagedBy) > maxManagedByLength {
			errs = append(errs, field.TooLong(fld.Child("managedBy"), *s.ManagedBy, maxManagedByLength))
		}
	}

	indexed := s.CompletionMode != nil && *s.CompletionMode == batchv1.IndexedCompletion
	if m := s.CompletionMode; m != nil && *m != batchv1.NonIndexedCompletion && *m != batchv1.IndexedCompletion {
		errs = append(errs, field.NotSupported(fld.Child("completionMode"), *m, []batchv1.CompletionMode{batchv1.NonIndexedCompletion, batchv1.IndexedCompletion}))
	}
	if indexed {
		if s.Completions == nil {
			errs = append(errs, field.Required(fld.Child("completions"), "when completion mode is Indexed"))
		}
		if s.Parallelism != nil && *s.Parallelism > maxParallelismForIndexedJob {
			errs = append(errs, field.Invalid(fld.Child("parallelism"), *s.Parallelism,
				fmt.Sprintf("must be less than or equal to %d when completion mode is Indexed", maxParallelismForIndexedJob)))
		}
		if s.MaxFailedIndexes != nil {
			if s.Completions != nil && *s.MaxFailedIndexes > *s.Completions {
				errs = append(errs, field.Invalid(fld.Child("maxFailedIndexes"), *s.MaxFailedIndexes, "must be less than or equal to completions"))
			}
			if *s.MaxFailedIndexes > maxFailedIndexesForBackoffPerIndex {
				errs = append(errs, field.Invalid(fld.Child("maxFailedIndexes"), *s.MaxFailedIndexes,
					fmt.Sprintf("must be less than or equal to %d", maxFailedIndexesForBackoffPerIndex)))
			}
		}
		if s.Completions != nil && s.BackoffLimitPerIndex != nil && s.Parallelism != nil &&
			*s.Completions > completionsSoftLimit && *s.Parallelism > parallelismLimitForHighCompletions {
			errs = append(errs, field.Invalid(fld.Child("parallelism"), *s.Parallelism,
				fmt.Sprintf("must be less than or equal to %d when completions are above %d and used with backoff limit per index",
					parallelismLimitForHighCompletions, completionsSoftLimit)))
		}
	} else {
		if s.BackoffLimitPerIndex != nil {
			errs = append(errs, field.Invalid(fld.Child("backoffLimitPerIndex"), *s.BackoffLimitPerIndex, "requires indexed completion mode"))
		}
		if s.MaxFailedIndexes != nil {
			errs = append(errs, field.Invalid(fld.Child("maxFailedIndexes"), *s.MaxFailedIndexes, "requires indexed completion mode"))
		}
	}

	if s.PodFailurePolicy != nil {
		errs = append(errs, validatePodFailurePolicy(s, fld.Child("podFailurePolicy"))...)
	}
	if s.SuccessPolicy != nil {
		errs = append(errs, validateSuccessPolicy(s, indexed, fld.Child("successPolicy"))...)
	}
	if p := s.PodReplacementPolicy; p != nil {
		switch {
		case s.PodFailurePolicy != nil && *p != batchv1.Failed:
			errs = append(errs, field.NotSupported(fld.Child("podReplacementPolicy"), *p, []batchv1.PodReplacementPolicy{batchv1.Failed}))
		case *p != batchv1.Failed && *p != batchv1.TerminatingOrFailed:
			errs = append(errs, field.NotSupported(fld.Child("podReplacementPolicy"), *p, []batchv1.PodReplacementPolicy{batchv1.Failed, batchv1.TerminatingOrFailed}))
		}
	}

	tp := fld.Child("template")
	errs = append(errs, core.ValidatePodTemplate(&s.Template, tp)...)
	// The pod defaults make an unset restart policy Always, so both mean
	// the user did not choose one of the two a job may have.
	switch rp, rpPath := s.Template.Spec.RestartPolicy, tp.Child("spec", "restartPolicy"); {
	case rp == corev1.RestartPolicyAlways || rp == "":
		errs = append(errs, field.Required(rpPath, `valid values: "OnFailure", "Never"`))
	case rp != corev1.RestartPolicyOnFailure && rp != corev1.RestartPolicyNever:
		errs = append(errs, field.NotSupported(rpPath, rp, []corev1.RestartPolicy{corev1.RestartPolicyOnFailure, corev1.RestartPolicyNever}))
	case s.PodFailurePolicy != nil && rp != corev1.RestartPolicyNever:
		errs = append(errs, field.Invalid(rpPath, rp, `only "Never" is supported when podFailurePolicy is specified`))
	}
	return errs
}

func validatePodFailurePolicy(s *batchv1.JobSpec, fld *field.Path) field.ErrorList {
	rules := s.PodFailurePolicy.Rules
	rp := fld.Child("rules")
	if len(rules) > maxPodFailurePolicyRules {
		return field.ErrorList{field.TooMany(rp, len(rules), maxPodFailurePolicyRules)}
	}
	var errs field.ErrorList
	actions := []batchv1.PodFailurePolicyAction{batchv1.PodFailurePolicyActionCount, batchv1.PodFailurePolicyActionFailIndex,
		batchv1.PodFailurePolicyActionFailJob, batchv1.PodFailurePolicyActionIgnore}
	for i, r := range rules {
		p := rp.Index(i)
		switch r.Action {
		case batchv1.PodFailurePolicyActionFailJob, batchv1.PodFailurePolicyActionIgnore, batchv1.PodFailurePolicyActionCount:
		case batchv1.PodFailurePolicyActionFailIndex:
			if s.BackoffLimitPerIndex == nil {
				errs = append(errs, field.Invalid(p.Child("action"), r.Action, "requires the backoffLimitPerIndex to be set"))
			}
		default:
			errs = append(errs, field.NotSupported(p.Child("action"), r.Action, actions))
		}
		switch {
		case r.OnExitCodes != nil && len(r.OnPodConditions) > 0:
			errs = append(errs, field.Invalid(p, r, "specifying both OnExitCodes and OnPodConditions is not supported"))
		case r.OnExitCodes == nil && len(r.OnPodConditions) == 0:
			errs = append(errs, field.Invalid(p, r, "specifying one of OnExitCodes and OnPodConditions is required"))
		}
		if c := r.OnExitCodes; c != nil {
			cp := p.Child("onExitCodes")
			if c.ContainerName != nil && !templateHasContainer(&s.Template.Spec, *c.ContainerName) {
				errs = append(errs, field.Invalid(cp.Child("containerName"), *c.ContainerName, "must be one of the container or initContainer names in the pod template"))
			}
			switch c.Operator {
			case batchv1.PodFailurePolicyOnExitCodesOpIn, batchv1.PodFailurePolicyOnExitCodesOpNotIn:
			default:
				errs = append(errs, field.NotSupported(cp.Child("operator"), c.Operator, []batchv1.PodFailurePolicyOnExitCodesOperator{
					batchv1.PodFailurePolicyOnExitCodesOpIn, batchv1.PodFailurePolicyOnExitCodesOpNotIn}))
			}
			vp := cp.Child("values")
			switch n := len(c.Values); {
			case n == 0:
				errs = append(errs, field.Invalid(vp, c.Values, "at least one value is required"))
			case n > maxPodFailurePolicyOnExitCodeValues:
				errs = append(errs, field.TooMany(vp, n, maxPodFailurePolicyOnExitCodeValues))
			}
			for k, v := range c.Values {
				switch {
				case c.Operator == batchv1.PodFailurePolicyOnExitCodesOpIn && v == 0:
					errs = append(errs, field.Invalid(vp.Index(k), v, "must not be 0 for the In operator"))
				case k > 0 && c.Values[k-1] == v:
					errs = append(errs, field.Duplicate(vp.Index(k), v))
				case k > 0 && c.Values[k-1] > v:
					errs = append(errs, field.Invalid(vp.Index(k), v, "must be ordered"))
				}
			}
		}
		cp := p.Child("onPodConditions")
		if n := len(r.OnPodConditions); n > maxPodFailurePolicyOnPodConditions {
			errs = append(errs, field.TooMany(cp, n, maxPodFailurePolicyOnPodConditions))
		}
		for k, c := range r.OnPodConditions {
			switch c.Status {
			case corev1.ConditionTrue, corev1.ConditionFalse, corev1.ConditionUnknown:
			default:
				errs = append(errs, field.NotSupported(cp.Index(k).Child("status"), c.Status, []corev1.ConditionStatus{
					corev1.ConditionFalse, corev1.ConditionTrue, corev1.ConditionUnknown}))
			}
			for _, msg := range validation.IsDNS1123Subdomain(string(c.Type)) {
				errs = append(errs, field.Invalid(cp.Index(k).Child("type"), c.Type, msg))
			}
		}
	}
	return errs
}

func templateHasContainer(s *corev1.PodSpec, name string) bool {
	for _, cs := range [][]corev1.Container{s.InitContainers, s.Containers} {
		for _, c := range cs {
			if c.Name == name {
				return true
			}
		}
	}
	return false
}

func validateSuccessPolicy(s *batchv1.JobSpec, indexed bool, fld *field.Path) field.ErrorList {
	rp := fld.Child("rules")
	rules := s.SuccessPolicy.Rules
	if !indexed {
		return field.ErrorList{field.Invalid(fld.Child("completionMode"), s.CompletionMode, "requires indexed completion mode")}
	}
	switch n := len(rules); {
	case n == 0:
		return field.ErrorList{field.Required(rp, "at least one rules must be specified when the successPolicy is specified")}
	case n > maxSuccessPolicyRules:
		return field.ErrorList{field.TooMany(rp, n, maxSuccessPolicyRules)}
	}
	var errs field.ErrorList
	for i, r := range rules {
		p := rp.Index(i)
		if r.SucceededIndexes == nil && r.SucceededCount == nil {
			errs = append(errs, field.Required(p, "at least one of succeededCount or succeededIndexes must be specified"))
		}
		if r.SucceededCount != nil {
			if *r.SucceededCount < 0 {
				errs = append(errs, field.Invalid(p.Child("succeededCount"), *r.SucceededCount, "must be greater than or equal to 0"))
			} else if s.Completions != nil && *r.SucceededCount > *s.Completions {
				errs = append(errs, field.Invalid(p.Child("succeededCount"), *r.SucceededCount,
					fmt.Sprintf("must be less than or equal to %d (the number of specified completions)", *s.Completions)))
			}
		}
	}
	return errs
}

// validateJobSpecUpdate checks what an update of a job may not change:
// the selector, the completion mode and the failure and success policies;
// completions, except of an indexed job in tandem with parallelism; and the
// pod template, except the scheduling directives of a job suspended before
// it ever started.
func validateJobSpecUpdate(s *batchv1.JobSpec, old *batchv1.Job, fld *field.Path) field.ErrorList {
	o := &old.Spec
	var errs field.ErrorList
	indexed := s.CompletionMode != nil && *s.CompletionMode == batchv1.IndexedCompletion
	if !indexed {
		errs = append(errs, apivalidation.ValidateImmutableField(s.Completions, o.Completions, fld.Child("completions"))...)
	} else if !equality.Semantic.DeepEqual(s.Completions, o.Completions) && s.Completions != nil &&
		(s.Parallelism == nil || *s.Completions != *s.Parallelism) {
		errs = append(errs, field.Invalid(fld.Child("completions"), *s.Completions, "can only be modified in tandem with spec.parallelism"))
	}
	errs = append(errs, apivalidation.ValidateImmutableField(s.Selector, o.Selector, fld.Child("selector"))...)

	oldTemplate := &o.Template
	if old.Spec.Suspend != nil && *old.Spec.Suspend && old.Status.StartTime == nil {
		oldTemplate = mutableSchedulingDirectives(&s.Template, &o.Template)
	}
	errs = append(errs, apivalidation.ValidateImmutableField(s.Template, *oldTemplate, fld.Child("template"))...)

	errs = append(errs, apivalidation.ValidateImmutableField(s.CompletionMode, o.CompletionMode, fld.Child("completionMode"))...)
	errs = append(errs, apivalidation.ValidateImmutableField(s.PodFailurePolicy, o.PodFailurePolicy, fld.Child("podFailurePolicy"))...)
	errs = append(errs, apivalidation.ValidateImmutableField(s.BackoffLimitPerIndex, o.BackoffLimitPerIndex, fld.Child("backoffLimitPerIndex"))...)
	errs = append(errs, apivalidation.ValidateImmutableField(s.ManagedBy, o.ManagedBy, fld.Child("managedBy"))...)
	return append(errs, apivalidation.ValidateImmutableField(s.SuccessPolicy, o.SuccessPolicy, fld.Child("successPolicy"))...)
}

// mutableSchedulingDirectives returns old with what a suspended job that
// never started may change taken from t: node affinity, node selector,
// tolerations, scheduling gates, and the template's labels and annotations.
func mutableSchedulingDirectives(t, old *corev1.PodTemplateSpec) *corev1.PodTemplateSpec {
	o := old.DeepCopy()
	switch {
	case t.Spec.Affinity == nil && o.Spec.Affinity != nil:
		// The affinity may be cleared if it held only node affinity.
		o.Spec.Affinity.NodeAffinity = nil
		if *o.Spec.Affinity == (corev1.Affinity{}) {
			o.Spec.Affinity = nil
		}
	case t.Spec.Affinity != nil && o.Spec.Affinity == nil:
		o.Spec.Affinity = &corev1.Affinity{NodeAffinity: t.Spec.Affinity.NodeAffinity}
	case t.Spec.Affinity != nil && o.Spec.Affinity != nil:
		o.Spec.Affinity.NodeAffinity = t.Spec.Affinity.NodeAffinity
	}
	o.Spec.NodeSelector = t.Spec.NodeSelector
	o.Spec.Tolerations = t.Spec.Tolerations
	o.Spec.SchedulingGates = t.Spec.SchedulingGates
	o.Labels = t.Labels
	o.Annotations = t.Annotations
	return o
}

// jobFields is status.successful, which upstream selects jobs by.
func jobFields(j *batchv1.Job) fields.Set {
	return fields.Set{"status.successful": strconv.Itoa(int(j.Status.Succeeded))}
}

// jobColumns are upstream's columns of jobs.
func jobColumns() []metav1.TableColumnDefinition {
	return []metav1.TableColumnDefinition{
		nameColumn,
		{Name: "Status", Type: "string", Description: "Status of the job."},
		{Name: "Completions", Type: "string", Description: batchv1.JobStatus{}.SwaggerDoc()["succeeded"]},
		{Name: "Duration", Type: "string", Description: "Time required to complete the job."},
		ageColumn,
		containersColumn,
		imagesColumn,
		selectorColumn,
	}
}

// jobRow is j's cells for jobColumns, its age and duration measured
// against now.
func jobRow(j *batchv1.Job, now time.Time) []interface{} {
	names, images := containerCells(j.Spec.Template.Spec.Containers)
	return []interface{}{
		j.Name,
		jobStatus(j),
		jobCompletions(j),
		jobDuration(j, now),
		age(now, j.CreationTimestamp),
		names,
		images,
		metav1.FormatLabelSelector(j.Spec.Selector),
	}
}

// jobStatus is the STATUS column: the job's state as its conditions tell.
func jobStatus(j *batchv1.Job) string {
	switch {
	case hasCondition(j, batchv1.JobComplete):
		return "Complete"
	case hasCondition(j, batchv1.JobFailed):
		return "Failed"
	case j.DeletionTimestamp != nil:
		return "Terminating"
	case hasCondition(j, batchv1.JobSuspended):
		return "Suspended"
	case hasCondition(j, batchv1.JobFailureTarget):
		return "FailureTarget"
	case hasCondition(j, batchv1.JobSuccessCriteriaMet):
		return "SuccessCriteriaMet"
	default:
		return "Running"
	}
}

// hasCondition reports whether the first condition of type t is true.
func hasCondition(j *batchv1.Job, t batchv1.JobConditionType) bool {
	for _, c := range j.Status.Conditions {
		if c.Type == t {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// jobCompletions is the COMPLETIONS column: succeeded pods of those
// wanted, "n/1 of p" for a work queue job run p wide.
func jobCompletions(j *batchv1.Job) string {
	if c := j.Spec.Completions; c != nil {
		return fmt.Sprintf("%d/%d", j.Status.Succeeded, *c)
	}
	if p := j.Spec.Parallelism; p != nil && *p > 1 {
		return fmt.Sprintf("%d/1 of %d", j.Status.Succeeded, *p)
	}
	return fmt.Sprintf("%d/1", j.Status.Succeeded)
}

// jobDuration is the DURATION column: how long the job ran, or has been
// running; empty before it starts.
func jobDuration(j *batchv1.Job, now time.Time) string {
	switch start, end := j.Status.StartTime, j.Status.CompletionTime; {
	case start == nil:
		return ""
	case end == nil:
		return duration.HumanDuration(now.Sub(start.Time))
	default:
		return duration.HumanDuration(end.Sub(start.Time))
	}
}

// nonNegative checks that the value at fld, if set, is not negative.
func nonNegative[T int32 | int64](v *T, fld *field.Path) field.ErrorList {
	if v == nil {
		return nil
	}
	return apivalidation.ValidateNonnegativeField(int64(*v), fld)
}
