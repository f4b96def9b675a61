package policy

import (
	"fmt"
	"reflect"
	"sync"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/managedfields"
	"k8s.io/apiserver/pkg/admission"
	plugincel "k8s.io/apiserver/pkg/admission/plugin/cel"
	"k8s.io/apiserver/pkg/admission/plugin/policy/mutating/patch"
	"k8s.io/apiserver/pkg/admission/plugin/webhook/matchconditions"
	"k8s.io/apiserver/pkg/cel/environment"
	"k8s.io/client-go/applyconfigurations"
	"k8s.io/client-go/kubernetes/scheme"
)

// mutations are a MutatingAdmissionPolicy's expressions compiled, as
// upstream's mutating plugin holds them: its matchConditions and one
// patcher per mutation, in order. Safe for concurrent use.
type mutations struct {
	matcher  match // nil without matchConditions
	patchers []patch.Patcher
	// compiler holds the policy's variables: each invocation evaluates
	// them afresh, in a context it makes.
	compiler *plugincel.CompositedCompiler
	// err is set when no CEL environment could be made for the policy.
	err error
}

// compileMutating compiles p's expressions as upstream's mutating plugin
// does: variables first, in order; params declared when p has a
// paramKind; the authorizer, and the Object{} and JSONPatch{} types for
// mutations. Compile errors are kept with their expression and surface
// when it is evaluated, under the policy's failurePolicy.
func compileMutating(p *admissionregistrationv1.MutatingAdmissionPolicy) *mutations {
	compiler, err := plugincel.NewCompositedCompiler(compositionEnv())
	if err != nil {
		return &mutations{err: fmt.Errorf("failed to initialize CEL compiler: %w", err)}
	}
	vars := plugincel.OptionalVariableDeclarations{HasParams: p.Spec.ParamKind != nil, HasAuthorizer: true}
	env := environment.StoredExpressions
	for _, v := range p.Spec.Variables {
		compiler.CompileAndStoreVariable(&variable{Name: v.Name, Expression: v.Expression}, vars, env)
	}
	m := &mutations{compiler: compiler}
	if len(p.Spec.MatchConditions) > 0 {
		conds := make([]plugincel.ExpressionAccessor, len(p.Spec.MatchConditions))
		for i := range p.Spec.MatchConditions {
			conds[i] = (*matchconditions.MatchCondition)(&p.Spec.MatchConditions[i])
		}
		m.matcher = matchconditions.NewMatcher(compiler.CompileCondition(conds, vars, env), p.Spec.FailurePolicy, "policy", "validate", p.Name)
	}
	patchVars := vars
	patchVars.HasPatchTypes = true
	for _, mu := range p.Spec.Mutations {
		switch {
		case mu.PatchType == admissionregistrationv1.PatchTypeJSONPatch && mu.JSONPatch != nil:
			e := compiler.CompileMutatingEvaluator(&patch.JSONPatchCondition{Expression: mu.JSONPatch.Expression}, patchVars, env)
			m.patchers = append(m.patchers, patch.NewJSONPatcher(e))
		case mu.PatchType == admissionregistrationv1.PatchTypeApplyConfiguration && mu.ApplyConfiguration != nil:
			e := compiler.CompileMutatingEvaluator(&patch.ApplyConfigurationCondition{Expression: mu.ApplyConfiguration.Expression}, patchVars, env)
			m.patchers = append(m.patchers, patch.NewApplyConfigurationPatcher(e))
		default:
			// API validation refuses such a mutation; one stored anyway is a
			// configuration error of the policy.
			m.err = fmt.Errorf("unsupported patchType %q", mu.PatchType)
		}
	}
	return m
}

// builtinTypes is the schema of the k8s.io/api types client-go knows,
// built on first use (it is large) and shared.
var builtinTypes = sync.OnceValue(func() managedfields.TypeConverter {
	return applyconfigurations.NewTypeConverter(scheme.Scheme)
})

// defaultTypeConverter returns the schema obj merges by when the Mutator
// is given none: that of k8s.io/api for typed objects, and one deduced
// from the object for custom resources.
func defaultTypeConverter(obj runtime.Object) managedfields.TypeConverter {
	if _, ok := obj.(*unstructured.Unstructured); ok {
		return managedfields.NewDeducedTypeConverter()
	}
	return builtinTypes()
}

// objectInterfaces are what upstream's JSONPatch patcher encodes and
// decodes a write's object with: client-go's scheme, except that new
// objects are of the Go type of the write's object and take its kind,
// so that the hub's own types are patched too.
type objectInterfaces struct {
	admission.ObjectInterfaces
	like runtime.Object
}

// newObjectInterfaces returns the objectInterfaces for patching like.
func newObjectInterfaces(like runtime.Object) objectInterfaces {
	return objectInterfaces{ObjectInterfaces: admission.NewObjectInterfacesFromScheme(scheme.Scheme), like: like}
}

func (o objectInterfaces) GetObjectCreater() runtime.ObjectCreater { return o }
func (o objectInterfaces) GetObjectTyper() runtime.ObjectTyper     { return o }

// New returns a new object of the Go type of the write's object.
func (o objectInterfaces) New(kind schema.GroupVersionKind) (runtime.Object, error) {
	return newLike(o.like, kind), nil
}

// ObjectKinds returns the kind obj carries, or the one the scheme knows
// its Go type by.
func (o objectInterfaces) ObjectKinds(obj runtime.Object) ([]schema.GroupVersionKind, bool, error) {
	if gvk := obj.GetObjectKind().GroupVersionKind(); !gvk.Empty() {
		return []schema.GroupVersionKind{gvk}, false, nil
	}
	return scheme.Scheme.ObjectKinds(obj)
}

// Recognizes reports whether kind is the write's object's.
func (o objectInterfaces) Recognizes(kind schema.GroupVersionKind) bool {
	return kind == o.like.GetObjectKind().GroupVersionKind()
}

// newLike returns a new, empty object of like's Go type carrying kind.
func newLike(like runtime.Object, kind schema.GroupVersionKind) runtime.Object {
	obj := reflect.New(reflect.TypeOf(like).Elem()).Interface().(runtime.Object)
	obj.GetObjectKind().SetGroupVersionKind(kind)
	return obj
}

// retyped returns a patched object as an object of like's Go type, as
// upstream converts a patch's result back before it defaults it:
// ApplyConfiguration mutations give an unstructured object, which a
// typed write gets back in its type.
func retyped(patched, like runtime.Object) (runtime.Object, error) {
	if reflect.TypeOf(patched) == reflect.TypeOf(like) {
		return patched, nil
	}
	u, ok := patched.(*unstructured.Unstructured)
	if !ok {
		return nil, fmt.Errorf("patch gave a %T for a %T", patched, like)
	}
	obj := newLike(like, like.GetObjectKind().GroupVersionKind())
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, obj); err != nil {
		return nil, fmt.Errorf("failed to convert object: %w", err)
	}
	obj.GetObjectKind().SetGroupVersionKind(like.GetObjectKind().GroupVersionKind())
	return obj, nil
}
