package podint

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/outpost-mesh/outpost/internal/netnstest"
)

// TestSecurityContext: a pod's securityContext holds inside its
// container: its user and groups (fsGroup among them, owning its
// emptyDir), a read-only root filesystem, no capabilities, no privilege
// escalation, the runtime's default seccomp filter; and a container that
// must not run as root, in an image that would, is refused with kubelet's
// words.
func TestSecurityContext(t *testing.T) {
	if !netnstest.Enter(t) {
		return
	}
	n := startNode(t)
	ctx := context.Background()
	no := false
	check := strings.Join([]string{
		`set -e`,
		`[ "$(id -u)" = 1000 ] && [ "$(id -g)" = 3000 ]`,
		`id -G | grep -qw 2000`,
		`! touch /root-is-writable 2>/dev/null`,
		`touch /data/written`,
		`[ "$(stat -c %g /data)" = 2000 ]`,
		`grep -q '^CapEff:[[:space:]]*0000000000000000$' /proc/self/status`,
		`grep -q '^NoNewPrivs:[[:space:]]*1$' /proc/self/status`,
		`grep -q '^Seccomp:[[:space:]]*2$' /proc/self/status`,
		`echo "uid=$(id -u) groups=$(id -G)" > /dev/termination-log`,
	}, "\n")
	pods := []*corev1.Pod{
		{
			ObjectMeta: metav1.ObjectMeta{Name: "confined", Namespace: "default"},
			Spec: corev1.PodSpec{
				NodeName: n.name, RestartPolicy: corev1.RestartPolicyNever,
				SecurityContext: &corev1.PodSecurityContext{
					RunAsUser: new(int64(1000)), RunAsGroup: new(int64(3000)), FSGroup: new(int64(2000)),
					SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
				},
				Volumes: []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}},
				Containers: []corev1.Container{{
					Name: "main", Image: busybox, ImagePullPolicy: corev1.PullNever,
					Command:      []string{"sh", "-c", check},
					VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: "/data"}},
					SecurityContext: &corev1.SecurityContext{
						ReadOnlyRootFilesystem:   new(true),
						AllowPrivilegeEscalation: &no,
						Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
					},
				}},
			},
		},
		{
			ObjectMeta: metav1.ObjectMeta{Name: "not-root", Namespace: "default"},
			Spec: corev1.PodSpec{
				NodeName:        n.name,
				SecurityContext: &corev1.PodSecurityContext{RunAsNonRoot: new(true)},
				Containers: []corev1.Container{{
					Name: "main", Image: busybox, ImagePullPolicy: corev1.PullNever, Command: []string{"sleep", "3600"},
				}},
			},
		},
	}
	for _, p := range pods {
		if _, err := n.client.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	p := n.waitPod(t, "confined", "ended", func(p *corev1.Pod) bool {
		return p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed
	})
	if p.Status.Phase != corev1.PodSucceeded {
		term := p.Status.ContainerStatuses[0].State.Terminated
		t.Fatalf("confined %s: a check failed in the container: exit %d %q", p.Status.Phase, term.ExitCode, term.Message)
	}
	if msg := p.Status.ContainerStatuses[0].State.Terminated.Message; !strings.HasPrefix(msg, "uid=1000 groups=3000") || !strings.Contains(msg, "2000") {
		t.Errorf("confined said %q, want its uid 1000 and groups 3000 and 2000", msg)
	}

	p = n.waitPod(t, "not-root", "refused", func(p *corev1.Pod) bool {
		w := waitingOf(p)
		return w != nil && w.Reason == "CreateContainerConfigError"
	})
	if msg := waitingOf(p).Message; !strings.Contains(msg, "runAsNonRoot") || !strings.Contains(msg, "root") {
		t.Errorf("not-root waits with %q: want kubelet's words about runAsNonRoot and root", msg)
	}
}

// waitingOf returns the waiting state of the pod's only container, or nil.
func waitingOf(p *corev1.Pod) *corev1.ContainerStateWaiting {
	if len(p.Status.ContainerStatuses) != 1 {
		return nil
	}
	return p.Status.ContainerStatuses[0].State.Waiting
}
