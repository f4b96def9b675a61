package apps

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apiresource "k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/outpost-mesh/outpost/hub/registry/typed"
)

// TestStatefulSetClaimTemplatesRefused: until the hub has storage, a set
// with volumeClaimTemplates is refused on create with a reason, while a
// set stored with them before stays updatable.
func TestStatefulSetClaimTemplatesRefused(t *testing.T) {
	rules := resource(t, "StatefulSet").Rules.(typed.All)
	ss := statefulSet()
	ss.Spec.VolumeClaimTemplates = []corev1.PersistentVolumeClaim{{
		ObjectMeta: metav1.ObjectMeta{Name: "data"},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: apiresource.MustParse("1Gi")}},
		},
	}}
	rules.Default(ss)
	errs := rules.Validate(ss)
	if len(errs) != 1 || errs[0].Field != "spec.volumeClaimTemplates" || errs[0].Type != field.ErrorTypeForbidden ||
		!strings.Contains(errs[0].Error(), "not supported until the hub has storage") {
		t.Fatalf("Validate(set with claim templates) = %v, want spec.volumeClaimTemplates: Forbidden: ... not supported until the hub has storage", errs)
	}

	updated := ss.DeepCopy()
	updated.Spec.Replicas = new(int32(5))
	if errs := rules.ValidateUpdate(updated, ss); len(errs) != 0 {
		t.Errorf("ValidateUpdate(stored set with claim templates) = %v, want none", errs)
	}
}
