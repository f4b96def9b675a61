package admission

import (
	"context"
	"errors"
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/outpost-mesh/outpost/hub/apiserver"
)

func class(name string, value int32, def bool, policy *corev1.PreemptionPolicy) *schedulingv1.PriorityClass {
	return &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Value: value, GlobalDefault: def, PreemptionPolicy: policy}
}

var (
	lower = new(corev1.PreemptLowerPriority)
	never = new(corev1.PreemptNever)
)

// priorityPod is a pod to admit, named web unless generated, changed by
// edit.
func priorityPod(edit func(*corev1.Pod)) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default"}}
	if edit != nil {
		edit(p)
	}
	return p
}

func TestPriorityHandles(t *testing.T) {
	for gr, want := range map[schema.GroupResource]bool{
		{Resource: "pods"}: true,
		{Group: "scheduling.k8s.io", Resource: "priorityclasses"}: true,
		{Resource: "nodes"}:                      false,
		{Group: "x.io", Resource: "pods"}:        false,
		{Resource: "priorityclasses"}:            false,
		{Group: "apps", Resource: "deployments"}: false,
	} {
		if got := (&Priority{}).Handles(gr); got != want {
			t.Errorf("Handles(%v) = %v, want %v", gr, got, want)
		}
	}
}

func TestPriorityMutateCreate(t *testing.T) {
	withDefault := []*schedulingv1.PriorityClass{class("high", 1000, false, never), class("low", -5, true, lower), class("lower", -10, true, nil), class("system-node-critical", 2000001000, false, lower)}
	noDefault := []*schedulingv1.PriorityClass{class("high", 1000, false, never)}
	for _, tc := range []struct {
		name    string
		classes []*schedulingv1.PriorityClass
		pod     *corev1.Pod
		// want is the pod admitted, or nil when refused with wantErr.
		want    *corev1.Pod
		wantErr string
	}{
		{"named class", withDefault, priorityPod(func(p *corev1.Pod) { p.Spec.PriorityClassName = "high" }),
			priorityPod(func(p *corev1.Pod) {
				p.Spec.PriorityClassName, p.Spec.Priority, p.Spec.PreemptionPolicy = "high", new(int32(1000)), never
			}), ""},
		{"default class, lowest of two", withDefault, priorityPod(nil),
			priorityPod(func(p *corev1.Pod) { p.Spec.PriorityClassName, p.Spec.Priority = "lower", new(int32(-10)) }), ""},
		{"no default class", noDefault, priorityPod(nil),
			priorityPod(func(p *corev1.Pod) { p.Spec.Priority, p.Spec.PreemptionPolicy = new(int32(0)), lower }), ""},
		{"system class in any namespace", withDefault, priorityPod(func(p *corev1.Pod) { p.Spec.PriorityClassName = "system-node-critical" }),
			priorityPod(func(p *corev1.Pod) {
				p.Spec.PriorityClassName, p.Spec.Priority, p.Spec.PreemptionPolicy = "system-node-critical", new(int32(2000001000)), lower
			}), ""},
		{"matching priority given", withDefault, priorityPod(func(p *corev1.Pod) { p.Spec.PriorityClassName, p.Spec.Priority = "high", new(int32(1000)) }),
			priorityPod(func(p *corev1.Pod) {
				p.Spec.PriorityClassName, p.Spec.Priority, p.Spec.PreemptionPolicy = "high", new(int32(1000)), never
			}), ""},
		{"missing class", withDefault, priorityPod(func(p *corev1.Pod) { p.Spec.PriorityClassName = "gold" }), nil,
			`pods "web" is forbidden: no PriorityClass with name gold was found`},
		{"missing class, generated name", withDefault, priorityPod(func(p *corev1.Pod) { p.Name, p.GenerateName, p.Spec.PriorityClassName = "", "web-", "gold" }), nil,
			`pods "web-" is forbidden: no PriorityClass with name gold was found`},
		{"other priority", withDefault, priorityPod(func(p *corev1.Pod) { p.Spec.PriorityClassName, p.Spec.Priority = "high", new(int32(7)) }), nil,
			`pods "web" is forbidden: the integer value of priority (7) must not be provided in pod spec; priority admission controller computed 1000 from the given PriorityClass name`},
		{"priority without a default class", noDefault, priorityPod(func(p *corev1.Pod) { p.Spec.Priority = new(int32(3)) }), nil,
			`pods "web" is forbidden: the integer value of priority (3) must not be provided in pod spec; priority admission controller computed 0 from the given PriorityClass name`},
		{"other preemption policy", withDefault, priorityPod(func(p *corev1.Pod) { p.Spec.PriorityClassName, p.Spec.PreemptionPolicy = "high", lower }), nil,
			`pods "web" is forbidden: the string value of PreemptionPolicy (PreemptLowerPriority) must not be provided in pod spec; priority admission controller computed Never from the given PriorityClass name`},
	} {
		pr := &Priority{Classes: func() ([]*schedulingv1.PriorityClass, error) { return tc.classes, nil }}
		a := &apiserver.AdmissionAttributes{Operation: apiserver.Create, Resource: podsResource, Namespace: "default", Name: tc.pod.Name, Object: tc.pod}
		orig := tc.pod.DeepCopy()
		err := pr.Mutate(context.Background(), a)
		switch {
		case tc.want != nil && err != nil:
			t.Errorf("%s: Mutate = %v, want admitted", tc.name, err)
		case tc.want != nil && !reflect.DeepEqual(a.Object, tc.want):
			t.Errorf("%s: admitted pod spec %+v, want %+v", tc.name, a.Object.(*corev1.Pod).Spec, tc.want.Spec)
		case tc.want == nil && (!apierrors.IsForbidden(err) || err.Error() != tc.wantErr):
			t.Errorf("%s: Mutate = %v, want 403 %q", tc.name, err, tc.wantErr)
		case tc.want == nil && !reflect.DeepEqual(tc.pod, orig):
			t.Errorf("%s: refused pod was changed: %+v", tc.name, tc.pod.Spec)
		}
	}
}

