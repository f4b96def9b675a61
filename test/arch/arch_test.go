package arch

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"go/parser"
	"go/token"
	"io"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
)

const module = "github.com/outpost-mesh/outpost"

// pkg is the part of `go list -json` these tests read.
type pkg struct {
	Dir          string
	ImportPath   string
	Doc          string
	Name         string
	GoFiles      []string
	CgoFiles     []string
	TestGoFiles  []string
	XTestGoFiles []string
	Imports      []string
	TestImports  []string
	XTestImports []string
	Error        *struct{ Err string }
}

// goList runs `go list args...` in the module root and returns its stdout.
func goList(t *testing.T, args ...string) []byte {
	t.Helper()
	cmd := exec.Command("go", append([]string{"list"}, args...)...)
	cmd.Dir = moduleRoot(t)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list %s: %v\n%s", strings.Join(args, " "), err, stderr.Bytes())
	}
	return out
}

var (
	rootOnce sync.Once
	root     string
	rootErr  error
)

// moduleRoot returns the directory of the module's go.mod, wherever the
// test runs from.
func moduleRoot(t *testing.T) string {
	t.Helper()
	rootOnce.Do(func() {
		out, err := exec.Command("go", "env", "GOMOD").Output()
		if err != nil {
			rootErr = fmt.Errorf("go env GOMOD: %w", err)
			return
		}
		gomod := strings.TrimSpace(string(out))
		if gomod == "" || gomod == "/dev/null" {
			rootErr = errors.New("not inside the module")
			return
		}
		root = filepath.Dir(gomod)
	})
	if rootErr != nil {
		t.Fatal(rootErr)
	}
	return root
}

var (
	pkgsOnce sync.Once
	pkgs     []pkg
	pkgsErr  error
)

// modulePackages returns every package of the module (go list -e ./...).
func modulePackages(t *testing.T) []pkg {
	t.Helper()
	out := goList(t, "-e", "-json=Dir,ImportPath,Doc,Name,GoFiles,CgoFiles,TestGoFiles,XTestGoFiles,Imports,TestImports,XTestImports,Error", "./...")
	pkgsOnce.Do(func() {
		dec := json.NewDecoder(bytes.NewReader(out))
		for {
			var p pkg
			if err := dec.Decode(&p); err == io.EOF {
				break
			} else if err != nil {
				pkgsErr = fmt.Errorf("decode go list output: %w", err)
				return
			}
			pkgs = append(pkgs, p)
		}
		if len(pkgs) == 0 {
			pkgsErr = errors.New("go list ./... found no packages")
		}
	})
	if pkgsErr != nil {
		t.Fatal(pkgsErr)
	}
	return pkgs
}

// rel returns path relative to the module ("hub/store"), or "" for a
// package outside it.
func rel(path string) (string, bool) {
	if path == module {
		return "", true
	}
	r, ok := strings.CutPrefix(path, module+"/")
	return r, ok
}

// under reports whether the module-relative path r is dir or below it.
func under(r, dir string) bool {
	return r == dir || strings.HasPrefix(r, dir+"/")
}

func TestEdgeBinaryLinksNoHub(t *testing.T) {
	out := goList(t, "-deps", "-f", "{{.ImportPath}}", "./cmd/outpost-edge")
	var bad []string
	for _, path := range strings.Fields(string(out)) {
		if r, ok := rel(path); ok && under(r, "hub") {
			bad = append(bad, path)
		}
	}
	if len(bad) > 0 {
		t.Errorf("cmd/outpost-edge links hub packages, which must stay out of the edge binary: %v\n(find the path with: go list -deps -f '{{.ImportPath}}: {{.Imports}}' ./cmd/outpost-edge)", bad)
	}
}

// edgeTags are the build tags the edge binary is built with: the
// Makefile's GOTAGS.
const edgeTags = "grpcnotrace"

// methodKeepers are packages that must stay out of the edge binary because
// they look up methods by a name known only at run time (text/template's
// evalField calls reflect's MethodByName): once such a call is reachable,
// the linker keeps every exported method of every reachable type, about
// 9 MB of the binary and 5 MB of its resident memory on each gateway.
// gRPC brings in golang.org/x/net/trace, and its html/template, unless
// built with grpcnotrace; cobra's help templates are why outpost-edge
// parses its flags with pflag alone.
var methodKeepers = []string{"html/template", "golang.org/x/net/trace", "github.com/spf13/cobra"}

// templateImporters are the packages allowed to bring html/template in:
// net/rpc, for its debug page, which the site mesh's memberlist imports
// through its msgpack codec's RPC support. The agent serves no RPC and no
// debug page, so nothing reaches the templates' method lookups, as
// TestEdgeBinaryKeepsNoMethodsByName checks in the linked binary.
var templateImporters = []string{"net/rpc"}

