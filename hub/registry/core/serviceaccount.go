package core

import (
	"time"

	corev1 "k8s.io/api/core/v1"
	apimachineryvalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/outpost-mesh/outpost/hub/apiserver"
)

func serviceAccountResource(now func() time.Time) apiserver.Resource {
	validate := func(sa *corev1.ServiceAccount) field.ErrorList {
		return validateObjectMeta(&sa.ObjectMeta, true, apimachineryvalidation.ValidateServiceAccountName)
	}
	return apiserver.Resource{
		GroupVersion: corev1.SchemeGroupVersion,
		Kind:         "ServiceAccount",
		Plural:       "serviceaccounts",
		Singular:     "serviceaccount",
		ShortNames:   []string{"sa"},
		Namespaced:   true,
		New:          func() runtime.Object { return &corev1.ServiceAccount{} },
		NewList:      func() runtime.Object { return &corev1.ServiceAccountList{} },
		Rules: &rules[*corev1.ServiceAccount]{
			now:           now,
			prepareCreate: cleanSecretReferences,
			prepareUpdate: func(sa, _ *corev1.ServiceAccount) { cleanSecretReferences(sa) },
			validate:      validate,
			validateUpdate: func(sa, old *corev1.ServiceAccount) field.ErrorList {
				return append(validateObjectMetaUpdate(&sa.ObjectMeta, &old.ObjectMeta), validate(sa)...)
			},
			columns: []metav1.TableColumnDefinition{
				nameColumn,
				{Name: "Secrets", Type: "string", Description: corev1.ServiceAccount{}.SwaggerDoc()["secrets"]},
				ageColumn,
			},
			row: func(sa *corev1.ServiceAccount, now time.Time) []interface{} {
				return []interface{}{sa.Name, int64(len(sa.Secrets)), age(sa.CreationTimestamp, now)}
			},
		},
	}
}

// cleanSecretReferences keeps only the names of referenced secrets, the
// only part of the references that means anything.
func cleanSecretReferences(sa *corev1.ServiceAccount) {
	for i, s := range sa.Secrets {
		sa.Secrets[i] = corev1.ObjectReference{Name: s.Name}
	}
}
