package core

import (
	"reflect"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/outpost-mesh/outpost/hub/apiserver"
)

func validRC(mutate func(*corev1.ReplicationController)) *corev1.ReplicationController {
	rc := &corev1.ReplicationController{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default"},
		Spec: corev1.ReplicationControllerSpec{
			Template: &corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "web"}},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "nginx", Image: "nginx:1.27"}}},
			},
		},
	}
	if mutate != nil {
		mutate(rc)
	}
	return rc
}

func TestReplicationControllerDefaults(t *testing.T) {
	rc := create("replicationcontrollers", validRC(nil))
	want := map[string]string{"app": "web"}
	if *rc.Spec.Replicas != 1 || !reflect.DeepEqual(rc.Spec.Selector, want) || !reflect.DeepEqual(rc.Labels, want) ||
		rc.Spec.Template.Spec.RestartPolicy != corev1.RestartPolicyAlways {
		t.Errorf("create(rc) = %+v, want 1 replica, selector and labels from the template, pod defaults", rc)
	}
	rc.Spec.Template.Labels["tier"] = "front"
	if len(rc.Spec.Selector) != 1 || len(rc.Labels) != 1 {
		t.Errorf("defaulted selector and labels share the template's map")
	}
	own := create("replicationcontrollers", validRC(func(rc *corev1.ReplicationController) {
		rc.Labels = map[string]string{"owner": "ops"}
		rc.Spec.Selector = map[string]string{"app": "web"}
		rc.Spec.Template.Labels["tier"] = "front"
		rc.Spec.Replicas = ptrTo(int32(0))
	}))
	if *own.Spec.Replicas != 0 || len(own.Spec.Selector) != 1 || own.Labels["owner"] != "ops" {
		t.Errorf("create(rc with its own selector, labels, replicas) = %+v, want them kept", own)
	}
}

func TestValidateReplicationController(t *testing.T) {
	runValidate(t, "replicationcontrollers", []validateCase{
		{"valid", validRC(nil), nil},
		{"no template", validRC(func(rc *corev1.ReplicationController) {
			rc.Spec.Template = nil
			rc.Spec.Selector = map[string]string{"app": "web"}
		}), want("spec.template: Required value")},
		{"no selector", validRC(func(rc *corev1.ReplicationController) { rc.Spec.Template.Labels = nil }),
			want("spec.selector: Required value")},
		{"unselected template", validRC(func(rc *corev1.ReplicationController) {
			rc.Spec.Selector = map[string]string{"app": "api"}
		}), want("spec.template.metadata.labels: Invalid value")},
		{"negative replicas", validRC(func(rc *corev1.ReplicationController) { rc.Spec.Replicas = ptrTo(int32(-1)) }),
			want("spec.replicas: Invalid value")},
		{"restart never", validRC(func(rc *corev1.ReplicationController) {
			rc.Spec.Template.Spec.RestartPolicy = corev1.RestartPolicyNever
		}), want("spec.template.spec.restartPolicy: Unsupported value")},
		{"deadline", validRC(func(rc *corev1.ReplicationController) {
			rc.Spec.Template.Spec.ActiveDeadlineSeconds = ptrTo(int64(30))
		}), want("spec.template.spec.activeDeadlineSeconds: Invalid value")},
		{"writable disk, 2 replicas", validRC(func(rc *corev1.ReplicationController) {
			rc.Spec.Replicas = ptrTo(int32(2))
			rc.Spec.Template.Spec.Volumes = []corev1.Volume{{Name: "pd", VolumeSource: corev1.VolumeSource{
				GCEPersistentDisk: &corev1.GCEPersistentDiskVolumeSource{PDName: "pd-1"}}}}
		}), want("spec.template.spec.volumes[0].gcePersistentDisk.readOnly: Invalid value")},
		{"bad image", validRC(func(rc *corev1.ReplicationController) { rc.Spec.Template.Spec.Containers[0].Image = "" }),
			want("spec.template.spec.containers[0].image: Required value")},
	})
}

