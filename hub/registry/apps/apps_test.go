package apps

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiresource "k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"

	"github.com/outpost-mesh/outpost/hub/apiserver"
	"github.com/outpost-mesh/outpost/hub/registry/typed"
	"github.com/outpost-mesh/outpost/hub/registry/typed/typedtest"
)

var (
	created = time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	now     = created.Add(90 * time.Minute)
)

// resource returns the resource of kind from Resources, its clock stopped
// at now.
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

var webLabels = map[string]string{"app": "web"}

func podTemplate() corev1.PodTemplateSpec {
	return corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "web"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name:  "web",
			Image: "nginx:1.27",
			Ports: []corev1.ContainerPort{{ContainerPort: 80}},
		}}},
	}
}

func objectMeta() metav1.ObjectMeta {
	return metav1.ObjectMeta{Name: "web", Namespace: "default", UID: "3c9b5e4f-uid", ResourceVersion: "41", CreationTimestamp: metav1.NewTime(created)}
}

func selector() *metav1.LabelSelector {
	return &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}
}

func deployment() *appsv1.Deployment {
	return &appsv1.Deployment{ObjectMeta: objectMeta(), Spec: appsv1.DeploymentSpec{Selector: selector(), Template: podTemplate()}}
}

func replicaSet() *appsv1.ReplicaSet {
	return &appsv1.ReplicaSet{ObjectMeta: objectMeta(), Spec: appsv1.ReplicaSetSpec{Selector: selector(), Template: podTemplate()}}
}

func statefulSet() *appsv1.StatefulSet {
	return &appsv1.StatefulSet{ObjectMeta: objectMeta(), Spec: appsv1.StatefulSetSpec{Selector: selector(), Template: podTemplate(), ServiceName: "web"}}
}

func daemonSet() *appsv1.DaemonSet {
	return &appsv1.DaemonSet{ObjectMeta: objectMeta(), Spec: appsv1.DaemonSetSpec{Selector: selector(), Template: podTemplate()}}
}

func controllerRevision() *appsv1.ControllerRevision {
	return &appsv1.ControllerRevision{ObjectMeta: objectMeta(), Data: runtime.RawExtension{Raw: []byte(`{}`)}, Revision: 1}
}

// specYAML is the spec of obj as `kubectl get -o yaml` shows it.
func specYAML(t *testing.T, obj runtime.Object) string {
	t.Helper()
	spec := reflect.ValueOf(obj).Elem().FieldByName("Spec").Interface()
	b, err := yaml.Marshal(spec)
	if err != nil {
		t.Fatalf("marshal spec: %v", err)
	}
	return string(b)
}

const templateYAML = `  metadata:
    labels:
      app: web
  spec:
    containers:
    - image: nginx:1.27
      imagePullPolicy: IfNotPresent
      name: web
      ports:
      - containerPort: 80
        protocol: TCP
      resources: {}
      terminationMessagePath: /dev/termination-log
      terminationMessagePolicy: File
    dnsPolicy: ClusterFirst
    restartPolicy: Always
    schedulerName: default-scheduler
    securityContext: {}
    terminationGracePeriodSeconds: 30
`

func TestDefault(t *testing.T) {
	tests := []struct {
		kind string
		obj  runtime.Object
		want string
	}{
		{"Deployment", deployment(), `progressDeadlineSeconds: 600
replicas: 1
revisionHistoryLimit: 10
selector:
  matchLabels:
    app: web
strategy:
  rollingUpdate:
    maxSurge: 25%
    maxUnavailable: 25%
  type: RollingUpdate
template:
` + templateYAML},
		{"ReplicaSet", replicaSet(), `replicas: 1
selector:
  matchLabels:
    app: web
template:
` + templateYAML},
		{"StatefulSet", statefulSet(), `persistentVolumeClaimRetentionPolicy:
  whenDeleted: Retain
  whenScaled: Retain
podManagementPolicy: OrderedReady
replicas: 1
revisionHistoryLimit: 10
selector:
  matchLabels:
    app: web
serviceName: web
template:
` + templateYAML + `updateStrategy:
  rollingUpdate:
    partition: 0
  type: RollingUpdate
`},
		{"DaemonSet", daemonSet(), `revisionHistoryLimit: 10
selector:
  matchLabels:
    app: web
template:
` + templateYAML + `updateStrategy:
  rollingUpdate:
    maxSurge: 0
    maxUnavailable: 1
  type: RollingUpdate
`},
	}
	for _, tt := range tests {
		t.Run(tt.kind, func(t *testing.T) {
			resource(t, tt.kind).Rules.(typed.All).Default(tt.obj)
			if got := specYAML(t, tt.obj); got != tt.want {
				t.Errorf("Default(minimal %s) spec =\n%s\nwant\n%s", tt.kind, got, tt.want)
			}
		})
	}
}

