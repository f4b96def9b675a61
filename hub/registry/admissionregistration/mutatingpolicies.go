package admissionregistration

import (
	celgo "github.com/google/cel-go/cel"
	"regexp"
	"strings"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation/field"
	plugincel "k8s.io/apiserver/pkg/admission/plugin/cel"
	"k8s.io/apiserver/pkg/admission/plugin/policy/mutating/patch"
	"k8s.io/apiserver/pkg/cel/environment"

	"github.com/outpost-mesh/outpost/hub/registry/typed"
)

var (
	// mutatingOperations are the operations a mutating policy may match:
	// only creates and updates have an object to mutate.
	mutatingOperations = sets.New(string(admissionregistrationv1.OperationAll), string(admissionregistrationv1.Create), string(admissionregistrationv1.Update))
	patchTypes         = sets.New(string(admissionregistrationv1.PatchTypeApplyConfiguration), string(admissionregistrationv1.PatchTypeJSONPatch))
	reinvocations      = sets.New(string(admissionregistrationv1.NeverReinvocationPolicy), string(admissionregistrationv1.IfNeededReinvocationPolicy))

	// celIdent and celReserved are what a variable's name must match and
	// must not be, as CEL's grammar has them.
	celIdent    = regexp.MustCompile(`^[_a-zA-Z][_a-zA-Z0-9]*$`)
	celReserved = sets.New("true", "false", "null", "in", "as", "break", "const", "continue", "else",
		"for", "function", "if", "import", "let", "loop", "package", "namespace", "return", "var", "void", "while")
)

// mutatingPolicyRules are upstream's rules of MutatingAdmissionPolicies:
// defaults, validation with its CEL expressions compiled, and columns.
// They have no status.
func mutatingPolicyRules(o options) *typed.Rules[*admissionregistrationv1.MutatingAdmissionPolicy] {
	return &typed.Rules[*admissionregistrationv1.MutatingAdmissionPolicy]{
		Now:      o.now,
		Defaults: defaultMutatingPolicy,
		Check: func(p *admissionregistrationv1.MutatingAdmissionPolicy) field.ErrorList {
			return validateMutatingPolicy(p, mutatingStored{})
		},
		CheckUpdate: func(p, old *admissionregistrationv1.MutatingAdmissionPolicy) field.ErrorList {
			errs := validateMutatingPolicy(p, storedOf(p, old))
			return append(errs, apivalidation.ValidateObjectMetaUpdate(&p.ObjectMeta, &old.ObjectMeta, metadataPath)...)
		},
		TableColumns: []metav1.TableColumnDefinition{
			typed.NameColumn,
			{Name: "Mutations", Type: "integer", Description: "Mutation indicates the number of mutations rules defined in this configuration"},
			{Name: "ParamKind", Type: "string", Description: "ParamKind specifies the kind of resources used to parameterize this policy"},
			typed.AgeColumn,
		},
		TableRow: func(p *admissionregistrationv1.MutatingAdmissionPolicy, now time.Time) []any {
			return []any{p.Name, int64(len(p.Spec.Mutations)), paramKindCell(p.Spec.ParamKind), typed.Age(now, p.CreationTimestamp)}
		},
	}
}

// mutatingBindingRules are upstream's rules of
// MutatingAdmissionPolicyBindings.
func mutatingBindingRules(o options) *typed.Rules[*admissionregistrationv1.MutatingAdmissionPolicyBinding] {
	return &typed.Rules[*admissionregistrationv1.MutatingAdmissionPolicyBinding]{
		Now: o.now,
		Defaults: func(b *admissionregistrationv1.MutatingAdmissionPolicyBinding) {
			defaultMatchResources(b.Spec.MatchResources)
		},
		Check: validateMutatingBinding,
		CheckUpdate: func(b, old *admissionregistrationv1.MutatingAdmissionPolicyBinding) field.ErrorList {
			return append(validateMutatingBinding(b), apivalidation.ValidateObjectMetaUpdate(&b.ObjectMeta, &old.ObjectMeta, metadataPath)...)
		},
		TableColumns: []metav1.TableColumnDefinition{
			typed.NameColumn,
			{Name: "PolicyName", Type: "string", Description: "PolicyName indicates the policy definition which the policy binding binded to"},
			{Name: "ParamRef", Type: "string", Description: "ParamRef indicates the param resource which sets the configuration param"},
			typed.AgeColumn,
		},
		TableRow: func(b *admissionregistrationv1.MutatingAdmissionPolicyBinding, now time.Time) []any {
			return []any{b.Name, b.Spec.PolicyName, paramRefCell(b.Spec.ParamRef), typed.Age(now, b.CreationTimestamp)}
		},
	}
}

