package v1

import (
	"encoding/json"
	"fmt"
	"reflect"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/randfill"
)

// filler returns a randfill that sets every field, with times to the
// second (as their JSON keeps them) and metadata of a name and labels.
func filler(seed int64) *randfill.Filler {
	return randfill.NewWithSeed(seed).NilChance(0).NumElements(1, 3).Funcs(
		func(t *metav1.Time, c randfill.Continue) {
			*t = metav1.Unix(c.Int63n(4e9), 0)
		},
		func(m *metav1.ObjectMeta, c randfill.Continue) {
			m.Name = c.String(20)
			m.Labels = map[string]string{c.String(5): c.String(5)}
		},
		func(m *metav1.ListMeta, c randfill.Continue) {
			m.ResourceVersion = c.String(5)
		},
		func(m *metav1.TypeMeta, c randfill.Continue) {},
	)
}

// objects returns new empty objects of every kind of the package.
func objects() []runtime.Object {
	return []runtime.Object{&Release{}, &ReleaseList{}, &Rollout{}, &RolloutList{}}
}

// TestDeepCopy fills objects at random, copies them, checks the copy
// is equal, then changes every value the copy reaches in place and checks
// that the original did not change: nothing is shared.
func TestDeepCopy(t *testing.T) {
	for seed := int64(0); seed < 20; seed++ {
		for _, obj := range objects() {
			t.Run(fmt.Sprintf("%T/%d", obj, seed), func(t *testing.T) {
				filler(seed).Fill(obj)
				before, err := json.Marshal(obj)
				if err != nil {
					t.Fatal(err)
				}
				cp := obj.DeepCopyObject()
				if !reflect.DeepEqual(cp, obj) {
					t.Fatalf("copy differs:\n%+v\n%+v", cp, obj)
				}
				mutate(reflect.ValueOf(cp))
				after, err := json.Marshal(obj)
				if err != nil {
					t.Fatal(err)
				}
				if string(before) != string(after) {
					t.Fatalf("changing the copy changed the original:\n%s\n%s", before, after)
				}
			})
		}
	}
}

// mutate changes every string, number, bool and time v reaches, in place.
func mutate(v reflect.Value) {
	switch v.Kind() {
	case reflect.Pointer, reflect.Interface:
		if !v.IsNil() {
			mutate(v.Elem())
		}
	case reflect.Struct:
		if v.Type() == reflect.TypeFor[metav1.Time]() {
			v.Set(reflect.ValueOf(metav1.Unix(1, 0)))
			return
		}
		if v.Type() == reflect.TypeFor[time.Duration]() {
			return
		}
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				mutate(v.Field(i))
			}
		}
	case reflect.Slice, reflect.Array:
		for i := range v.Len() {
			mutate(v.Index(i))
		}
	case reflect.Map:
		for _, k := range v.MapKeys() {
			e := reflect.New(v.Type().Elem()).Elem()
			e.Set(v.MapIndex(k))
			mutate(e)
			v.SetMapIndex(k, e)
		}
	case reflect.String:
		v.SetString(v.String() + "!")
	case reflect.Bool:
		v.SetBool(!v.Bool())
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(v.Int() + 1)
	case reflect.Uint8:
		v.SetUint(v.Uint() + 1)
	}
}

// TestJSONRoundTrip checks that randomly filled objects survive JSON.
func TestJSONRoundTrip(t *testing.T) {
	for seed := int64(0); seed < 20; seed++ {
		for i, obj := range objects() {
			filler(seed).Fill(obj)
			data, err := json.Marshal(obj)
			if err != nil {
				t.Fatal(err)
			}
			back := objects()[i]
			if err := json.Unmarshal(data, back); err != nil {
				t.Fatal(err)
			}
			if !equality.Semantic.DeepEqual(back, obj) {
				t.Fatalf("%T seed %d: round trip\n got %+v\nwant %+v", obj, seed, back, obj)
			}
		}
	}
}

// TestAddToScheme checks the registered kinds and that the scheme decodes
// a Rollout by its apiVersion and kind.
func TestAddToScheme(t *testing.T) {
	s := runtime.NewScheme()
	if err := AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	for _, kind := range []string{"Release", "ReleaseList", "Rollout", "RolloutList"} {
		if !s.Recognizes(SchemeGroupVersion.WithKind(kind)) {
			t.Errorf("scheme does not recognize %s", kind)
		}
	}
	if got := Resource("rollouts").String(); got != "rollouts.firmware.outpost.dev" {
		t.Errorf("Resource = %q", got)
	}
	obj, err := s.New(SchemeGroupVersion.WithKind("Rollout"))
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := obj.(*Rollout); !ok {
		t.Fatalf("scheme made %T", obj)
	}
}
