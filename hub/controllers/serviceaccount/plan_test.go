package serviceaccount

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

const ca = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"

func TestDecide(t *testing.T) {
	active := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "app"}, Status: corev1.NamespaceStatus{Phase: corev1.NamespaceActive}}
	fresh := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "app"}} // no phase yet
	now := metav1.NewTime(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	terminating := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "app", DeletionTimestamp: &now}, Status: corev1.NamespaceStatus{Phase: corev1.NamespaceTerminating}}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: DefaultName, Namespace: "app"}}
	good := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: RootCAName, Namespace: "app", ResourceVersion: "7", Labels: map[string]string{"keep": "me"},
			Annotations: map[string]string{DescriptionAnnotation: rootCADescription}},
		Data: map[string]string{RootCAKey: ca},
	}
	edited := good.DeepCopy()
	edited.Data[RootCAKey] = "tampered"
	extraKey := good.DeepCopy()
	extraKey.Data["more"] = "x"
	undescribed := good.DeepCopy()
	undescribed.Annotations = nil
	wantSA := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: DefaultName, Namespace: "app"}}
	wantCM := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: RootCAName, Namespace: "app", Annotations: map[string]string{DescriptionAnnotation: rootCADescription}},
		Data:       map[string]string{RootCAKey: ca},
	}

	for _, tc := range []struct {
		name string
		ns   *corev1.Namespace
		sa   *corev1.ServiceAccount
		cm   *corev1.ConfigMap
		want Plan
	}{
		{"new namespace", active, nil, nil, Plan{CreateServiceAccount: wantSA, CreateRootCA: wantCM}},
		{"new namespace without a phase yet", fresh, nil, nil, Plan{CreateServiceAccount: wantSA, CreateRootCA: wantCM}},
		{"all there", active, sa, good, Plan{}},
		{"service account deleted", active, nil, good, Plan{CreateServiceAccount: wantSA}},
		{"config map deleted", active, sa, nil, Plan{CreateRootCA: wantCM}},
		{"config map edited", active, sa, edited, Plan{UpdateRootCA: good}},
		{"config map with a key added", active, sa, extraKey, Plan{UpdateRootCA: good}},
		{"config map without its description", active, sa, undescribed, Plan{UpdateRootCA: good}},
		{"namespace terminating", terminating, nil, nil, Plan{}},
		{"namespace gone", nil, nil, nil, Plan{}},
	} {
		before := tc.cm.DeepCopy()
		got := Decide(tc.ns, tc.sa, tc.cm, []byte(ca))
		if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("%s: Decide (-want +got):\n%s", tc.name, diff)
		}
		if !cmp.Equal(before, tc.cm) {
			t.Errorf("%s: Decide modified the config map it was given", tc.name)
		}
		if got.Empty() != (tc.want == Plan{}) {
			t.Errorf("%s: Empty() = %v", tc.name, got.Empty())
		}
	}
}
