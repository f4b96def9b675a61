package podint

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/outpost-mesh/outpost/edge/agent"
	"github.com/outpost-mesh/outpost/internal/netnstest"
	"github.com/outpost-mesh/outpost/internal/nodetest"
	"github.com/outpost-mesh/outpost/internal/ociimage"
	"github.com/outpost-mesh/outpost/internal/wait"
)

// TestBadInput: what a node cannot run is said on the pod with kubelet's
// reasons, and the agent goes on: an image the registry does not have,
// a command the image does not have, a ConfigMap key that does not
// exist, a pod larger than the node; and a container that fails says why
// in its termination message.
func TestBadInput(t *testing.T) {
	if !netnstest.Enter(t) {
		return
	}
	reg, err := ociimage.StartRegistry(context.Background(), t.TempDir(), "", "")
	if errors.Is(err, ociimage.ErrNoRegistry) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { reg.Close() })
	n := startNode(t, func(c *agent.Config) { c.Containerd.InsecureRegistries = []string{reg.Addr} })
	ctx := context.Background()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "settings", Namespace: "default"}, Data: map[string]string{"present": "yes"}}
	if _, err := n.client.CoreV1().ConfigMaps("default").Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod := func(name string, c corev1.Container) *corev1.Pod {
		c.Name = "main"
		if c.Image == "" {
			c.Image, c.ImagePullPolicy = busybox, corev1.PullNever
		}
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
			Spec:       corev1.PodSpec{NodeName: n.name, TerminationGracePeriodSeconds: new(int64(1)), Containers: []corev1.Container{c}},
		}
	}
	missing := reg.Addr + "/outpost.test/missing:1"
	for _, p := range []*corev1.Pod{
		pod("no-image", corev1.Container{Image: missing, ImagePullPolicy: corev1.PullAlways}),
		pod("no-command", corev1.Container{Command: []string{"/no/such/command"}}),
		pod("no-key", corev1.Container{Command: []string{"sleep", "3600"}, Env: []corev1.EnvVar{{Name: "X", ValueFrom: &corev1.EnvVarSource{
			ConfigMapKeyRef: &corev1.ConfigMapKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "settings"}, Key: "absent"}}}}}),
		pod("too-big", corev1.Container{Command: []string{"sleep", "3600"}, Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
			corev1.ResourceCPU: resource.MustParse("1000")}}}),
		pod("fine", corev1.Container{Command: []string{"sleep", "3600"}}),
		pod("last-words", corev1.Container{Command: []string{"sh", "-c", "echo starting; echo no config at /etc/app.conf >&2; exit 3"},
			TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError}),
	} {
		if _, err := n.client.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	waiting := func(p *corev1.Pod) *corev1.ContainerStateWaiting {
		if len(p.Status.ContainerStatuses) != 1 {
			return nil
		}
		return p.Status.ContainerStatuses[0].State.Waiting
	}

	// The registry's answer first, then the back-off.
	seen := map[string]string{}
	n.waitPod(t, "no-image", "ErrImagePull then ImagePullBackOff", func(p *corev1.Pod) bool {
		if w := waiting(p); w != nil {
			seen[w.Reason] = w.Message
		}
		return seen["ImagePullBackOff"] != "" && seen["ErrImagePull"] != ""
	})
	// The registry's words for a missing manifest.
	if msg := seen["ErrImagePull"]; !strings.Contains(msg, "manifest unknown") || !strings.Contains(msg, missing) {
		t.Errorf("ErrImagePull's message %q: want the registry's manifest unknown for %s", msg, missing)
	}
	if msg, want := seen["ImagePullBackOff"], fmt.Sprintf("Back-off pulling image %q: ErrImagePull: ", missing); !strings.HasPrefix(msg, want) || !strings.Contains(msg, "manifest unknown") {
		t.Errorf("ImagePullBackOff's message %q: want kubelet's %q and the registry's words", msg, want)
	}

	p := n.waitPod(t, "no-command", "CrashLoopBackOff", func(p *corev1.Pod) bool {
		w := waiting(p)
		return w != nil && w.Reason == "CrashLoopBackOff" && p.Status.ContainerStatuses[0].LastTerminationState.Terminated != nil
	})
	cs := p.Status.ContainerStatuses[0]
	if last := cs.LastTerminationState.Terminated; last.Reason != "StartError" || last.ExitCode != 128 || !strings.Contains(last.Message, "/no/such/command") {
		t.Errorf("no-command's last state %s %d %q: want StartError, 128 and the runtime's message about /no/such/command", last.Reason, last.ExitCode, last.Message)
	}
	if !strings.Contains(cs.State.Waiting.Message, "back-off") {
		t.Errorf("no-command waits with %q: want the back-off's message", cs.State.Waiting.Message)
	}
	if p.Status.Phase != corev1.PodRunning && p.Status.Phase != corev1.PodPending {
		t.Errorf("no-command is %s: a crash-looping pod with restartPolicy Always stays Pending or Running", p.Status.Phase)
	}

	p = n.waitPod(t, "no-key", "CreateContainerConfigError", func(p *corev1.Pod) bool {
		w := waiting(p)
		return w != nil && w.Reason == "CreateContainerConfigError"
	})
	if msg := waiting(p).Message; !strings.Contains(msg, "absent") || !strings.Contains(msg, "settings") {
		t.Errorf("no-key's message %q: want the missing key and its ConfigMap", msg)
	}

	p = n.waitPod(t, "too-big", "rejected", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodFailed })
	if p.Status.Reason != "OutOfcpu" || !strings.Contains(p.Status.Message, "cpu") {
		t.Errorf("too-big failed with %q %q: want OutOfcpu and a message about cpu", p.Status.Reason, p.Status.Message)
	}

	n.waitPod(t, "fine", "Running beside them", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodRunning })

	// A container that fails without a termination message: its log's
	// end is the message, as FallbackToLogsOnError asks.
	p = n.waitPod(t, "last-words", "failed", func(p *corev1.Pod) bool {
		return len(p.Status.ContainerStatuses) == 1 && p.Status.ContainerStatuses[0].LastTerminationState.Terminated != nil
	})
	// Its stdout and stderr come through pipes of their own: their lines
	// are in the log in either order.
	term := p.Status.ContainerStatuses[0].LastTerminationState.Terminated
	if msg := term.Message; term.ExitCode != 3 || len(msg) != len("starting\nno config at /etc/app.conf\n") ||
		!strings.Contains(msg, "starting\n") || !strings.Contains(msg, "no config at /etc/app.conf\n") {
		t.Errorf("last-words ended with %d and message %q: want 3 and its log", term.ExitCode, msg)
	}
}