// paramRefCell is how upstream prints a binding's paramRef: namespace and
// name, "*/name" without a namespace, or the selector.
func paramRefCell(pr *admissionregistrationv1.ParamRef) string {
	switch {
	case pr == nil:
		return "<unset>"
	case pr.Name != "" && pr.Namespace != "":
		return pr.Namespace + "/" + pr.Name
	case pr.Name != "":
		return "*/" + pr.Name
	case pr.Selector != nil:
		return metav1.FormatLabelSelector(pr.Selector)
	}
	return "<unset>"
}

// defaultMutatingPolicy applies v1's defaults: failurePolicy Fail and
// those of its matchConstraints.
func defaultMutatingPolicy(p *admissionregistrationv1.MutatingAdmissionPolicy) {
	if p.Spec.FailurePolicy == nil {
		p.Spec.FailurePolicy = new(admissionregistrationv1.Fail)
	}
	defaultMatchResources(p.Spec.MatchConstraints)
}

// mutatingStored are the expressions of the policy an update replaces:
// those compile in the environment of stored expressions, so that an
// update never fails on what the server already accepted.
type mutatingStored struct {
	match, patches sets.Set[string]
	// keepMatch is set when the update leaves the matchConditions and
	// paramKind as they were, which are then not checked again.
	keepMatch bool
}

// storedOf returns what of old an update to p keeps, as upstream finds
// it. Like upstream's, JSONPatch expressions are looked up among the
// patches of both kinds.
func storedOf(p, old *admissionregistrationv1.MutatingAdmissionPolicy) mutatingStored {
	s := mutatingStored{match: sets.New[string](), patches: sets.New[string]()}
	for _, m := range old.Spec.MatchConditions {
		s.match.Insert(m.Expression)
	}
	for _, m := range old.Spec.Mutations {
		if m.ApplyConfiguration != nil {
			s.patches.Insert(m.ApplyConfiguration.Expression)
		}
		if m.JSONPatch != nil {
			s.patches.Insert(m.JSONPatch.Expression)
		}
	}
	s.keepMatch = equality.Semantic.DeepEqual(p.Spec.ParamKind, old.Spec.ParamKind) &&
		equality.Semantic.DeepEqual(p.Spec.MatchConditions, old.Spec.MatchConditions)
	return s
}

// envFor returns the environment expr compiles in: that of stored
// expressions when the policy already had it.
func envFor(stored sets.Set[string], expr string) environment.Type {
	if stored.Has(expr) {
		return environment.StoredExpressions
	}
	return environment.NewExpressions
}

