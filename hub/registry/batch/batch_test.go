package batch

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/yaml"

	"github.com/outpost-mesh/outpost/hub/apiserver"
	"github.com/outpost-mesh/outpost/hub/registry/typed"
	"github.com/outpost-mesh/outpost/hub/registry/typed/typedtest"
)

var (
	created = time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	now     = created.Add(90 * time.Minute)
)

const uid = types.UID("0e4d8a2c-1111-4b5b-9c1e-3f2a6b7c8d9e")

func resource(t *testing.T, kind string) apiserver.Resource {
	t.Helper()
	for _, r := range ResourcesWithClock(func() time.Time { return now }) {
		if r.Kind == kind {
			return r
		}
	}
	t.Fatalf("no resource of kind %s", kind)
	return apiserver.Resource{}
}

func podTemplate() corev1.PodTemplateSpec {
	return corev1.PodTemplateSpec{Spec: corev1.PodSpec{
		RestartPolicy: corev1.RestartPolicyNever,
		Containers:    []corev1.Container{{Name: "pi", Image: "perl:5.34", Command: []string{"perl", "-e", "print 3.14"}}},
	}}
}

// job is a minimal job as a client sends it: no uid, no selector.
func job() *batchv1.Job {
	return &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: "pi", Namespace: "default"},
		Spec:       batchv1.JobSpec{Template: podTemplate()},
	}
}

func cronJob() *batchv1.CronJob {
	return &batchv1.CronJob{
		ObjectMeta: metav1.ObjectMeta{Name: "nightly", Namespace: "default", UID: uid, ResourceVersion: "7", CreationTimestamp: metav1.NewTime(created)},
		Spec: batchv1.CronJobSpec{
			Schedule:    "0 3 * * *",
			JobTemplate: batchv1.JobTemplateSpec{Spec: batchv1.JobSpec{Template: podTemplate()}},
		},
	}
}

// create runs a job through the create path in the machinery's order:
// Default, PrepareForCreate, generic metadata, Validate.
func create(t *testing.T, j *batchv1.Job) field.ErrorList {
	t.Helper()
	rules := resource(t, "Job").Rules.(typed.All)
	rules.Default(j)
	rules.PrepareForCreate(j)
	j.UID, j.ResourceVersion, j.CreationTimestamp = uid, "7", metav1.NewTime(created)
	return rules.Validate(j)
}

func toYAML(t *testing.T, v interface{}) string {
	t.Helper()
	b, err := yaml.Marshal(v)
	if err != nil {
		t.Fatalf("marshal: %v", err)
	}
	return string(b)
}

func TestJobCreate(t *testing.T) {
	j := job()
	if errs := create(t, j); len(errs) > 0 {
		t.Fatalf("create(minimal job) = %v", errs)
	}
	const want = `metadata:
  creationTimestamp: "2025-03-01T12:00:00Z"
  labels:
    batch.kubernetes.io/controller-uid: 0e4d8a2c-1111-4b5b-9c1e-3f2a6b7c8d9e
    batch.kubernetes.io/job-name: pi
    controller-uid: 0e4d8a2c-1111-4b5b-9c1e-3f2a6b7c8d9e
    job-name: pi
  name: pi
  namespace: default
  resourceVersion: "7"
  uid: 0e4d8a2c-1111-4b5b-9c1e-3f2a6b7c8d9e
spec:
  backoffLimit: 6
  completionMode: NonIndexed
  completions: 1
  parallelism: 1
  podReplacementPolicy: TerminatingOrFailed
  selector:
    matchLabels:
      batch.kubernetes.io/controller-uid: 0e4d8a2c-1111-4b5b-9c1e-3f2a6b7c8d9e
  suspend: false
  template:
    metadata:
      labels:
        batch.kubernetes.io/controller-uid: 0e4d8a2c-1111-4b5b-9c1e-3f2a6b7c8d9e
        batch.kubernetes.io/job-name: pi
        controller-uid: 0e4d8a2c-1111-4b5b-9c1e-3f2a6b7c8d9e
        job-name: pi
    spec:
      containers:
      - command:
        - perl
        - -e
        - print 3.14
        image: perl:5.34
        imagePullPolicy: IfNotPresent
        name: pi
        resources: {}
        terminationMessagePath: /dev/termination-log
        terminationMessagePolicy: File
      dnsPolicy: ClusterFirst
      restartPolicy: Never
      schedulerName: default-scheduler
      securityContext: {}
      terminationGracePeriodSeconds: 30
status: {}
`
	if got := toYAML(t, j); got != want {
		t.Errorf("created job =\n%s\nwant\n%s", got, want)
	}
}

