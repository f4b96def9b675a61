package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/outpost-mesh/outpost/internal/netem"
)

// streamFailFast bounds how long a logs, exec or port-forward to a pod
// whose node is cut off may take to fail.
const streamFailFast = 5 * time.Second

// TestContainerdStreams: kubectl 1.27 (SPDY) and 1.33 (WebSocket first)
// read logs, exec, copy files and port-forward to pods that run on real
// containerd on a node that only dials out to the hub, every byte riding
// the node's sync connection. With the node's link black-holed each fails
// fast with a clear error; once the link heals each works again, the
// agent never restarted.
func TestContainerdStreams(t *testing.T) {
	if !enterContainerdTest(t) {
		return
	}
	f := newFleet(t)
	h := f.startHub()
	const site, name = "store-8", "e2e-ctrd-2"
	const image = "outpost.test/busybox:1"
	relay, err := netem.Listen(h.syncAddr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { relay.Close() })
	// Usage every second, of this node's pods only: kubectl top below.
	startContainerdNode(f, h, site, name, image, relay, "--usage-interval", "1s", "--node-usage", "agent-cgroup")

	const ns = "streams"
	ctx, cancel := h.ctx()
	defer cancel()
	if _, err := h.cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod := func(podName string, policy corev1.RestartPolicy, cmd ...string) *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: podName, Namespace: ns},
			Spec: corev1.PodSpec{
				NodeName: name, RestartPolicy: policy, TerminationGracePeriodSeconds: new(int64),
				Containers: []corev1.Container{{Name: "main", Image: image, Command: cmd, ImagePullPolicy: corev1.PullNever}},
			},
		}
	}
	pods := []*corev1.Pod{
		pod("web", corev1.RestartPolicyAlways, "httpd", "-f", "-p", "8080", "-h", "/etc"),
		pod("talker", corev1.RestartPolicyAlways, "sh", "-c", `i=0; while :; do echo "line $i"; i=$((i+1)); sleep 0.2; done`),
		pod("crasher", corev1.RestartPolicyAlways, "sh", "-c", `echo "run at $(date +%s)"; sleep 1; exit 1`),
	}
	// A pod that burns what its limit lets it, for kubectl top.
	burner := pod("burner", corev1.RestartPolicyAlways, "sh", "-c", "while :; do :; done")
	burner.Spec.Containers[0].Resources.Limits = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("300m")}
	pods = append(pods, burner)
	for _, p := range pods {
		if _, err := h.cs.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	f.eventually(workloadTimeout, "the pods running, crasher restarted once", func() (bool, string) {
		l, err := h.cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, apiProblem(err)
		}
		for _, p := range l.Items {
			st := mainStatus(&p)
			switch {
			case p.Name == "crasher" && (st == nil || st.RestartCount < 1):
				return false, "crasher has not restarted"
			case p.Name != "crasher" && p.Status.Phase != corev1.PodRunning:
				return false, fmt.Sprintf("%s is %s", p.Name, p.Status.Phase)
			}
		}
		return len(l.Items) == len(pods), fmt.Sprintf("%d pods", len(l.Items))
	})

	for _, version := range []string{"1.27", "1.33"} {
		t.Run("kubectl-"+version, func(t *testing.T) {
			k := newKubectl(t, version)
			k.kubeconfig = filepath.Join(h.dataDir, "admin.kubeconfig")
			k.namespace = ns
			testLogs(t, f, k)
			testExec(t, k)
			testCopy(t, k)
			testPortForward(t, k)
			testTop(t, f, k, name)
		})
	}

	// The link black-holed: once the hub has given the connection up,
	// every stream fails at once, saying why.
	starts := countStarts(f, name)
	relay.Set(netem.Conditions{Blackhole: true})
	k := newKubectl(t, "1.33")
	k.kubeconfig = filepath.Join(h.dataDir, "admin.kubeconfig")
	k.namespace = ns
	notConnected := "node " + name + " is not connected to the hub"
	f.eventually(time.Minute, "kubectl logs refused with "+notConnected, func() (bool, string) {
		r := k.exec(t, "logs", "web")
		return r.err != nil && strings.Contains(r.stderr, notConnected), r.String()
	})
	for _, args := range [][]string{
		{"logs", "web"},
		{"exec", "web", "--", "true"},
		{"port-forward", "pod/web", ":8080"},
	} {
		t0 := time.Now()
		r := k.fail(t, args...)
		if took := time.Since(t0); took > streamFailFast {
			t.Errorf("kubectl %s with the node cut off took %v, want under %v", strings.Join(args, " "), took, streamFailFast)
		}
		wantContains(t, r, r.stderr, notConnected)
	}
	relay.Set(netem.Conditions{})
	f.eventually(time.Minute, "kubectl exec works again after the link healed", func() (bool, string) {
		r := k.exec(t, "exec", "web", "--", "echo", "back")
		return r.err == nil && r.stdout == "back\n", r.String()
	})
	testLogs(t, f, k)
	if got := countStarts(f, name); got != starts {
		t.Errorf("the agent started %d times, want %d: the link's cut must not restart it", got, starts)
	}
}