// validateMutatingPolicy checks a MutatingAdmissionPolicy as upstream
// does, compiling its variables, matchConditions and mutations.
func validateMutatingPolicy(p *admissionregistrationv1.MutatingAdmissionPolicy, s mutatingStored) field.ErrorList {
	errs := apivalidation.ValidateObjectMeta(&p.ObjectMeta, false, apivalidation.NameIsDNSSubdomain, metadataPath)
	spec := &p.Spec
	if spec.FailurePolicy == nil {
		errs = append(errs, field.Required(specPath.Child("failurePolicy"), ""))
	} else if !supportedFailurePolicies.Has(string(*spec.FailurePolicy)) {
		errs = append(errs, field.NotSupported(specPath.Child("failurePolicy"), *spec.FailurePolicy, sets.List(supportedFailurePolicies)))
	}
	hasParams := spec.ParamKind != nil
	if hasParams {
		errs = append(errs, validateParamKind(spec.ParamKind, specPath.Child("paramKind"))...)
	}
	if spec.MatchConstraints == nil {
		errs = append(errs, field.Required(specPath.Child("matchConstraints"), ""))
	} else {
		errs = append(errs, validateMatchResources(spec.MatchConstraints, specPath.Child("matchConstraints"))...)
		if len(spec.MatchConstraints.ResourceRules) == 0 {
			errs = append(errs, field.Required(specPath.Child("matchConstraints", "resourceRules"), ""))
		}
		errs = append(errs, validateMutatingOperations(spec.MatchConstraints, specPath.Child("matchConstraints"))...)
	}
	if !s.keepMatch {
		errs = append(errs, validateMatchConditions(spec.MatchConditions, s.match, hasParams, specPath.Child("matchConditions"))...)
	}
	compiler, err := plugincel.NewCompositedCompiler(environment.MustBaseEnvSet(environment.DefaultCompatibilityVersion()))
	if err != nil {
		return append(errs, field.InternalError(specPath, err))
	}
	for i := range spec.Variables {
		errs = append(errs, validateVariable(compiler, &spec.Variables[i], hasParams, specPath.Child("variables").Index(i))...)
	}
	if len(spec.Mutations) == 0 {
		errs = append(errs, field.Required(specPath.Child("mutations"), "mutations must contain at least one item"))
	}
	for i := range spec.Mutations {
		errs = append(errs, validateMutation(compiler, &spec.Mutations[i], hasParams, s.patches, specPath.Child("mutations").Index(i))...)
	}
	if spec.ReinvocationPolicy == "" {
		errs = append(errs, field.Required(specPath.Child("reinvocationPolicy"), ""))
	} else if !reinvocations.Has(string(spec.ReinvocationPolicy)) {
		errs = append(errs, field.NotSupported(specPath.Child("reinvocationPolicy"), spec.ReinvocationPolicy, sets.List(reinvocations)))
	}
	return errs
}

// validateMutatingOperations refuses rules of m for operations other
// than CREATE and UPDATE, which have no object to mutate.
func validateMutatingOperations(m *admissionregistrationv1.MatchResources, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	for _, r := range m.ResourceRules {
		for _, op := range r.Operations {
			if !mutatingOperations.Has(string(op)) {
				errs = append(errs, field.NotSupported(p.Child("resourceRules", "operations"), op, sets.List(mutatingOperations)))
			}
		}
	}
	return errs
}

// validateVariable checks a variable's name and compiles its expression,
// storing it in compiler for the expressions after it to use. Like
// upstream's, the expression always compiles as a new one.
func validateVariable(compiler *plugincel.CompositedCompiler, v *admissionregistrationv1.Variable, hasParams bool, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if strings.TrimSpace(v.Name) == "" {
		errs = append(errs, field.Required(p.Child("name"), "name is not specified"))
	} else if !celIdent.MatchString(v.Name) || celReserved.Has(v.Name) {
		errs = append(errs, field.Invalid(p.Child("name"), v.Name, "must be a valid CEL identifier"))
	}
	if strings.TrimSpace(v.Expression) == "" {
		return append(errs, field.Required(p.Child("expression"), "expression is not specified"))
	}
	r := compiler.CompileAndStoreVariable(&variable{name: v.Name, expression: v.Expression},
		plugincel.OptionalVariableDeclarations{HasParams: hasParams, HasAuthorizer: true}, environment.NewExpressions)
	if r.Error != nil {
		errs = append(errs, celError(p.Child("expression"), v.Expression, r.Error))
	}
	return errs
}

