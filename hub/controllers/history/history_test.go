package history

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
)

var setKind = appsv1.SchemeGroupVersion.WithKind("StatefulSet")

func parent() *appsv1.StatefulSet {
	return &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: "default", UID: "set-uid",
		Annotations: map[string]string{"a": "b"}}}
}

func template(image string) *corev1.PodTemplateSpec {
	return &corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "db"}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "db", Image: image}}},
	}
}

func TestTemplatePatch(t *testing.T) {
	p, err := TemplatePatch(template("postgres:16"))
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Spec struct {
			Template map[string]any `json:"template"`
		} `json:"spec"`
	}
	if err := json.Unmarshal(p, &got); err != nil {
		t.Fatalf("TemplatePatch = %s: %v", p, err)
	}
	if got.Spec.Template["$patch"] != "replace" {
		t.Errorf("TemplatePatch = %s, want spec.template.$patch replace", p)
	}
	again, _ := TemplatePatch(template("postgres:16"))
	if string(again) != string(p) {
		t.Errorf("TemplatePatch not deterministic: %s then %s", p, again)
	}
}

func TestHashAndName(t *testing.T) {
	data, _ := TemplatePatch(template("postgres:16"))
	other, _ := TemplatePatch(template("postgres:17"))
	r := New(parent(), setKind, map[string]string{"app": "db"}, data, 1, nil)
	if !strings.HasPrefix(r.Name, "db-") || r.Labels[HashLabel] != strings.TrimPrefix(r.Name, "db-") {
		t.Errorf("New name %q, hash label %q: want db-<hash label>", r.Name, r.Labels[HashLabel])
	}
	if r.Labels["app"] != "db" || r.Annotations["a"] != "b" || r.Namespace != "default" {
		t.Errorf("New = %+v: want the template labels, the parent's annotations and namespace", r.ObjectMeta)
	}
	if ref := metav1.GetControllerOf(r); ref == nil || ref.UID != "set-uid" || ref.Kind != "StatefulSet" {
		t.Errorf("New controller ref = %+v, want the StatefulSet's", ref)
	}
	one := int32(1)
	for _, c := range []struct {
		name string
		a, b string
	}{
		{"other data", Hash(r, nil), Hash(&appsv1.ControllerRevision{Data: runtime.RawExtension{Raw: other}}, nil)},
		{"collision count", Hash(r, nil), Hash(r, &one)},
	} {
		if c.a == c.b {
			t.Errorf("%s: same hash %q, want different", c.name, c.a)
		}
	}
	if long := Name(strings.Repeat("x", 300), "abc"); len(long) != maxPrefix+4 {
		t.Errorf("Name of a long prefix has %d characters, want %d", len(long), maxPrefix+4)
	}
}

func rev(name string, n int64, owner string) *appsv1.ControllerRevision {
	r := &appsv1.ControllerRevision{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", Labels: map[string]string{"app": "db"}}, Revision: n}
	if owner != "" {
		r.OwnerReferences = []metav1.OwnerReference{{UID: "set-uid", Name: owner, Controller: new(true)}}
	}
	return r
}

func names(revs []*appsv1.ControllerRevision) string {
	var s []string
	for _, r := range revs {
		s = append(s, r.Name)
	}
	return strings.Join(s, ",")
}

func TestToDelete(t *testing.T) {
	old := []*appsv1.ControllerRevision{rev("r3", 3, "db"), rev("r1", 1, "db"), rev("r2", 2, "db"), rev("r4", 4, "db")}
	live := func(names ...string) func(*appsv1.ControllerRevision) bool {
		return func(r *appsv1.ControllerRevision) bool {
			for _, n := range names {
				if r.Name == n {
					return true
				}
			}
			return false
		}
	}
	for _, c := range []struct {
		limit int
		live  []string
		want  string
	}{
		{10, nil, ""},
		{4, nil, ""},
		{2, nil, "r1,r2"},
		{2, []string{"r1"}, "r2,r3"},
		{0, []string{"r4"}, "r1,r2,r3"},
		{-1, nil, "r1,r2,r3,r4"},
	} {
		if got := names(ToDelete(old, c.limit, live(c.live...))); got != c.want {
			t.Errorf("ToDelete(limit %d, live %v) = %q, want %q", c.limit, c.live, got, c.want)
		}
	}
	if names(old) != "r3,r1,r2,r4" {
		t.Errorf("ToDelete reordered its input: %s", names(old))
	}
}

func TestClaimAndNext(t *testing.T) {
	foreign := rev("foreign", 7, "")
	foreign.OwnerReferences = []metav1.OwnerReference{{UID: "other", Controller: new(true)}}
	unmatched := rev("unmatched", 1, "")
	unmatched.Labels = map[string]string{"app": "web"}
	revs := []*appsv1.ControllerRevision{rev("mine", 2, "db"), rev("orphan", 1, ""), foreign, unmatched}
	owned, orphans := Claim(revs, "set-uid", labels.SelectorFromSet(labels.Set{"app": "db"}))
	if names(owned) != "mine" || names(orphans) != "orphan" {
		t.Errorf("Claim = owned %q, orphans %q; want mine, orphan", names(owned), names(orphans))
	}
	if got := Next(revs); got != 8 {
		t.Errorf("Next = %d, want 8", got)
	}
	if got := Next(nil); got != 1 {
		t.Errorf("Next(nil) = %d, want 1", got)
	}
}

func TestCreateCollision(t *testing.T) {
	ctx := context.Background()
	data, _ := TemplatePatch(template("postgres:16"))
	var count int32
	want := New(parent(), setKind, map[string]string{"app": "db"}, data, 1, &count)
	// Another revision already holds the name the hash gives, with other data.
	squatter := want.DeepCopy()
	squatter.Data.Raw = []byte(`{"other":true}`)
	client := fake.NewClientset(squatter)

	got, err := Create(ctx, client.AppsV1(), parent(), want, &count)
	if err != nil {
		t.Fatal(err)
	}
	if count != 1 || got.Name == squatter.Name || !Equal(got, want) {
		t.Errorf("Create over a collision = %s with count %d, want a new name and count 1", got.Name, count)
	}
	// The same data again returns the same revision, without a new count.
	again, err := Create(ctx, client.AppsV1(), parent(), want, &count)
	if err != nil || again.Name != got.Name || count != 1 {
		t.Errorf("Create again = %v, %v (count %d), want %s (count 1)", again.GetName(), err, count, got.Name)
	}
}
