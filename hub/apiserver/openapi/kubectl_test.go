package openapi

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// kubectlDir holds the kubectl binaries of several minor versions, named
// kubectl.1.27 ... kubectl.1.33.
const kubectlDir = "/usr/lib/google-cloud-sdk/bin"

// TestKubectlExplain runs the real kubectl explain of two minor versions
// against a server with minimal discovery and the OpenAPI handlers.
func TestKubectlExplain(t *testing.T) {
	t.Parallel()
	srv := newTestServer(t)
	dir := t.TempDir()
	kubeconfig := filepath.Join(dir, "kubeconfig")
	cfg := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: test
  cluster:
    server: %s
users:
- name: test
  user:
    token: test-token
contexts:
- name: test
  context:
    cluster: test
    user: test
current-context: test
`, srv.URL)
	if err := os.WriteFile(kubeconfig, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}

	kubectl := func(t *testing.T, version string, args ...string) string {
		t.Helper()
		bin := filepath.Join(kubectlDir, "kubectl."+version)
		if _, err := os.Stat(bin); err != nil {
			t.Skipf("kubectl %s is not installed at %s: %v", version, bin, err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		// Each run gets its own discovery and OpenAPI cache.
		cache := t.TempDir()
		cmd := exec.CommandContext(ctx, bin, append([]string{"--kubeconfig", kubeconfig, "--cache-dir", cache}, args...)...)
		cmd.Env = []string{"HOME=" + cache, "PATH=/usr/bin:/bin"}
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("kubectl.%s %s: %v\n%s", version, strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	contains := func(t *testing.T, out string, wants ...string) {
		t.Helper()
		for _, w := range wants {
			if !strings.Contains(out, w) {
				t.Errorf("output lacks %q:\n%s", w, out)
			}
		}
	}

	for _, version := range []string{"1.27", "1.33"} {
		t.Run(version+"/pod.spec.containers", func(t *testing.T) {
			out := kubectl(t, version, "explain", "pod.spec.containers")
			t.Logf("kubectl.%s explain pod.spec.containers:\n%s", version, head(out, 25))
			contains(t, out, "KIND:", "Pod", "FIELD: containers", "FIELDS:", "image\t<string>",
				"Container image name.", "name\t<string> -required-", "resources\t<ResourceRequirements>")
		})
	}
	t.Run("1.27/plaintext-openapiv2", func(t *testing.T) {
		out := kubectl(t, "1.27", "explain", "pod.spec.containers", "--output", "plaintext-openapiv2")
		t.Logf("kubectl.1.27 explain pod.spec.containers --output plaintext-openapiv2:\n%s", head(out, 25))
		contains(t, out, "RESOURCE: containers", "FIELDS:", "image\t<string>", "Container image name.")
	})
	t.Run("1.33/deployment.spec.strategy", func(t *testing.T) {
		out := kubectl(t, "1.33", "explain", "deployment.spec.strategy")
		t.Logf("kubectl.1.33 explain deployment.spec.strategy:\n%s", head(out, 25))
		contains(t, out, "GROUP:      apps", "KIND:       Deployment", "FIELD: strategy <DeploymentStrategy>",
			"rollingUpdate\t<RollingUpdateDeployment>", "Rolling update config params.")
		out = kubectl(t, "1.33", "explain", "deployment.spec.strategy.rollingUpdate")
		contains(t, out, "FIELD: rollingUpdate <RollingUpdateDeployment>", "maxSurge\t<IntOrString>")
	})
	// kubectl looks for fieldValidation among the parameters of the kind's
	// PATCH operations in the v3 document; finding it, it leaves
	// validation to the server and sends fieldValidation=Strict, so a pod
	// with an unknown field reaches the server instead of failing in
	// kubectl's own validation.
	podFile := filepath.Join(dir, "pod.yaml")
	pod := "apiVersion: v1\nkind: Pod\nmetadata:\n  name: web\nspec:\n  containers:\n  - name: web\n    image: nginx\n    bogusField: 1\n"
	if err := os.WriteFile(podFile, []byte(pod), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, version := range []string{"1.27", "1.33"} {
		t.Run(version+"/create-fieldValidation", func(t *testing.T) {
			before := len(srv.createQueries())
			out := kubectl(t, version, "create", "-f", podFile, "--dry-run=server", "--validate=strict")
			queries := srv.createQueries()
			if len(queries) != before+1 {
				t.Fatalf("kubectl create made %d requests, want 1; output:\n%s", len(queries)-before, out)
			}
			q := queries[len(queries)-1]
			t.Logf("kubectl.%s create --validate=strict: POST query %v; output: %s", version, q, strings.TrimSpace(out))
			if q.Get("fieldValidation") != "Strict" || q.Get("dryRun") != "All" {
				t.Errorf("create query = %v, want fieldValidation=Strict and dryRun=All", q)
			}
		})
	}
	t.Run("1.33/pods--recursive", func(t *testing.T) {
		out := kubectl(t, "1.33", "explain", "pods", "--recursive")
		t.Logf("kubectl.1.33 explain pods --recursive: %d lines:\n%s", strings.Count(out, "\n"), head(out, 40))
		contains(t, out, "creationTimestamp\t<string>", "containers\t<[]Container> -required-", "image\t<string>")
	})
}

// head returns the first n lines of s.
func head(s string, n int) string {
	lines := strings.SplitAfter(s, "\n")
	if len(lines) > n {
		lines = append(lines[:n], "...\n")
	}
	return strings.Join(lines, "")
}
