// Package rbac holds the hub's rules for the rbac.authorization.k8s.io/v1
// resources, roles, clusterroles, rolebindings and clusterrolebindings:
// their defaults, validation and printer columns, as upstream Kubernetes
// defines them. It stores what the authorizer reads; it does not decide
// access, nor check that a writer may grant what it writes (escalation),
// which are hub/auth's.
package rbac

import (
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/validate/content"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/duration"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/outpost-mesh/outpost/hub/apiserver"
)

// Resources returns the rbac.authorization.k8s.io/v1 resources, with ages
// in printed tables measured against the wall clock.
func Resources() []apiserver.Resource { return ResourcesWithClock(nil) }

// ResourcesWithClock is Resources with ages measured against now, or the
// wall clock if now is nil. Tests use it to get stable Table rows.
//
// Every one of them may be created with a PUT, as upstream allows and
// `kubectl auth reconcile` relies on. None has a short name, a category or
// a status.
func ResourcesWithClock(now func() time.Time) []apiserver.Resource {
	gv := rbacv1.SchemeGroupVersion
	return []apiserver.Resource{
		{
			GroupVersion: gv,
			Kind:         "Role",
			Plural:       "roles",
			Singular:     "role",
			Namespaced:   true,
			New:          func() runtime.Object { return &rbacv1.Role{} },
			NewList:      func() runtime.Object { return &rbacv1.RoleList{} },
			AddToScheme:  rbacv1.AddToScheme,
			Rules:        roleRules(),
		},
		{
			GroupVersion: gv,
			Kind:         "ClusterRole",
			Plural:       "clusterroles",
			Singular:     "clusterrole",
			New:          func() runtime.Object { return &rbacv1.ClusterRole{} },
			NewList:      func() runtime.Object { return &rbacv1.ClusterRoleList{} },
			AddToScheme:  rbacv1.AddToScheme,
			Rules:        clusterRoleRules(),
		},
		{
			GroupVersion: gv,
			Kind:         "RoleBinding",
			Plural:       "rolebindings",
			Singular:     "rolebinding",
			Namespaced:   true,
			New:          func() runtime.Object { return &rbacv1.RoleBinding{} },
			NewList:      func() runtime.Object { return &rbacv1.RoleBindingList{} },
			AddToScheme:  rbacv1.AddToScheme,
			Rules:        roleBindingRules(now),
		},
		{
			GroupVersion: gv,
			Kind:         "ClusterRoleBinding",
			Plural:       "clusterrolebindings",
			Singular:     "clusterrolebinding",
			New:          func() runtime.Object { return &rbacv1.ClusterRoleBinding{} },
			NewList:      func() runtime.Object { return &rbacv1.ClusterRoleBindingList{} },
			AddToScheme:  rbacv1.AddToScheme,
			Rules:        clusterRoleBindingRules(now),
		},
	}
}

var (
	metadataPath = field.NewPath("metadata")
	rulesPath    = field.NewPath("rules")
)

// validName is upstream's name rule for roles, bindings and the roles
// they refer to: any name that is safe as one segment of a URL path (not
// "." or "..", no "/" or "%"). It applies to a generateName prefix alike,
// as upstream's does.
func validName(name string, _ bool) []string { return content.IsPathSegmentName(name) }

// Column definitions worded as upstream's printers. Roles have no printer
// upstream, so the server's default table applies to them: the name and
// the creation time in RFC 3339.
var (
	nameColumn      = metav1.TableColumnDefinition{Name: "Name", Type: "string", Format: "name", Description: metav1.ObjectMeta{}.SwaggerDoc()["name"]}
	createdAtColumn = metav1.TableColumnDefinition{Name: "Created At", Type: "date", Description: metav1.ObjectMeta{}.SwaggerDoc()["creationTimestamp"]}
	ageColumn       = metav1.TableColumnDefinition{Name: "Age", Type: "string", Description: metav1.ObjectMeta{}.SwaggerDoc()["creationTimestamp"]}
)

// defaultRow is the row of the default table: the name and the creation
// time in RFC 3339.
func defaultRow(m *metav1.ObjectMeta) []interface{} {
	return []interface{}{m.Name, m.CreationTimestamp.UTC().Format(time.RFC3339)}
}

// age is how long before now t was, as kubectl's AGE column shows it, or
// "<unknown>" for a zero time.
func age(now time.Time, t metav1.Time) string {
	if t.IsZero() {
		return "<unknown>"
	}
	return duration.HumanDuration(now.Sub(t.Time))
}
