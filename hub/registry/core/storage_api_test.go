package core_test

import (
	"context"
	"reflect"
	"slices"
	"testing"

	autoscalingv1 "k8s.io/api/autoscaling/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"

	"github.com/outpost-mesh/outpost/hub/registry/typed/typedtest"
	"github.com/outpost-mesh/outpost/test/hubtest"
)

// tableColumns lists path as a Table and returns its column names.
func tableColumns(t *testing.T, c kubernetes.Interface, path string) []string {
	t.Helper()
	return typedtest.ColumnNames(typedtest.Table(t, c.CoreV1().RESTClient(), path))
}

// TestStorageAndReplicationAPI: volumes, claims, pod templates and
// replication controllers are served with upstream's defaults, refusals,
// immutable fields, columns and, for controllers, the scale subresource.
func TestStorageAndReplicationAPI(t *testing.T) {
	h := hubtest.Start(t)
	ctx := context.Background()
	core := h.Client.CoreV1()

	pv, err := core.PersistentVolumes().Create(ctx, &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: "disk-1"},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:               corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("10Gi")},
			AccessModes:            []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			PersistentVolumeSource: corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/srv/disk-1"}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create pv: %v", err)
	}
	if pv.Spec.PersistentVolumeReclaimPolicy != corev1.PersistentVolumeReclaimRetain || pv.Status.Phase != corev1.VolumePending {
		t.Errorf("created pv: policy %q, phase %q; want Retain, Pending", pv.Spec.PersistentVolumeReclaimPolicy, pv.Status.Phase)
	}
	pv.Spec.HostPath.Path = "/srv/other"
	_, err = core.PersistentVolumes().Update(ctx, pv, metav1.UpdateOptions{})
	if got := typedtest.Causes(t, "change a pv's source", err); !slices.Contains(got, "spec.persistentvolumesource") {
		t.Errorf("change a pv's source: causes %v, want spec.persistentvolumesource", got)
	}

	claims := core.PersistentVolumeClaims("default")
	pvc, err := claims.Create(ctx, &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "data"},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create pvc: %v", err)
	}
	if pvc.Spec.VolumeMode == nil || *pvc.Spec.VolumeMode != corev1.PersistentVolumeFilesystem || pvc.Status.Phase != corev1.ClaimPending {
		t.Errorf("created pvc: volumeMode %v, phase %q; want Filesystem, Pending", pvc.Spec.VolumeMode, pvc.Status.Phase)
	}
	pvc.Spec.AccessModes = []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany}
	_, err = claims.Update(ctx, pvc, metav1.UpdateOptions{})
	if got := typedtest.Causes(t, "change a pvc's access modes", err); !slices.Contains(got, "spec") {
		t.Errorf("change a pvc's access modes: causes %v, want spec", got)
	}
	_, err = claims.Create(ctx, &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "empty"},
		Spec:       corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}},
	}, metav1.CreateOptions{})
	if got := typedtest.Causes(t, "create a pvc without storage", err); !slices.Contains(got, "spec.resources[storage]") {
		t.Errorf("create a pvc without storage: causes %v, want spec.resources[storage]", got)
	}

	template := corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "web"}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "nginx", Image: "nginx:1.27"}}},
	}
	if _, err := core.PodTemplates("default").Create(ctx, &corev1.PodTemplate{
		ObjectMeta: metav1.ObjectMeta{Name: "web"}, Template: template}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create podtemplate: %v", err)
	}

	rcs := core.ReplicationControllers("default")
	rc, err := rcs.Create(ctx, &corev1.ReplicationController{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec:       corev1.ReplicationControllerSpec{Template: &template},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create rc: %v", err)
	}
	if *rc.Spec.Replicas != 1 || !reflect.DeepEqual(rc.Spec.Selector, template.Labels) || rc.Generation != 1 {
		t.Errorf("created rc: replicas %d, selector %v, generation %d; want 1, the template's labels, 1", *rc.Spec.Replicas, rc.Spec.Selector, rc.Generation)
	}
	_, err = rcs.Create(ctx, &corev1.ReplicationController{
		ObjectMeta: metav1.ObjectMeta{Name: "never"},
		Spec: corev1.ReplicationControllerSpec{Template: &corev1.PodTemplateSpec{
			ObjectMeta: template.ObjectMeta,
			Spec:       corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever, Containers: template.Spec.Containers},
		}},
	}, metav1.CreateOptions{})
	if got := typedtest.Causes(t, "create an rc whose pods stop", err); !slices.Contains(got, "spec.template.spec.restartPolicy") {
		t.Errorf("create an rc whose pods stop: causes %v, want spec.template.spec.restartPolicy", got)
	}

	// The hub's ReplicationController controller writes the RC's status
	// meanwhile: a conflict is tried again, as any client does.
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		scale, err := rcs.GetScale(ctx, "web", metav1.GetOptions{})
		if err != nil || scale.Spec.Replicas != 1 || scale.Status.Selector != "app=web" {
			t.Fatalf("get rc scale = %+v, %v; want 1 replica, selector app=web", scale, err)
		}
		_, err = rcs.UpdateScale(ctx, "web", &autoscalingv1.Scale{
			ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default", ResourceVersion: scale.ResourceVersion},
			Spec:       autoscalingv1.ScaleSpec{Replicas: 3},
		}, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatalf("scale rc to 3: %v", err)
	}
	if rc, err := rcs.Get(ctx, "web", metav1.GetOptions{}); err != nil || *rc.Spec.Replicas != 3 || rc.Generation != 2 {
		t.Errorf("rc after scaling = %+v, %v; want 3 replicas, generation 2", rc, err)
	}

	for _, tc := range []struct {
		path string
		want []string
	}{
		{"/api/v1/persistentvolumes", []string{"Name", "Capacity", "Access Modes", "Reclaim Policy", "Status", "Claim", "StorageClass",
			"VolumeAttributesClass", "Reason", "Age", "VolumeMode"}},
		{"/api/v1/namespaces/default/persistentvolumeclaims", []string{"Name", "Status", "Volume", "Capacity", "Access Modes", "StorageClass",
			"VolumeAttributesClass", "Age", "VolumeMode"}},
		{"/api/v1/namespaces/default/podtemplates", []string{"Name", "Containers", "Images", "Pod Labels"}},
		{"/api/v1/namespaces/default/replicationcontrollers", []string{"Name", "Desired", "Current", "Ready", "Age", "Containers", "Images", "Selector"}},
	} {
		if got := tableColumns(t, h.Client, tc.path); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s as a Table: columns %q, want %q", tc.path, got, tc.want)
		}
	}
}
