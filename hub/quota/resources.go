package quota

import (
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// Add returns a+b, resource by resource, in a new list; a resource only
// one of them has is copied.
func Add(a, b corev1.ResourceList) corev1.ResourceList {
	out := make(corev1.ResourceList, len(a)+len(b))
	for name, q := range a {
		out[name] = q.DeepCopy()
	}
	for name, q := range b {
		sum := out[name]
		sum.Add(q)
		out[name] = sum
	}
	return out
}

// SubtractNonNegative returns a-b in a new list, for the resources of a
// only, with every difference below zero made zero: the growth from b to
// a, as upstream measures an update's delta.
func SubtractNonNegative(a, b corev1.ResourceList) corev1.ResourceList {
	out := make(corev1.ResourceList, len(a))
	for name, q := range a {
		d := q.DeepCopy()
		if old, ok := b[name]; ok {
			d.Sub(old)
		}
		if d.Sign() < 0 {
			d = *resource.NewQuantity(0, q.Format)
		}
		out[name] = d
	}
	return out
}

// Mask returns the entries of list whose names are in names, in a new
// list.
func Mask(list corev1.ResourceList, names []corev1.ResourceName) corev1.ResourceList {
	out := corev1.ResourceList{}
	for _, name := range names {
		if q, ok := list[name]; ok {
			out[name] = q.DeepCopy()
		}
	}
	return out
}

// Names returns the names of list, sorted.
func Names(list corev1.ResourceList) []corev1.ResourceName {
	out := make([]corev1.ResourceName, 0, len(list))
	for name := range list {
		out = append(out, name)
	}
	slices.Sort(out)
	return out
}

// RemoveZeros returns the entries of list that are not zero, in a new
// list.
func RemoveZeros(list corev1.ResourceList) corev1.ResourceList {
	out := corev1.ResourceList{}
	for name, q := range list {
		if !q.IsZero() {
			out[name] = q.DeepCopy()
		}
	}
	return out
}

// Negative returns the names of list whose quantity is below zero,
// sorted.
func Negative(list corev1.ResourceList) []corev1.ResourceName {
	var out []corev1.ResourceName
	for _, name := range Names(list) {
		if q := list[name]; q.Sign() < 0 {
			out = append(out, name)
		}
	}
	return out
}

// Exceeded returns the names of used that have a limit in hard which
// they are above, sorted; none means used fits hard.
func Exceeded(used, hard corev1.ResourceList) []corev1.ResourceName {
	var out []corev1.ResourceName
	for _, name := range Names(used) {
		limit, ok := hard[name]
		if q := used[name]; ok && q.Cmp(limit) > 0 {
			out = append(out, name)
		}
	}
	return out
}

// Equal reports whether a and b hold the same resources in equal
// quantities (1000m equals 1); nil equals empty.
func Equal(a, b corev1.ResourceList) bool {
	if len(a) != len(b) {
		return false
	}
	for name, q := range a {
		other, ok := b[name]
		if !ok || q.Cmp(other) != 0 {
			return false
		}
	}
	return true
}

// Format prints list as upstream's quota messages do: name=quantity,
// sorted by name, joined by commas.
func Format(list corev1.ResourceList) string {
	parts := make([]string, 0, len(list))
	for _, name := range Names(list) {
		q := list[name]
		parts = append(parts, fmt.Sprintf("%s=%s", name, q.String()))
	}
	return strings.Join(parts, ",")
}

// FormatNames prints names as upstream's quota messages do, sorted and
// joined by commas.
func FormatNames(names []corev1.ResourceName) string {
	s := make([]string, len(names))
	for i, n := range names {
		s[i] = string(n)
	}
	slices.Sort(s)
	return strings.Join(s, ",")
}
