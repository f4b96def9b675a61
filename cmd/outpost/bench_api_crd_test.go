package main

import (
	"testing"
	"time"

	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestSummarizeStages(t *testing.T) {
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	rs := []crdResult{
		{Stages: map[string]stageTime{stageDiscovery: {Reached: true, After: ms(30)}, stageOpenAPI: {Error: "not listed"}}},
		{Stages: map[string]stageTime{stageDiscovery: {Reached: true, After: ms(10)}}},
		{Stages: map[string]stageTime{stageDiscovery: {Reached: true, After: ms(20)}}},
	}
	got := summarizeStages(rs, []string{stageDiscovery, stageOpenAPI})
	want := []stageSummary{
		{Stage: stageDiscovery, Reached: 3, Min: ms(10), Median: ms(20), Max: ms(30)},
		{Stage: stageOpenAPI},
	}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Errorf("summarizeStages = %+v, want %+v", got, want)
	}
}

func TestListsResource(t *testing.T) {
	group, _, plural := benchCRDNames(7)
	list := &apidiscoveryv2.APIGroupDiscoveryList{Items: []apidiscoveryv2.APIGroupDiscovery{
		{ObjectMeta: metav1.ObjectMeta{Name: "apps"}, Versions: []apidiscoveryv2.APIVersionDiscovery{
			{Version: "v1", Resources: []apidiscoveryv2.APIResourceDiscovery{{Resource: plural}}}}},
		{ObjectMeta: metav1.ObjectMeta{Name: group}, Versions: []apidiscoveryv2.APIVersionDiscovery{
			{Version: "v1beta1", Resources: []apidiscoveryv2.APIResourceDiscovery{{Resource: plural}}}}},
	}}
	if listsResource(list, group, plural) {
		t.Error("listed in another group or version, but listsResource = true")
	}
	list.Items[1].Versions = append(list.Items[1].Versions, apidiscoveryv2.APIVersionDiscovery{
		Version: "v1", Resources: []apidiscoveryv2.APIResourceDiscovery{{Resource: plural}}})
	if !listsResource(list, group, plural) {
		t.Error("listed in its group's v1, but listsResource = false")
	}
}

// TestBenchCRDs checks that the CRDs are distinct in group and kind, and
// named as the API requires: plural.group.
func TestBenchCRDs(t *testing.T) {
	groups, kinds := map[string]bool{}, map[string]bool{}
	for i := range 20 {
		crd := benchCRD(i)
		if want := crd.Spec.Names.Plural + "." + crd.Spec.Group; crd.Name != want {
			t.Errorf("CRD %d named %q, want %q", i, crd.Name, want)
		}
		if groups[crd.Spec.Group] || kinds[crd.Spec.Names.Kind] {
			t.Errorf("CRD %d repeats a group or kind: %s %s", i, crd.Spec.Group, crd.Spec.Names.Kind)
		}
		groups[crd.Spec.Group], kinds[crd.Spec.Names.Kind] = true, true
	}
}

func TestCRDConfigValidate(t *testing.T) {
	ok := defaultCRDConfig()
	ok.Binary = "/bin/outpost"
	if err := ok.validate(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	for name, mutate := range map[string]func(*crdConfig){
		"no binary":       func(c *crdConfig) { c.Binary = "" },
		"no CRDs":         func(c *crdConfig) { c.CRDs = 0 },
		"too many CRDs":   func(c *crdConfig) { c.CRDs = maxCRDs + 1 },
		"negative objs":   func(c *crdConfig) { c.Objects = -1 },
		"no kubectl":      func(c *crdConfig) { c.Kubectl = "" },
		"no timeout":      func(c *crdConfig) { c.Timeout = 0 },
		"no openapi wait": func(c *crdConfig) { c.OpenAPITimeout = 0 },
		"no poll":         func(c *crdConfig) { c.Poll = 0 },
	} {
		c := ok
		mutate(&c)
		if err := c.validate(); err == nil {
			t.Errorf("%s: validate = nil", name)
		}
	}
}
