package job

import (
	"fmt"
	"slices"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
)

// policyVerdict is what a job's pod failure policy makes of a failed pod.
type policyVerdict struct {
	// Rule is the action of the first rule that matched, or "" when none
	// did (the pod then counts toward the back-off limit).
	Rule batchv1.PodFailurePolicyAction
	// FailJob is the Failed condition's message when the rule fails the
	// job, else "".
	FailJob string
}

// Counts reports whether the failure counts toward the back-off limits:
// all but those a rule ignores.
func (v policyVerdict) Counts() bool { return v.Rule != batchv1.PodFailurePolicyActionIgnore }

// matchPolicy applies pol to the failed pod p: the first rule whose exit
// codes match a terminated container (regular, then init), or whose pod
// conditions match one of p's, decides, as upstream's. A nil policy
// matches nothing.
func matchPolicy(pol *batchv1.PodFailurePolicy, p *corev1.Pod) policyVerdict {
	if pol == nil {
		return policyVerdict{}
	}
	for i, r := range pol.Rules {
		var failJob string
		switch {
		case r.OnExitCodes != nil:
			c := matchExitCodes(&p.Status, r.OnExitCodes)
			if c == nil {
				continue
			}
			failJob = fmt.Sprintf("Container %s for pod %s/%s failed with exit code %v matching %v rule at index %d",
				c.Name, p.Namespace, p.Name, c.State.Terminated.ExitCode, r.Action, i)
		case len(r.OnPodConditions) > 0:
			c := matchPodConditions(&p.Status, r.OnPodConditions)
			if c == nil {
				continue
			}
			failJob = fmt.Sprintf("Pod %s/%s has condition %v matching %v rule at index %d",
				p.Namespace, p.Name, c.Type, r.Action, i)
		default:
			continue
		}
		switch r.Action {
		case batchv1.PodFailurePolicyActionFailJob:
			return policyVerdict{Rule: r.Action, FailJob: failJob}
		case batchv1.PodFailurePolicyActionIgnore, batchv1.PodFailurePolicyActionCount, batchv1.PodFailurePolicyActionFailIndex:
			return policyVerdict{Rule: r.Action}
		}
		// An action this controller does not know (validation refuses
		// them) matches nothing, as upstream's.
	}
	return policyVerdict{}
}

func matchExitCodes(s *corev1.PodStatus, req *batchv1.PodFailurePolicyOnExitCodesRequirement) *corev1.ContainerStatus {
	if c := matchContainer(s.ContainerStatuses, req); c != nil {
		return c
	}
	return matchContainer(s.InitContainerStatuses, req)
}

func matchContainer(cs []corev1.ContainerStatus, req *batchv1.PodFailurePolicyOnExitCodesRequirement) *corev1.ContainerStatus {
	for i := range cs {
		c := &cs[i]
		t := c.State.Terminated
		if t == nil || t.ExitCode == 0 || (req.ContainerName != nil && *req.ContainerName != c.Name) {
			continue
		}
		in := slices.Contains(req.Values, t.ExitCode)
		switch req.Operator {
		case batchv1.PodFailurePolicyOnExitCodesOpIn:
			if in {
				return c
			}
		case batchv1.PodFailurePolicyOnExitCodesOpNotIn:
			if !in {
				return c
			}
		}
	}
	return nil
}

func matchPodConditions(s *corev1.PodStatus, patterns []batchv1.PodFailurePolicyOnPodConditionsPattern) *corev1.PodCondition {
	for i := range s.Conditions {
		c := &s.Conditions[i]
		for _, pat := range patterns {
			if c.Type == pat.Type && c.Status == pat.Status {
				return c
			}
		}
	}
	return nil
}