// topRow matches a row of kubectl top: name, CPU in millicores, memory.
var topRow = regexp.MustCompile(`(?m)^(\S+)\s+(\d+)m\s+(\d+)Mi\s*$`)

// testTop checks kubectl top nodes and pods against the node's real
// cgroups: the burner, held to 300m, shows near its limit while the web
// pod idles.
func testTop(t *testing.T, f *fleet, k *kubectl, node string) {
	r := k.run(t, "top", "nodes")
	wantMatch(t, r, r.stdout, `(?m)^`+node+`\s+\d+m\s+\d+%\s+\d+Mi\s+\d+%\s*$`)
	f.eventually(waitTimeout, "kubectl top pods: the burner busy, web idle", func() (bool, string) {
		r = k.exec(t, "top", "pods", "--no-headers")
		cpu := map[string]int{}
		for _, m := range topRow.FindAllStringSubmatch(r.stdout, -1) {
			cpu[m[1]], _ = strconv.Atoi(m[2])
		}
		return r.err == nil && cpu["burner"] >= 200 && cpu["burner"] <= 330 && cpu["web"] < 50, r.String()
	})
}

// countStarts returns how many times node name's agent was started.
func countStarts(f *fleet, name string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, p := range f.procs {
		if strings.HasPrefix(p.label, name+"#") {
			n++
		}
	}
	return n
}

// testLogs reads the talker's and the crasher's logs as `kubectl logs`
// does with its main options.
func testLogs(t *testing.T, f *fleet, k *kubectl) {
	r := k.run(t, "logs", "talker")
	wantContains(t, r, r.stdout, "line 0\nline 1\n")
	r = k.run(t, "logs", "talker", "--tail=1")
	if l := r.lines(); len(l) != 1 || !strings.HasPrefix(l[0], "line ") {
		t.Errorf("--tail=1 printed %q, want one line\n%s", l, r)
	}
	r = k.run(t, "logs", "talker", "--tail=2", "--timestamps")
	wantMatch(t, r, r.stdout, `^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d+Z line \d+\n\S+ line \d+\n$`)
	r = k.run(t, "logs", "talker", "--limit-bytes=4")
	wantEqual(t, "--limit-bytes=4 output", r.stdout, "line")
	// --since=2s must leave out line 0, so wait until the talker has
	// written for longer than that: 20 lines at 5 a second.
	f.eventually(waitTimeout, "the talker has written for 4s", func() (bool, string) {
		r := k.exec(t, "logs", "talker", "--tail=1")
		return r.err == nil && lastLogLineOf(r.stdout) >= 20, r.String()
	})
	r = k.run(t, "logs", "talker", "--since=2s")
	if l := r.lines(); len(l) == 0 || len(l) > 15 || l[0] == "line 0" {
		t.Errorf("--since=2s printed %d lines from %q, want the last 2s (about 10)\n%s", len(l), l, r)
	}
	r = k.run(t, "logs", "crasher", "--previous")
	wantMatch(t, r, r.stdout, `^run at \d+\n$`)

	// -f: lines written after it started come through as they are written.
	last := lastLogLine(t, k.run(t, "logs", "talker", "--tail=1").stdout)
	p := k.start(t, "logs", "-f", "talker", "--tail=1")
	p.waitOutput(t, waitTimeout, fmt.Sprintf("a line after %d", last+2), false, func(s string) bool {
		return strings.Contains(s, fmt.Sprintf("line %d\n", last+3))
	})
	p.stop(5 * time.Second)
}

var lastLineRE = regexp.MustCompile(`line (\d+)\n$`)

// lastLogLine returns the number of the last "line N" of out.
func lastLogLine(t *testing.T, out string) int {
	t.Helper()
	n := lastLogLineOf(out)
	if n < 0 {
		t.Fatalf("no last line in %q", out)
	}
	return n
}

