package policy

import (
	"context"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
)

// TestCheckPolicy: compile and type errors come back with upstream's
// field paths and messages; good policies have none.
func TestCheckPolicy(t *testing.T) {
	tests := []struct {
		name   string
		modify func(p *admissionregistrationv1.ValidatingAdmissionPolicy)
		want   []string // parts of the one error expected, none for none
	}{
		{"good", func(p *admissionregistrationv1.ValidatingAdmissionPolicy) {}, nil},
		{"syntax", func(p *admissionregistrationv1.ValidatingAdmissionPolicy) {
			p.Spec.Validations[0].Expression = "object.spec.replicas <"
		}, []string{"spec.validations[0].expression: Invalid value: \"object.spec.replicas <\": compilation failed: ERROR: <input>:1:23: Syntax error"}},
		{"not bool", func(p *admissionregistrationv1.ValidatingAdmissionPolicy) {
			p.Spec.Validations[0].Expression = "1"
		}, []string{"spec.validations[0].expression: Invalid value: \"1\": must evaluate to bool but got int"}},
		{"params without paramKind", func(p *admissionregistrationv1.ValidatingAdmissionPolicy) {
			p.Spec.Validations[0].Expression = "params.x == 1"
		}, []string{"spec.validations[0].expression: Invalid value: \"params.x == 1\": compilation failed: ERROR: <input>:1:1: undeclared reference to 'params'"}},
		{"params with paramKind", func(p *admissionregistrationv1.ValidatingAdmissionPolicy) {
			p.Spec.Validations[0].Expression = "params.x == 1"
			p.Spec.ParamKind = &admissionregistrationv1.ParamKind{APIVersion: "v1", Kind: "ConfigMap"}
		}, nil},
		{"messageExpression", func(p *admissionregistrationv1.ValidatingAdmissionPolicy) {
			p.Spec.Validations[0].MessageExpression = "1"
		}, []string{"spec.validations[0].messageExpression: Invalid value: \"1\": must evaluate to string but got int"}},
		{"messageExpression has no authorizer", func(p *admissionregistrationv1.ValidatingAdmissionPolicy) {
			p.Spec.Validations[0].MessageExpression = "string(authorizer.group('').resource('pods').check('get').allowed())"
		}, []string{"spec.validations[0].messageExpression: Invalid value", "undeclared reference to 'authorizer'"}},
		{"variables", func(p *admissionregistrationv1.ValidatingAdmissionPolicy) {
			p.Spec.Variables = []admissionregistrationv1.Variable{{Name: "max", Expression: "5"}, {Name: "bad", Expression: "nope"}}
			p.Spec.Validations[0].Expression = "object.spec.replicas <= variables.max"
		}, []string{"spec.variables[1].expression: Invalid value: \"nope\": compilation failed: ERROR: <input>:1:1: undeclared reference to 'nope'"}},
		{"variables undeclared without any", func(p *admissionregistrationv1.ValidatingAdmissionPolicy) {
			p.Spec.Validations[0].Expression = "variables.max == 1"
		}, []string{"spec.validations[0].expression: Invalid value", "undeclared reference to 'variables'"}},
		{"matchConditions", func(p *admissionregistrationv1.ValidatingAdmissionPolicy) {
			p.Spec.MatchConditions = []admissionregistrationv1.MatchCondition{{Name: "a", Expression: "'x'"}}
		}, []string{"spec.matchConditions[0].expression: Invalid value: \"'x'\": must evaluate to bool but got string"}},
		{"auditAnnotations", func(p *admissionregistrationv1.ValidatingAdmissionPolicy) {
			p.Spec.AuditAnnotations = []admissionregistrationv1.AuditAnnotation{{Key: "k", ValueExpression: "1"}}
		}, []string{"spec.auditAnnotations[0].valueExpression: Invalid value: \"1\": must evaluate to one of [string null_type] but got int"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := replicasPolicy()
			tt.modify(p)
			errs := CheckPolicy(p)
			if len(tt.want) == 0 && len(errs) == 0 {
				return
			}
			if len(errs) != 1 || len(tt.want) == 0 {
				t.Fatalf("CheckPolicy = %v, want one error with %q", errs, tt.want)
			}
			for _, w := range tt.want {
				if !strings.Contains(errs[0].Error(), w) {
					t.Errorf("CheckPolicy = %v, want it to contain %q", errs[0], w)
				}
			}
		})
	}
}

// TestCheckPolicyUpdate: an update keeping an expression checks it as
// stored, and still finds errors in new ones.
func TestCheckPolicyUpdate(t *testing.T) {
	old := replicasPolicy()
	p := replicasPolicy()
	p.Spec.Validations = append(p.Spec.Validations, admissionregistrationv1.Validation{Expression: "object.x +"})
	errs := CheckPolicyUpdate(p, old)
	if len(errs) != 1 || errs[0].Field != "spec.validations[1].expression" {
		t.Fatalf("CheckPolicyUpdate = %v, want one error of spec.validations[1].expression", errs)
	}
}

// FuzzCheckPolicy: no expression, however malformed, crashes the check
// or the evaluation of a policy.
func FuzzCheckPolicy(f *testing.F) {
	for _, s := range []string{"object.spec.replicas <= 5", "", "(((((", "'\\u", "[1,2].all(x, x > 0)", "variables.a", "params.data.x", "a.b.c(", strings.Repeat("!", 300)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, expr string) {
		p := replicasPolicy()
		p.Spec.Validations[0].Expression = expr
		p.Spec.Validations[0].MessageExpression = expr
		p.Spec.Variables = []admissionregistrationv1.Variable{{Name: "a", Expression: expr}}
		p.Spec.MatchConditions = []admissionregistrationv1.MatchCondition{{Name: "m", Expression: expr}}
		_ = CheckPolicy(p)
		w := newWorld()
		w.policies = []*admissionregistrationv1.ValidatingAdmissionPolicy{p}
		w.bindings = []*admissionregistrationv1.ValidatingAdmissionPolicyBinding{newBinding("b", p.Name)}
		_ = w.evaluator().Admit(context.Background(), createOf(deploymentsGR, deployment("default", 1)))
	})
}
