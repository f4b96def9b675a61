package admission

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/outpost-mesh/outpost/hub/apiserver"
)

var (
	podsResource            = schema.GroupResource{Resource: "pods"}
	priorityClassesResource = schema.GroupResource{Group: schedulingv1.GroupName, Resource: "priorityclasses"}
)

// DefaultPriorityWhenNoDefaultClassExists is the priority of a pod that
// names no class when no class is the global default, as upstream's.
const DefaultPriorityWhenNoDefaultClassExists int32 = 0

// Priority is upstream's Priority admission plugin. As a mutating
// admission it resolves a new pod's spec.priorityClassName (or the global
// default class, or none) into spec.priority and spec.preemptionPolicy,
// refusing with 403 Forbidden a class that does not exist and a pod that
// gives a priority or preemption policy other than its class's; on an
// update it restores the priority and policy a pod's writer left out. As
// a validating admission it refuses a second global default class. Every
// namespace may use every class, system ones included, as upstream since
// 1.17 (a ResourceQuota may limit them). It is safe for concurrent use if
// Classes is.
type Priority struct {
	// Classes lists the priority classes, e.g. from an informer's lister;
	// non-nil. The caller keeps ownership of what it returns, which
	// Priority only reads.
	Classes func() ([]*schedulingv1.PriorityClass, error)
}

var (
	_ apiserver.MutatingAdmission = (*Priority)(nil)
	_ apiserver.Admission         = (*Priority)(nil)
)

// Handles reports whether resource is pods or priorityclasses.
func (p *Priority) Handles(resource schema.GroupResource) bool {
	return resource == podsResource || resource == priorityClassesResource
}

// Mutate resolves a pod's priority on create and keeps it on update.
// Writes of subresources and of other resources pass unchanged.
func (p *Priority) Mutate(_ context.Context, a *apiserver.AdmissionAttributes) error {
	if a.Resource != podsResource || a.Subresource != "" {
		return nil
	}
	pod, ok := a.Object.(*corev1.Pod)
	if !ok {
		return apierrors.NewBadRequest("resource was marked with kind Pod but was unable to be converted")
	}
	switch a.Operation {
	case apiserver.Create:
		return p.admitNewPod(a, pod)
	case apiserver.Update:
		old, ok := a.OldObject.(*corev1.Pod)
		if !ok {
			return apierrors.NewBadRequest("resource was marked with kind Pod but was unable to be converted")
		}
		KeepPriority(pod, old)
	}
	return nil
}

// KeepPriority gives pod, an update of old, the priority and preemption
// policy old was admitted with where pod leaves them out, so that a
// client that does not know the fields does not fail validation, which
// refuses to change them.
func KeepPriority(pod, old *corev1.Pod) {
	if pod.Spec.Priority == nil && old.Spec.Priority != nil {
		pod.Spec.Priority = new(*old.Spec.Priority)
	}
	if pod.Spec.PreemptionPolicy == nil && old.Spec.PreemptionPolicy != nil {
		pod.Spec.PreemptionPolicy = new(*old.Spec.PreemptionPolicy)
	}
}

// admitNewPod resolves the priority of a pod being created.
func (p *Priority) admitNewPod(a *apiserver.AdmissionAttributes, pod *corev1.Pod) error {
	classes, err := p.Classes()
	if err != nil {
		return apierrors.NewInternalError(fmt.Errorf("list priority classes: %w", err))
	}
	if err := ResolvePriority(pod, classes); err != nil {
		return apierrors.NewForbidden(a.Resource, forbiddenName(a, pod), err)
	}
	return nil
}

// forbiddenName is the name a Forbidden about pod is given, as upstream's
// admission names it: the request's, the object's, its generateName, or
// "Unknown", since names are generated after admission.
func forbiddenName(a *apiserver.AdmissionAttributes, pod *corev1.Pod) string {
	for _, n := range []string{a.Name, pod.Name, pod.GenerateName} {
		if n != "" {
			return n
		}
	}
	return "Unknown"
}

// ResolvePriority sets a new pod's spec.priority and spec.preemptionPolicy
// from its spec.priorityClassName among classes, or from the global
// default class (whose name it then sets), or to priority 0 and
// PreemptLowerPriority when there is none. It returns the reason, worded
// as upstream's, to refuse a pod whose class does not exist or which gives
// a priority or preemption policy other than its class's; pod is then
// left as it was. It does not keep classes.
func ResolvePriority(pod *corev1.Pod, classes []*schedulingv1.PriorityClass) error {
	name := pod.Spec.PriorityClassName
	priority := DefaultPriorityWhenNoDefaultClassExists
	policy := new(corev1.PreemptLowerPriority)
	if name == "" {
		if pc := DefaultClass(classes); pc != nil {
			name, priority, policy = pc.Name, pc.Value, pc.PreemptionPolicy
		}
	} else {
		pc := findClass(classes, name)
		if pc == nil {
			return fmt.Errorf("no PriorityClass with name %v was found", name)
		}
		priority, policy = pc.Value, pc.PreemptionPolicy
	}
	if pod.Spec.Priority != nil && *pod.Spec.Priority != priority {
		return fmt.Errorf("the integer value of priority (%d) must not be provided in pod spec; priority admission controller computed %d from the given PriorityClass name", *pod.Spec.Priority, priority)
	}
	if policy != nil && pod.Spec.PreemptionPolicy != nil && *pod.Spec.PreemptionPolicy != *policy {
		return fmt.Errorf("the string value of PreemptionPolicy (%s) must not be provided in pod spec; priority admission controller computed %s from the given PriorityClass name", *pod.Spec.PreemptionPolicy, *policy)
	}
	pod.Spec.PriorityClassName = name
	pod.Spec.Priority = new(priority)
	if policy != nil {
		pod.Spec.PreemptionPolicy = new(*policy)
	}
	return nil
}

// findClass returns the class of classes called name, or nil.
func findClass(classes []*schedulingv1.PriorityClass, name string) *schedulingv1.PriorityClass {
	for _, pc := range classes {
		if pc.Name == name {
			return pc
		}
	}
	return nil
}

// DefaultClass returns the global default class among classes, or nil.
// Should a race have made two, it is the one of lowest value, as
// upstream picks.
func DefaultClass(classes []*schedulingv1.PriorityClass) *schedulingv1.PriorityClass {
	var def *schedulingv1.PriorityClass
	for _, pc := range classes {
		if pc.GlobalDefault && (def == nil || pc.Value < def.Value) {
			def = pc
		}
	}
	return def
}

// Admit refuses with 403 Forbidden a priority class that would be a
// second global default: created as one, or made one by an update, while
// another class already is.
func (p *Priority) Admit(_ context.Context, a apiserver.AdmissionAttributes) error {
	if a.Resource != priorityClassesResource || a.Subresource != "" {
		return nil
	}
	pc, ok := a.Object.(*schedulingv1.PriorityClass)
	if !ok {
		return apierrors.NewBadRequest("resource was marked with kind PriorityClass but was unable to be converted")
	}
	if !pc.GlobalDefault {
		return nil
	}
	classes, err := p.Classes()
	if err != nil {
		return apierrors.NewInternalError(fmt.Errorf("list priority classes: %w", err))
	}
	def := DefaultClass(classes)
	if def != nil && (a.Operation == apiserver.Create || def.Name != pc.Name) {
		return apierrors.NewForbidden(a.Resource, pc.Name, fmt.Errorf("PriorityClass %v is already marked as default. Only one default can exist", def.Name))
	}
	return nil
}
