package streams_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// kubectls are the real kubectl binaries tested: 1.27 speaks SPDY only,
// 1.33 tries WebSocket first.
var kubectls = []string{
	"/usr/lib/google-cloud-sdk/bin/kubectl.1.27",
	"/usr/lib/google-cloud-sdk/bin/kubectl.1.33",
}

func TestKubectl(t *testing.T) {
	e := start(t)
	// kubectl port-forward wants a running pod.
	e.pod.Status.Phase = corev1.PodRunning
	if _, err := e.hub.Client.CoreV1().Pods("default").UpdateStatus(context.Background(), e.pod, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, bin := range kubectls {
		if _, err := os.Stat(bin); err != nil {
			t.Logf("skipping %s: %v", bin, err)
			continue
		}
		t.Run(bin[strings.LastIndex(bin, ".")-1:], func(t *testing.T) {
			kubectl := func(stdin string, args ...string) (string, int) {
				t.Helper()
				ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
				defer cancel()
				cmd := exec.CommandContext(ctx, bin, append([]string{"--kubeconfig", e.hub.KubeconfigPath()}, args...)...)
				cmd.Stdin = strings.NewReader(stdin)
				out, err := cmd.CombinedOutput()
				var ee *exec.ExitError
				switch {
				case errors.As(err, &ee):
					return string(out), ee.ExitCode()
				case err != nil:
					t.Fatalf("kubectl %v: %v", args, err)
				}
				return string(out), 0
			}
			if out, code := kubectl("", "exec", "web", "--", "sh", "-c", "exit 3"); code != 3 {
				t.Errorf("kubectl exec web -- sh -c 'exit 3' exited %d (%s), want 3", code, out)
			}
			if out, code := kubectl("", "exec", "web", "--", "echo", "hi"); code != 0 || !strings.Contains(out, "hi\n") || !strings.Contains(out, "oops\n") {
				t.Errorf("kubectl exec web -- echo hi = %q, %d", out, code)
			}
			if out, code := kubectl("from stdin\n", "exec", "-i", "web", "--", "cat"); code != 0 || out != "from stdin\n" {
				t.Errorf("kubectl exec -i web -- cat = %q, %d", out, code)
			}
			if out, code := kubectl("", "logs", "web", "--tail", "1"); code != 0 || out != "line 3\n" {
				t.Errorf("kubectl logs web --tail 1 = %q, %d", out, code)
			}
			e.node.setDown("edge-1", true)
			if out, code := kubectl("", "exec", "web", "--", "echo"); code == 0 || !strings.Contains(out, "node edge-1 is not connected to the hub") {
				t.Errorf("kubectl exec to a node not connected = %q, %d; want the clear error", out, code)
			}
			e.node.setDown("edge-1", false)
			kubectlPortForward(t, bin, e.hub.KubeconfigPath())
		})
	}
	waitNoTunnels(t, e.node)
}

// kubectlPortForward runs kubectl port-forward pod/web :80 and echoes
// through it twice at once.
func kubectlPortForward(t *testing.T, bin, kubeconfig string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "--kubeconfig", kubeconfig, "port-forward", "--address", "127.0.0.1", "pod/web", ":80")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		cmd.Process.Kill()
		cmd.Wait()
	}()
	lines := bufio.NewScanner(stdout)
	re := regexp.MustCompile(`Forwarding from (127\.0\.0\.1:\d+) -> 80`)
	var addr string
	for addr == "" && lines.Scan() {
		if m := re.FindStringSubmatch(lines.Text()); m != nil {
			addr = m[1]
		}
	}
	if addr == "" {
		t.Fatalf("kubectl port-forward printed no forwarding address")
	}
	go io.Copy(io.Discard, stdout)
	done := make(chan string, 2)
	for _, msg := range []string{"first", "second"} {
		go func() {
			c, err := net.DialTimeout("tcp", addr, 10*time.Second)
			if err != nil {
				done <- err.Error()
				return
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(30 * time.Second))
			io.WriteString(c, msg)
			c.(*net.TCPConn).CloseWrite()
			got, err := io.ReadAll(c)
			if err != nil || string(got) != msg {
				done <- "echoed " + string(got) + " for " + msg
				return
			}
			done <- ""
		}()
	}
	for range 2 {
		if msg := <-done; msg != "" {
			t.Errorf("kubectl port-forward: %s", msg)
		}
	}
}