func TestDefaultKeepsSetValues(t *testing.T) {
	d := deployment()
	d.Spec.Replicas = new(int32(0))
	d.Spec.Strategy.Type = appsv1.RecreateDeploymentStrategyType
	d.Spec.Template.Spec.RestartPolicy = corev1.RestartPolicyNever
	d.Spec.Template.Spec.Containers[0].Image = "nginx"
	resource(t, "Deployment").Rules.(typed.All).Default(d)
	if *d.Spec.Replicas != 0 || d.Spec.Strategy.RollingUpdate != nil || d.Spec.Template.Spec.RestartPolicy != corev1.RestartPolicyNever {
		t.Errorf("Default changed set values: replicas %d, rollingUpdate %v, restartPolicy %s",
			*d.Spec.Replicas, d.Spec.Strategy.RollingUpdate, d.Spec.Template.Spec.RestartPolicy)
	}
	if got := d.Spec.Template.Spec.Containers[0].ImagePullPolicy; got != corev1.PullAlways {
		t.Errorf("imagePullPolicy of an untagged image = %s, want Always", got)
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name string
		kind string
		obj  func() runtime.Object
		want []string
	}{
		{"deployment ok", "Deployment", func() runtime.Object { return deployment() }, nil},
		{"replicaset ok", "ReplicaSet", func() runtime.Object { return replicaSet() }, nil},
		{"statefulset ok", "StatefulSet", func() runtime.Object { return statefulSet() }, nil},
		{"daemonset ok", "DaemonSet", func() runtime.Object { return daemonSet() }, nil},
		{"controllerrevision ok", "ControllerRevision", func() runtime.Object { return controllerRevision() }, nil},
		{"selector mismatch", "Deployment", func() runtime.Object {
			d := deployment()
			d.Spec.Template.Labels = map[string]string{"app": "other"}
			return d
		}, []string{"spec.template.metadata.labels: Invalid value"}},
		{"selector missing", "ReplicaSet", func() runtime.Object {
			rs := replicaSet()
			rs.Spec.Selector = nil
			return rs
		}, []string{"spec.selector: Required value", "spec.template.metadata.labels: Invalid value"}},
		{"selector empty", "StatefulSet", func() runtime.Object {
			ss := statefulSet()
			ss.Spec.Selector = &metav1.LabelSelector{}
			return ss
		}, []string{"spec.selector: Invalid value"}},
		{"negative replicas", "Deployment", func() runtime.Object {
			d := deployment()
			d.Spec.Replicas = new(int32(-1))
			return d
		}, []string{"spec.replicas: Invalid value"}},
		{"negative replicas statefulset", "StatefulSet", func() runtime.Object {
			ss := statefulSet()
			ss.Spec.Replicas = new(int32(-3))
			return ss
		}, []string{"spec.replicas: Invalid value"}},
		{"bad name", "Deployment", func() runtime.Object {
			d := deployment()
			d.Name = "Web_1"
			return d
		}, []string{"metadata.name: Invalid value"}},
		{"statefulset name must be a DNS label", "StatefulSet", func() runtime.Object {
			ss := statefulSet()
			ss.Name = "web.prod"
			return ss
		}, []string{"metadata.name: Invalid value"}},
		{"statefulset bad serviceName", "StatefulSet", func() runtime.Object {
			ss := statefulSet()
			ss.Spec.ServiceName = "Web_Svc"
			return ss
		}, []string{"spec.serviceName: Invalid value"}},
		{"statefulset mounting its claims", "StatefulSet", func() runtime.Object {
			ss := statefulSet()
			ss.Spec.VolumeClaimTemplates = []corev1.PersistentVolumeClaim{{
				ObjectMeta: metav1.ObjectMeta{Name: "data"},
				Spec: corev1.PersistentVolumeClaimSpec{
					AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
					Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: apiresource.MustParse("1Gi")}},
				},
			}}
			ss.Spec.Template.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "data", MountPath: "/var/lib/web"}}
			return ss
		}, []string{"spec.volumeClaimTemplates: Forbidden"}}, // until the hub has storage
		{"statefulset mounting what it lacks", "StatefulSet", func() runtime.Object {
			ss := statefulSet()
			ss.Spec.Template.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "data", MountPath: "/var/lib/web"}}
			return ss
		}, []string{"spec.template.spec.containers[0].volumeMounts[0].name: Not found"}},
		{"statefulset without serviceName", "StatefulSet", func() runtime.Object {
			ss := statefulSet()
			ss.Spec.ServiceName = ""
			return ss
		}, nil},
		{"statefulset bad policies", "StatefulSet", func() runtime.Object {
			ss := statefulSet()
			ss.Spec.PodManagementPolicy = "Sometimes"
			ss.Spec.PersistentVolumeClaimRetentionPolicy = &appsv1.StatefulSetPersistentVolumeClaimRetentionPolicy{WhenDeleted: "Keep", WhenScaled: "Delete"}
			ss.Spec.UpdateStrategy = appsv1.StatefulSetUpdateStrategy{Type: appsv1.OnDeleteStatefulSetStrategyType, RollingUpdate: &appsv1.RollingUpdateStatefulSetStrategy{}}
			return ss
		}, []string{"spec.podManagementPolicy: Invalid value", "spec.updateStrategy.rollingUpdate: Invalid value",
			"spec.persistentVolumeClaimRetentionPolicy.whenDeleted: Unsupported value"}},
		{"restartPolicy must be Always", "Deployment", func() runtime.Object {
			d := deployment()
			d.Spec.Template.Spec.RestartPolicy = corev1.RestartPolicyOnFailure
			return d
		}, []string{"spec.template.spec.restartPolicy: Unsupported value"}},
		{"bad strategy type", "Deployment", func() runtime.Object {
			d := deployment()
			d.Spec.Strategy.Type = "Blue-Green"
			return d
		}, []string{"spec.strategy: Unsupported value"}},
		{"negative surge and unavailable", "Deployment", func() runtime.Object {
			d := deployment()
			d.Spec.Strategy.RollingUpdate = &appsv1.RollingUpdateDeployment{
				MaxUnavailable: new(intstr.FromInt32(-1)),
				MaxSurge:       new(intstr.FromInt32(-2)),
			}
			return d
		}, []string{"spec.strategy.rollingUpdate.maxUnavailable: Invalid value", "spec.strategy.rollingUpdate.maxSurge: Invalid value"}},
		{"surge above 100% is allowed", "Deployment", func() runtime.Object {
			d := deployment()
			d.Spec.Strategy.RollingUpdate = &appsv1.RollingUpdateDeployment{
				MaxUnavailable: new(intstr.FromString("100%")),
				MaxSurge:       new(intstr.FromString("200%")),
			}
			return d
		}, nil},
		{"negative counts", "Deployment", func() runtime.Object {
			d := deployment()
			d.Spec.MinReadySeconds = -1
			d.Spec.RevisionHistoryLimit = new(int32(-1))
			d.Spec.ProgressDeadlineSeconds = new(int32(-5))
			return d
		}, []string{"spec.minReadySeconds: Invalid value", "spec.revisionHistoryLimit: Invalid value",
			"spec.progressDeadlineSeconds: Invalid value", "spec.progressDeadlineSeconds: Invalid value"}},
		{"negative replicas replicaset", "ReplicaSet", func() runtime.Object {
			rs := replicaSet()
			rs.Spec.Replicas = new(int32(-1))
			rs.Spec.MinReadySeconds = -1
			return rs
		}, []string{"spec.replicas: Invalid value", "spec.minReadySeconds: Invalid value"}},
		{"replicaset selector mismatch", "ReplicaSet", func() runtime.Object {
			rs := replicaSet()
			rs.Spec.Template.Labels = map[string]string{"app": "other"}
			return rs
		}, []string{"spec.template.metadata.labels: Invalid value"}},
		{"recreate with rollingUpdate", "Deployment", func() runtime.Object {
			d := deployment()
			d.Spec.Strategy = appsv1.DeploymentStrategy{Type: appsv1.RecreateDeploymentStrategyType, RollingUpdate: &appsv1.RollingUpdateDeployment{}}
			return d
		}, []string{"spec.strategy.rollingUpdate: Forbidden"}},
		{"bad percentages", "Deployment", func() runtime.Object {
			d := deployment()
			d.Spec.Strategy.RollingUpdate = &appsv1.RollingUpdateDeployment{
				MaxUnavailable: new(intstr.FromString("120%")),
				MaxSurge:       new(intstr.FromString("ten")),
			}
			return d
		}, []string{"spec.strategy.rollingUpdate.maxSurge: Invalid value", "spec.strategy.rollingUpdate.maxUnavailable: Invalid value"}},
		{"both zero", "Deployment", func() runtime.Object {
			d := deployment()
			d.Spec.Strategy.RollingUpdate = &appsv1.RollingUpdateDeployment{
				MaxUnavailable: new(intstr.FromInt32(0)),
				MaxSurge:       new(intstr.FromString("0%")),
			}
			return d
		}, []string{"spec.strategy.rollingUpdate.maxUnavailable: Invalid value"}},
		{"progress deadline not above minReadySeconds", "Deployment", func() runtime.Object {
			d := deployment()
			d.Spec.MinReadySeconds = 600
			return d
		}, []string{"spec.progressDeadlineSeconds: Invalid value"}},
		{"daemonset surge and unavailable", "DaemonSet", func() runtime.Object {
			ds := daemonSet()
			ds.Spec.UpdateStrategy.RollingUpdate = &appsv1.RollingUpdateDaemonSet{
				MaxUnavailable: new(intstr.FromInt32(1)),
				MaxSurge:       new(intstr.FromString("10%")),
			}
			return ds
		}, []string{"spec.updateStrategy.rollingUpdate.maxSurge: Invalid value"}},
		{"daemonset neither surge nor unavailable", "DaemonSet", func() runtime.Object {
			ds := daemonSet()
			ds.Spec.UpdateStrategy.RollingUpdate = &appsv1.RollingUpdateDaemonSet{
				MaxUnavailable: new(intstr.FromInt32(0)),
				MaxSurge:       new(intstr.FromInt32(0)),
			}
			return ds
		}, []string{"spec.updateStrategy.rollingUpdate.maxUnavailable: Required value"}},
		{"no containers", "DaemonSet", func() runtime.Object {
			ds := daemonSet()
			ds.Spec.Template.Spec.Containers = nil
			return ds
		}, []string{"spec.template.spec.containers: Required value"}},
		{"bad containers", "ReplicaSet", func() runtime.Object {
			rs := replicaSet()
			c := rs.Spec.Template.Spec.Containers[0]
			c.Image = ""
			c.Ports = []corev1.ContainerPort{{ContainerPort: 70000, Protocol: "ICMP"}}
			rs.Spec.Template.Spec.Containers = append(rs.Spec.Template.Spec.Containers, c, corev1.Container{Name: "Side_Car", Image: "busybox"})
			return rs
		}, []string{
			"spec.template.spec.containers[1].image: Required value",
			"spec.template.spec.containers[1].ports[0].containerPort: Invalid value",
			"spec.template.spec.containers[1].ports[0].protocol: Unsupported value",
			"spec.template.spec.containers[1].name: Duplicate value",
			"spec.template.spec.containers[2].name: Invalid value",
		}},
		{"controllerrevision without data", "ControllerRevision", func() runtime.Object {
			cr := controllerRevision()
			cr.Data = runtime.RawExtension{}
			cr.Revision = -1
			return cr
		}, []string{"data: Required value", "revision: Invalid value"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rules := resource(t, tt.kind).Rules.(typed.All)
			obj := tt.obj()
			rules.Default(obj)
			got := typedtest.ErrStrings(rules.Validate(obj))
			if !reflect.DeepEqual(got, tt.want) && !(len(got) == 0 && len(tt.want) == 0) {
				t.Errorf("Validate(%s) = %q, want %q", tt.name, got, tt.want)
			}
		})
	}
}