// validateMutation checks that a mutation has the patch its patchType
// names, and no other, and compiles its expression to the type that
// patch needs (an Object{} for ApplyConfiguration, a list of
// JSONPatch{} for JSONPatch).
func validateMutation(compiler plugincel.Compiler, m *admissionregistrationv1.Mutation, hasParams bool, stored sets.Set[string], p *field.Path) field.ErrorList {
	var errs field.ErrorList
	switch m.PatchType {
	case "":
		return field.ErrorList{field.Required(p.Child("patchType"), "")}
	case admissionregistrationv1.PatchTypeJSONPatch:
		if m.JSONPatch == nil {
			errs = append(errs, field.Required(p.Child("jsonPatch"), "must be specified when patchType is JSONPatch"))
		} else {
			errs = append(errs, compilePatch(compiler, &patch.JSONPatchCondition{Expression: strings.TrimSpace(m.JSONPatch.Expression)},
				m.JSONPatch.Expression, hasParams, stored, p.Child("jsonPatch", "expression"))...)
		}
		if m.ApplyConfiguration != nil {
			errs = append(errs, field.Invalid(p.Child("applyConfiguration"), "{applyConfiguration}", "must not be specified when patchType is JSONPatch"))
		}
	case admissionregistrationv1.PatchTypeApplyConfiguration:
		if m.ApplyConfiguration == nil {
			errs = append(errs, field.Required(p.Child("applyConfiguration"), "must be specified when patchType is ApplyConfiguration"))
		} else {
			errs = append(errs, compilePatch(compiler, &patch.ApplyConfigurationCondition{Expression: strings.TrimSpace(m.ApplyConfiguration.Expression)},
				m.ApplyConfiguration.Expression, hasParams, stored, p.Child("applyConfiguration", "expression"))...)
		}
		if m.JSONPatch != nil {
			errs = append(errs, field.Invalid(p.Child("jsonPatch"), "{jsonPatch}", "must not be specified when patchType is ApplyConfiguration"))
		}
	default:
		errs = append(errs, field.NotSupported(p.Child("patchType"), m.PatchType, sets.List(patchTypes)))
	}
	return errs
}

// compilePatch compiles a mutation's expression (expr as written, accessor
// with it trimmed), with the patch types declared.
func compilePatch(compiler plugincel.Compiler, accessor plugincel.ExpressionAccessor, expr string, hasParams bool, stored sets.Set[string], p *field.Path) field.ErrorList {
	if accessor.GetExpression() == "" {
		return field.ErrorList{field.Required(p, "")}
	}
	vars := plugincel.OptionalVariableDeclarations{HasParams: hasParams, HasAuthorizer: true, HasPatchTypes: true}
	if r := compiler.CompileCELExpression(accessor, vars, envFor(stored, expr)); r.Error != nil {
		return field.ErrorList{celError(p, accessor.GetExpression(), r.Error)}
	}
	return nil
}

// validateMutatingBinding checks a binding as upstream does: a policy
// name, its paramRef and matchResources, and that these match only
// creates and updates.
func validateMutatingBinding(b *admissionregistrationv1.MutatingAdmissionPolicyBinding) field.ErrorList {
	errs := apivalidation.ValidateObjectMeta(&b.ObjectMeta, false, apivalidation.NameIsDNSSubdomain, metadataPath)
	s := &b.Spec
	if s.PolicyName == "" {
		errs = append(errs, field.Required(specPath.Child("policyName"), ""))
	} else {
		for _, msg := range apivalidation.NameIsDNSSubdomain(s.PolicyName, false) {
			errs = append(errs, field.Invalid(specPath.Child("policyName"), s.PolicyName, msg))
		}
	}
	if s.ParamRef != nil {
		errs = append(errs, validateParamRef(s.ParamRef, specPath.Child("paramRef"))...)
	}
	if s.MatchResources != nil {
		errs = append(errs, validateMatchResources(s.MatchResources, specPath.Child("matchResources"))...)
		errs = append(errs, validateMutatingOperations(s.MatchResources, specPath.Child("matchResources"))...)
	}
	return errs
}

// variable is a policy variable for the CEL compiler: of any type.
type variable struct{ name, expression string }

func (v *variable) GetName() string       { return v.name }
func (v *variable) GetExpression() string { return v.expression }
func (v *variable) ReturnTypes() []*celgo.Type {
	return []*celgo.Type{celgo.AnyType, celgo.DynType}
}
