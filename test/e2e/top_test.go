package e2e

import (
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/outpost-mesh/outpost/hub/hubd"
	"github.com/outpost-mesh/outpost/internal/wait"
)

// TestTop runs kubectl top nodes and top pods, kubectl 1.27 and 1.33,
// against a hub whose node runs on the FAKE runtime, which reports
// synthetic usage (edge/agent's fake numbers: 2m of CPU and 8Mi per
// running container, 50m and 128Mi more for the node), every second.
// The real-containerd check that numbers move with a busy pod is not
// this test's.
func TestTop(t *testing.T) {
	skipShort(t)
	t.Parallel()
	f := newFleet(t)
	h := f.startHub()
	token, caHash := h.createToken("")
	const node = "top-1"
	for _, name := range []string{"web-1", "web-2", "db"} {
		p := newPod(name, node, "busybox")
		p.Labels = map[string]string{"app": strings.TrimSuffix(strings.TrimSuffix(name, "-1"), "-2")}
		h.createPod(p)
	}
	e := &edge{f: f, name: node, dataDir: filepath.Join(t.TempDir(), node)}
	e.args = []string{"edge", "--hub", h.syncAddr, "--token", token, "--ca-cert-hash", caHash,
		"--node-name", node, "--data-dir", e.dataDir, "--runtime", "fake", "--usage-interval", "1s", "--mesh=false"}
	t.Cleanup(e.shutdown)
	e.start()
	kubeconfig := filepath.Join(h.dataDir, hubd.KubeconfigFile)

	for _, version := range []string{"1.27", "1.33"} {
		t.Run("kubectl-"+version, func(t *testing.T) {
			k := newKubectl(t, version)
			k.kubeconfig, k.namespace = kubeconfig, "default"
			// The node reports once its pods run: 3 containers.
			var r result
			// Rates are rounded up to whole millicores.
			wait.ForEvery(t, pollInterval, joinTimeout, "top nodes shows the node's usage", func() (bool, string) {
				r = k.exec(t, "top", "nodes")
				return r.err == nil && regexp.MustCompile(`(?m)^`+node+`\s+5[5-7]m\s+\d+%\s+152Mi\s+\d+%\s*$`).MatchString(r.stdout), r.String()
			})
			wantMatch(t, r, r.stdout, `(?m)^NAME\s+CPU\(cores\)\s+CPU( ?%|\(%\))\s+MEMORY\(bytes\)\s+MEMORY( ?%|\(%\))`)

			// A container's rate is known from its second sample.
			wait.ForEvery(t, pollInterval, joinTimeout, "top pods shows the pods", func() (bool, string) {
				r = k.exec(t, "top", "pods")
				return r.err == nil && len(r.lines()) == 4, r.String()
			})
			for _, name := range []string{"db", "web-1", "web-2"} {
				wantMatch(t, r, r.stdout, `(?m)^`+name+`\s+[23]m\s+8Mi\s*$`)
			}
			r = k.run(t, "top", "pods", "-l", "app=web")
			if got := len(r.lines()); got != 3 || strings.Contains(r.stdout, "db") {
				t.Errorf("top pods -l app=web: want the header and web-1, web-2\n%s", r)
			}
			r = k.run(t, "top", "pod", "db", "--containers")
			wantMatch(t, r, r.stdout, `(?m)^db\s+main\s+[23]m\s+8Mi\s*$`)
			r = k.run(t, "top", "pods", "-A", "--no-headers")
			if got := len(r.lines()); got != 3 {
				t.Errorf("top pods -A: want 3 pods\n%s", r)
			}
			r = k.fail(t, "top", "pod", "nosuch")
			if !strings.Contains(r.stderr, "not found") && !strings.Contains(r.stderr, "not available") {
				t.Errorf("top pod nosuch: want a not found error\n%s", r)
			}
		})
	}
}
