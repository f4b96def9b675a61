package admissionregistration

import (
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// FuzzMutatingPolicyValidation: whatever expressions a client sends, the
// validation of a mutating policy returns errors and never panics.
func FuzzMutatingPolicyValidation(f *testing.F) {
	for _, seed := range [][3]string{
		{"object.spec.replicas", "Object{spec: Object.spec{replicas: 1}}", `[JSONPatch{op: "add", path: "/x", value: 1}]`},
		{"", "", ""},
		{"object.(", `"s"`, "Object{}"},
		{"params.x", "Object{metadata: Object.metadata{labels: {'a': 'b'}}}", "[]"},
	} {
		f.Add(seed[0], seed[1], seed[2])
	}
	f.Fuzz(func(t *testing.T, variable, apply, patch string) {
		p := &admissionregistrationv1.MutatingAdmissionPolicy{
			ObjectMeta: metav1.ObjectMeta{Name: "fuzz"},
			Spec: admissionregistrationv1.MutatingAdmissionPolicySpec{
				FailurePolicy:      new(admissionregistrationv1.Fail),
				Variables:          []admissionregistrationv1.Variable{{Name: "v", Expression: variable}},
				MatchConditions:    []admissionregistrationv1.MatchCondition{{Name: "m", Expression: variable}},
				Mutations:          []admissionregistrationv1.Mutation{applyMutation(apply), patchMutation(patch)},
				ReinvocationPolicy: admissionregistrationv1.NeverReinvocationPolicy,
			},
		}
		defaultMutatingPolicy(p)
		validateMutatingPolicy(p, mutatingStored{})
		validateMutatingPolicy(p, storedOf(p, p))
	})
}

func applyMutation(expr string) admissionregistrationv1.Mutation {
	return admissionregistrationv1.Mutation{PatchType: admissionregistrationv1.PatchTypeApplyConfiguration,
		ApplyConfiguration: &admissionregistrationv1.ApplyConfiguration{Expression: expr}}
}

func patchMutation(expr string) admissionregistrationv1.Mutation {
	return admissionregistrationv1.Mutation{PatchType: admissionregistrationv1.PatchTypeJSONPatch,
		JSONPatch: &admissionregistrationv1.JSONPatch{Expression: expr}}
}