func TestJobDefaults(t *testing.T) {
	tests := []struct {
		name  string
		spec  batchv1.JobSpec
		check func(*batchv1.JobSpec) string
	}{
		{"parallelism only", batchv1.JobSpec{Parallelism: new(int32(3))}, func(s *batchv1.JobSpec) string {
			if s.Completions != nil || *s.Parallelism != 3 {
				return fmt.Sprintf("completions %v, parallelism %d; want unset, 3", s.Completions, *s.Parallelism)
			}
			return ""
		}},
		{"completions only", batchv1.JobSpec{Completions: new(int32(5))}, func(s *batchv1.JobSpec) string {
			if *s.Completions != 5 || *s.Parallelism != 1 {
				return fmt.Sprintf("completions %d, parallelism %d; want 5, 1", *s.Completions, *s.Parallelism)
			}
			return ""
		}},
		{"backoff per index", batchv1.JobSpec{BackoffLimitPerIndex: new(int32(1))}, func(s *batchv1.JobSpec) string {
			if *s.BackoffLimit != 1<<31-1 {
				return fmt.Sprintf("backoffLimit %d, want MaxInt32", *s.BackoffLimit)
			}
			return ""
		}},
		{"pod failure policy", batchv1.JobSpec{PodFailurePolicy: &batchv1.PodFailurePolicy{Rules: []batchv1.PodFailurePolicyRule{{
			Action:          batchv1.PodFailurePolicyActionIgnore,
			OnPodConditions: []batchv1.PodFailurePolicyOnPodConditionsPattern{{Type: corev1.DisruptionTarget}},
		}}}}, func(s *batchv1.JobSpec) string {
			if *s.PodReplacementPolicy != batchv1.Failed || s.PodFailurePolicy.Rules[0].OnPodConditions[0].Status != corev1.ConditionTrue {
				return fmt.Sprintf("podReplacementPolicy %s, condition status %q; want Failed, True",
					*s.PodReplacementPolicy, s.PodFailurePolicy.Rules[0].OnPodConditions[0].Status)
			}
			return ""
		}},
		{"manual selector stays unset", batchv1.JobSpec{}, func(s *batchv1.JobSpec) string {
			if s.ManualSelector != nil {
				return fmt.Sprintf("manualSelector %v, want unset", *s.ManualSelector)
			}
			return ""
		}},
	}
	for _, tt := range tests {
		j := job()
		j.Spec = tt.spec
		j.Spec.Template = podTemplate()
		resource(t, "Job").Rules.(typed.All).Default(j)
		if msg := tt.check(&j.Spec); msg != "" {
			t.Errorf("Default(job with %s): %s", tt.name, msg)
		}
	}
}