// TestContainerdRestart: the agent's containerd dies, the agent starts
// it again and goes on with it: the running pod keeps its container and
// process, and a pod created afterwards runs.
func TestContainerdRestart(t *testing.T) {
	if !netnstest.Enter(t) {
		return
	}
	n := startNode(t)
	ctx := context.Background()
	mk := func(name string) {
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
			Spec: corev1.PodSpec{NodeName: n.name, TerminationGracePeriodSeconds: new(int64(1)), Containers: []corev1.Container{{
				Name: "main", Image: busybox, ImagePullPolicy: corev1.PullNever, Command: []string{"sleep", "3600"},
			}}},
		}
		if _, err := n.client.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	mk("before")
	before := n.waitPod(t, "before", "Running", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodRunning })

	config := filepath.Join(n.dir, agent.ContainerdDir)
	pid := containerdPID(t, config)
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	wait.For(t, 60*time.Second, "containerd started again", func() (bool, string) {
		n.running(t)
		now := findContainerd(config)
		return now != 0 && now != pid, fmt.Sprintf("containerd %d", now)
	})

	mk("after")
	n.waitPod(t, "after", "Running", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodRunning })
	p := n.waitPod(t, "before", "Running", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodRunning })
	b, a := before.Status.ContainerStatuses[0], p.Status.ContainerStatuses[0]
	if a.ContainerID != b.ContainerID || a.RestartCount != 0 || a.State.Running == nil || !a.State.Running.StartedAt.Equal(&b.State.Running.StartedAt) {
		t.Errorf("after containerd's restart: %s restarts=%d %+v; before: %s %+v", a.ContainerID, a.RestartCount, a.State, b.ContainerID, b.State)
	}
}

// containerdPID returns the process of the containerd whose config is
// under dir, failing the test if none runs.
func containerdPID(t *testing.T, dir string) int {
	t.Helper()
	pid := findContainerd(dir)
	if pid == 0 {
		t.Fatalf("no containerd runs with its config under %s", dir)
	}
	return pid
}

// findContainerd returns the process of the containerd whose config is
// under dir, or 0.
func findContainerd(dir string) int {
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || nodetest.Zombie(pid) {
			continue
		}
		f := strings.Fields(nodetest.Cmdline(pid))
		if len(f) == 3 && filepath.Base(f[0]) == "containerd" && f[1] == "--config" && strings.HasPrefix(f[2], dir+"/") {
			return pid
		}
	}
	return 0
}
