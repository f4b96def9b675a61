package batch

import (
	"fmt"
	"regexp"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/outpost-mesh/outpost/hub/registry/core"
	"github.com/outpost-mesh/outpost/hub/registry/typed"
	"github.com/outpost-mesh/outpost/internal/cron"
)

// maxCronJobNameLength leaves room for the 11 characters the cronjob
// controller appends to a job's name ("-" and the scheduled minute) within
// a DNS label's 63.
const maxCronJobNameLength = 52

// cronJobRules returns the rules of batch/v1 cronjobs, with ages in their
// Table rows measured against now (nil is the wall clock). Its status
// updates are not validated, and it has no field selectors beyond
// metadata's.
func cronJobRules(now func() time.Time) *typed.Rules[*batchv1.CronJob] {
	return &typed.Rules[*batchv1.CronJob]{
		Now:           now,
		Defaults:      defaultCronJob,
		PrepareCreate: prepareCronJobCreate,
		PrepareUpdate: prepareCronJobUpdate,
		Check:         validateCronJob,
		CheckUpdate:   validateCronJobUpdate,
		TableColumns:  cronJobColumns(),
		TableRow:      cronJobRow,
	}
}

// defaultCronJob applies upstream's defaults of a cronjob.
func defaultCronJob(cj *batchv1.CronJob) {
	s := &cj.Spec
	if s.ConcurrencyPolicy == "" {
		s.ConcurrencyPolicy = batchv1.AllowConcurrent
	}
	if s.Suspend == nil {
		s.Suspend = new(false)
	}
	if s.SuccessfulJobsHistoryLimit == nil {
		s.SuccessfulJobsHistoryLimit = new(int32(3))
	}
	if s.FailedJobsHistoryLimit == nil {
		s.FailedJobsHistoryLimit = new(int32(1))
	}
	// Upstream defaults the job template's pods, not the job template
	// itself: its spec shows no backoffLimit or completionMode.
	core.DefaultPodTemplate(&s.JobTemplate.Spec.Template)
}

// prepareCronJobCreate clears the status a client sent.
func prepareCronJobCreate(cj *batchv1.CronJob) { cj.Status = batchv1.CronJobStatus{} }

// prepareCronJobUpdate keeps the stored status.
func prepareCronJobUpdate(cj, old *batchv1.CronJob) { cj.Status = old.Status }

// validateCronJob checks a new cronjob.
func validateCronJob(cj *batchv1.CronJob) field.ErrorList {
	errs := apivalidation.ValidateObjectMeta(&cj.ObjectMeta, true, apivalidation.NameIsDNSSubdomain, metadataPath)
	if len(cj.Name) > maxCronJobNameLength {
		errs = append(errs, field.Invalid(metadataPath.Child("name"), cj.Name, fmt.Sprintf("must be no more than %d characters", maxCronJobNameLength)))
	}
	return append(errs, validateCronJobSpec(&cj.Spec, nil, specPath)...)
}

// validateCronJobUpdate checks an update of cronjob o to cj.
func validateCronJobUpdate(cj, o *batchv1.CronJob) field.ErrorList {
	// No name length check: cronjobs named before it stay updatable.
	errs := apivalidation.ValidateObjectMetaUpdate(&cj.ObjectMeta, &o.ObjectMeta, metadataPath)
	return append(errs, validateCronJobSpec(&cj.Spec, &o.Spec, specPath)...)
}

