package flowcontrol

import (
	"fmt"
	"reflect"
	"slices"
	"testing"
	"time"

	flowcontrolv1 "k8s.io/api/flowcontrol/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/outpost-mesh/outpost/hub/registry/typed"
	"github.com/outpost-mesh/outpost/hub/registry/typed/typedtest"
)

var (
	created = time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	now     = created.Add(26 * time.Hour)
	rs      = ResourcesWithClock(func() time.Time { return now })
	fsRules = rs[0].Rules.(typed.All)
	plRules = rs[1].Rules.(typed.All)
)

func errStrings(errs field.ErrorList) []string {
	out := make([]string, 0, len(errs))
	for _, e := range errs {
		out = append(out, fmt.Sprintf("%s: %s", e.Field, e.Type))
	}
	slices.Sort(out)
	return out
}

func sameErrs(got, want []string) bool {
	slices.Sort(want)
	return reflect.DeepEqual(got, want) || len(got) == 0 && len(want) == 0
}

func schemaFor(mutate func(*flowcontrolv1.FlowSchema)) *flowcontrolv1.FlowSchema {
	fs := &flowcontrolv1.FlowSchema{
		ObjectMeta: metav1.ObjectMeta{Name: "edge-agents", CreationTimestamp: metav1.NewTime(created)},
		Spec: flowcontrolv1.FlowSchemaSpec{
			PriorityLevelConfiguration: flowcontrolv1.PriorityLevelConfigurationReference{Name: "system"},
			DistinguisherMethod:        &flowcontrolv1.FlowDistinguisherMethod{Type: flowcontrolv1.FlowDistinguisherMethodByUserType},
			Rules: []flowcontrolv1.PolicyRulesWithSubjects{{
				Subjects: groups("system:nodes"),
				ResourceRules: []flowcontrolv1.ResourcePolicyRule{{Verbs: []string{"get", "watch"}, APIGroups: []string{""},
					Resources: []string{"pods"}, Namespaces: []string{"*"}}},
				NonResourceRules: []flowcontrolv1.NonResourcePolicyRule{{Verbs: []string{"get"}, NonResourceURLs: []string{"/version", "/metrics/*"}}},
			}},
		},
	}
	if mutate != nil {
		mutate(fs)
	}
	return fs
}

func levelFor(mutate func(*flowcontrolv1.PriorityLevelConfiguration)) *flowcontrolv1.PriorityLevelConfiguration {
	pl := &flowcontrolv1.PriorityLevelConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "edge", CreationTimestamp: metav1.NewTime(created)},
		Spec: flowcontrolv1.PriorityLevelConfigurationSpec{
			Type: flowcontrolv1.PriorityLevelEnablementLimited,
			Limited: &flowcontrolv1.LimitedPriorityLevelConfiguration{
				LimitResponse: flowcontrolv1.LimitResponse{Type: flowcontrolv1.LimitResponseTypeQueue, Queuing: &flowcontrolv1.QueuingConfiguration{}},
			},
		},
	}
	if mutate != nil {
		mutate(pl)
	}
	return pl
}

func TestDefaults(t *testing.T) {
	fs := schemaFor(nil)
	fsRules.Default(fs)
	if fs.Spec.MatchingPrecedence != 1000 {
		t.Errorf("Default(schema).matchingPrecedence = %d, want 1000", fs.Spec.MatchingPrecedence)
	}
	pl := levelFor(nil)
	plRules.Default(pl)
	want := &flowcontrolv1.LimitedPriorityLevelConfiguration{
		NominalConcurrencyShares: new(int32(30)), LendablePercent: new(int32(0)),
		LimitResponse: flowcontrolv1.LimitResponse{Type: flowcontrolv1.LimitResponseTypeQueue,
			Queuing: &flowcontrolv1.QueuingConfiguration{Queues: 64, HandSize: 8, QueueLengthLimit: 50}},
	}
	if !reflect.DeepEqual(pl.Spec.Limited, want) {
		t.Errorf("Default(limited level) = %+v, want %+v", pl.Spec.Limited, want)
	}
	exempt := &flowcontrolv1.PriorityLevelConfiguration{Spec: flowcontrolv1.PriorityLevelConfigurationSpec{Type: flowcontrolv1.PriorityLevelEnablementExempt}}
	plRules.Default(exempt)
	if e := exempt.Spec.Exempt; e == nil || *e.NominalConcurrencyShares != 0 || *e.LendablePercent != 0 {
		t.Errorf("Default(exempt level).exempt = %+v, want zeros", e)
	}
}

