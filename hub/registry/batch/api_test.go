package batch_test

import (
	"context"
	"slices"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/outpost-mesh/outpost/hub/registry/typed/typedtest"
	"github.com/outpost-mesh/outpost/test/hubtest"
)

func template() corev1.PodTemplateSpec {
	return corev1.PodTemplateSpec{Spec: corev1.PodSpec{
		RestartPolicy: corev1.RestartPolicyNever,
		Containers:    []corev1.Container{{Name: "main", Image: "busybox"}},
	}}
}

// TestBadInputRefused checks that the API refuses the cronjobs and jobs
// the controllers could not run, with 422 and the field at fault.
func TestBadInputRefused(t *testing.T) {
	h := hubtest.Start(t)
	ctx := context.Background()
	cronJobs := []struct {
		name  string
		edit  func(*batchv1.CronJobSpec)
		field string
	}{
		{"bad-schedule", func(s *batchv1.CronJobSpec) { s.Schedule = "61 * * * *" }, "spec.schedule"},
		{"five-fields", func(s *batchv1.CronJobSpec) { s.Schedule = "@every" }, "spec.schedule"},
		{"unknown-zone", func(s *batchv1.CronJobSpec) { s.TimeZone = new("Mars/Olympus_Mons") }, "spec.timeZone"},
		{"zone-in-schedule", func(s *batchv1.CronJobSpec) { s.Schedule = "CRON_TZ=UTC * * * * *" }, "spec.schedule"},
		{"bad-concurrency", func(s *batchv1.CronJobSpec) { s.ConcurrencyPolicy = "Queue" }, "spec.concurrencyPolicy"},
		{"bad-job-template", func(s *batchv1.CronJobSpec) { s.JobTemplate.Spec.Parallelism = new(int32(-1)) }, "spec.jobTemplate.spec.parallelism"},
	}
	for _, tt := range cronJobs {
		cj := &batchv1.CronJob{
			ObjectMeta: metav1.ObjectMeta{Name: tt.name},
			Spec: batchv1.CronJobSpec{Schedule: "* * * * *",
				JobTemplate: batchv1.JobTemplateSpec{Spec: batchv1.JobSpec{Template: template()}}},
		}
		tt.edit(&cj.Spec)
		_, err := h.Client.BatchV1().CronJobs("default").Create(ctx, cj, metav1.CreateOptions{})
		if got := typedtest.Causes(t, "cronjob "+tt.name, err); !slices.Contains(got, tt.field) {
			t.Errorf("create cronjob %s: causes %v, want %s", tt.name, got, tt.field)
		}
	}
	jobs := []struct {
		name  string
		edit  func(*batchv1.JobSpec)
		field string
	}{
		{"negative-completions", func(s *batchv1.JobSpec) { s.Completions = new(int32(-1)) }, "spec.completions"},
		{"negative-parallelism", func(s *batchv1.JobSpec) { s.Parallelism = new(int32(-2)) }, "spec.parallelism"},
		{"indexed-without-completions", func(s *batchv1.JobSpec) {
			s.CompletionMode = new(batchv1.IndexedCompletion)
			s.Parallelism = new(int32(2))
		}, "spec.completions"},
		{"policy-bad-action", func(s *batchv1.JobSpec) {
			s.PodFailurePolicy = &batchv1.PodFailurePolicy{Rules: []batchv1.PodFailurePolicyRule{{Action: "Retry",
				OnExitCodes: &batchv1.PodFailurePolicyOnExitCodesRequirement{Operator: batchv1.PodFailurePolicyOnExitCodesOpIn, Values: []int32{1}}}}}
		}, "spec.podFailurePolicy.rules[0].action"},
		{"policy-exit-code-zero", func(s *batchv1.JobSpec) {
			s.PodFailurePolicy = &batchv1.PodFailurePolicy{Rules: []batchv1.PodFailurePolicyRule{{Action: batchv1.PodFailurePolicyActionFailJob,
				OnExitCodes: &batchv1.PodFailurePolicyOnExitCodesRequirement{Operator: batchv1.PodFailurePolicyOnExitCodesOpIn, Values: []int32{0}}}}}
		}, "spec.podFailurePolicy.rules[0].onExitCodes.values[0]"},
		{"policy-fail-index-without-per-index", func(s *batchv1.JobSpec) {
			s.PodFailurePolicy = &batchv1.PodFailurePolicy{Rules: []batchv1.PodFailurePolicyRule{{Action: batchv1.PodFailurePolicyActionFailIndex,
				OnExitCodes: &batchv1.PodFailurePolicyOnExitCodesRequirement{Operator: batchv1.PodFailurePolicyOnExitCodesOpIn, Values: []int32{1}}}}}
		}, "spec.podFailurePolicy.rules[0].action"},
		{"policy-with-on-failure", func(s *batchv1.JobSpec) {
			s.Template.Spec.RestartPolicy = corev1.RestartPolicyOnFailure
			s.PodFailurePolicy = &batchv1.PodFailurePolicy{Rules: []batchv1.PodFailurePolicyRule{{Action: batchv1.PodFailurePolicyActionIgnore,
				OnPodConditions: []batchv1.PodFailurePolicyOnPodConditionsPattern{{Type: corev1.DisruptionTarget}}}}}
		}, "spec.template.spec.restartPolicy"},
	}
	for _, tt := range jobs {
		j := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: tt.name}, Spec: batchv1.JobSpec{Template: template()}}
		tt.edit(&j.Spec)
		_, err := h.Client.BatchV1().Jobs("default").Create(ctx, j, metav1.CreateOptions{})
		if got := typedtest.Causes(t, "job "+tt.name, err); !slices.Contains(got, tt.field) {
			t.Errorf("create job %s: causes %v, want %s", tt.name, got, tt.field)
		}
	}
}
