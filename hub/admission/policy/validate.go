package policy

import (
	"context"
	"errors"
	"fmt"
	"strings"

	celtypes "github.com/google/cel-go/common/types"
	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/admission"
	plugincel "k8s.io/apiserver/pkg/admission/plugin/cel"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	apiservercel "k8s.io/apiserver/pkg/cel"
)

// decision is what one validation, or a failure to evaluate, decided.
type decision struct {
	deny bool
	// evalError is set when the decision comes of an error (compile,
	// runtime, cost) rather than of a validation that came out false.
	evalError bool
	message   string
	reason    metav1.StatusReason
}

// annotation is an audit annotation a policy's valueExpression gave.
type annotation struct {
	key, value string
}

// result is what a policy decided of one write with one param.
type result struct {
	decisions   []decision
	annotations []annotation
}

// errorDecision is the decision on an error: a denial under failure
// policy Fail, an admission under Ignore.
func errorDecision(f admissionregistrationv1.FailurePolicyType, msg string) decision {
	return decision{deny: f != admissionregistrationv1.Ignore, evalError: true, message: msg}
}

// validate evaluates c for a write (va, with request as CEL's request)
// with one param, as upstream's validator does: matchConditions first,
// then the validations and their messageExpressions within one runtime
// cost budget, then the audit annotations.
func (c *compiled) validate(ctx context.Context, va *admission.VersionedAttributes, gvr schema.GroupVersionResource, param runtime.Object, ns *corev1.Namespace, authz authorizer.UnconditionalAuthorizer) result {
	if c.err != nil {
		return result{decisions: []decision{errorDecision(c.failure, c.err.Error())}}
	}
	if c.matcher != nil {
		m := c.matcher.Match(ctx, va, param, authz)
		if m.Error != nil {
			return result{decisions: []decision{errorDecision(c.failure, m.Error.Error())}}
		}
		if !m.Matches {
			return result{}
		}
	}
	request := plugincel.CreateAdmissionRequest(va.Attributes, metav1.GroupVersionResource(gvr), metav1.GroupVersionKind(va.VersionedKind))
	nsObj := plugincel.CreateNamespaceObject(ns)
	evals, remaining, err := c.validations.ForInput(ctx, va, request,
		plugincel.OptionalVariableBindings{VersionedParams: param, Authorizer: authz}, nsObj, celconfig.RuntimeCELCostBudget)
	if err != nil {
		return result{decisions: []decision{errorDecision(c.failure, err.Error())}}
	}
	msgs, _, msgErr := c.messages.ForInput(ctx, va, request, plugincel.OptionalVariableBindings{VersionedParams: param}, nsObj, remaining)
	r := result{decisions: make([]decision, len(evals))}
	for i, ev := range evals {
		var msg *plugincel.EvaluationResult
		if i < len(msgs) {
			msg = &msgs[i]
		}
		r.decisions[i] = c.decide(ev, msg, msgErr)
	}
	annotations, denials, err := c.annotate(ctx, va, request, param, ns)
	if err != nil {
		return result{decisions: []decision{errorDecision(c.failure, err.Error())}}
	}
	r.annotations = annotations
	r.decisions = append(r.decisions, denials...)
	return r
}

// decide turns one validation's evaluation into a decision, with the
// message upstream gives: its messageExpression's when that evaluated
// to a usable string, else its message, else "failed expression: ...".
func (c *compiled) decide(ev plugincel.EvaluationResult, msg *plugincel.EvaluationResult, msgErr error) decision {
	v, ok := ev.ExpressionAccessor.(*validationCondition)
	switch {
	case !ok:
		return errorDecision(c.failure, "Invalid type sent to validator, expected ValidationCondition")
	case ev.Error != nil:
		return errorDecision(c.failure, ev.Error.Error())
	case errors.Is(msgErr, apiservercel.ErrInternal) || errors.Is(msgErr, apiservercel.ErrOutOfBudget):
		return errorDecision(c.failure, fmt.Sprintf("failed messageExpression: %s", msgErr))
	case ev.EvalResult == celtypes.True:
		return decision{}
	}
	d := decision{deny: true, reason: metav1.StatusReasonInvalid}
	if v.Reason != nil {
		d.reason = *v.Reason
	}
	d.message = evaluatedMessage(msg)
	if d.message == "" {
		d.message = strings.TrimSpace(v.Message)
	}
	if d.message == "" {
		d.message = fmt.Sprintf("failed expression: %v", strings.TrimSpace(v.Expression))
	}
	return d
}

// evaluatedMessage returns what a messageExpression evaluated to, when
// that is a string of one line and at most upstream's size limit, and
// "" otherwise.
func evaluatedMessage(msg *plugincel.EvaluationResult) string {
	if msg == nil || msg.Error != nil || msg.EvalResult == nil {
		return ""
	}
	s, ok := msg.EvalResult.Value().(string)
	if !ok {
		return ""
	}
	s = strings.TrimSpace(s)
	if len(s) > celconfig.MaxEvaluatedMessageExpressionSizeBytes || strings.Contains(s, "\n") {
		return ""
	}
	return s
}

// annotate evaluates the policy's audit annotations, as upstream does:
// empty and null values are left out; an expression that failed denies
// under failure policy Fail and is left out under Ignore; one of another
// type than string or null denies.
func (c *compiled) annotate(ctx context.Context, va *admission.VersionedAttributes, request *admissionv1.AdmissionRequest, param runtime.Object, ns *corev1.Namespace) ([]annotation, []decision, error) {
	evals, _, err := c.audits.ForInput(ctx, va, request, plugincel.OptionalVariableBindings{VersionedParams: param}, ns, celconfig.RuntimeCELCostBudget)
	if err != nil {
		return nil, nil, err
	}
	var out []annotation
	var denials []decision
	for _, ev := range evals {
		a, ok := ev.ExpressionAccessor.(*auditCondition)
		switch {
		case !ok:
			continue
		case ev.Error != nil:
			if c.failure != admissionregistrationv1.Ignore {
				denials = append(denials, decision{deny: true, evalError: true, message: ev.Error.Error()})
			}
		case ev.EvalResult.Type() == celtypes.StringType:
			if v := strings.TrimSpace(ev.EvalResult.Value().(string)); v != "" {
				out = append(out, annotation{key: a.Key, value: v})
			}
		case ev.EvalResult.Type() != celtypes.NullType:
			denials = append(denials, decision{deny: true, evalError: true, message: fmt.Sprintf("valueExpression '%v' resulted in unsupported return type: %v. "+
				"Return type must be either string or null.", a.ValueExpression, ev.EvalResult.Type())})
		}
	}
	return out, denials, nil
}
