package flowcontrol_test

import (
	"context"
	"reflect"
	"slices"
	"testing"

	flowcontrolv1 "k8s.io/api/flowcontrol/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/outpost-mesh/outpost/hub/registry/flowcontrol"
	"github.com/outpost-mesh/outpost/hub/registry/typed/typedtest"
	"github.com/outpost-mesh/outpost/test/hubtest"
)

// TestFlowControlAPI: a started hub has upstream's bootstrap objects;
// others are created with their defaults, refused where upstream refuses
// them, and printed with upstream's columns.
func TestFlowControlAPI(t *testing.T) {
	h := hubtest.Start(t)
	ctx := context.Background()
	fc := h.Client.FlowcontrolV1()

	for _, obj := range flowcontrol.BootstrapObjects() {
		var err error
		switch o := obj.(type) {
		case *flowcontrolv1.FlowSchema:
			var got *flowcontrolv1.FlowSchema
			got, err = fc.FlowSchemas().Get(ctx, o.Name, metav1.GetOptions{})
			if err == nil && !reflect.DeepEqual(got.Spec, o.Spec) {
				t.Errorf("flowschema %s after start: spec %+v, want %+v", o.Name, got.Spec, o.Spec)
			}
		case *flowcontrolv1.PriorityLevelConfiguration:
			var got *flowcontrolv1.PriorityLevelConfiguration
			got, err = fc.PriorityLevelConfigurations().Get(ctx, o.Name, metav1.GetOptions{})
			if err == nil && !reflect.DeepEqual(got.Spec, o.Spec) {
				t.Errorf("prioritylevelconfiguration %s after start: spec %+v, want %+v", o.Name, got.Spec, o.Spec)
			}
		}
		if err != nil {
			t.Errorf("get %v after start: %v", obj.GetObjectKind().GroupVersionKind().Kind, err)
		}
	}

	pl, err := fc.PriorityLevelConfigurations().Create(ctx, &flowcontrolv1.PriorityLevelConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "edge"},
		Spec: flowcontrolv1.PriorityLevelConfigurationSpec{Type: flowcontrolv1.PriorityLevelEnablementLimited,
			Limited: &flowcontrolv1.LimitedPriorityLevelConfiguration{LimitResponse: flowcontrolv1.LimitResponse{
				Type: flowcontrolv1.LimitResponseTypeQueue, Queuing: &flowcontrolv1.QueuingConfiguration{}}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create prioritylevelconfiguration: %v", err)
	}
	if l := pl.Spec.Limited; *l.NominalConcurrencyShares != 30 || l.LimitResponse.Queuing.Queues != 64 || l.LimitResponse.Queuing.HandSize != 8 {
		t.Errorf("created prioritylevelconfiguration: %+v, want 30 shares, 64 queues, hands of 8", l)
	}
	fs, err := fc.FlowSchemas().Create(ctx, &flowcontrolv1.FlowSchema{
		ObjectMeta: metav1.ObjectMeta{Name: "edge-agents"},
		Spec: flowcontrolv1.FlowSchemaSpec{
			PriorityLevelConfiguration: flowcontrolv1.PriorityLevelConfigurationReference{Name: "edge"},
			Rules: []flowcontrolv1.PolicyRulesWithSubjects{{
				Subjects:         []flowcontrolv1.Subject{{Kind: flowcontrolv1.SubjectKindGroup, Group: &flowcontrolv1.GroupSubject{Name: "system:nodes"}}},
				NonResourceRules: []flowcontrolv1.NonResourcePolicyRule{{Verbs: []string{"get"}, NonResourceURLs: []string{"/version"}}},
			}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create flowschema: %v", err)
	}
	if fs.Spec.MatchingPrecedence != 1000 || fs.Generation != 1 {
		t.Errorf("created flowschema: precedence %d, generation %d; want 1000, 1", fs.Spec.MatchingPrecedence, fs.Generation)
	}
	fs.Spec.MatchingPrecedence = 1
	_, err = fc.FlowSchemas().Update(ctx, fs, metav1.UpdateOptions{})
	if got := typedtest.Causes(t, "give a flowschema precedence 1", err); !slices.Contains(got, "spec.matchingPrecedence") {
		t.Errorf("give a flowschema precedence 1: causes %v, want spec.matchingPrecedence", got)
	}
	catchAll, err := fc.FlowSchemas().Get(ctx, "catch-all", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	catchAll.Spec.MatchingPrecedence = 5000
	_, err = fc.FlowSchemas().Update(ctx, catchAll, metav1.UpdateOptions{})
	if got := typedtest.Causes(t, "change the catch-all flowschema", err); !slices.Contains(got, "spec") {
		t.Errorf("change the catch-all flowschema: causes %v, want spec", got)
	}

	for _, tc := range []struct {
		path string
		want []string
		rows int
	}{
		{"flowschemas", []string{"Name", "PriorityLevel", "MatchingPrecedence", "DistinguisherMethod", "Age", "MissingPL"}, 12},
		{"prioritylevelconfigurations", []string{"Name", "Type", "NominalConcurrencyShares", "Queues", "HandSize", "QueueLengthLimit", "Age"}, 9},
	} {
		tbl := typedtest.Table(t, fc.RESTClient(), "/apis/flowcontrol.apiserver.k8s.io/v1/"+tc.path)
		names := typedtest.ColumnNames(tbl)
		if !reflect.DeepEqual(names, tc.want) || len(tbl.Rows) != tc.rows {
			t.Errorf("%s as a Table: columns %q, %d rows; want %q, %d", tc.path, names, len(tbl.Rows), tc.want, tc.rows)
		}
	}
}