func TestSelectorMismatchMessage(t *testing.T) {
	d := deployment()
	d.Spec.Template.Labels = map[string]string{"app": "other"}
	rules := resource(t, "Deployment").Rules.(typed.All)
	rules.Default(d)
	errs := rules.Validate(d)
	const want = "`selector` does not match template `labels`"
	if len(errs) != 1 || !strings.Contains(errs[0].Error(), want) {
		t.Errorf("Validate(mismatched deployment) = %v, want one error saying %s", errs, want)
	}
}

func TestValidateUpdate(t *testing.T) {
	tests := []struct {
		name   string
		kind   string
		old    func() runtime.Object
		update func(runtime.Object)
		want   []string
	}{
		{"deployment scale and new image", "Deployment", func() runtime.Object { return deployment() }, func(o runtime.Object) {
			d := o.(*appsv1.Deployment)
			d.Spec.Replicas = new(int32(5))
			d.Spec.Template.Spec.Containers[0].Image = "nginx:1.28"
		}, nil},
		{"deployment selector", "Deployment", func() runtime.Object { return deployment() }, func(o runtime.Object) {
			d := o.(*appsv1.Deployment)
			d.Spec.Selector.MatchLabels["tier"] = "front"
			d.Spec.Template.Labels["tier"] = "front"
		}, []string{"spec.selector: Invalid value"}},
		{"replicaset selector", "ReplicaSet", func() runtime.Object { return replicaSet() }, func(o runtime.Object) {
			rs := o.(*appsv1.ReplicaSet)
			rs.Spec.Selector.MatchLabels = map[string]string{"app": "web", "v": "2"}
			rs.Spec.Template.Labels["v"] = "2"
		}, []string{"spec.selector: Invalid value"}},
		{"daemonset selector", "DaemonSet", func() runtime.Object { return daemonSet() }, func(o runtime.Object) {
			ds := o.(*appsv1.DaemonSet)
			ds.Spec.Selector.MatchLabels = nil
			ds.Spec.Selector.MatchExpressions = []metav1.LabelSelectorRequirement{{Key: "app", Operator: metav1.LabelSelectorOpExists}}
		}, []string{"spec.selector: Invalid value"}},
		{"statefulset mutable fields", "StatefulSet", func() runtime.Object { return statefulSet() }, func(o runtime.Object) {
			ss := o.(*appsv1.StatefulSet)
			ss.Spec.Replicas = new(int32(3))
			ss.Spec.Template.Spec.Containers[0].Image = "nginx:1.28"
			ss.Spec.UpdateStrategy = appsv1.StatefulSetUpdateStrategy{Type: appsv1.OnDeleteStatefulSetStrategyType}
			ss.Spec.MinReadySeconds = 10
			ss.Spec.Ordinals = &appsv1.StatefulSetOrdinals{Start: 1}
			ss.Spec.PersistentVolumeClaimRetentionPolicy.WhenScaled = appsv1.DeletePersistentVolumeClaimRetentionPolicyType
		}, nil},
		{"statefulset serviceName", "StatefulSet", func() runtime.Object { return statefulSet() }, func(o runtime.Object) {
			o.(*appsv1.StatefulSet).Spec.ServiceName = "web-headless"
		}, []string{"spec: Forbidden"}},
		{"statefulset podManagementPolicy", "StatefulSet", func() runtime.Object { return statefulSet() }, func(o runtime.Object) {
			o.(*appsv1.StatefulSet).Spec.PodManagementPolicy = appsv1.ParallelPodManagement
		}, []string{"spec: Forbidden"}},
		{"controllerrevision data", "ControllerRevision", func() runtime.Object { return controllerRevision() }, func(o runtime.Object) {
			o.(*appsv1.ControllerRevision).Data = runtime.RawExtension{Raw: []byte(`{"spec":{}}`)}
		}, []string{"data: Invalid value"}},
		{"controllerrevision labels", "ControllerRevision", func() runtime.Object { return controllerRevision() }, func(o runtime.Object) {
			o.(*appsv1.ControllerRevision).Labels = map[string]string{"controller-revision-hash": "abc"}
		}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rules := resource(t, tt.kind).Rules.(typed.All)
			old := tt.old()
			rules.Default(old)
			obj := old.DeepCopyObject()
			tt.update(obj)
			rules.Default(obj)
			rules.PrepareForUpdate(obj, old)
			got := typedtest.ErrStrings(rules.ValidateUpdate(obj, old))
			if !reflect.DeepEqual(got, tt.want) && !(len(got) == 0 && len(tt.want) == 0) {
				t.Errorf("ValidateUpdate(%s) = %q, want %q", tt.name, got, tt.want)
			}
		})
	}
}

