package apiserver

import (
	"encoding/json"
	"fmt"
	"testing"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	corev1 "k8s.io/api/core/v1"
)

// TestArrayElemBound: every '[' and ',' outside strings counts.
func TestArrayElemBound(t *testing.T) {
	for _, tc := range []struct {
		doc  string
		want int64
	}{
		{`{}`, 0},
		{`[]`, 1},
		{`[1,2,3]`, 3},
		{`{"a":[1,[2,3]],"b":"[,\",]"}`, 5},
	} {
		if got := arrayElemBound([]byte(tc.doc)); got != tc.want {
			t.Errorf("arrayElemBound(%s) = %d, want %d", tc.doc, got, tc.want)
		}
	}
}

// TestJSONPatchWork: the estimate counts the arrays' elements for every
// operation that shifts an array, and nothing for appends, map keys or
// reads.
func TestJSONPatchWork(t *testing.T) {
	doc := []byte(`{"a":[1,2,3,4,5,6,7],"m":{"k":"v"}}`)
	for _, tc := range []struct {
		patch  string
		shifts int64
	}{
		{`[{"op":"add","path":"/a/-","value":1}]`, 0},
		{`[{"op":"add","path":"/m/x","value":1}]`, 0},
		{`[{"op":"replace","path":"/a/0","value":1},{"op":"test","path":"/a/1","value":2}]`, 0},
		{`[{"op":"add","path":"/a/0","value":1}]`, 1},
		{`[{"op":"remove","path":"/a/3"},{"op":"move","from":"/a/1","path":"/m/y"}]`, 2},
		{`[{"op":"copy","from":"/m/k","path":"/a/2"}]`, 1},
	} {
		p, err := jsonpatch.DecodePatch([]byte(tc.patch))
		if err != nil {
			t.Fatal(err)
		}
		want := int64(len(p)) + tc.shifts*4*(arrayElemBound(doc)+arrayElemBound([]byte(tc.patch)))
		if got := jsonPatchWork(doc, []byte(tc.patch), p); got != want {
			t.Errorf("jsonPatchWork(%s) = %d, want %d", tc.patch, got, want)
		}
	}
}

// TestSMPWork: the estimate grows with the square of the lists merged by
// key, and only with the size of what is replaced or added whole.
func TestSMPWork(t *testing.T) {
	pod := func(env int) map[string]any {
		p := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c"}}}}
		for i := range env {
			p.Spec.Containers[0].Env = append(p.Spec.Containers[0].Env, corev1.EnvVar{Name: fmt.Sprint(i)})
		}
		b, _ := json.Marshal(p)
		var m map[string]any
		json.Unmarshal(b, &m)
		return m
	}
	patch := func(s string) map[string]any {
		var m map[string]any
		if err := json.Unmarshal([]byte(s), &m); err != nil {
			t.Fatal(err)
		}
		return m
	}
	const unbounded = 1 << 62
	small := smpWork(pod(10), patch(`{"spec":{"containers":[{"name":"c","env":[{"name":"x"}]}]}}`), &corev1.Pod{}, unbounded)
	big := smpWork(pod(1000), patch(`{"spec":{"containers":[{"name":"c","env":[{"name":"x"}]}]}}`), &corev1.Pod{}, unbounded)
	if small > 10_000 || big < 1000*1000 || big > maxPatchWork {
		t.Errorf("smpWork of one env var into 10 and 1000 = %d, %d; want under 10000, and between 1e6 and %d", small, big, maxPatchWork)
	}
	// A list the original lacks is taken whole; an atomic one (args) is
	// replaced whole.
	added := smpWork(pod(0), patch(`{"spec":{"volumes":[`+repeat(`{"name":"v"}`, 5000)+`]}}`), &corev1.Pod{}, unbounded)
	replaced := smpWork(pod(0), patch(`{"spec":{"containers":[{"name":"c","args":[`+repeat(`"a"`, 5000)+`]}]}}`), &corev1.Pod{}, unbounded)
	if added > 10_000 || replaced > 10_000 {
		t.Errorf("smpWork of 5000 new volumes, 5000 args = %d, %d; want each under 10000", added, replaced)
	}
	// Past its limit, the estimate says so.
	if got := smpWork(pod(3000), patch(`{"spec":{"containers":[{"name":"c","env":[{"name":"x"}]}]}}`), &corev1.Pod{}, 1000); got <= 1000 {
		t.Errorf("smpWork of one env var into 3000 with limit 1000 = %d, want over 1000", got)
	}
}
