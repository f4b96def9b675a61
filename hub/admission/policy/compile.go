package policy

import (
	"sync"

	celgo "github.com/google/cel-go/cel"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	plugincel "k8s.io/apiserver/pkg/admission/plugin/cel"
	"k8s.io/apiserver/pkg/admission/plugin/webhook/matchconditions"
	"k8s.io/apiserver/pkg/cel/environment"
)

// validationCondition is a validation's expression, with what its
// failure reports.
type validationCondition struct {
	Expression string
	Message    string
	Reason     *metav1.StatusReason
}

func (v *validationCondition) GetExpression() string      { return v.Expression }
func (v *validationCondition) ReturnTypes() []*celgo.Type { return []*celgo.Type{celgo.BoolType} }

// messageCondition is a validation's messageExpression.
type messageCondition struct{ Expression string }

func (m *messageCondition) GetExpression() string      { return m.Expression }
func (m *messageCondition) ReturnTypes() []*celgo.Type { return []*celgo.Type{celgo.StringType} }

// auditCondition is an audit annotation's valueExpression, a string or
// null.
type auditCondition struct {
	Key             string
	ValueExpression string
}

func (a *auditCondition) GetExpression() string { return a.ValueExpression }
func (a *auditCondition) ReturnTypes() []*celgo.Type {
	return []*celgo.Type{celgo.StringType, celgo.NullType}
}

// variable is a policy variable, of any type.
type variable struct {
	Name       string
	Expression string
}

func (v *variable) GetName() string       { return v.Name }
func (v *variable) GetExpression() string { return v.Expression }
func (v *variable) ReturnTypes() []*celgo.Type {
	return []*celgo.Type{celgo.AnyType, celgo.DynType}
}

// compositionEnv is the CEL environment policies compile in: upstream's
// base environment at the default compatibility version, with its
// libraries and per-call cost limit, built once.
var compositionEnv = sync.OnceValue(func() *environment.EnvSet {
	return environment.MustBaseEnvSet(environment.DefaultCompatibilityVersion())
})

// compiled is a policy's expressions compiled, as upstream's validator
// holds them. Safe for concurrent use.
type compiled struct {
	validations cel   // bool, one per validation
	messages    cel   // string, one per validation (nil where none)
	audits      cel   // string or null, one per audit annotation
	matcher     match // nil without matchConditions
	failure     admissionregistrationv1.FailurePolicyType
	// err is set when no CEL environment could be made for the policy.
	err error
}

// cel and match are upstream's evaluators, named for what they do here.
type (
	cel   = plugincel.ConditionEvaluator
	match = matchconditions.Matcher
)

// compile compiles p's expressions for evaluation as upstream's
// validating plugin does: variables first, in order, so that later ones
// and every other expression may use them; params declared when p has a
// paramKind; the authorizer for all but messageExpressions. Compile
// errors are kept with their expression and surface when it is
// evaluated, under the policy's failurePolicy.
func compile(p *admissionregistrationv1.ValidatingAdmissionPolicy) *compiled {
	c := &compiled{failure: admissionregistrationv1.Fail}
	if p.Spec.FailurePolicy != nil {
		c.failure = *p.Spec.FailurePolicy
	}
	compiler, err := plugincel.NewCompositedCompiler(compositionEnv())
	if err != nil {
		c.err = err
		return c
	}
	hasParams := p.Spec.ParamKind != nil
	vars := plugincel.OptionalVariableDeclarations{HasParams: hasParams, HasAuthorizer: true}
	msgVars := plugincel.OptionalVariableDeclarations{HasParams: hasParams}
	env := environment.StoredExpressions
	for _, v := range p.Spec.Variables {
		compiler.CompileAndStoreVariable(&variable{Name: v.Name, Expression: v.Expression}, vars, env)
	}
	if len(p.Spec.MatchConditions) > 0 {
		conds := make([]plugincel.ExpressionAccessor, len(p.Spec.MatchConditions))
		for i := range p.Spec.MatchConditions {
			conds[i] = (*matchconditions.MatchCondition)(&p.Spec.MatchConditions[i])
		}
		c.matcher = matchconditions.NewMatcher(compiler.CompileCondition(conds, vars, env), &c.failure, "policy", "validate", p.Name)
	}
	validations := make([]plugincel.ExpressionAccessor, len(p.Spec.Validations))
	messages := make([]plugincel.ExpressionAccessor, len(p.Spec.Validations))
	for i, v := range p.Spec.Validations {
		validations[i] = &validationCondition{Expression: v.Expression, Message: v.Message, Reason: v.Reason}
		if v.MessageExpression != "" {
			messages[i] = &messageCondition{Expression: v.MessageExpression}
		}
	}
	audits := make([]plugincel.ExpressionAccessor, len(p.Spec.AuditAnnotations))
	for i, a := range p.Spec.AuditAnnotations {
		audits[i] = &auditCondition{Key: a.Key, ValueExpression: a.ValueExpression}
	}
	c.validations = compiler.CompileCondition(validations, vars, env)
	c.messages = compiler.CompileCondition(messages, msgVars, env)
	c.audits = compiler.CompileCondition(audits, vars, env)
	return c
}

// cacheKey names one generation of one policy. Policies the server
// stored have a uid and a generation that changes with their spec.
type cacheKey struct {
	uid        types.UID
	name       string
	generation int64
}

// keyOf returns the cache key of the policy m describes.
func keyOf(m *metav1.ObjectMeta) cacheKey {
	return cacheKey{uid: m.UID, name: m.Name, generation: m.Generation}
}

// cache keeps each policy compiled once per generation, as a T. Safe for
// concurrent use.
type cache[T any] struct {
	mu      sync.Mutex
	entries map[cacheKey]T
}

// get returns the compilation of the policy key names, made by compile
// on first use of its generation. live is how many policies there are
// now: when the cache holds more than twice as many compilations it
// starts afresh, so that those of deleted policies and old generations
// do not pile up.
func (c *cache[T]) get(key cacheKey, live int, compile func() T) T {
	c.mu.Lock()
	cp, ok := c.entries[key]
	c.mu.Unlock()
	if ok {
		return cp
	}
	cp = compile()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.entries == nil || len(c.entries) > 2*live+8 {
		c.entries = map[cacheKey]T{}
	}
	c.entries[key] = cp
	return cp
}