func TestEdgeBinaryLinksNoTemplates(t *testing.T) {
	out := goList(t, "-deps", "-tags", edgeTags, "-f", "{{.ImportPath}} {{join .Imports \",\"}}", "./cmd/outpost-edge")
	var bad []string
	importers := map[string][]string{}
	for line := range strings.SplitSeq(strings.TrimSpace(string(out)), "\n") {
		path, imports, _ := strings.Cut(line, " ")
		for _, imp := range strings.Split(imports, ",") {
			importers[imp] = append(importers[imp], path)
		}
	}
	for path, by := range importers {
		if !slices.Contains(methodKeepers, path) {
			continue
		}
		if path == "html/template" && !slices.ContainsFunc(by, func(p string) bool { return !slices.Contains(templateImporters, p) }) {
			continue
		}
		bad = append(bad, path)
	}
	slices.Sort(bad)
	if len(bad) > 0 {
		t.Errorf("cmd/outpost-edge links %v: the linker then keeps every exported method of every type in the binary (about 9 MB of it, 5 MB of RSS), see methodKeepers\n(find the path with: go list -deps -tags %s -f '{{.ImportPath}}: {{.Imports}}' ./cmd/outpost-edge)", bad, edgeTags)
	}
}

// reflectMethod matches a symbol the linker marks as calling reflect's
// Method or MethodByName with a name it cannot know, in -dumpdep's output.
var reflectMethod = regexp.MustCompile(`(\S+) <ReflectMethod>`)

// TestEdgeBinaryKeepsNoMethodsByName links the edge binary and checks that
// no call of reflect's Method or MethodByName with a non-constant name is
// reachable in it, which would make the linker keep every exported method
// of every reachable type (see methodKeepers). Packages cannot be checked
// for text/template and containerd's internal/fsview, which uses it: the
// containerd client imports its pkg/oci, which imports fsview, but the
// agent must call nothing of pkg/oci that reaches it (the user lookups of
// oci.WithUser, WithUserID, WithAdditionalGIDs do; edge/runtime/containerd
// has its own).
func TestEdgeBinaryKeepsNoMethodsByName(t *testing.T) {
	if testing.Short() {
		t.Skip("links the edge binary")
	}
	cmd := exec.Command("go", "build", "-tags", edgeTags, "-ldflags=-dumpdep", "-o", filepath.Join(t.TempDir(), "outpost-edge"), "./cmd/outpost-edge")
	cmd.Dir = moduleRoot(t)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go build -ldflags=-dumpdep ./cmd/outpost-edge: %v\n%s", err, stderr.Bytes())
	}
	// The linker writes -dumpdep's graph on stderr or stdout, by version.
	seen := map[string]bool{}
	var bad []string
	for _, m := range reflectMethod.FindAllSubmatch(append(out, stderr.Bytes()...), -1) {
		if sym := string(m[1]); !seen[sym] {
			seen[sym] = true
			bad = append(bad, sym)
		}
	}
	if len(bad) > 0 {
		t.Errorf("cmd/outpost-edge reaches %v, which look methods up by a name known only at run time: the linker then keeps every exported method of every type in the binary (about 9 MB of it, 5 MB of RSS)\n(find what reaches them with: go build -tags %s -ldflags=-dumpdep ./cmd/outpost-edge 2>&1 | grep -F -- '-> SYMBOL')", bad, edgeTags)
	}
}

func TestPackageDocs(t *testing.T) {
	for _, p := range modulePackages(t) {
		if p.Error != nil {
			t.Errorf("%s: %s", p.ImportPath, p.Error.Err)
			continue
		}
		if strings.TrimSpace(p.Doc) != "" {
			continue
		}
		// go list reports Doc from the non-test files only; a package of
		// tests alone carries its comment in a test file.
		if len(p.GoFiles)+len(p.CgoFiles) == 0 && testFilesHaveDoc(t, p) {
			continue
		}
		t.Errorf("%s has no package doc comment: add `// Package %s ...` saying what it owns (STYLE.md §1)", p.ImportPath, p.Name)
	}
}

func testFilesHaveDoc(t *testing.T, p pkg) bool {
	fset := token.NewFileSet()
	for _, f := range append(append([]string(nil), p.TestGoFiles...), p.XTestGoFiles...) {
		file, err := parser.ParseFile(fset, filepath.Join(p.Dir, f), nil, parser.PackageClauseOnly|parser.ParseComments)
		if err != nil {
			t.Errorf("parse %s: %v", f, err)
			return false
		}
		if file.Doc != nil && strings.TrimSpace(file.Doc.Text()) != "" {
			return true
		}
	}
	return false
}

// rule is one import rule of DESIGN.md: packages that from matches must not
// import packages that to matches. Paths are module-relative.
type rule struct {
	why  string
	from func(r string) bool
	to   func(r string) bool
}