// TestBootstrapObjects: upstream's objects, valid, unchanged by the
// defaults, each level named by a schema existing, and new on each call.
func TestBootstrapObjects(t *testing.T) {
	var levels, schemas []string
	for _, obj := range BootstrapObjects() {
		before := obj.DeepCopyObject()
		switch o := obj.(type) {
		case *flowcontrolv1.PriorityLevelConfiguration:
			levels = append(levels, o.Name)
			plRules.Default(o)
			if errs := plRules.Validate(o); len(errs) > 0 {
				t.Errorf("level %s: Validate = %v", o.Name, errs)
			}
		case *flowcontrolv1.FlowSchema:
			schemas = append(schemas, o.Name)
			fsRules.Default(o)
			if errs := fsRules.Validate(o); len(errs) > 0 {
				t.Errorf("schema %s: Validate = %v", o.Name, errs)
			}
		}
		if !reflect.DeepEqual(obj, before) {
			t.Errorf("defaults changed bootstrap object %v", obj)
		}
		if m := obj.(metav1.Object); m.GetAnnotations()[flowcontrolv1.AutoUpdateAnnotationKey] != "true" || obj.GetObjectKind().GroupVersionKind().Group != "flowcontrol.apiserver.k8s.io" {
			t.Errorf("bootstrap object %s: annotations %v, kind %v", m.GetName(), m.GetAnnotations(), obj.GetObjectKind().GroupVersionKind())
		}
	}
	wantLevels := []string{"exempt", "catch-all", "system", "node-high", "leader-election", "workload-high", "workload-low", "global-default"}
	wantSchemas := []string{"exempt", "catch-all", "probes", "system-leader-election", "system-node-high", "system-nodes",
		"kube-controller-manager", "kube-scheduler", "kube-system-service-accounts", "service-accounts", "global-default"}
	if !reflect.DeepEqual(levels, wantLevels) || !reflect.DeepEqual(schemas, wantSchemas) {
		t.Errorf("BootstrapObjects() = levels %q, schemas %q; want %q, %q", levels, schemas, wantLevels, wantSchemas)
	}
	for _, fs := range bootstrapSchemas() {
		if !slices.Contains(levels, fs.Spec.PriorityLevelConfiguration.Name) {
			t.Errorf("schema %s names missing level %s", fs.Name, fs.Spec.PriorityLevelConfiguration.Name)
		}
	}
	BootstrapObjects()[0].(*flowcontrolv1.PriorityLevelConfiguration).Name = "changed"
	if BootstrapObjects()[0].(metav1.Object).GetName() != "exempt" {
		t.Errorf("BootstrapObjects() returned a shared object")
	}
}