func TestPriorityMutateOther(t *testing.T) {
	boom := &Priority{Classes: func() ([]*schedulingv1.PriorityClass, error) { return nil, errors.New("cache not synced") }}
	old := priorityPod(func(p *corev1.Pod) { p.Spec.Priority, p.Spec.PreemptionPolicy = new(int32(1000)), never })

	// An update that leaves the fields out gets old's.
	upd := &apiserver.AdmissionAttributes{Operation: apiserver.Update, Resource: podsResource, Name: "web", Object: priorityPod(nil), OldObject: old}
	if err := boom.Mutate(context.Background(), upd); err != nil {
		t.Fatalf("Mutate(update) = %v", err)
	}
	if got := upd.Object.(*corev1.Pod).Spec; !reflect.DeepEqual(got.Priority, old.Spec.Priority) || !reflect.DeepEqual(got.PreemptionPolicy, never) {
		t.Errorf("updated pod priority %v policy %v, want 1000 and Never", got.Priority, got.PreemptionPolicy)
	}
	// An update that changes them is left to validation, which refuses it.
	changed := priorityPod(func(p *corev1.Pod) { p.Spec.Priority = new(int32(1)) })
	upd = &apiserver.AdmissionAttributes{Operation: apiserver.Update, Resource: podsResource, Object: changed, OldObject: old}
	if err := boom.Mutate(context.Background(), upd); err != nil || *changed.Spec.Priority != 1 {
		t.Errorf("Mutate(update changing priority) = %v, priority %v; want nil and 1 unchanged", err, *changed.Spec.Priority)
	}
	// Subresources and other resources pass; a lister error is a 500.
	for _, a := range []*apiserver.AdmissionAttributes{
		{Operation: apiserver.Create, Resource: podsResource, Subresource: "binding", Object: priorityPod(nil)},
		{Operation: apiserver.Create, Resource: schema.GroupResource{Resource: "nodes"}, Object: &corev1.Node{}},
	} {
		if err := boom.Mutate(context.Background(), a); err != nil {
			t.Errorf("Mutate(%s %v/%s) = %v, want nil", a.Operation, a.Resource, a.Subresource, err)
		}
	}
	err := boom.Mutate(context.Background(), &apiserver.AdmissionAttributes{Operation: apiserver.Create, Resource: podsResource, Object: priorityPod(nil)})
	if !apierrors.IsInternalError(err) {
		t.Errorf("Mutate with a failing lister = %v, want 500", err)
	}
	err = boom.Mutate(context.Background(), &apiserver.AdmissionAttributes{Operation: apiserver.Create, Resource: podsResource, Object: &corev1.Node{}})
	if !apierrors.IsBadRequest(err) {
		t.Errorf("Mutate of a Node as a pod = %v, want 400", err)
	}
}

func TestPriorityAdmitClasses(t *testing.T) {
	classes := []*schedulingv1.PriorityClass{class("low", 1, true, nil), class("high", 1000, false, nil)}
	pr := &Priority{Classes: func() ([]*schedulingv1.PriorityClass, error) { return classes, nil }}
	for _, tc := range []struct {
		name string
		op   apiserver.Operation
		pc   *schedulingv1.PriorityClass
		want string // the Forbidden's message, "" for admitted
	}{
		{"second default", apiserver.Create, class("mid", 10, true, nil), `priorityclasses.scheduling.k8s.io "mid" is forbidden: PriorityClass low is already marked as default. Only one default can exist`},
		{"made default", apiserver.Update, class("high", 1000, true, nil), `priorityclasses.scheduling.k8s.io "high" is forbidden: PriorityClass low is already marked as default. Only one default can exist`},
		{"the default updated", apiserver.Update, class("low", 1, true, nil), ""},
		{"not a default", apiserver.Create, class("mid", 10, false, nil), ""},
	} {
		err := pr.Admit(context.Background(), apiserver.AdmissionAttributes{Operation: tc.op, Resource: priorityClassesResource, Name: tc.pc.Name, Object: tc.pc})
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: Admit = %v, want admitted", tc.name, err)
		case tc.want != "" && (!apierrors.IsForbidden(err) || err.Error() != tc.want):
			t.Errorf("%s: Admit = %v, want 403 %q", tc.name, err, tc.want)
		}
	}
}
