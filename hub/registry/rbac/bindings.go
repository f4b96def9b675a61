package rbac

import (
	"fmt"
	"slices"
	"strings"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/outpost-mesh/outpost/hub/registry/typed"
)

var (
	roleRefPath  = field.NewPath("roleRef")
	subjectsPath = field.NewPath("subjects")
)

// roleBindingRules are the rules of rolebindings, with ages in their
// Table rows measured against now (nil is the wall clock).
func roleBindingRules(now func() time.Time) *typed.Rules[*rbacv1.RoleBinding] {
	return &typed.Rules[*rbacv1.RoleBinding]{
		Now: now,
		Defaults: func(b *rbacv1.RoleBinding) {
			defaultBinding(&b.RoleRef, b.Subjects)
		},
		Check: func(b *rbacv1.RoleBinding) field.ErrorList {
			errs := apivalidation.ValidateObjectMeta(&b.ObjectMeta, true, validName, metadataPath)
			return append(errs, validateBinding(b.RoleRef, b.Subjects, true)...)
		},
		CheckUpdate: func(b, old *rbacv1.RoleBinding) field.ErrorList {
			errs := apivalidation.ValidateObjectMetaUpdate(&b.ObjectMeta, &old.ObjectMeta, metadataPath)
			errs = append(errs, validateBinding(b.RoleRef, b.Subjects, true)...)
			return append(errs, validateRoleRefUpdate(b.RoleRef, old.RoleRef)...)
		},
		CreateOnUpdate: true,
		TableColumns:   bindingColumns("roleBinding", rbacv1.RoleBinding{}.SwaggerDoc()["roleRef"]),
		TableRow: func(b *rbacv1.RoleBinding, now time.Time) []interface{} {
			return bindingRow(&b.ObjectMeta, b.RoleRef, b.Subjects, now)
		},
	}
}

// clusterRoleBindingRules are the rules of clusterrolebindings, with ages
// in their Table rows measured against now (nil is the wall clock).
func clusterRoleBindingRules(now func() time.Time) *typed.Rules[*rbacv1.ClusterRoleBinding] {
	return &typed.Rules[*rbacv1.ClusterRoleBinding]{
		Now: now,
		Defaults: func(b *rbacv1.ClusterRoleBinding) {
			defaultBinding(&b.RoleRef, b.Subjects)
		},
		Check: func(b *rbacv1.ClusterRoleBinding) field.ErrorList {
			errs := apivalidation.ValidateObjectMeta(&b.ObjectMeta, false, validName, metadataPath)
			return append(errs, validateBinding(b.RoleRef, b.Subjects, false)...)
		},
		CheckUpdate: func(b, old *rbacv1.ClusterRoleBinding) field.ErrorList {
			errs := apivalidation.ValidateObjectMetaUpdate(&b.ObjectMeta, &old.ObjectMeta, metadataPath)
			errs = append(errs, validateBinding(b.RoleRef, b.Subjects, false)...)
			return append(errs, validateRoleRefUpdate(b.RoleRef, old.RoleRef)...)
		},
		CreateOnUpdate: true,
		TableColumns:   bindingColumns("clusterRoleBinding", rbacv1.ClusterRoleBinding{}.SwaggerDoc()["roleRef"]),
		TableRow: func(b *rbacv1.ClusterRoleBinding, now time.Time) []interface{} {
			return bindingRow(&b.ObjectMeta, b.RoleRef, b.Subjects, now)
		},
	}
}

// defaultBinding applies upstream's defaults of a binding: the roleRef's
// API group, and each subject's (rbac.authorization.k8s.io for users and
// groups; a service account's is the core group, "").
func defaultBinding(ref *rbacv1.RoleRef, subjects []rbacv1.Subject) {
	if ref.APIGroup == "" {
		ref.APIGroup = rbacv1.GroupName
	}
	for i := range subjects {
		s := &subjects[i]
		if s.APIGroup == "" && (s.Kind == rbacv1.UserKind || s.Kind == rbacv1.GroupKind) {
			s.APIGroup = rbacv1.GroupName
		}
	}
}