func TestValidateFlowSchema(t *testing.T) {
	for _, tc := range []struct {
		name string
		obj  *flowcontrolv1.FlowSchema
		want []string
	}{
		{"valid", schemaFor(nil), nil},
		{"service account subject", schemaFor(func(fs *flowcontrolv1.FlowSchema) {
			fs.Spec.Rules[0].Subjects = []flowcontrolv1.Subject{{Kind: flowcontrolv1.SubjectKindServiceAccount,
				ServiceAccount: &flowcontrolv1.ServiceAccountSubject{Name: "*", Namespace: "kube-system"}}}
		}), nil},
		{"precedence 1", schemaFor(func(fs *flowcontrolv1.FlowSchema) { fs.Spec.MatchingPrecedence = 1 }), []string{"spec.matchingPrecedence: Invalid value"}},
		{"precedence too high", schemaFor(func(fs *flowcontrolv1.FlowSchema) { fs.Spec.MatchingPrecedence = 10001 }),
			[]string{"spec.matchingPrecedence: Invalid value"}},
		{"no level", schemaFor(func(fs *flowcontrolv1.FlowSchema) { fs.Spec.PriorityLevelConfiguration.Name = "" }),
			[]string{"spec.priorityLevelConfiguration.name: Required value"}},
		{"distinguisher", schemaFor(func(fs *flowcontrolv1.FlowSchema) { fs.Spec.DistinguisherMethod.Type = "ByIP" }),
			[]string{"spec.distinguisherMethod.type: Unsupported value"}},
		{"user subject with group", schemaFor(func(fs *flowcontrolv1.FlowSchema) {
			fs.Spec.Rules[0].Subjects = []flowcontrolv1.Subject{{Kind: flowcontrolv1.SubjectKindUser, User: &flowcontrolv1.UserSubject{Name: "a"},
				Group: &flowcontrolv1.GroupSubject{Name: "b"}}}
		}), []string{"spec.rules[0].subjects[0].group: Forbidden"}},
		{"verbs", schemaFor(func(fs *flowcontrolv1.FlowSchema) { fs.Spec.Rules[0].ResourceRules[0].Verbs = []string{"*", "get"} }),
			[]string{"spec.rules[0].resourceRules[0].verbs: Invalid value"}},
		{"unknown verb", schemaFor(func(fs *flowcontrolv1.FlowSchema) { fs.Spec.Rules[0].ResourceRules[0].Verbs = []string{"escalate"} }),
			[]string{"spec.rules[0].resourceRules[0].verbs: Unsupported value"}},
		{"no namespaces", schemaFor(func(fs *flowcontrolv1.FlowSchema) { fs.Spec.Rules[0].ResourceRules[0].Namespaces = nil }),
			[]string{"spec.rules[0].resourceRules[0].namespaces: Required value"}},
		{"bad url", schemaFor(func(fs *flowcontrolv1.FlowSchema) {
			fs.Spec.Rules[0].NonResourceRules[0].NonResourceURLs = []string{"/metrics*", "healthz"}
		}), []string{"spec.rules[0].nonResourceRules[0].nonResourceURLs[0]: Invalid value", "spec.rules[0].nonResourceRules[0].nonResourceURLs[1]: Invalid value"}},
		{"no rules kinds", schemaFor(func(fs *flowcontrolv1.FlowSchema) {
			fs.Spec.Rules[0].ResourceRules, fs.Spec.Rules[0].NonResourceRules = nil, nil
		}), []string{"spec.rules[0]: Required value"}},
		{"changed catch-all", schemaFor(func(fs *flowcontrolv1.FlowSchema) { fs.Name = "catch-all" }), []string{"spec: Invalid value"}},
	} {
		fsRules.Default(tc.obj)
		fsRules.PrepareForCreate(tc.obj)
		if got := errStrings(fsRules.Validate(tc.obj)); !sameErrs(got, tc.want) {
			t.Errorf("Validate(schema %s) = %q, want %q", tc.name, got, tc.want)
		}
	}
}