func TestJobValidate(t *testing.T) {
	tests := []struct {
		name string
		edit func(*batchv1.Job)
		want []string
	}{
		{"minimal", func(*batchv1.Job) {}, nil},
		{"restartPolicy Always", func(j *batchv1.Job) { j.Spec.Template.Spec.RestartPolicy = corev1.RestartPolicyAlways },
			[]string{"spec.template.spec.restartPolicy: Required value"}},
		{"restartPolicy unset", func(j *batchv1.Job) { j.Spec.Template.Spec.RestartPolicy = "" },
			[]string{"spec.template.spec.restartPolicy: Required value"}},
		// Twice, as upstream: once as a pod's, once as a job's.
		{"restartPolicy unknown", func(j *batchv1.Job) { j.Spec.Template.Spec.RestartPolicy = "Sometimes" },
			[]string{"spec.template.spec.restartPolicy: Unsupported value", "spec.template.spec.restartPolicy: Unsupported value"}},
		{"manual selector", func(j *batchv1.Job) {
			j.Spec.ManualSelector = new(true)
			j.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"app": "pi"}}
			j.Spec.Template.Labels = map[string]string{"app": "pi"}
		}, nil},
		{"manual selector mismatch", func(j *batchv1.Job) {
			j.Spec.ManualSelector = new(true)
			j.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"app": "pi"}}
			j.Spec.Template.Labels = map[string]string{"app": "e"}
		}, []string{"spec.template.metadata.labels: Invalid value"}},
		{"manual without selector", func(j *batchv1.Job) { j.Spec.ManualSelector = new(true) },
			[]string{"spec.selector: Required value"}},
		{"conflicting generated label", func(j *batchv1.Job) { j.Spec.Template.Labels = map[string]string{"job-name": "other"} },
			[]string{"spec.template.metadata.labels[job-name]: Invalid value"}},
		{"user selector without manualSelector", func(j *batchv1.Job) {
			j.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"app": "pi"}}
			j.Spec.Template.Labels = map[string]string{"app": "pi"}
		}, []string{"spec.selector: Invalid value"}},
		{"negative counts", func(j *batchv1.Job) {
			j.Spec.Parallelism = new(int32(-1))
			j.Spec.BackoffLimit = new(int32(-2))
			j.Spec.ActiveDeadlineSeconds = new(int64(-3))
		}, []string{"spec.parallelism: Invalid value", "spec.activeDeadlineSeconds: Invalid value", "spec.backoffLimit: Invalid value"}},
		{"indexed without completions", func(j *batchv1.Job) {
			j.Spec.CompletionMode = new(batchv1.IndexedCompletion)
			j.Spec.Parallelism = new(int32(2))
		}, []string{"spec.completions: Required value"}},
		{"indexed name too long for pods", func(j *batchv1.Job) {
			j.Name = strings.Repeat("a", 62)
			j.Spec.CompletionMode = new(batchv1.IndexedCompletion)
			j.Spec.Completions = new(int32(10))
		}, []string{"metadata.name: Invalid value"}},
		{"per-index backoff of a non-indexed job", func(j *batchv1.Job) { j.Spec.BackoffLimitPerIndex = new(int32(1)) },
			[]string{"spec.backoffLimitPerIndex: Invalid value"}},
		{"pod failure policy needs Never", func(j *batchv1.Job) {
			j.Spec.Template.Spec.RestartPolicy = corev1.RestartPolicyOnFailure
			j.Spec.PodFailurePolicy = &batchv1.PodFailurePolicy{Rules: []batchv1.PodFailurePolicyRule{{
				Action:      batchv1.PodFailurePolicyActionFailJob,
				OnExitCodes: &batchv1.PodFailurePolicyOnExitCodesRequirement{Operator: batchv1.PodFailurePolicyOnExitCodesOpIn, Values: []int32{42}},
			}}}
		}, []string{"spec.template.spec.restartPolicy: Invalid value"}},
		{"pod failure policy rules", func(j *batchv1.Job) {
			j.Spec.PodReplacementPolicy = new(batchv1.TerminatingOrFailed)
			j.Spec.PodFailurePolicy = &batchv1.PodFailurePolicy{Rules: []batchv1.PodFailurePolicyRule{{
				Action:      "Retry",
				OnExitCodes: &batchv1.PodFailurePolicyOnExitCodesRequirement{Operator: batchv1.PodFailurePolicyOnExitCodesOpIn, Values: []int32{0, 3, 2}},
			}}}
		}, []string{
			"spec.podFailurePolicy.rules[0].action: Unsupported value",
			"spec.podFailurePolicy.rules[0].onExitCodes.values[0]: Invalid value",
			"spec.podFailurePolicy.rules[0].onExitCodes.values[2]: Invalid value",
			"spec.podReplacementPolicy: Unsupported value",
		}},
		{"no containers", func(j *batchv1.Job) { j.Spec.Template.Spec.Containers = nil },
			[]string{"spec.template.spec.containers: Required value"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			j := job()
			tt.edit(j)
			if got := typedtest.ErrStrings(create(t, j)); !typedtest.SameErrs(got, tt.want) {
				t.Errorf("create(job with %s) = %q, want %q", tt.name, got, tt.want)
			}
		})
	}
}