func TestPrepare(t *testing.T) {
	rules := resource(t, "Deployment").Rules.(typed.All)
	d := deployment()
	d.Status.Replicas = 3
	rules.PrepareForCreate(d)
	if d.Status.Replicas != 0 {
		t.Errorf("PrepareForCreate kept status.replicas %d", d.Status.Replicas)
	}

	old := deployment()
	old.Status.ReadyReplicas = 2
	upd := deployment()
	upd.Status.ReadyReplicas = 7
	rules.PrepareForUpdate(upd, old)
	if upd.Status.ReadyReplicas != 2 {
		t.Errorf("PrepareForUpdate: status.readyReplicas = %d, want the stored 2", upd.Status.ReadyReplicas)
	}
}

func TestDaemonSetTemplateGeneration(t *testing.T) {
	rules := resource(t, "DaemonSet").Rules.(typed.All)
	ds := daemonSet()
	rules.Default(ds)
	rules.PrepareForCreate(ds)
	if got := ds.Annotations[appsv1.DeprecatedTemplateGeneration]; got != "1" {
		t.Fatalf("after create, template generation = %q, want 1", got)
	}
	steps := []struct {
		name   string
		update func(*appsv1.DaemonSet)
		want   string
	}{
		{"labels only", func(ds *appsv1.DaemonSet) { ds.Labels = map[string]string{"team": "edge"} }, "1"},
		{"client tampers", func(ds *appsv1.DaemonSet) { ds.Annotations[appsv1.DeprecatedTemplateGeneration] = "9" }, "1"},
		{"new image", func(ds *appsv1.DaemonSet) { ds.Spec.Template.Spec.Containers[0].Image = "nginx:1.28" }, "2"},
		{"new env", func(ds *appsv1.DaemonSet) {
			ds.Spec.Template.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "A", Value: "1"}}
		}, "3"},
	}
	for _, s := range steps {
		upd := ds.DeepCopy()
		s.update(upd)
		rules.Default(upd)
		rules.PrepareForUpdate(upd, ds)
		if got := upd.Annotations[appsv1.DeprecatedTemplateGeneration]; got != s.want {
			t.Errorf("after update %q, template generation = %q, want %s", s.name, got, s.want)
		}
		ds = upd
	}
}