// lastLogLineOf returns the number of the last "line N" of out, or -1.
func lastLogLineOf(out string) int {
	m := lastLineRE.FindStringSubmatch(out)
	if m == nil {
		return -1
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

// testExec runs commands in the web pod: output on both streams, the
// exit code, stdin, and a terminal with its size.
func testExec(t *testing.T, k *kubectl) {
	r := k.exec(t, "exec", "web", "--", "sh", "-c", "echo out; echo err >&2; exit 3")
	if ee, ok := r.err.(*exec.ExitError); !ok || ee.ExitCode() != 3 {
		t.Errorf("kubectl exec of `exit 3` ended with %v, want exit status 3\n%s", r.err, r)
	}
	wantEqual(t, "exec stdout", r.stdout, "out\n")
	wantContains(t, r, r.stderr, "err\n")

	r = k.execInput(t, "hello\nthrough stdin\n", "exec", "-i", "web", "--", "cat")
	if r.err != nil {
		t.Errorf("kubectl exec -i: %v\n%s", r.err, r)
	}
	wantEqual(t, "exec -i cat stdout", r.stdout, "hello\nthrough stdin\n")

	// A terminal: script(1) gives kubectl one, of a size set beforehand,
	// and the pod's shell sees that size on its own terminal.
	if _, err := exec.LookPath("script"); err != nil {
		t.Logf("no script(1): the TTY exec is left out")
		return
	}
	inner := k.bin + " --namespace=" + k.namespace + " exec -it web -- sh -c 'stty size; tty'"
	ctx, cancel := context.WithTimeout(context.Background(), kubectlTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "script", "-qec", "stty rows 33 cols 101; "+inner, "/dev/null")
	cmd.Env = []string{"HOME=" + k.home, "KUBECONFIG=" + k.kubeconfig, "PATH=/usr/bin:/bin", "TERM=dumb"}
	cmd.Stdin = strings.NewReader("")
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "33 101") || !strings.Contains(string(out), "/dev/pts/") {
		t.Errorf("kubectl exec -it `stty size; tty` = %q, %v; want 33 101 on a /dev/pts terminal", out, err)
	}
}

// execInput is exec with input on kubectl's stdin.
func (k *kubectl) execInput(t *testing.T, input string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), kubectlTimeout)
	defer cancel()
	cmd := k.command(ctx, args...)
	dieWithTest(cmd)
	var stdout, stderr bytes.Buffer
	cmd.Stdin, cmd.Stdout, cmd.Stderr = strings.NewReader(input), &stdout, &stderr
	err := cmd.Run()
	return result{cmdline: "kubectl." + k.version + " " + strings.Join(cmd.Args[1:], " "), stdout: stdout.String(), stderr: stderr.String(), err: err}
}

// testCopy copies a file into the web pod and back out with kubectl cp,
// which runs tar through exec.
func testCopy(t *testing.T, k *kubectl) {
	dir := t.TempDir()
	in := filepath.Join(dir, "in.txt")
	data := strings.Repeat("copied through the hub\n", 5000) // 110 KB
	if err := os.WriteFile(in, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	k.run(t, "cp", in, k.namespace+"/web:/tmp/copied.txt")
	r := k.run(t, "exec", "web", "--", "wc", "-c", "/tmp/copied.txt")
	wantContains(t, r, r.stdout, strconv.Itoa(len(data)))
	out := filepath.Join(dir, "out.txt")
	k.run(t, "cp", k.namespace+"/web:/tmp/copied.txt", out)
	got, err := os.ReadFile(out)
	if err != nil || string(got) != data {
		t.Errorf("kubectl cp out of the pod: %d bytes, %v; want the %d bytes copied in", len(got), err, len(data))
	}
}

var forwardingRE = regexp.MustCompile(`Forwarding from 127\.0\.0\.1:(\d+) -> 8080`)

// testPortForward forwards two local ports to the web pod's httpd at once
// and fetches through both, several requests at a time.
func testPortForward(t *testing.T, k *kubectl) {
	var addrs []string
	for range 2 {
		p := k.start(t, "port-forward", "pod/web", ":8080")
		out := p.waitOutput(t, waitTimeout, "Forwarding from", false, forwardingRE.MatchString)
		addrs = append(addrs, "127.0.0.1:"+forwardingRE.FindStringSubmatch(out)[1])
	}
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for i := range 8 {
		wg.Go(func() {
			got, err := httpGet(addrs[i%2], "/hostname")
			if err != nil || strings.TrimSpace(got) != "web" {
				errs <- fmt.Errorf("GET /hostname through %s = %q, %v; want web", addrs[i%2], got, err)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}