func TestJobRestartPolicyMessage(t *testing.T) {
	j := job()
	j.Spec.Template.Spec.RestartPolicy = ""
	errs := create(t, j)
	const want = `spec.template.spec.restartPolicy: Required value: valid values: "OnFailure", "Never"`
	if len(errs) != 1 || errs[0].Error() != want {
		t.Errorf("create(job without restartPolicy) = %v, want %s", errs, want)
	}
}

func TestJobValidateUpdate(t *testing.T) {
	tests := []struct {
		name      string
		suspended bool
		edit      func(*batchv1.Job)
		want      []string
	}{
		{"mutable fields", false, func(j *batchv1.Job) {
			j.Spec.Parallelism = new(int32(4))
			j.Spec.Suspend = new(true)
			j.Spec.ActiveDeadlineSeconds = new(int64(600))
			j.Spec.TTLSecondsAfterFinished = new(int32(100))
			j.Spec.BackoffLimit = new(int32(2))
			j.Labels["team"] = "data"
		}, nil},
		{"template image", false, func(j *batchv1.Job) { j.Spec.Template.Spec.Containers[0].Image = "perl:5.36" },
			[]string{"spec.template: Invalid value"}},
		{"scheduling of a running job", false, func(j *batchv1.Job) { j.Spec.Template.Spec.NodeSelector = map[string]string{"zone": "a"} },
			[]string{"spec.template: Invalid value"}},
		{"scheduling of a job suspended before it started", true, func(j *batchv1.Job) {
			j.Spec.Template.Spec.NodeSelector = map[string]string{"zone": "a"}
			j.Spec.Template.Spec.Tolerations = []corev1.Toleration{{Key: "edge", Operator: corev1.TolerationOpExists}}
			j.Spec.Template.Annotations = map[string]string{"note": "moved"}
		}, nil},
		{"image of a suspended job", true, func(j *batchv1.Job) { j.Spec.Template.Spec.Containers[0].Image = "perl:5.36" },
			[]string{"spec.template: Invalid value"}},
		{"completions", false, func(j *batchv1.Job) { j.Spec.Completions = new(int32(3)) },
			[]string{"spec.completions: Invalid value"}},
		{"completion mode", false, func(j *batchv1.Job) {
			j.Spec.CompletionMode = new(batchv1.IndexedCompletion)
		}, []string{"spec.completionMode: Invalid value"}},
		{"selector", false, func(j *batchv1.Job) {
			j.Spec.Selector.MatchLabels["batch.kubernetes.io/job-name"] = "pi"
		}, []string{"spec.selector: Invalid value"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			old := job()
			old.Spec.Suspend = new(tt.suspended)
			if errs := create(t, old); len(errs) > 0 {
				t.Fatalf("create: %v", errs)
			}
			upd := old.DeepCopy()
			tt.edit(upd)
			rules := resource(t, "Job").Rules.(typed.All)
			rules.Default(upd)
			rules.PrepareForUpdate(upd, old)
			errs := rules.Validate(upd)
			if len(errs) > 0 {
				t.Fatalf("Validate(updated job) = %v", errs)
			}
			if got := typedtest.ErrStrings(rules.ValidateUpdate(upd, old)); !typedtest.SameErrs(got, tt.want) {
				t.Errorf("ValidateUpdate(%s) = %q, want %q", tt.name, got, tt.want)
			}
		})
	}
}

func TestElasticIndexedJob(t *testing.T) {
	old := job()
	old.Spec.CompletionMode = new(batchv1.IndexedCompletion)
	old.Spec.Completions, old.Spec.Parallelism = new(int32(4)), new(int32(4))
	if errs := create(t, old); len(errs) > 0 {
		t.Fatalf("create: %v", errs)
	}
	rules := resource(t, "Job").Rules.(typed.All)
	tests := []struct {
		completions, parallelism int32
		want                     []string
	}{
		{6, 6, nil},
		{6, 4, []string{"spec.completions: Invalid value"}},
	}
	for _, tt := range tests {
		upd := old.DeepCopy()
		upd.Spec.Completions, upd.Spec.Parallelism = new(tt.completions), new(tt.parallelism)
		if got := typedtest.ErrStrings(rules.ValidateUpdate(upd, old)); !typedtest.SameErrs(got, tt.want) {
			t.Errorf("ValidateUpdate(indexed job to %d completions, %d wide) = %q, want %q", tt.completions, tt.parallelism, got, tt.want)
		}
	}
}

