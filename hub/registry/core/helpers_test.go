package core

import (
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/outpost-mesh/outpost/hub/apiserver"
	"github.com/outpost-mesh/outpost/hub/registry/typed"
)

// t0 is the time the tests' clock always shows.
var t0 = time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)

func clock() time.Time { return t0 }

// ago is a timestamp d before t0.
func ago(d time.Duration) metav1.Time { return metav1.NewTime(t0.Add(-d)) }

// testResources are the resources with the tests' clock, by plural.
func testResources() map[string]apiserver.Resource {
	m := map[string]apiserver.Resource{}
	for _, r := range resources(clock, options{services: DefaultServiceConfig()}) {
		m[r.Plural] = r
	}
	return m
}

func rulesFor(plural string) typed.All {
	return testResources()[plural].Rules.(typed.All)
}

// create runs what the machinery runs on a create before Validate, and
// returns obj.
func create[T runtime.Object](plural string, obj T) T {
	r := rulesFor(plural)
	r.Default(obj)
	r.PrepareForCreate(obj)
	return obj
}

// summary renders errors as "path: type" lines, sorted, the way
// `kubectl apply` prints their start.
func summary(errs field.ErrorList) []string {
	out := make([]string, 0, len(errs))
	for _, e := range errs {
		out = append(out, fmt.Sprintf("%s: %s", e.Field, e.Type))
	}
	slices.Sort(out)
	return out
}

// want is a sorted copy of lines, for comparing with summary.
func want(lines ...string) []string {
	out := append([]string{}, lines...)
	slices.Sort(out)
	return out
}

func sameLines(a, b []string) bool { return strings.Join(a, "\n") == strings.Join(b, "\n") }

// validPod is a pod that passes validation once defaulted.
func validPod() *corev1.Pod {
	return create("pods", &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default"},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{
				Name:  "nginx",
				Image: "nginx:1.27",
				Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 80}},
			}},
		},
	})
}

func validService() *corev1.Service {
	return create("services", &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default"},
		Spec: corev1.ServiceSpec{
			Selector: map[string]string{"app": "web"},
			Ports:    []corev1.ServicePort{{Port: 80}},
		},
	})
}
