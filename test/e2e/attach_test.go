package e2e

import (
	"context"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestContainerdAttach: kubectl 1.27 (SPDY) and 1.33 (WebSocket first)
// attach with stdin to containers on real containerd through the hub. A
// container with stdin: true reads what kubectl attach -i sends and the
// end of kubectl's stdin ends the attach, the container going on; a
// stdinOnce container reads EOF when kubectl's stdin ends, and the
// attach ends when it exits; kubectl attach -it gives a container with a
// TTY the size of kubectl's terminal.
func TestContainerdAttach(t *testing.T) {
	if !enterContainerdTest(t) {
		return
	}
	f := newFleet(t)
	h := f.startHub()
	const site, name = "store-7", "e2e-ctrd-3"
	const image = "outpost.test/busybox:1"
	startContainerdNode(f, h, site, name, image, nil)

	const ns = "attach"
	ctx, cancel := h.ctx()
	defer cancel()
	if _, err := h.cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	versions := []string{"1.27", "1.33"}
	pod := func(podName string, once bool, script string) *corev1.Pod {
		policy := corev1.RestartPolicyAlways
		if once {
			policy = corev1.RestartPolicyNever
		}
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: podName, Namespace: ns},
			Spec: corev1.PodSpec{
				NodeName: name, RestartPolicy: policy, TerminationGracePeriodSeconds: new(int64),
				Containers: []corev1.Container{{
					Name: "main", Image: image, ImagePullPolicy: corev1.PullNever,
					Command: []string{"sh", "-c", script}, Stdin: true, StdinOnce: once,
				}},
			},
		}
	}
	pods := []*corev1.Pod{pod("echo", false, `while read l; do echo "got $l"; done`)}
	for _, v := range versions { // they exit: one attach each
		v = strings.ReplaceAll(v, ".", "")
		pods = append(pods, pod("once-"+v, true, `while read l; do echo "got $l"; done; echo bye`))
		// A terminal: once it has read a line, it asks until its size
		// is what kubectl's terminal has, which comes beside the line.
		term := pod("term-"+v, true, `read l; for i in $(seq 50); do s=$(stty size); [ "$s" = "33 101" ] && break; sleep 0.1; done; echo "size $s"`)
		term.Spec.Containers[0].TTY = true
		pods = append(pods, term)
	}
	for _, p := range pods {
		if _, err := h.cs.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	f.eventually(workloadTimeout, "the pods running", func() (bool, string) {
		l, err := h.cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, apiProblem(err)
		}
		for _, p := range l.Items {
			if p.Status.Phase != corev1.PodRunning {
				return false, fmt.Sprintf("%s is %s", p.Name, p.Status.Phase)
			}
		}
		return len(l.Items) == len(pods), fmt.Sprintf("%d pods", len(l.Items))
	})

	for _, version := range versions {
		t.Run("kubectl-"+version, func(t *testing.T) {
			k := newKubectl(t, version)
			k.kubeconfig = filepath.Join(h.dataDir, "admin.kubeconfig")
			k.namespace = ns

			// The echo reads each line; the end of kubectl's stdin ends
			// the attach with success, the container runs on.
			p, in := k.startInput(t, "attach", "-i", "echo")
			for _, l := range []string{"one", "two"} {
				want := "got " + l + "-" + version + "\n"
				if _, err := io.WriteString(in, l+"-"+version+"\n"); err != nil {
					t.Fatal(err)
				}
				p.waitOutput(t, waitTimeout, want, false, func(s string) bool { return strings.Contains(s, want) })
			}
			in.Close()
			if err := p.wait(t, waitTimeout); err != nil {
				t.Errorf("kubectl attach -i after its stdin ended: %v\n%s", err, p.describe())
			}
			if phase := k.jsonpath(t, "{.status.phase}", "pod", "echo"); phase != "Running" {
				t.Errorf("echo is %s after the attach, want Running", phase)
			}

			// stdinOnce: the container reads EOF once kubectl's stdin
			// ends, says bye and exits; so does the attach.
			once := "once-" + strings.ReplaceAll(version, ".", "")
			r := k.execInput(t, "x\n", "attach", "-i", once)
			if r.err != nil || !strings.Contains(r.stdout, "got x\nbye\n") {
				t.Errorf("kubectl attach -i of a stdinOnce container: want got x, bye and success\n%s", r)
			}
			f.eventually(workloadTimeout, once+" succeeded", func() (bool, string) {
				phase := k.jsonpath(t, "{.status.phase}", "pod", once)
				return phase == "Succeeded", phase
			})

			// A terminal: script(1) gives kubectl one of a size set
			// beforehand; the container's terminal gets that size.
			if _, err := exec.LookPath("script"); err != nil {
				t.Logf("no script(1): the TTY attach is left out")
				return
			}
			term := "term-" + strings.ReplaceAll(version, ".", "")
			inner := k.bin + " --namespace=" + k.namespace + " attach -it " + term
			ctx, cancel := context.WithTimeout(context.Background(), kubectlTimeout)
			defer cancel()
			cmd := exec.CommandContext(ctx, "script", "-qec", "stty rows 33 cols 101; "+inner, "/dev/null")
			cmd.Env = []string{"HOME=" + k.home, "KUBECONFIG=" + k.kubeconfig, "PATH=/usr/bin:/bin", "TERM=dumb"}
			cmd.Stdin = strings.NewReader("\n")
			dieWithTest(cmd)
			out, err := cmd.CombinedOutput()
			if err != nil || !strings.Contains(string(out), "size 33 101") {
				t.Errorf("kubectl attach -it to a container printing its terminal's size = %q, %v; want size 33 101", out, err)
			}
		})
	}
}

// startInput is start with a stdin the caller writes and closes.
func (k *kubectl) startInput(t *testing.T, args ...string) (*proc, io.WriteCloser) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), kubectlBackgroundTimeout)
	cmd := k.command(ctx, args...)
	in, err := cmd.StdinPipe()
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	p := startProc(t, cmd)
	p.name = "kubectl." + k.version + " " + strings.Join(cmd.Args[1:], " ")
	t.Cleanup(func() {
		in.Close()
		p.stop(5 * time.Second)
		cancel()
	})
	return p, in
}