func TestValidateReplicationControllerStatus(t *testing.T) {
	rules := rulesFor("replicationcontrollers")
	old := create("replicationcontrollers", validRC(nil))
	old.ResourceVersion = "5"
	for _, tc := range []struct {
		status corev1.ReplicationControllerStatus
		want   []string
	}{
		{corev1.ReplicationControllerStatus{Replicas: 2, FullyLabeledReplicas: 2, ReadyReplicas: 2, AvailableReplicas: 1, ObservedGeneration: 1}, nil},
		{corev1.ReplicationControllerStatus{Replicas: 1, FullyLabeledReplicas: 2}, want("status.fullyLabeledReplicas: Invalid value")},
		{corev1.ReplicationControllerStatus{Replicas: 2, ReadyReplicas: 1, AvailableReplicas: 2}, want("status.availableReplicas: Invalid value")},
		{corev1.ReplicationControllerStatus{Replicas: -1}, want("status.replicas: Invalid value", "status.fullyLabeledReplicas: Invalid value",
			"status.readyReplicas: Invalid value", "status.availableReplicas: Invalid value")},
	} {
		rc := old.DeepCopy()
		rc.Status = tc.status
		if got := summary(rules.(apiserver.StatusValidator).ValidateStatusUpdate(rc, old)); !sameLines(got, tc.want) {
			t.Errorf("ValidateStatusUpdate(%+v) = %v, want %v", tc.status, got, tc.want)
		}
	}
}

func TestValidatePodTemplateObject(t *testing.T) {
	pt := func(mutate func(*corev1.PodTemplate)) *corev1.PodTemplate {
		p := &corev1.PodTemplate{
			ObjectMeta: metav1.ObjectMeta{Name: "job-template", Namespace: "default"},
			Template:   *validRC(nil).Spec.Template,
		}
		if mutate != nil {
			mutate(p)
		}
		return p
	}
	runValidate(t, "podtemplates", []validateCase{
		{"valid", pt(nil), nil},
		{"restart never", pt(func(p *corev1.PodTemplate) { p.Template.Spec.RestartPolicy = corev1.RestartPolicyNever }), nil},
		{"no containers", pt(func(p *corev1.PodTemplate) { p.Template.Spec.Containers = nil }),
			want("template.spec.containers: Required value")},
		{"bad label", pt(func(p *corev1.PodTemplate) { p.Template.Labels = map[string]string{"bad key": "x"} }),
			want("template.labels: Invalid value")},
	})
	runUpdate(t, "podtemplates", []updateCase{
		{"image", pt(nil), pt(func(p *corev1.PodTemplate) { p.Template.Spec.Containers[0].Image = "nginx:1.28" }), nil},
	})
}

func TestReplicationRows(t *testing.T) {
	created := ago(26 * time.Hour)
	rc := create("replicationcontrollers", validRC(func(rc *corev1.ReplicationController) {
		rc.CreationTimestamp = created
		rc.Spec.Replicas = ptrTo(int32(3))
		rc.Spec.Template.Spec.Containers = append(rc.Spec.Template.Spec.Containers, corev1.Container{Name: "log", Image: "fluent-bit:3"})
	}))
	rc.Status = corev1.ReplicationControllerStatus{Replicas: 2, ReadyReplicas: 1}
	if got, w := row(t, "replicationcontrollers", rc), "[web 3 2 1 26h nginx,log nginx:1.27,fluent-bit:3 app=web]"; got != w {
		t.Errorf("Row(rc) = %s, want %s", got, w)
	}
	pt := &corev1.PodTemplate{ObjectMeta: metav1.ObjectMeta{Name: "tmpl"}, Template: *rc.Spec.Template}
	if got, w := row(t, "podtemplates", pt), "[tmpl nginx,log nginx:1.27,fluent-bit:3 app=web]"; got != w {
		t.Errorf("Row(podtemplate) = %s, want %s", got, w)
	}
}

func TestReplicationControllerScale(t *testing.T) {
	rc := create("replicationcontrollers", validRC(nil))
	rc.Status.Replicas = 1
	scale := testResources()["replicationcontrollers"].Scale
	if spec, status, sel := scale.Get(rc); spec != 1 || status != 1 || sel != "app=web" {
		t.Errorf("Scale.Get(rc) = %d, %d, %q; want 1, 1, app=web", spec, status, sel)
	}
	scale.Set(rc, 4)
	if *rc.Spec.Replicas != 4 {
		t.Errorf("Scale.Set(rc, 4): replicas %d", *rc.Spec.Replicas)
	}
}
