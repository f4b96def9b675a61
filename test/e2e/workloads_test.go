package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// workloadTimeout bounds one step of the workload tests: a rollout, a
// job's run, a namespace's deletion.
const workloadTimeout = 2 * time.Minute

// TestWorkloads is the application layer end to end: a hub with its
// controllers and scheduler, three edge agents on the fake runtime, and
// kubectl 1.27 and 1.33 each in a namespace of its own driving
// Deployments, DaemonSets, StatefulSets, Jobs, CronJobs and namespaces as
// a user does.
func TestWorkloads(t *testing.T) {
	skipShort(t)
	t.Parallel()
	f := newFleet(t)
	h := f.startHub()
	const site = "store-1"
	token, caHash := h.createToken(site)
	nodes := []string{"edge-1", "edge-2", "edge-3"}
	for _, node := range nodes {
		f.startEdge(h, node, token, caHash)
	}
	f.eventually(joinTimeout, "nodes Ready", func() (bool, string) {
		for _, node := range nodes {
			n, err := h.node(node)
			if err != nil {
				return false, apiProblem(err)
			}
			if p := nodeProblem(n, site, runtime.GOOS, runtime.GOARCH); p != "" {
				return false, p
			}
		}
		return true, ""
	})
	for _, version := range []string{"1.27", "1.33"} {
		// One after the other: the DaemonSet step taints a node, which
		// the other kubectl's Deployment would otherwise be placed around.
		t.Run("kubectl-"+version, func(t *testing.T) {
			k := newKubectl(t, version)
			k.kubeconfig = filepath.Join(h.dataDir, "admin.kubeconfig")
			k.namespace = "wl-" + strings.ReplaceAll(version, ".", "-")
			k.run(t, "create", "namespace", k.namespace)
			w := &workloads{f: f, h: h, k: k, nodes: nodes}
			t.Run("deployment", w.deployment)
			t.Run("orphan", w.orphan)
			t.Run("daemonset", w.daemonSet)
			t.Run("statefulset", w.statefulSet)
			t.Run("job", w.job)
			t.Run("cronjob", w.cronJob)
			t.Run("namespace", w.namespace)
		})
	}
}

// workloads holds one kubectl's run of TestWorkloads.
type workloads struct {
	f     *fleet
	h     *syncHub
	k     *kubectl
	nodes []string
}

// podRow is one pod as `kubectl get pods -o jsonpath` prints it below.
type podRow struct {
	name, node, phase, ready, image, owner string
}

// podsJSONPath prints one line per pod: name, node, phase, Ready, the
// first container's image and the controlling owner's kind/name.
const podsJSONPath = `{range .items[*]}{.metadata.name}{"\t"}{.spec.nodeName}{"\t"}{.status.phase}{"\t"}{.status.conditions[?(@.type=="Ready")].status}{"\t"}{.spec.containers[0].image}{"\t"}{.metadata.ownerReferences[0].kind}/{.metadata.ownerReferences[0].name}{"\n"}{end}`

// pods returns the pods that selector selects.
func (w *workloads) pods(t *testing.T, selector string) []podRow {
	t.Helper()
	out := w.k.jsonpath(t, podsJSONPath, "pods", "-l", selector)
	var rows []podRow
	for l := range strings.SplitSeq(out, "\n") {
		f := strings.Split(l, "\t")
		if len(f) != 6 {
			continue
		}
		rows = append(rows, podRow{f[0], f[1], f[2], f[3], f[4], f[5]})
	}
	return rows
}

// waitPods waits until the pods of selector are n, each Running and Ready
// with image (any image when ""), and returns them.
func (w *workloads) waitPods(t *testing.T, selector string, n int, image string) []podRow {
	t.Helper()
	var rows []podRow
	w.f.eventually(workloadTimeout, fmt.Sprintf("%d pods of %s Running and Ready with %q", n, selector, image), func() (bool, string) {
		rows = w.pods(t, selector)
		if len(rows) != n {
			return false, fmt.Sprintf("%d pods: %v", len(rows), rows)
		}
		for _, r := range rows {
			if r.phase != "Running" || r.ready != "True" || image != "" && r.image != image {
				return false, fmt.Sprintf("pod %+v", r)
			}
		}
		return true, ""
	})
	return rows
}

