package core

import (
	"math"
	"slices"
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
	"k8s.io/utils/ptr"
)

func TestTokenRequestRules(t *testing.T) {
	rules := testResources()["serviceaccounts"].Token
	if rules == nil {
		t.Fatal("serviceaccounts declare no token subresource")
	}
	tr := &authenticationv1.TokenRequest{}
	rules.Default(tr)
	if tr.Spec.ExpirationSeconds == nil || *tr.Spec.ExpirationSeconds != 3600 {
		t.Errorf("default expirationSeconds = %v, want 3600", tr.Spec.ExpirationSeconds)
	}
	for _, tc := range []struct {
		name string
		spec authenticationv1.TokenRequestSpec
		want []string
	}{
		{"ten minutes", authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](600)}, nil},
		{"2^32 seconds", authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](math.MaxUint32)}, nil},
		{"too short", authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](599)}, want("spec.expirationSeconds: Invalid value")},
		{"too long", authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](math.MaxUint32 + 1)}, want("spec.expirationSeconds: Invalid value")},
		{"bound to a pod", authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600),
			BoundObjectRef: &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: "web"}}, nil},
		{"bound to no name", authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600),
			BoundObjectRef: &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1"}}, want("spec.boundObjectRef.name: Required value")},
	} {
		tr := &authenticationv1.TokenRequest{Spec: tc.spec}
		if got := summary(rules.Validate(tr)); !slices.Equal(got, tc.want) {
			t.Errorf("%s: Validate = %v, want %v", tc.name, got, tc.want)
		}
	}
}