func TestValidatePriorityLevel(t *testing.T) {
	exempt := func() *flowcontrolv1.PriorityLevelConfiguration { return bootstrapLevels()[0] }
	for _, tc := range []struct {
		name string
		obj  *flowcontrolv1.PriorityLevelConfiguration
		want []string
	}{
		{"valid", levelFor(nil), nil},
		{"reject", levelFor(func(pl *flowcontrolv1.PriorityLevelConfiguration) {
			pl.Spec.Limited.LimitResponse = flowcontrolv1.LimitResponse{Type: flowcontrolv1.LimitResponseTypeReject}
			pl.Spec.Limited.NominalConcurrencyShares = new(int32(0))
		}), nil},
		{"exempt with shares", func() *flowcontrolv1.PriorityLevelConfiguration {
			pl := exempt()
			pl.Spec.Exempt.NominalConcurrencyShares = new(int32(10))
			return pl
		}(), nil},
		{"exempt type, other name", levelFor(func(pl *flowcontrolv1.PriorityLevelConfiguration) {
			pl.Spec = flowcontrolv1.PriorityLevelConfigurationSpec{Type: flowcontrolv1.PriorityLevelEnablementExempt}
		}), []string{"spec.type: Invalid value"}},
		{"no limited", levelFor(func(pl *flowcontrolv1.PriorityLevelConfiguration) { pl.Spec.Limited = nil }),
			[]string{"spec.limited: Required value"}},
		{"hand over deck", levelFor(func(pl *flowcontrolv1.PriorityLevelConfiguration) {
			pl.Spec.Limited.LimitResponse.Queuing = &flowcontrolv1.QueuingConfiguration{Queues: 4, HandSize: 8}
		}), []string{"spec.limited.limitResponse.queuing.handSize: Invalid value"}},
		{"too much entropy", levelFor(func(pl *flowcontrolv1.PriorityLevelConfiguration) {
			pl.Spec.Limited.LimitResponse.Queuing = &flowcontrolv1.QueuingConfiguration{Queues: 1 << 20, HandSize: 4 << 10}
		}), []string{"spec.limited.limitResponse.queuing.handSize: Invalid value"}},
		{"percentages", levelFor(func(pl *flowcontrolv1.PriorityLevelConfiguration) {
			pl.Spec.Limited.LendablePercent = new(int32(101))
			pl.Spec.Limited.BorrowingLimitPercent = new(int32(-1))
		}), []string{"spec.limited.lendablePercent: Invalid value", "spec.limited.borrowingLimitPercent: Invalid value"}},
		{"queuing on reject", levelFor(func(pl *flowcontrolv1.PriorityLevelConfiguration) {
			pl.Spec.Limited.LimitResponse.Type = flowcontrolv1.LimitResponseTypeReject
		}), []string{"spec.limited.limitResponse.queuing: Forbidden"}},
		{"changed catch-all", levelFor(func(pl *flowcontrolv1.PriorityLevelConfiguration) { pl.Name = "catch-all" }),
			[]string{"spec: Invalid value"}},
	} {
		plRules.Default(tc.obj)
		plRules.PrepareForCreate(tc.obj)
		if got := errStrings(plRules.Validate(tc.obj)); !sameErrs(got, tc.want) {
			t.Errorf("Validate(level %s) = %q, want %q", tc.name, got, tc.want)
		}
	}
}

func TestRows(t *testing.T) {
	fs := schemaFor(nil)
	fsRules.Default(fs)
	pl := levelFor(nil)
	plRules.Default(pl)
	exempt := bootstrapLevels()[0]
	exempt.CreationTimestamp = metav1.NewTime(created)
	for _, tc := range []struct {
		rules typed.All
		obj   runtime.Object
		want  []interface{}
	}{
		{fsRules, fs, []interface{}{"edge-agents", "system", int64(1000), "ByUser", "26h", "?"}},
		{plRules, pl, []interface{}{"edge", "Limited", int64(30), int64(64), int64(8), int64(50), "26h"}},
		{plRules, exempt, []interface{}{"exempt", "Exempt", "<none>", "<none>", "<none>", "<none>", "26h"}},
	} {
		if got := tc.rules.Row(tc.obj); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("Row = %#v, want %#v", got, tc.want)
		}
	}
}

// TestWrongType: the rules, given an object of another type, neither
// panic nor accept it.
func TestWrongType(t *testing.T) { typedtest.WrongType(t, Resources()) }