func nodesOf(rows []podRow) []string {
	var ns []string
	for _, r := range rows {
		if !slices.Contains(ns, r.node) {
			ns = append(ns, r.node)
		}
	}
	slices.Sort(ns)
	return ns
}

// deployment: create, spread, set image and roll out, undo, restart,
// scale to zero and back, history, and a cascading delete.
func (w *workloads) deployment(t *testing.T) {
	k := w.k
	k.run(t, "create", "deployment", "web", "--image=nginx:1", "--replicas=6")
	rows := w.waitPods(t, "app=web", 6, "nginx:1")
	if got := nodesOf(rows); !slices.Equal(got, w.nodes) {
		t.Errorf("6 replicas landed on %v, want spread over all of %v: %v", got, w.nodes, rows)
	}
	k.run(t, "rollout", "status", "deploy/web", "--timeout=2m")

	k.run(t, "set", "image", "deploy/web", "nginx=nginx:2")
	r := k.run(t, "rollout", "status", "deploy/web", "--timeout=2m")
	wantContains(t, r, r.stdout, `deployment "web" successfully rolled out`)
	w.waitPods(t, "app=web", 6, "nginx:2")

	r = k.run(t, "rollout", "history", "deploy/web")
	wantMatch(t, r, r.stdout, `(?m)^1\s`, `(?m)^2\s`)

	k.run(t, "rollout", "undo", "deploy/web")
	k.run(t, "rollout", "status", "deploy/web", "--timeout=2m")
	w.waitPods(t, "app=web", 6, "nginx:1")
	wantEqual(t, "image after undo", k.jsonpath(t, "{.spec.template.spec.containers[0].image}", "deploy/web"), "nginx:1")

	before := names(w.pods(t, "app=web"))
	k.run(t, "rollout", "restart", "deploy/web")
	k.run(t, "rollout", "status", "deploy/web", "--timeout=2m")
	w.f.eventually(workloadTimeout, "every pod replaced by the restart", func() (bool, string) {
		after := w.pods(t, "app=web")
		for _, r := range after {
			if slices.Contains(before, r.name) {
				return false, "old pod " + r.name + " still there"
			}
		}
		return len(after) == 6, fmt.Sprintf("%d pods", len(after))
	})

	k.run(t, "scale", "deploy/web", "--replicas=0")
	w.f.eventually(workloadTimeout, "no pods at scale 0", func() (bool, string) {
		rows := w.pods(t, "app=web")
		return len(rows) == 0, fmt.Sprintf("%v", rows)
	})
	k.run(t, "scale", "deploy/web", "--replicas=3")
	w.waitPods(t, "app=web", 3, "nginx:1")
	r = k.run(t, "describe", "deploy/web")
	wantContains(t, r, r.stdout, "ScalingReplicaSet")

	k.run(t, "delete", "deploy/web")
	w.f.eventually(workloadTimeout, "the deployment's replica sets and pods deleted", func() (bool, string) {
		rs := k.run(t, "get", "rs", "-l", "app=web", "-o", "name").lines()
		pods := w.pods(t, "app=web")
		return len(rs) == 0 && len(pods) == 0, fmt.Sprintf("replica sets %v, pods %v", rs, pods)
	})
}

func names(rows []podRow) []string {
	var out []string
	for _, r := range rows {
		out = append(out, r.name)
	}
	return out
}

// orphan: deleting with --cascade=orphan leaves the replica set and its
// pods, no longer owned.
func (w *workloads) orphan(t *testing.T) {
	k := w.k
	k.run(t, "create", "deployment", "keep", "--image=nginx:1", "--replicas=2")
	w.waitPods(t, "app=keep", 2, "nginx:1")
	k.run(t, "delete", "deploy/keep", "--cascade=orphan")
	w.f.eventually(workloadTimeout, "the deployment gone", func() (bool, string) {
		r := k.exec(t, "get", "deploy/keep")
		return r.err != nil && strings.Contains(r.stderr, "NotFound"), r.stdout + r.stderr
	})
	w.f.eventually(workloadTimeout, "the replica set orphaned", func() (bool, string) {
		out := k.jsonpath(t, `{range .items[*]}{.metadata.name}={.metadata.ownerReferences}{"\n"}{end}`, "rs", "-l", "app=keep")
		lines := strings.Fields(out)
		return len(lines) == 1 && strings.HasSuffix(lines[0], "="), out
	})
	if rows := w.pods(t, "app=keep"); len(rows) != 2 {
		t.Errorf("pods after the orphaning delete: %v, want the 2 left running", rows)
	}
	k.run(t, "delete", "rs", "-l", "app=keep")
}

