package policy

import (
	"fmt"
	"strings"
	"sync"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation/field"
	plugincel "k8s.io/apiserver/pkg/admission/plugin/cel"
	"k8s.io/apiserver/pkg/admission/plugin/webhook/matchconditions"
	apiservercel "k8s.io/apiserver/pkg/cel"
	"k8s.io/apiserver/pkg/cel/environment"
)

// maxAuditValueExpressionLength is upstream's limit on the length of an
// audit annotation's valueExpression.
const maxAuditValueExpressionLength = 5 * 1024

// CheckPolicy returns the errors upstream's API validation finds in the
// CEL expressions of a ValidatingAdmissionPolicy being created: those of
// its variables, validations (expression and messageExpression),
// matchConditions and auditAnnotations that do not compile or are not of
// the type their field needs, with upstream's field paths and messages
// (such as "compilation failed: ERROR: <input>:1:5: ..."). It checks
// nothing else of the policy. Expressions compile in the environment of
// new expressions, which may be newer than the one policies are
// evaluated in. CEL's parser bounds what it reads (100,000 code points,
// nesting 250 deep), and the API's request size limit bounds the policy.
func CheckPolicy(p *admissionregistrationv1.ValidatingAdmissionPolicy) field.ErrorList {
	return check(p, stored{})
}

// CheckPolicyUpdate is CheckPolicy for an update of old to p: an
// expression p keeps from old compiles in the environment of stored
// expressions, as upstream's update validation compiles it, so that an
// update never fails on what the server already accepted.
func CheckPolicyUpdate(p, old *admissionregistrationv1.ValidatingAdmissionPolicy) field.ErrorList {
	s := stored{match: sets.New[string](), validation: sets.New[string](), message: sets.New[string](), audit: sets.New[string]()}
	for _, m := range old.Spec.MatchConditions {
		s.match.Insert(m.Expression)
	}
	for _, v := range old.Spec.Validations {
		s.validation.Insert(v.Expression)
		if v.MessageExpression != "" {
			s.message.Insert(v.MessageExpression)
		}
	}
	for _, a := range old.Spec.AuditAnnotations {
		s.audit.Insert(a.ValueExpression)
	}
	return check(p, s)
}

// stored are the expressions of the policy an update replaces, by kind.
// Variables are looked up among validations, as upstream does.
type stored struct {
	match, validation, message, audit sets.Set[string]
}

// env returns the environment an expression compiles in.
func env(kept sets.Set[string], expr string) environment.Type {
	if kept.Has(expr) {
		return environment.StoredExpressions
	}
	return environment.NewExpressions
}

// statelessCompiler compiles expressions that cannot use variables
// (matchConditions, and all of a policy without variables), built once.
var statelessCompiler = sync.OnceValue(func() plugincel.Compiler {
	return plugincel.NewCompiler(compositionEnv())
})

// check compiles p's expressions as upstream's validation does.
func check(p *admissionregistrationv1.ValidatingAdmissionPolicy, s stored) field.ErrorList {
	spec := field.NewPath("spec")
	hasParams := p.Spec.ParamKind != nil
	vars := plugincel.OptionalVariableDeclarations{HasParams: hasParams, HasAuthorizer: true}
	var errs field.ErrorList
	for i, m := range p.Spec.MatchConditions {
		if expr := strings.TrimSpace(m.Expression); expr != "" {
			r := statelessCompiler().CompileCELExpression(&matchconditions.MatchCondition{Expression: expr}, vars, env(s.match, expr))
			errs = appendCompileError(errs, spec.Child("matchConditions").Index(i).Child("expression"), expr, r.Error)
		}
	}
	compiler := statelessCompiler()
	if len(p.Spec.Variables) > 0 {
		cc, err := plugincel.NewCompositedCompiler(compositionEnv())
		if err != nil {
			return append(errs, field.InternalError(spec.Child("variables"), err))
		}
		for i, v := range p.Spec.Variables {
			if strings.TrimSpace(v.Expression) == "" {
				continue
			}
			r := cc.CompileAndStoreVariable(&variable{Name: v.Name, Expression: v.Expression}, vars, env(s.validation, v.Expression))
			errs = appendCompileError(errs, spec.Child("variables").Index(i).Child("expression"), v.Expression, r.Error)
		}
		compiler = cc
	}
	for i, v := range p.Spec.Validations {
		path := spec.Child("validations").Index(i)
		if strings.TrimSpace(v.Expression) != "" {
			r := compiler.CompileCELExpression(&validationCondition{Expression: v.Expression}, vars, env(s.validation, v.Expression))
			errs = appendCompileError(errs, path.Child("expression"), v.Expression, r.Error)
		}
		if strings.TrimSpace(v.MessageExpression) != "" {
			msgVars := plugincel.OptionalVariableDeclarations{HasParams: hasParams}
			r := compiler.CompileCELExpression(&messageCondition{Expression: v.MessageExpression}, msgVars, env(s.message, v.MessageExpression))
			errs = appendCompileError(errs, path.Child("messageExpression"), v.MessageExpression, r.Error)
		}
	}
	for i, a := range p.Spec.AuditAnnotations {
		path := spec.Child("auditAnnotations").Index(i).Child("valueExpression")
		expr := strings.TrimSpace(a.ValueExpression)
		switch {
		case expr == "":
		case len(expr) > maxAuditValueExpressionLength:
			errs = append(errs, field.Required(path, fmt.Sprintf("must not exceed %d bytes in length", maxAuditValueExpressionLength)))
		default:
			r := compiler.CompileCELExpression(&auditCondition{Key: a.Key, ValueExpression: expr}, vars, env(s.audit, a.ValueExpression))
			errs = appendCompileError(errs, path, a.ValueExpression, r.Error)
		}
	}
	return errs
}

// appendCompileError appends the field error upstream makes of a CEL
// error of the expression expr at path, if there is one.
func appendCompileError(errs field.ErrorList, path *field.Path, expr string, err *apiservercel.Error) field.ErrorList {
	if err == nil {
		return errs
	}
	switch err.Type {
	case apiservercel.ErrorTypeRequired:
		return append(errs, field.Required(path, err.Detail))
	case apiservercel.ErrorTypeInvalid:
		return append(errs, field.Invalid(path, expr, err.Detail))
	default:
		return append(errs, field.InternalError(path, err))
	}
}
