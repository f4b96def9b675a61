// Package policy enforces admissionregistration.k8s.io/v1
// ValidatingAdmissionPolicies, as upstream kube-apiserver's
// ValidatingAdmissionPolicy admission plugin does: a policy's
// matchConstraints intersected with each of its bindings' matchResources
// select the writes it judges, its matchConditions narrow them, and its
// CEL validations (with variables, params from the binding's paramRef,
// messageExpression and reason) decide; the binding's validationActions
// say whether a failure denies the write, is logged as a warning, or is
// logged for audit.
//
// The CEL side is upstream's own: the compiler, environment, libraries,
// cost limits and activation of k8s.io/apiserver/pkg/admission/plugin/cel
// and pkg/cel, which the Evaluator feeds with a k8s.io/apiserver
// admission.Attributes built from the hub's apiserver.AdmissionAttributes.
// What upstream's validating package adds around it (matching, params,
// failure policy, decisions and their messages) is here, since that
// package drags in fake clientsets and webhook machinery.
//
// The Mutator is upstream's MutatingAdmissionPolicy plugin on the same
// matching, params and CEL: the bound policies that match a write apply
// their mutations to its object in order (ApplyConfiguration merging a
// CEL Object{} with structured-merge-diff, JSONPatch applying CEL
// JSONPatch{} operations, both upstream's patchers), and those with
// reinvocationPolicy IfNeeded run once more when a later one changed
// the object.
//
// CheckPolicy gives the compile errors upstream's API validation reports
// when a policy is created or updated, for the registry to use. Only the
// composition root wires the Evaluator in.
package policy