// daemonSet: a pod on every node but one whose taint it does not
// tolerate, and a rolling update.
func (w *workloads) daemonSet(t *testing.T) {
	k := w.k
	taint := k.namespace + "=only:NoSchedule" // this kubectl's own, so the two runs do not meet
	tainted := w.nodes[2]
	k.run(t, "taint", "nodes", tainted, taint)
	t.Cleanup(func() { k.exec(t, "taint", "nodes", tainted, k.namespace+"-") })
	k.apply(t, `apiVersion: apps/v1
kind: DaemonSet
metadata: {name: agent}
spec:
  selector: {matchLabels: {app: agent}}
  template:
    metadata: {labels: {app: agent}}
    spec:
      containers: [{name: agent, image: "agent:1"}]
`)
	rows := w.waitPods(t, "app=agent", 2, "agent:1")
	if got, want := nodesOf(rows), w.nodes[:2]; !slices.Equal(got, want) {
		t.Errorf("daemon set pods on %v, want on %v (not on the tainted %s)", got, want, tainted)
	}
	k.run(t, "rollout", "status", "ds/agent", "--timeout=2m")
	k.run(t, "set", "image", "ds/agent", "agent=agent:2")
	k.run(t, "rollout", "status", "ds/agent", "--timeout=2m")
	w.waitPods(t, "app=agent", 2, "agent:2")
	k.run(t, "delete", "ds/agent")
}

// statefulSet: db-0, db-1 and db-2, each created once the one before is
// Ready.
func (w *workloads) statefulSet(t *testing.T) {
	k := w.k
	k.apply(t, `apiVersion: v1
kind: Service
metadata: {name: db}
spec:
  clusterIP: None
  selector: {app: db}
  ports: [{port: 5432}]
---
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: db}
spec:
  serviceName: db
  replicas: 3
  selector: {matchLabels: {app: db}}
  template:
    metadata: {labels: {app: db}}
    spec:
      containers: [{name: db, image: "postgres:16"}]
`)
	rows := w.waitPods(t, "app=db", 3, "postgres:16")
	got := names(rows)
	slices.Sort(got)
	wantEqual(t, "stateful set pods", strings.Join(got, ","), "db-0,db-1,db-2")
	// Ordered: each pod was created no earlier than the one before it
	// became Ready.
	out := k.jsonpath(t, `{range .items[*]}{.metadata.name}{"\t"}{.metadata.creationTimestamp}{"\t"}{.status.conditions[?(@.type=="Ready")].lastTransitionTime}{"\n"}{end}`, "pods", "-l", "app=db")
	created, ready := map[string]time.Time{}, map[string]time.Time{}
	for l := range strings.SplitSeq(strings.TrimSpace(out), "\n") {
		f := strings.Split(l, "\t")
		if len(f) != 3 {
			t.Fatalf("pod times: %q", out)
		}
		c, _ := time.Parse(time.RFC3339, f[1])
		r, _ := time.Parse(time.RFC3339, f[2])
		created[f[0]], ready[f[0]] = c, r
	}
	for i := 1; i < 3; i++ {
		prev, cur := fmt.Sprintf("db-%d", i-1), fmt.Sprintf("db-%d", i)
		if created[cur].Before(ready[prev]) {
			t.Errorf("%s created at %v, before %s was Ready at %v", cur, created[cur], prev, ready[prev])
		}
	}
	k.run(t, "rollout", "status", "sts/db", "--timeout=2m")
	k.run(t, "delete", "sts/db", "svc/db")
}