func TestCronJobDefault(t *testing.T) {
	cj := cronJob()
	resource(t, "CronJob").Rules.(typed.All).Default(cj)
	const want = `concurrencyPolicy: Allow
failedJobsHistoryLimit: 1
jobTemplate:
  metadata: {}
  spec:
    template:
      metadata: {}
      spec:
        containers:
        - command:
          - perl
          - -e
          - print 3.14
          image: perl:5.34
          imagePullPolicy: IfNotPresent
          name: pi
          resources: {}
          terminationMessagePath: /dev/termination-log
          terminationMessagePolicy: File
        dnsPolicy: ClusterFirst
        restartPolicy: Never
        schedulerName: default-scheduler
        securityContext: {}
        terminationGracePeriodSeconds: 30
schedule: 0 3 * * *
successfulJobsHistoryLimit: 3
suspend: false
`
	if got := toYAML(t, cj.Spec); got != want {
		t.Errorf("Default(minimal cronjob) spec =\n%s\nwant\n%s", got, want)
	}
}

func TestCronJobValidate(t *testing.T) {
	tests := []struct {
		name string
		edit func(*batchv1.CronJob)
		want []string
	}{
		{"minimal", func(*batchv1.CronJob) {}, nil},
		{"descriptor and zone", func(cj *batchv1.CronJob) {
			cj.Spec.Schedule = "@hourly"
			cj.Spec.TimeZone = new("Europe/Berlin")
		}, nil},
		{"schedule out of range", func(cj *batchv1.CronJob) { cj.Spec.Schedule = "61 * * * *" }, []string{"spec.schedule: Invalid value"}},
		{"schedule too short", func(cj *batchv1.CronJob) { cj.Spec.Schedule = "*/5 * * *" }, []string{"spec.schedule: Invalid value"}},
		{"schedule missing", func(cj *batchv1.CronJob) { cj.Spec.Schedule = "" }, []string{"spec.schedule: Required value"}},
		{"zone in schedule", func(cj *batchv1.CronJob) { cj.Spec.Schedule = "TZ=UTC 0 3 * * *" }, []string{"spec.schedule: Invalid value"}},
		{"unknown zone", func(cj *batchv1.CronJob) { cj.Spec.TimeZone = new("Mars/Olympus") }, []string{"spec.timeZone: Invalid value"}},
		{"local zone", func(cj *batchv1.CronJob) { cj.Spec.TimeZone = new("Local") }, []string{"spec.timeZone: Invalid value"}},
		{"empty zone", func(cj *batchv1.CronJob) { cj.Spec.TimeZone = new("") }, []string{"spec.timeZone: Invalid value"}},
		{"concurrency policy", func(cj *batchv1.CronJob) { cj.Spec.ConcurrencyPolicy = "Queue" }, []string{"spec.concurrencyPolicy: Unsupported value"}},
		{"negative limits", func(cj *batchv1.CronJob) {
			cj.Spec.StartingDeadlineSeconds = new(int64(-1))
			cj.Spec.FailedJobsHistoryLimit = new(int32(-1))
		}, []string{"spec.startingDeadlineSeconds: Invalid value", "spec.failedJobsHistoryLimit: Invalid value"}},
		{"name too long", func(cj *batchv1.CronJob) { cj.Name = strings.Repeat("n", 53) }, []string{"metadata.name: Invalid value"}},
		{"job restartPolicy Always", func(cj *batchv1.CronJob) {
			cj.Spec.JobTemplate.Spec.Template.Spec.RestartPolicy = corev1.RestartPolicyAlways
		}, []string{"spec.jobTemplate.spec.template.spec.restartPolicy: Required value"}},
		{"job template selector", func(cj *batchv1.CronJob) {
			cj.Spec.JobTemplate.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"a": "b"}}
			cj.Spec.JobTemplate.Spec.ManualSelector = new(true)
		}, []string{"spec.jobTemplate.spec.selector: Invalid value", "spec.jobTemplate.spec.manualSelector: Unsupported value"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cj := cronJob()
			tt.edit(cj)
			rules := resource(t, "CronJob").Rules.(typed.All)
			rules.Default(cj)
			if got := typedtest.ErrStrings(rules.Validate(cj)); !typedtest.SameErrs(got, tt.want) {
				t.Errorf("Validate(cronjob with %s) = %q, want %q", tt.name, got, tt.want)
			}
		})
	}
}

