// Package typedtest serves the tests of hub/registry's groups: it checks
// that a group's rules keep the typed.Rules contract, and reads what the
// API answers (the causes of a 422, Tables).
package typedtest

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/rest"

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

// Causes returns the field paths of the causes of err, which must be a
// 422 Invalid: t fails otherwise. what names the request in the failure.
func Causes(t testing.TB, what string, err error) []string {
	t.Helper()
	if !apierrors.IsInvalid(err) {
		t.Fatalf("%s: %v, want 422 Invalid", what, err)
	}
	var fields []string
	if s, ok := err.(apierrors.APIStatus); ok && s.Status().Details != nil {
		for _, c := range s.Status().Details.Causes {
			fields = append(fields, c.Field)
		}
	}
	return fields
}

// Table returns what path serves as the Table kubectl get asks for,
// through c; t fails on an error.
func Table(t testing.TB, c rest.Interface, path string) *metav1.Table {
	t.Helper()
	raw, err := c.Get().AbsPath(path).SetHeader("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io").DoRaw(context.Background())
	if err != nil {
		t.Fatalf("GET %s as a Table: %v", path, err)
	}
	var tbl metav1.Table
	if err := json.Unmarshal(raw, &tbl); err != nil {
		t.Fatalf("GET %s as a Table: %v", path, err)
	}
	return &tbl
}

// ColumnNames returns the names of tbl's columns, in order.
func ColumnNames(tbl *metav1.Table) []string {
	var names []string
	for _, c := range tbl.ColumnDefinitions {
		names = append(names, c.Name)
	}
	return names
}

// ErrStrings returns errs as "field: type" strings, in order, or nil for
// none: what the groups' validation tables compare.
func ErrStrings(errs field.ErrorList) []string {
	var out []string
	for _, e := range errs {
		out = append(out, fmt.Sprintf("%s: %s", e.Field, e.Type))
	}
	return out
}

// SameErrs reports whether got and want, from ErrStrings, are the same
// errors in the same order; nil and empty are the same.
func SameErrs(got, want []string) bool {
	return reflect.DeepEqual(got, want) || len(got) == 0 && len(want) == 0
}