// job runs to completion on images that exit 0; cronJob fires on its
// schedule.
func (w *workloads) job(t *testing.T) {
	k := w.k
	k.apply(t, `apiVersion: batch/v1
kind: Job
metadata: {name: once}
spec:
  completions: 3
  parallelism: 2
  template:
    spec:
      restartPolicy: Never
      containers: [{name: work, image: "crash:0"}]
`)
	k.run(t, "wait", "--for=condition=complete", "job/once", "--timeout=2m")
	wantEqual(t, "succeeded", k.jsonpath(t, "{.status.succeeded}", "job/once"), "3")

	k.apply(t, `apiVersion: batch/v1
kind: Job
metadata: {name: fails}
spec:
  backoffLimit: 1
  template:
    spec:
      restartPolicy: Never
      containers: [{name: work, image: "crash:1"}]
`)
	k.run(t, "wait", "--for=condition=failed", "job/fails", "--timeout=2m")
	wantEqual(t, "failed reason", k.jsonpath(t, `{.status.conditions[?(@.type=="Failed")].reason}`, "job/fails"), "BackoffLimitExceeded")
	k.run(t, "delete", "job/once", "job/fails")
}

func (w *workloads) cronJob(t *testing.T) {
	k := w.k
	k.run(t, "create", "cronjob", "tick", "--image=crash:0", "--schedule=* * * * *")
	// The next minute starts at most 60 s away.
	w.f.eventually(90*time.Second+workloadTimeout, "a job of the cron job completed", func() (bool, string) {
		out := k.jsonpath(t, `{range .items[*]}{.metadata.ownerReferences[0].name}{"\t"}{.status.succeeded}{"\n"}{end}`, "jobs")
		for l := range strings.SplitSeq(out, "\n") {
			if l == "tick\t1" {
				return true, ""
			}
		}
		return false, out
	})
	wantContains(t, result{}, k.jsonpath(t, "{.status.lastScheduleTime}", "cronjob/tick"), "T")
	k.run(t, "delete", "cronjob/tick")
}

// namespace: a new namespace has its default service account at once;
// deleting a namespace with objects in it removes them all, then it.
func (w *workloads) namespace(t *testing.T) {
	k := w.k
	ns := k.namespace + "-tmp"
	k.run(t, "create", "namespace", ns)
	w.f.eventually(10*time.Second, "the default service account", func() (bool, string) {
		r := k.exec(t, "-n", ns, "get", "sa", "default")
		return r.err == nil, r.stderr
	})
	k.run(t, "-n", ns, "create", "configmap", "c", "--from-literal=a=b")
	k.run(t, "-n", ns, "create", "deployment", "d", "--image=nginx:1", "--replicas=2")
	w.f.eventually(workloadTimeout, "the deployment's pods Running", func() (bool, string) {
		out := k.jsonpath(t, `{range .items[*]}{.status.phase}{"\n"}{end}`, "-n", ns, "pods")
		return strings.Count(out, "Running") == 2, out
	})
	k.run(t, "delete", "namespace", ns, "--timeout=2m") // waits until it is gone
	r := k.exec(t, "get", "namespace", ns)
	if r.err == nil || !strings.Contains(r.stderr, "NotFound") {
		t.Errorf("namespace %s after delete:\n%s", ns, r)
	}
	pods, err := w.h.cs.CoreV1().Pods(ns).List(t.Context(), metav1.ListOptions{})
	if err != nil || len(pods.Items) != 0 {
		t.Errorf("pods left in the deleted namespace: %v, %v", podNames(pods), err)
	}
}

func podNames(l *corev1.PodList) []string {
	if l == nil {
		return nil
	}
	var out []string
	for _, p := range l.Items {
		out = append(out, p.Name)
	}
	return out
}

// apply runs `kubectl apply -f` on manifest.
func (k *kubectl) apply(t *testing.T, manifest string) result {
	t.Helper()
	path := filepath.Join(t.TempDir(), "manifest.yaml")
	if err := os.WriteFile(path, []byte(manifest), 0o600); err != nil {
		t.Fatal(err)
	}
	return k.run(t, "apply", "-f", path)
}