// validateBinding checks the roleRef and subjects of a rolebinding
// (namespaced) or a clusterrolebinding. A clusterrolebinding may refer
// only to a clusterrole, and its service account subjects need a
// namespace; a rolebinding's may leave it out, for the binding's own.
func validateBinding(ref rbacv1.RoleRef, subjects []rbacv1.Subject, namespaced bool) field.ErrorList {
	var errs field.ErrorList
	if ref.APIGroup != rbacv1.GroupName {
		errs = append(errs, field.NotSupported(roleRefPath.Child("apiGroup"), ref.APIGroup, []string{rbacv1.GroupName}))
	}
	kinds := []string{"ClusterRole"}
	if namespaced {
		kinds = []string{"Role", "ClusterRole"}
	}
	if !slices.Contains(kinds, ref.Kind) {
		errs = append(errs, field.NotSupported(roleRefPath.Child("kind"), ref.Kind, kinds))
	}
	if ref.Name == "" {
		errs = append(errs, field.Required(roleRefPath.Child("name"), ""))
	} else {
		for _, msg := range validName(ref.Name, false) {
			errs = append(errs, field.Invalid(roleRefPath.Child("name"), ref.Name, msg))
		}
	}
	for i, s := range subjects {
		errs = append(errs, validateSubject(s, namespaced, subjectsPath.Index(i))...)
	}
	return errs
}

// validateSubject checks one subject of a binding: a service account
// (named as one, in the core group, with a namespace in a
// clusterrolebinding), a user or a group (in rbac.authorization.k8s.io).
func validateSubject(s rbacv1.Subject, namespaced bool, fld *field.Path) field.ErrorList {
	var errs field.ErrorList
	if s.Name == "" {
		errs = append(errs, field.Required(fld.Child("name"), ""))
	}
	switch s.Kind {
	case rbacv1.ServiceAccountKind:
		if s.Name != "" {
			for _, msg := range apivalidation.ValidateServiceAccountName(s.Name, false) {
				errs = append(errs, field.Invalid(fld.Child("name"), s.Name, msg))
			}
		}
		if s.APIGroup != "" {
			errs = append(errs, field.NotSupported(fld.Child("apiGroup"), s.APIGroup, []string{""}))
		}
		if !namespaced && s.Namespace == "" {
			errs = append(errs, field.Required(fld.Child("namespace"), ""))
		}
	case rbacv1.UserKind, rbacv1.GroupKind:
		if s.APIGroup != rbacv1.GroupName {
			errs = append(errs, field.NotSupported(fld.Child("apiGroup"), s.APIGroup, []string{rbacv1.GroupName}))
		}
	default:
		errs = append(errs, field.NotSupported(fld.Child("kind"), s.Kind, []string{rbacv1.ServiceAccountKind, rbacv1.UserKind, rbacv1.GroupKind}))
	}
	return errs
}

// validateRoleRefUpdate refuses a change of a binding's roleRef: to bind
// another role, a client deletes the binding and creates a new one, so
// that what a binding grants never changes under its subjects.
func validateRoleRefUpdate(ref, old rbacv1.RoleRef) field.ErrorList {
	if ref != old {
		return field.ErrorList{field.Invalid(roleRefPath, ref, "cannot change roleRef")}
	}
	return nil
}

// bindingColumns are the columns of rolebindings and clusterrolebindings:
// what names the kind in the descriptions of the wide ones, and roleRef is
// the kind's documentation of its roleRef.
func bindingColumns(what, roleRef string) []metav1.TableColumnDefinition {
	return []metav1.TableColumnDefinition{
		nameColumn,
		{Name: "Role", Type: "string", Description: roleRef},
		ageColumn,
		{Name: "Users", Type: "string", Priority: 1, Description: "Users in the " + what},
		{Name: "Groups", Type: "string", Priority: 1, Description: "Groups in the " + what},
		{Name: "ServiceAccounts", Type: "string", Priority: 1, Description: "ServiceAccounts in the " + what},
	}
}

// bindingRow is a binding's row: its name, its role as Kind/Name, its
// age, and its users, groups and service accounts (namespace/name), each
// joined by ", ".
func bindingRow(m *metav1.ObjectMeta, ref rbacv1.RoleRef, subjects []rbacv1.Subject, now time.Time) []interface{} {
	var users, groups, sas []string
	for _, s := range subjects {
		switch s.Kind {
		case rbacv1.UserKind:
			users = append(users, s.Name)
		case rbacv1.GroupKind:
			groups = append(groups, s.Name)
		case rbacv1.ServiceAccountKind:
			sas = append(sas, s.Namespace+"/"+s.Name)
		}
	}
	return []interface{}{
		m.Name, fmt.Sprintf("%s/%s", ref.Kind, ref.Name), age(now, m.CreationTimestamp),
		strings.Join(users, ", "), strings.Join(groups, ", "), strings.Join(sas, ", "),
	}
}