func TestCronJobScheduleMessage(t *testing.T) {
	cj := cronJob()
	cj.Spec.Schedule = "0 25 * * *"
	rules := resource(t, "CronJob").Rules.(typed.All)
	rules.Default(cj)
	errs := rules.Validate(cj)
	const want = `spec.schedule: Invalid value: "0 25 * * *": end of range (25) above maximum (23): 25`
	if len(errs) != 1 || errs[0].Error() != want {
		t.Errorf("Validate(cronjob at hour 25) = %v, want %s", errs, want)
	}
}

func TestCronJobValidateUpdate(t *testing.T) {
	rules := resource(t, "CronJob").Rules.(typed.All)
	old := cronJob()
	old.Spec.Schedule = "TZ=UTC 0 3 * * *" // stored before zones moved to timeZone
	rules.Default(old)
	tests := []struct {
		name string
		edit func(*batchv1.CronJob)
		want []string
	}{
		{"keeps its zoned schedule", func(cj *batchv1.CronJob) { cj.Spec.Suspend = new(true) }, nil},
		{"zone in both", func(cj *batchv1.CronJob) { cj.Spec.TimeZone = new("UTC") }, []string{"spec.schedule: Invalid value"}},
		{"new schedule", func(cj *batchv1.CronJob) { cj.Spec.Schedule = "*/10 * * * *" }, nil},
	}
	for _, tt := range tests {
		upd := old.DeepCopy()
		tt.edit(upd)
		rules.PrepareForUpdate(upd, old)
		if got := typedtest.ErrStrings(rules.ValidateUpdate(upd, old)); !typedtest.SameErrs(got, tt.want) {
			t.Errorf("ValidateUpdate(cronjob %s) = %q, want %q", tt.name, got, tt.want)
		}
	}
}

func TestRow(t *testing.T) {
	at := func(d time.Duration) *metav1.Time { return new(metav1.NewTime(created.Add(d))) }

	complete := job()
	complete.CreationTimestamp = metav1.NewTime(created)
	complete.Spec.Completions = new(int32(1))
	complete.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"batch.kubernetes.io/controller-uid": string(uid)}}
	complete.Status = batchv1.JobStatus{Succeeded: 1, StartTime: at(time.Minute), CompletionTime: at(3 * time.Minute),
		Conditions: []batchv1.JobCondition{
			{Type: batchv1.JobSuccessCriteriaMet, Status: corev1.ConditionTrue},
			{Type: batchv1.JobComplete, Status: corev1.ConditionTrue},
		}}

	queue := job()
	queue.CreationTimestamp = metav1.NewTime(created)
	queue.Spec.Parallelism = new(int32(3))
	queue.Status = batchv1.JobStatus{Succeeded: 1, Active: 2, StartTime: at(30 * time.Minute)}

	suspended := job()
	suspended.Spec.Completions = new(int32(2))
	suspended.Status.Conditions = []batchv1.JobCondition{
		{Type: batchv1.JobFailed, Status: corev1.ConditionFalse},
		{Type: batchv1.JobSuspended, Status: corev1.ConditionTrue},
	}

	cj := cronJob()
	cj.Spec.Schedule = "*/5 * * * *"
	cj.Spec.Suspend = new(false)
	cj.Status = batchv1.CronJobStatus{Active: []corev1.ObjectReference{{Name: "a"}, {Name: "b"}}, LastScheduleTime: at(85 * time.Minute)}

	zoned := cronJob()
	zoned.Spec.TimeZone = new("Europe/Berlin")
	zoned.Spec.Suspend = new(true)

	tests := []struct {
		kind string
		obj  runtime.Object
		want []interface{}
	}{
		{"Job", complete, []interface{}{"pi", "Complete", "1/1", "2m", "90m", "pi", "perl:5.34", "batch.kubernetes.io/controller-uid=" + string(uid)}},
		{"Job", queue, []interface{}{"pi", "Running", "1/1 of 3", "60m", "90m", "pi", "perl:5.34", "<none>"}},
		{"Job", suspended, []interface{}{"pi", "Suspended", "0/2", "", "<unknown>", "pi", "perl:5.34", "<none>"}},
		{"CronJob", cj, []interface{}{"nightly", "*/5 * * * *", "<none>", "False", int64(2), "5m", "90m", "pi", "perl:5.34", "<none>"}},
		{"CronJob", zoned, []interface{}{"nightly", "0 3 * * *", "Europe/Berlin", "True", int64(0), "<none>", "90m", "pi", "perl:5.34", "<none>"}},
	}
	for _, tt := range tests {
		rules := resource(t, tt.kind).Rules.(typed.All)
		got := rules.Row(tt.obj)
		if !reflect.DeepEqual(got, tt.want) {
			t.Errorf("Row(%s) = %#v, want %#v", tt.kind, got, tt.want)
		}
		if n := len(rules.Columns()); n != len(got) {
			t.Errorf("%s: %d columns for %d cells", tt.kind, n, len(got))
		}
	}
}

