package core

import (
	"math"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apimachineryvalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/outpost-mesh/outpost/hub/apiserver"
	"github.com/outpost-mesh/outpost/hub/registry/typed"
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
		AddToScheme:  corev1.AddToScheme,
		Token:        &apiserver.TokenRules{Default: defaultTokenRequest, Validate: validateTokenRequest},
		Rules: &typed.Rules[*corev1.ServiceAccount]{
			Now:           now,
			PrepareCreate: cleanSecretReferences,
			PrepareUpdate: func(sa, _ *corev1.ServiceAccount) { cleanSecretReferences(sa) },
			Check:         validate,
			CheckUpdate: func(sa, old *corev1.ServiceAccount) field.ErrorList {
				return append(validateObjectMetaUpdate(&sa.ObjectMeta, &old.ObjectMeta), validate(sa)...)
			},
			TableColumns: []metav1.TableColumnDefinition{
				nameColumn,
				{Name: "Secrets", Type: "string", Description: corev1.ServiceAccount{}.SwaggerDoc()["secrets"]},
				ageColumn,
			},
			TableRow: func(sa *corev1.ServiceAccount, now time.Time) []interface{} {
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

// TokenRequest lifetimes, as upstream's defaults and validation have them.
const (
	// defaultTokenSeconds is the life of a token asked for without one.
	defaultTokenSeconds = int64(time.Hour / time.Second)
	// minTokenSeconds is the shortest life a client may ask for.
	minTokenSeconds = int64(10 * time.Minute / time.Second)
)

// defaultTokenRequest gives a TokenRequest without expirationSeconds an
// hour.
func defaultTokenRequest(tr *authenticationv1.TokenRequest) {
	if tr.Spec.ExpirationSeconds == nil {
		s := defaultTokenSeconds
		tr.Spec.ExpirationSeconds = &s
	}
}

// validateTokenRequest checks a defaulted TokenRequest as upstream's
// ValidateTokenRequest does: a life between ten minutes and 2^32 seconds.
// What the bound object reference names is checked against the store by
// the machinery.
func validateTokenRequest(tr *authenticationv1.TokenRequest) field.ErrorList {
	var errs field.ErrorList
	p := field.NewPath("spec", "expirationSeconds")
	switch s := *tr.Spec.ExpirationSeconds; {
	case s < minTokenSeconds:
		errs = append(errs, field.Invalid(p, s, "may not specify a duration less than 10 minutes"))
	case s > math.MaxUint32:
		errs = append(errs, field.Invalid(p, s, "may not specify a duration larger than 2^32 seconds"))
	}
	if ref := tr.Spec.BoundObjectRef; ref != nil && ref.Name == "" {
		errs = append(errs, field.Required(field.NewPath("spec", "boundObjectRef", "name"), ""))
	}
	return errs
}
