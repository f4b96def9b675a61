package controllers

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
)

func TestObject(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p"}}
	for _, tc := range []struct {
		name string
		obj  any
		ok   bool
	}{
		{"the object", pod, true},
		{"its tombstone", cache.DeletedFinalStateUnknown{Key: "ns/p", Obj: pod}, true},
		{"another type", &corev1.Node{}, false},
		{"a tombstone of another type", cache.DeletedFinalStateUnknown{Obj: &corev1.Node{}}, false},
		{"nil", nil, false},
	} {
		got, ok := Object[*corev1.Pod](tc.obj)
		if ok != tc.ok || ok && got != pod {
			t.Errorf("Object(%s) = %v, %v; want %v", tc.name, got, ok, tc.ok)
		}
		if m, ok := Object[metav1.Object](tc.obj); tc.ok && (!ok || m.GetName() != "p") {
			t.Errorf("Object[metav1.Object](%s) = %v, %v; want the pod", tc.name, m, ok)
		}
	}
}
