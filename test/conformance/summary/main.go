// Command summary reads the Ginkgo JSON report of a conformance run and
// writes a Markdown summary: the counts, the failures grouped by reason,
// and a table of every spec with its state and the first line of its
// failure. A spec that failed while one of its pods could not pull its
// image is put down to that image, since `make conformance` runs with no
// registry reachable. run.sh calls it; it ends with a line
// "N passed, N failed, N skipped" on stdout.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/onsi/ginkgo/v2/types"
)

// maxReport bounds the JSON report read: with every spec's captured
// output it is a few MB for the ~100 specs of sig-api-machinery.
const maxReport = 512 << 20

func main() {
	in := flag.String("in", "report.json", "Ginkgo JSON report (--ginkgo.json-report)")
	out := flag.String("out", "summary.md", "Markdown summary to write")
	flag.Parse()
	reports, err := readReports(*in)
	if err != nil {
		fmt.Fprintln(os.Stderr, "summary:", err)
		os.Exit(1)
	}
	results := Results(reports)
	f, err := os.Create(*out)
	if err != nil {
		fmt.Fprintln(os.Stderr, "summary:", err)
		os.Exit(1)
	}
	WriteMarkdown(f, reports, results)
	if err := f.Close(); err != nil {
		fmt.Fprintln(os.Stderr, "summary:", err)
		os.Exit(1)
	}
	c := Count(results)
	fmt.Printf("%d passed, %d failed, %d skipped\n", c.Passed, c.Failed, c.Skipped)
}

// readReports parses a Ginkgo JSON report: one types.Report per suite
// (one here).
func readReports(path string) ([]types.Report, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxReport+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if len(b) > maxReport {
		return nil, fmt.Errorf("%s: larger than %d bytes", path, maxReport)
	}
	var reports []types.Report
	if err := json.Unmarshal(b, &reports); err != nil {
		return nil, fmt.Errorf("parse %s: %w", path, err)
	}
	return reports, nil
}

// Result is one spec's outcome as the summary shows it.
type Result struct {
	Name    string
	State   string // passed, failed or skipped
	RunTime time.Duration
	// Reason is why it failed: "needs image X" when a pod of it could
	// not pull X, else the first line of the failure message.
	Reason string
}