var rules = []rule{
	{
		why:  "hub/* never imports edge/*: they meet only through sync/*",
		from: func(r string) bool { return under(r, "hub") },
		to:   func(r string) bool { return under(r, "edge") },
	},
	{
		why:  "edge/* never imports hub/*: they meet only through sync/*",
		from: func(r string) bool { return under(r, "edge") },
		to:   func(r string) bool { return under(r, "hub") },
	},
	{
		why:  "sync/* and netd import nothing from hub or edge: the consumer declares the interface and the composition root adapts",
		from: func(r string) bool { return under(r, "sync") || under(r, "netd") },
		to:   func(r string) bool { return under(r, "hub") || under(r, "edge") },
	},
	{
		why:  "hub/store imports no other project package (its subpackages may import it)",
		from: func(r string) bool { return r == "hub/store" },
		to:   func(r string) bool { return !under(r, "hub/store") },
	},
	{
		why:  "only tests, and the test support under test/, import the test-support packages internal/wait, internal/testlog, internal/testca and test/hubtest",
		from: func(r string) bool { return !under(r, "test") },
		to: func(r string) bool {
			return r == "internal/wait" || r == "internal/testlog" || r == "internal/testca" || r == "test/hubtest"
		},
	},
	{
		why:  "the API machinery and the registry know nothing of users or policy: hub/apiserver and hub/registry/* import neither hub/auth nor hub/admission (the machinery declares the Admission it calls; hub/hubd wires it in)",
		from: func(r string) bool { return under(r, "hub/apiserver") || under(r, "hub/registry") },
		to:   func(r string) bool { return under(r, "hub/auth") || under(r, "hub/admission") },
	},
	{
		why:  "controllers and the scheduler reach the API only through a client, as any other client: hub/controllers/* and hub/scheduler/* import none of hub/apiserver, hub/registry, hub/store, hub/auth, hub/admission",
		from: func(r string) bool { return under(r, "hub/controllers") || under(r, "hub/scheduler") },
		to: func(r string) bool {
			return under(r, "hub/apiserver") || under(r, "hub/registry") || under(r, "hub/store") || under(r, "hub/auth") || under(r, "hub/admission")
		},
	},
	{
		why: "the API machinery, the registry and the store know nothing of the controllers or the scheduler that use them",
		from: func(r string) bool {
			return under(r, "hub/apiserver") || under(r, "hub/registry") || under(r, "hub/store")
		},
		to: func(r string) bool { return under(r, "hub/controllers") || under(r, "hub/scheduler") },
	},
	{
		why:  "only cmd, bench and tests import the composition roots hub/hubd and edge/agent",
		from: func(r string) bool { return !under(r, "cmd") && !under(r, "bench") && !under(r, "test") },
		to:   func(r string) bool { return r == "hub/hubd" || r == "edge/agent" },
	},
}

// TestImportRules checks the non-test imports of every package of the
// module, which are what the binaries link. Tests may reach further, such
// as an end-to-end test wiring hub and edge together.
func TestImportRules(t *testing.T) {
	for _, p := range modulePackages(t) {
		from, ok := rel(p.ImportPath)
		if !ok {
			continue
		}
		for _, imp := range p.Imports {
			to, ok := rel(imp)
			if !ok {
				continue
			}
			for _, r := range rules {
				if r.from(from) && r.to(to) && from != to {
					t.Errorf("%s imports %s: %s", p.ImportPath, imp, r.why)
				}
			}
		}
	}
}

// TestRules checks the rules themselves on examples, so that a rule that
// matches nothing is caught.
func TestRules(t *testing.T) {
	for _, tc := range []struct {
		from, to string
		allowed  bool
	}{
		{"hub/apiserver", "hub/store", true},
		{"hub/apiserver", "edge/checkpoint", false},
		{"edge/agent", "hub/pki", false},
		{"edge/agent", "sync/client", true},
		{"sync/server", "hub/store", false},
		{"sync/wire", "edge/pods", false},
		{"netd", "edge/runtime", false},
		{"hub/store", "hub/pki", false},
		{"hub/store", "internal/version", false},
		{"hub/store", "hub/store/internal/fanout", true},
		{"hub/store/badgerstore", "hub/store", true},
		{"hub/apiserver", "hub/hubd", false},
		{"hub/apiserver", "hub/admission", false},
		{"hub/apiserver", "hub/auth", false},
		{"hub/registry/core", "hub/auth", false},
		{"hub/admission", "hub/apiserver", true},
		{"hub/admission", "hub/auth", true},
		{"hub/hubd", "hub/admission", true},
		{"cmd/outpost", "hub/hubd", true},
		{"bench/storebench", "hub/hubd", true},
		{"test/e2e", "edge/agent", true},
		{"edge/pods", "edge/agent", false},
		{"edge/agent", "internal/wait", false},
		{"hub/controllers", "test/hubtest", false},
		{"hub/controllers/deployment", "hub/apiserver", false},
		{"hub/scheduler", "hub/store/badgerstore", false},
		{"hub/apiserver", "hub/controllers/garbagecollector", false},
		{"hub/store", "hub/scheduler", false},
		{"hub/hubd", "hub/controllers/manager", true},
		{"test/hubtest", "internal/wait", true},
		{"bench/fleetbench", "internal/testca", false},
		{"edge/agent", "internal/version", true},
	} {
		allowed := true
		for _, r := range rules {
			if r.from(tc.from) && r.to(tc.to) {
				allowed = false
			}
		}
		if allowed != tc.allowed {
			t.Errorf("%s importing %s: allowed = %v, want %v", tc.from, tc.to, allowed, tc.allowed)
		}
	}
}