func TestValidateStatusUpdate(t *testing.T) {
	tests := []struct {
		name   string
		kind   string
		old    runtime.Object
		status func(runtime.Object)
		want   []string
	}{
		{"deployment ok", "Deployment", deployment(), func(o runtime.Object) {
			o.(*appsv1.Deployment).Status = appsv1.DeploymentStatus{Replicas: 3, UpdatedReplicas: 3, ReadyReplicas: 2, AvailableReplicas: 2, ObservedGeneration: 1}
		}, nil},
		{"deployment counters", "Deployment", deployment(), func(o runtime.Object) {
			o.(*appsv1.Deployment).Status = appsv1.DeploymentStatus{Replicas: 1, UpdatedReplicas: 2, ReadyReplicas: -1}
		}, []string{"status.readyReplicas: Invalid value", "status.updatedReplicas: Invalid value", "status.availableReplicas: Invalid value"}},
		{"replicaset available above ready", "ReplicaSet", replicaSet(), func(o runtime.Object) {
			o.(*appsv1.ReplicaSet).Status = appsv1.ReplicaSetStatus{Replicas: 3, ReadyReplicas: 1, AvailableReplicas: 2}
		}, []string{"status.availableReplicas: Invalid value"}},
		{"statefulset collision count decremented", "StatefulSet", func() runtime.Object {
			ss := statefulSet()
			ss.Status.CollisionCount = new(int32(2))
			return ss
		}(), func(o runtime.Object) { o.(*appsv1.StatefulSet).Status.CollisionCount = new(int32(1)) },
			[]string{"status.collisionCount: Invalid value"}},
		{"daemonset negative", "DaemonSet", daemonSet(), func(o runtime.Object) {
			o.(*appsv1.DaemonSet).Status.NumberReady = -1
		}, []string{"status.numberReady: Invalid value"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sv, ok := resource(t, tt.kind).Rules.(apiserver.StatusValidator)
			if !ok {
				t.Fatalf("%s rules do not validate status", tt.kind)
			}
			obj := tt.old.DeepCopyObject()
			tt.status(obj)
			got := typedtest.ErrStrings(sv.ValidateStatusUpdate(obj, tt.old))
			if !reflect.DeepEqual(got, tt.want) && !(len(got) == 0 && len(tt.want) == 0) {
				t.Errorf("ValidateStatusUpdate(%s) = %q, want %q", tt.name, got, tt.want)
			}
		})
	}
}