func TestColumns(t *testing.T) {
	tests := []struct{ kind, want, wide string }{
		{"Job", "Name Status Completions Duration Age", "Containers Images Selector"},
		{"CronJob", "Name Schedule Timezone Suspend Active Last Schedule Age", "Containers Images Selector"},
	}
	for _, tt := range tests {
		var names, wide []string
		for _, c := range resource(t, tt.kind).Rules.(typed.All).Columns() {
			if c.Priority == 0 {
				names = append(names, c.Name)
			} else {
				wide = append(wide, c.Name)
			}
		}
		if got := strings.Join(names, " "); got != tt.want {
			t.Errorf("%s columns = %q, want %q", tt.kind, got, tt.want)
		}
		if got := strings.Join(wide, " "); got != tt.wide {
			t.Errorf("%s wide columns = %q, want %q", tt.kind, got, tt.wide)
		}
	}
}

func TestFieldsAndStatus(t *testing.T) {
	rules := resource(t, "Job").Rules.(typed.All)
	j := job()
	j.Status.Succeeded = 3
	if got := rules.Fields(j); !reflect.DeepEqual(got, fields.Set{"status.successful": "3"}) {
		t.Errorf("Job Fields = %v, want status.successful=3", got)
	}
	if got := resource(t, "CronJob").Rules.(typed.All).Fields(cronJob()); got == nil || len(got) != 0 {
		t.Errorf("CronJob Fields = %v, want an empty set", got)
	}

	j.Status = batchv1.JobStatus{}
	rules.PrepareForCreate(j)
	old := j.DeepCopy()
	old.ResourceVersion = "7"
	upd := old.DeepCopy()
	upd.Status.Succeeded = -1
	sv := rules.(apiserver.StatusValidator)
	if got := typedtest.ErrStrings(sv.ValidateStatusUpdate(upd, old)); !typedtest.SameErrs(got, []string{"status.succeeded: Invalid value"}) {
		t.Errorf("ValidateStatusUpdate(succeeded -1) = %q", got)
	}
}

func TestResources(t *testing.T) {
	var got []string
	for _, r := range Resources() {
		got = append(got, fmt.Sprintf("%s %v %v status=%v", r.Plural, r.ShortNames, r.Categories, r.Status))
		if r.GroupVersion != batchv1.SchemeGroupVersion || !r.Namespaced || r.Scale != nil || r.Rules.(typed.All).AllowCreateOnUpdate() {
			t.Errorf("%s: %v, namespaced %v, scale %v, create on update %v", r.Plural, r.GroupVersion, r.Namespaced, r.Scale, r.Rules.(typed.All).AllowCreateOnUpdate())
		}
	}
	want := []string{"jobs [] [all] status=true", "cronjobs [cj] [all] status=true"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Resources() = %q, want %q", got, want)
	}
}

// TestWrongType: the rules, given an object of another type, neither
// panic nor accept it.
func TestWrongType(t *testing.T) { typedtest.WrongType(t, Resources()) }
