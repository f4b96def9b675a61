// Package typedtest checks, for the tests of hub/registry's groups, that
// a group's rules keep the typed.Rules contract.
package typedtest

import (
	"reflect"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/outpost-mesh/outpost/hub/apiserver"
	"github.com/outpost-mesh/outpost/hub/registry/typed"
)

// WrongType checks that the rules of each resource of rs, given an object
// of another type (a metav1.Status) alone or beside one of their own,
// answer validation with one internal error, leave the object alone in
// every other step, and never panic: the machinery's contract rules such
// an object out, and a mistake in it must not take the hub down.
func WrongType(t *testing.T, rs []apiserver.Resource) {
	t.Helper()
	for _, r := range rs {
		t.Run(r.Kind, func(t *testing.T) {
			rules, ok := r.Rules.(typed.All)
			if !ok {
				t.Fatalf("rules %T do not implement every step", r.Rules)
			}
			other, mine := runtime.Object(&metav1.Status{Message: "not a " + r.Kind}), r.New()
			internal := func(errs field.ErrorList) bool {
				return len(errs) == 1 && errs[0].Type == field.ErrorTypeInternal
			}
			if errs := rules.Validate(other); !internal(errs) {
				t.Errorf("Validate(%T) = %v, want one internal error", other, errs)
			}
			for _, pair := range [][2]runtime.Object{{other, other}, {other, mine}, {mine, other}} {
				if errs := rules.ValidateUpdate(pair[0], pair[1]); !internal(errs) {
					t.Errorf("ValidateUpdate(%T, %T) = %v, want one internal error", pair[0], pair[1], errs)
				}
				if sv, ok := r.Rules.(apiserver.StatusValidator); ok {
					if errs := sv.ValidateStatusUpdate(pair[0], pair[1]); !internal(errs) {
						t.Errorf("ValidateStatusUpdate(%T, %T) = %v, want one internal error", pair[0], pair[1], errs)
					}
				}
			}
			want := other.DeepCopyObject()
			rules.Default(other)
			rules.PrepareForCreate(other)
			rules.PrepareForUpdate(other, other)
			rules.PrepareForUpdate(mine, other)
			if !reflect.DeepEqual(other, want) {
				t.Errorf("Default and Prepare changed a %T: %v, want %v", other, other, want)
			}
			if f := rules.Fields(other); f == nil || len(f) != 0 {
				t.Errorf("Fields(%T) = %v, want an empty set", other, f)
			}
			if got, n := rules.Row(other), len(rules.Columns()); len(got) != n {
				t.Errorf("Row(%T) has %d cells, want %d", other, len(got), n)
			}
		})
	}
}