// validateCronJobSpec checks a cronjob's spec; old is the stored spec on an
// update, nil on a create.
func validateCronJobSpec(s, old *batchv1.CronJobSpec, fld *field.Path) field.ErrorList {
	var errs field.ErrorList
	sp := fld.Child("schedule")
	if s.Schedule == "" {
		errs = append(errs, field.Required(sp, ""))
	} else {
		if _, err := cron.Parse(s.Schedule); err != nil {
			errs = append(errs, field.Invalid(sp, s.Schedule, err.Error()))
		}
		// The zone belongs in timeZone; a schedule stored with one
		// before that rule may keep it.
		hadTZ := old != nil && strings.Contains(old.Schedule, "TZ")
		switch {
		case hadTZ && strings.Contains(s.Schedule, "TZ") && s.TimeZone != nil:
			errs = append(errs, field.Invalid(sp, s.Schedule, "cannot use both timeZone field and TZ or CRON_TZ in schedule"))
		case !hadTZ && strings.Contains(s.Schedule, "TZ"):
			errs = append(errs, field.Invalid(sp, s.Schedule, "cannot use TZ or CRON_TZ in schedule, use timeZone field instead"))
		}
	}
	errs = append(errs, nonNegative(s.StartingDeadlineSeconds, fld.Child("startingDeadlineSeconds"))...)
	if old == nil || !equalStrings(old.TimeZone, s.TimeZone) {
		errs = append(errs, validateTimeZone(s.TimeZone, fld.Child("timeZone"))...)
	}
	switch p := s.ConcurrencyPolicy; p {
	case batchv1.AllowConcurrent, batchv1.ForbidConcurrent, batchv1.ReplaceConcurrent:
	case "":
		errs = append(errs, field.Required(fld.Child("concurrencyPolicy"), ""))
	default:
		errs = append(errs, field.NotSupported(fld.Child("concurrencyPolicy"), p, []batchv1.ConcurrencyPolicy{
			batchv1.AllowConcurrent, batchv1.ForbidConcurrent, batchv1.ReplaceConcurrent}))
	}

	jt := fld.Child("jobTemplate")
	errs = append(errs, metav1validation.ValidateLabels(s.JobTemplate.Labels, jt.Child("metadata", "labels"))...)
	errs = append(errs, apivalidation.ValidateAnnotations(s.JobTemplate.Annotations, jt.Child("metadata", "annotations"))...)
	js := &s.JobTemplate.Spec
	errs = append(errs, validateJobTemplateSpec(js, jt.Child("spec"))...)
	if js.Selector != nil {
		errs = append(errs, field.Invalid(jt.Child("spec", "selector"), js.Selector, "`selector` will be auto-generated"))
	}
	if js.ManualSelector != nil && *js.ManualSelector {
		errs = append(errs, field.NotSupported(jt.Child("spec", "manualSelector"), *js.ManualSelector, []string{"nil", "false"}))
	}

	errs = append(errs, nonNegative(s.SuccessfulJobsHistoryLimit, fld.Child("successfulJobsHistoryLimit"))...)
	return append(errs, nonNegative(s.FailedJobsHistoryLimit, fld.Child("failedJobsHistoryLimit"))...)
}

// timeZonePart is what each /-separated part of a zone name may hold.
var timeZonePart = regexp.MustCompile(`^[A-Za-z\.\-_0-9+]{1,14}$`)

// validateTimeZone checks that tz, if set, names a zone of the IANA
// database, which the hub carries built in.
func validateTimeZone(tz *string, fld *field.Path) field.ErrorList {
	if tz == nil {
		return nil
	}
	if *tz == "" {
		return field.ErrorList{field.Invalid(fld, *tz, "timeZone must be nil or non-empty string")}
	}
	for _, part := range strings.Split(*tz, "/") {
		if part == "." || part == ".." || strings.HasPrefix(part, "-") || !timeZonePart.MatchString(part) {
			return field.ErrorList{field.Invalid(fld, *tz, "unknown time zone "+*tz)}
		}
	}
	if strings.EqualFold(*tz, "Local") {
		return field.ErrorList{field.Invalid(fld, *tz, "timeZone must be an explicit time zone as defined in https://www.iana.org/time-zones")}
	}
	if _, err := time.LoadLocation(*tz); err != nil {
		return field.ErrorList{field.Invalid(fld, *tz, err.Error())}
	}
	return nil
}

func equalStrings(a, b *string) bool {
	return (a == nil) == (b == nil) && (a == nil || *a == *b)
}

// cronJobColumns are upstream's columns of cronjobs.
func cronJobColumns() []metav1.TableColumnDefinition {
	spec, status := batchv1.CronJobSpec{}.SwaggerDoc(), batchv1.CronJobStatus{}.SwaggerDoc()
	return []metav1.TableColumnDefinition{
		nameColumn,
		{Name: "Schedule", Type: "string", Description: spec["schedule"]},
		{Name: "Timezone", Type: "string", Description: spec["timeZone"]},
		{Name: "Suspend", Type: "boolean", Description: spec["suspend"]},
		{Name: "Active", Type: "integer", Description: status["active"]},
		{Name: "Last Schedule", Type: "string", Description: status["lastScheduleTime"]},
		ageColumn,
		containersColumn,
		imagesColumn,
		selectorColumn,
	}
}

// cronJobRow is cj's cells for cronJobColumns, its ages measured against
// now.
func cronJobRow(cj *batchv1.CronJob, now time.Time) []interface{} {
	tz := "<none>"
	if cj.Spec.TimeZone != nil {
		tz = *cj.Spec.TimeZone
	}
	suspend := "<unset>"
	if cj.Spec.Suspend != nil {
		suspend = "False"
		if *cj.Spec.Suspend {
			suspend = "True"
		}
	}
	last := "<none>"
	if cj.Status.LastScheduleTime != nil {
		last = age(now, *cj.Status.LastScheduleTime)
	}
	names, images := containerCells(cj.Spec.JobTemplate.Spec.Template.Spec.Containers)
	return []interface{}{
		cj.Name,
		cj.Spec.Schedule,
		tz,
		suspend,
		int64(len(cj.Status.Active)),
		last,
		age(now, cj.CreationTimestamp),
		names,
		images,
		metav1.FormatLabelSelector(cj.Spec.JobTemplate.Spec.Selector),
	}
}