func TestRow(t *testing.T) {
	d := deployment()
	d.Spec.Replicas = new(int32(3))
	d.Spec.Template.Spec.Containers = append(d.Spec.Template.Spec.Containers, corev1.Container{Name: "sidecar", Image: "envoy:1.30"})
	d.Status = appsv1.DeploymentStatus{ReadyReplicas: 2, UpdatedReplicas: 3, AvailableReplicas: 2}

	rs := replicaSet()
	rs.Spec.Replicas = new(int32(2))
	rs.Status = appsv1.ReplicaSetStatus{Replicas: 2, ReadyReplicas: 1}

	ss := statefulSet()
	ss.Spec.Replicas = new(int32(3))
	ss.Status.ReadyReplicas = 3

	ds := daemonSet()
	ds.Spec.Template.Spec.NodeSelector = map[string]string{"kubernetes.io/os": "linux"}
	ds.Status = appsv1.DaemonSetStatus{DesiredNumberScheduled: 4, CurrentNumberScheduled: 4, NumberReady: 3, UpdatedNumberScheduled: 4, NumberAvailable: 3}

	cr := controllerRevision()
	cr.Name = "web-7d4b9c"
	cr.Revision = 2
	cr.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "StatefulSet", Name: "web", UID: "u", Controller: new(true)}}
	orphan := controllerRevision()
	orphan.CreationTimestamp = metav1.Time{}

	tests := []struct {
		kind string
		obj  runtime.Object
		want []interface{}
	}{
		{"Deployment", d, []interface{}{"web", "2/3", int64(3), int64(2), "90m", "web,sidecar", "nginx:1.27,envoy:1.30", "app=web"}},
		{"ReplicaSet", rs, []interface{}{"web", int64(2), int64(2), int64(1), "90m", "web", "nginx:1.27", "app=web"}},
		{"StatefulSet", ss, []interface{}{"web", "3/3", "90m", "web", "nginx:1.27"}},
		{"DaemonSet", ds, []interface{}{"web", int64(4), int64(4), int64(3), int64(4), int64(3), "kubernetes.io/os=linux", "90m", "web", "nginx:1.27", "app=web"}},
		{"ControllerRevision", cr, []interface{}{"web-7d4b9c", "statefulset.apps/web", int64(2), "90m"}},
		{"ControllerRevision", orphan, []interface{}{"web", "<none>", int64(1), "<unknown>"}},
	}
	for _, tt := range tests {
		t.Run(tt.kind, func(t *testing.T) {
			rules := resource(t, tt.kind).Rules.(typed.All)
			got := rules.Row(tt.obj)
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Row(%s) = %#v, want %#v", tt.kind, got, tt.want)
			}
			if cols := rules.Columns(); len(cols) != len(got) || cols[0].Name != "Name" {
				t.Errorf("%s has %d columns for %d cells, first %q", tt.kind, len(cols), len(got), cols[0].Name)
			}
		})
	}
}