// Results turns the suites' spec reports into Results, in the order of
// their names. Setup and report nodes (BeforeSuite and the like) count
// only when they failed.
func Results(reports []types.Report) []Result {
	var out []Result
	for _, r := range reports {
		focus := compileAll(r.SuiteConfig.FocusStrings)
		skip := compileAll(r.SuiteConfig.SkipStrings)
		for _, s := range r.SpecReports {
			if s.LeafNodeType != types.NodeTypeIt && !s.Failed() {
				continue
			}
			if s.State == types.SpecStateSkipped && !selected(s.FullText(), focus, skip) {
				continue // filtered out by the focus, not skipped in the run
			}
			res := Result{Name: specName(s), State: stateName(s.State), RunTime: s.RunTime}
			if s.Failed() {
				res.Reason = Reason(s.Failure.Message, s.CombinedOutput())
			}
			out = append(out, res)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// compileAll compiles Ginkgo's focus or skip expressions; one that does
// not compile is left out.
func compileAll(exprs []string) []*regexp.Regexp {
	var out []*regexp.Regexp
	for _, e := range exprs {
		if re, err := regexp.Compile(e); err == nil {
			out = append(out, re)
		}
	}
	return out
}

// selected says whether a spec's text matches the focus (any, or none
// given) and no skip expression, as Ginkgo selects specs.
func selected(text string, focus, skip []*regexp.Regexp) bool {
	for _, re := range skip {
		if re.MatchString(text) {
			return false
		}
	}
	if len(focus) == 0 {
		return true
	}
	for _, re := range focus {
		if re.MatchString(text) {
			return true
		}
	}
	return false
}

// specName is the spec's full text, or its node type for a setup node.
func specName(s types.SpecReport) string {
	if n := s.FullText(); n != "" {
		return n
	}
	return s.LeafNodeType.String()
}

// stateName folds Ginkgo's states into passed, failed and skipped.
func stateName(s types.SpecState) string {
	switch {
	case s == types.SpecStatePassed:
		return "passed"
	case s.Is(types.SpecStateFailureStates):
		return "failed"
	default:
		return "skipped"
	}
}

// pullFailure matches the Event a node records for an image it could not
// pull (outpost-edge's and kubelet's wording), as the framework dumps a
// failed spec's namespace events into its output.
var pullFailure = regexp.MustCompile(`Failed to pull image \\?"([^"\\]+)\\?"`)

// Reason says why a spec failed: the images its pods could not pull, if
// any, since no registry is reachable during the run; else the first
// non-empty line of the failure message.
func Reason(message, output string) string {
	var images []string
	for _, m := range pullFailure.FindAllStringSubmatch(output+"\n"+message, -1) {
		if !slices.Contains(images, m[1]) {
			images = append(images, m[1])
		}
	}
	if len(images) > 0 {
		slices.Sort(images)
		return "needs image " + strings.Join(images, ", ")
	}
	for _, line := range strings.Split(message, "\n") {
		if line = strings.TrimSpace(line); line != "" {
			return line
		}
	}
	return "(no failure message)"
}

// Counts are the numbers of specs in each state.
type Counts struct{ Passed, Failed, Skipped int }

// Count counts results by state.
func Count(results []Result) Counts {
	var c Counts
	for _, r := range results {
		switch r.State {
		case "passed":
			c.Passed++
		case "failed":
			c.Failed++
		default:
			c.Skipped++
		}
	}
	return c
}

// Group maps each failure reason to the failed specs that gave it.
func Group(results []Result) map[string][]string {
	g := map[string][]string{}
	for _, r := range results {
		if r.State == "failed" {
			g[r.Reason] = append(g[r.Reason], r.Name)
		}
	}
	return g
}

// WriteMarkdown writes the summary: counts, failures grouped by reason
// (largest group first) and a table of every spec.
func WriteMarkdown(w io.Writer, reports []types.Report, results []Result) {
	c := Count(results)
	fmt.Fprintf(w, "# Conformance: sig-api-machinery [Conformance] against outpost up\n\n")
	for _, r := range reports {
		fmt.Fprintf(w, "Suite %q, focus `%s`, %s, run time %s.\n\n", r.SuiteDescription,
			strings.Join(r.SuiteConfig.FocusStrings, " "), r.StartTime.UTC().Format(time.RFC3339), r.RunTime.Round(time.Second))
	}
	fmt.Fprintf(w, "**%d passed, %d failed, %d skipped** of %d.\n\n", c.Passed, c.Failed, c.Skipped, len(results))
	groups := Group(results)
	reasons := make([]string, 0, len(groups))
	for r := range groups {
		reasons = append(reasons, r)
	}
	sort.Slice(reasons, func(i, j int) bool {
		if len(groups[reasons[i]]) != len(groups[reasons[j]]) {
			return len(groups[reasons[i]]) > len(groups[reasons[j]])
		}
		return reasons[i] < reasons[j]
	})
	if len(reasons) > 0 {
		fmt.Fprintf(w, "## Failures by reason\n\n")
		for _, r := range reasons {
			fmt.Fprintf(w, "- %s (%d)\n", cell(r), len(groups[r]))
			for _, n := range groups[r] {
				fmt.Fprintf(w, "  - %s\n", cell(n))
			}
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintf(w, "## Specs\n\n| spec | state | time | reason |\n|---|---|---|---|\n")
	for _, r := range results {
		fmt.Fprintf(w, "| %s | %s | %s | %s |\n", cell(r.Name), r.State, r.RunTime.Round(100*time.Millisecond), cell(r.Reason))
	}
}

// cell makes s safe in a Markdown table cell and a list item: one line,
// pipes escaped, at most 300 characters.
func cell(s string) string {
	s = strings.ReplaceAll(strings.ReplaceAll(s, "\n", " "), "|", `\|`)
	if len(s) > 300 {
		s = s[:300] + "…"
	}
	return s
}
