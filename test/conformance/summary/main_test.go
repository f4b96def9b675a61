package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/onsi/ginkgo/v2/types"
)

func TestReason(t *testing.T) {
	for _, tc := range []struct {
		name, message, output, want string
	}{
		{"first line", "\n  timed out waiting\nmore", "", "timed out waiting"},
		{"empty", "", "", "(no failure message)"},
		{"pull event in output",
			"deployment not complete",
			`  event for sample-webhook: {} Failed: Failed to pull image "registry.k8s.io/e2e-test-images/agnhost:2.56": pull image ...`,
			"needs image registry.k8s.io/e2e-test-images/agnhost:2.56"},
		{"escaped quotes, two images, one twice",
			"",
			`Failed to pull image \"b:1\": x` + "\n" + `Failed to pull image "a:2": y` + "\n" + `Failed to pull image "b:1": z`,
			"needs image a:2, b:1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Reason(tc.message, tc.output); got != tc.want {
				t.Errorf("Reason = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestResultsAndMarkdown(t *testing.T) {
	spec := func(text string, state types.SpecState, msg string) types.SpecReport {
		return types.SpecReport{
			ContainerHierarchyTexts: []string{"[sig-api-machinery] X"},
			LeafNodeType:            types.NodeTypeIt, LeafNodeText: text,
			State: state, RunTime: time.Second, Failure: types.Failure{Message: msg},
		}
	}
	reports := []types.Report{{
		SuiteDescription: "s",
		SuiteConfig:      types.SuiteConfig{FocusStrings: []string{`\[Conformance\]|skipped`}},
		SpecReports: []types.SpecReport{
			spec("b passes [Conformance]", types.SpecStatePassed, ""),
			spec("a fails [Conformance]", types.SpecStateFailed, "boom\ndetail"),
			spec("c times out [Conformance]", types.SpecStateTimedout, "timed out | late"),
			spec("d skipped", types.SpecStateSkipped, ""),
			spec("e not focused", types.SpecStateSkipped, ""),
			{LeafNodeType: types.NodeTypeBeforeSuite, State: types.SpecStatePassed},
		},
	}}
	res := Results(reports)
	if len(res) != 4 || res[0].Name != "[sig-api-machinery] X a fails [Conformance]" || res[0].Reason != "boom" {
		t.Fatalf("Results = %+v", res)
	}
	if c := Count(res); c != (Counts{Passed: 1, Failed: 2, Skipped: 1}) {
		t.Errorf("Count = %+v", c)
	}
	var b bytes.Buffer
	WriteMarkdown(&b, reports, res)
	for _, want := range []string{"**1 passed, 2 failed, 1 skipped** of 4.", `timed out \| late (1)`, "| [sig-api-machinery] X b passes [Conformance] | passed | 1s |  |"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("summary lacks %q:\n%s", want, b.String())
		}
	}
}