func TestColumns(t *testing.T) {
	tests := []struct {
		kind       string
		want, wide string
	}{
		{"Deployment", "Name Ready Up-to-date Available Age", "Containers Images Selector"},
		{"ReplicaSet", "Name Desired Current Ready Age", "Containers Images Selector"},
		{"StatefulSet", "Name Ready Age", "Containers Images"},
		{"DaemonSet", "Name Desired Current Ready Up-to-date Available Node Selector Age", "Containers Images Selector"},
		{"ControllerRevision", "Name Controller Revision Age", ""},
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

func TestScale(t *testing.T) {
	tests := []struct {
		kind string
		obj  runtime.Object
	}{
		{"Deployment", deployment()},
		{"ReplicaSet", replicaSet()},
		{"StatefulSet", statefulSet()},
	}
	for _, tt := range tests {
		t.Run(tt.kind, func(t *testing.T) {
			r := resource(t, tt.kind)
			if r.Scale == nil {
				t.Fatalf("%s serves no scale subresource", tt.kind)
			}
			r.Rules.(typed.All).Default(tt.obj)
			reflect.ValueOf(tt.obj).Elem().FieldByName("Status").FieldByName("Replicas").SetInt(1)
			spec, status, sel := r.Scale.Get(tt.obj)
			if spec != 1 || status != 1 || sel != "app=web" {
				t.Errorf("Scale.Get(defaulted %s) = %d, %d, %q; want 1, 1, app=web", tt.kind, spec, status, sel)
			}
			r.Scale.Set(tt.obj, 4)
			if spec, _, _ := r.Scale.Get(tt.obj); spec != 4 {
				t.Errorf("Scale.Get after Set(4) = %d", spec)
			}
			if errs := r.Rules.Validate(tt.obj); len(errs) > 0 {
				t.Errorf("Validate after Set(4) = %v", errs)
			}
		})
	}
	for _, kind := range []string{"DaemonSet", "ControllerRevision"} {
		if resource(t, kind).Scale != nil {
			t.Errorf("%s serves a scale subresource; upstream does not", kind)
		}
	}
}

func TestFields(t *testing.T) {
	rs := replicaSet()
	rs.Status.Replicas = 2
	if got := resource(t, "ReplicaSet").Rules.(typed.All).Fields(rs); got["status.replicas"] != "2" {
		t.Errorf("ReplicaSet Fields = %v, want status.replicas=2", got)
	}
	for _, r := range ResourcesWithClock(nil) {
		obj := r.New()
		if got := r.Rules.(typed.All).Fields(obj); got == nil {
			t.Errorf("%s Fields returned a nil set", r.Kind)
		}
	}
}

func TestResources(t *testing.T) {
	var got []string
	for _, r := range Resources() {
		got = append(got, fmt.Sprintf("%s %v %v status=%v scale=%v", r.Plural, r.ShortNames, r.Categories, r.Status, r.Scale != nil))
		if r.GroupVersion != appsv1.SchemeGroupVersion || !r.Namespaced || r.Rules.(typed.All).AllowCreateOnUpdate() {
			t.Errorf("%s: group version %v, namespaced %v, create on update %v", r.Plural, r.GroupVersion, r.Namespaced, r.Rules.(typed.All).AllowCreateOnUpdate())
		}
		if obj := r.New(); reflect.TypeOf(obj).Elem().Name() != r.Kind {
			t.Errorf("%s New() = %T", r.Plural, obj)
		}
	}
	want := []string{
		"deployments [deploy] [all] status=true scale=true",
		"replicasets [rs] [all] status=true scale=true",
		"statefulsets [sts] [all] status=true scale=true",
		"daemonsets [ds] [all] status=true scale=false",
		"controllerrevisions [] [] status=false scale=false",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Resources() = %q, want %q", got, want)
	}
}

// TestWrongType: the rules, given an object of another type, neither
// panic nor accept it.
func TestWrongType(t *testing.T) { typedtest.WrongType(t, Resources()) }
