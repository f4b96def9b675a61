package agent_test

import (
	"context"
	"crypto/ed25519"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/outpost-mesh/outpost/edge/agent"
	edgeruntime "github.com/outpost-mesh/outpost/edge/runtime"
	"github.com/outpost-mesh/outpost/edge/runtime/fake"
	fwv1 "github.com/outpost-mesh/outpost/firmware/apis/v1"
	"github.com/outpost-mesh/outpost/firmware/manifest"
	"github.com/outpost-mesh/outpost/internal/wait"
	"github.com/outpost-mesh/outpost/sync/view"
)

// execRecorder answers the fake runtime's Exec with a code and output
// the test sets, and records the commands it ran.
type execRecorder struct {
	mu   sync.Mutex
	code int
	out  string
	ran  []string // "pod/container: argv"
}

func (r *execRecorder) exec(_ context.Context, pod edgeruntime.PodRef, c string, opts edgeruntime.ExecOptions) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ran = append(r.ran, fmt.Sprintf("%s/%s: %s", pod.Name, c, strings.Join(opts.Command, " ")))
	if opts.Stdout != nil && r.out != "" {
		fmt.Fprint(opts.Stdout, r.out)
	}
	return r.code, nil
}

func (r *execRecorder) calls() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.ran...)
}

// TestFirmwareHealthChecks: a release's signed exec check runs in the
// trial against the node's copy of a DaemonSet's pod (selected by the
// DaemonSet's name, in its first container) and a check of a pod the node
// does not run is skipped. A check that passes lets the node commit,
// saying which check it skipped; one that fails has it revert when its
// window ends, with HealthCheckFailed and the check's name and output.
func TestFirmwareHealthChecks(t *testing.T) {
	for _, tt := range []struct {
		name   string
		code   int
		window time.Duration
	}{
		{name: "pass", code: 0, window: 6 * time.Second},
		{name: "fail", code: 1, window: 3 * time.Second},
	} {
		t.Run(tt.name, func(t *testing.T) {
			pub, key, _ := ed25519.GenerateKey(nil)
			src := checkedRelease(t, key)
			slots := &fakeSlots{st: agent.SlotState{Committed: "1.0.0", Highest: "1.0.0"}}
			h, ns := startFirmwareHub(t)
			pod := daemonSetPod()
			if err := h.x.Apply([]view.Event{trustEvent(t, 1, pub), {Revision: 2, Key: podKey(pod.Name), Raw: encode(t, pod)}}); err != nil {
				t.Fatal(err)
			}
			ex := &execRecorder{code: tt.code, out: "app not ready\n"}
			rt := fake.New(fake.Config{Exec: ex.exec})
			dir := t.TempDir()
			ta := firmwareAgent(t, dir, rt, h, slots, src)

			// The pod runs; then the release is offered, installed, and
			// the agent stops to restart into it.
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			errc := startAgent(t, ctx, ta)
			wait.For(t, waitLong, "the pod running", func() (bool, string) {
				p := runtimePod(t, rt, pod.Name)
				return p != nil && len(p.Containers) == 2, fmt.Sprintf("%+v", p)
			})
			if err := h.x.Apply([]view.Event{offerEvent(t, 3, "r2", "2.0.0", tt.window)}); err != nil {
				t.Fatal(err)
			}
			waitRestart(t, errc, "into the release")
			if got := ex.calls(); len(got) != 0 {
				t.Fatalf("health checks ran before the trial: %q", got)
			}

			// The trial, in a new agent.
			if tt.code == 0 {
				run(t, ta)
				wait.For(t, waitLong, "trial committed", func() (bool, string) {
					n := ns.firmware()
					return n != nil && n.State == fwv1.StateUpdated && n.Version == "2.0.0", fmt.Sprintf("%+v", n)
				})
				if n := ns.firmware(); !strings.Contains(n.Message, "health check modem skipped") {
					t.Errorf("committed with message %q, want the skipped check named", n.Message)
				}
			} else {
				waitRestart(t, startAgent(t, ctx, ta), "the trial reverted")
				st := slots.State()
				if st.Trial != nil || len(st.Failed) != 1 || st.Failed[0] != "2.0.0" || st.Committed != "1.0.0" {
					t.Fatalf("slots after the window: %+v", st)
				}
				slots.mu.Lock()
				reason, msg := slots.reason, slots.message
				slots.mu.Unlock()
				if reason != agent.ReasonHealthCheckFailed || !strings.Contains(msg, "health check app:") || !strings.Contains(msg, "app not ready") {
					t.Fatalf("reverted with %s %q, want %s naming check app and its output", reason, msg, agent.ReasonHealthCheckFailed)
				}
				b, err := os.ReadFile(filepath.Join(dir, agent.FirmwareDir, "report.json"))
				if err != nil {
					t.Fatal(err)
				}
				n, err := fwv1.DecodeNodeFirmware(string(b))
				if err != nil || n.State != fwv1.StateReverted || n.Reason != agent.ReasonHealthCheckFailed || n.Message != msg {
					t.Fatalf("the node's report %+v, %v; want Reverted with %s %q", n, err, agent.ReasonHealthCheckFailed, msg)
				}
			}
			got := ex.calls()
			if len(got) == 0 {
				t.Fatal("the health check never ran")
			}
			for _, c := range got {
				if c != "gateway-app-x7k2p/app: /bin/check --quick" {
					t.Fatalf("ran %q, want only the app check in the pod's first container", got)
				}
			}
		})
	}
}

// TestFirmwareHealthChecksFromHub: a trial with no record of its health
// checks (lost, or never written by what installed the release) fetches
// the release's manifest from the hub, verifies it, and runs its checks:
// the one that fails reverts the node with HealthCheckFailed.
func TestFirmwareHealthChecksFromHub(t *testing.T) {
	pub, key, _ := ed25519.GenerateKey(nil)
	src := checkedRelease(t, key)
	slots := &fakeSlots{st: agent.SlotState{Committed: "1.0.0", Highest: "1.0.0",
		Trial: &agent.SlotTrial{Release: "r2", Version: "2.0.0", Deadline: time.Now().Add(6 * time.Second), Window: 6 * time.Second, Agent: true}}}
	h := startHub(t)
	pod := daemonSetPod()
	if err := h.x.Apply([]view.Event{trustEvent(t, 1, pub), {Revision: 2, Key: podKey(pod.Name), Raw: encode(t, pod)}}); err != nil {
		t.Fatal(err)
	}
	ex := &execRecorder{code: 3}
	ta := firmwareAgent(t, t.TempDir(), fake.New(fake.Config{Exec: ex.exec}), h, slots, src)
	waitRestart(t, startAgent(t, context.Background(), ta), "the trial reverted")
	slots.mu.Lock()
	defer slots.mu.Unlock()
	if slots.reason != agent.ReasonHealthCheckFailed || !strings.Contains(slots.message, "health check app:") || !strings.Contains(slots.message, "exited with code 3") {
		t.Fatalf("reverted with %s %q, want %s naming check app", slots.reason, slots.message, agent.ReasonHealthCheckFailed)
	}
}

// checkedRelease returns a source holding release r2, version 2.0.0 of
// an agent signed with key, with two exec checks: app, of the pods of
// DaemonSet default/gateway-app, and modem, of a pod no node runs.
func checkedRelease(t *testing.T, key ed25519.PrivateKey) *memSource {
	t.Helper()
	artifact := []byte(strings.Repeat("new agent ", 500))
	c, err := manifest.BuildComponent("agent", manifest.KindAgent, "linux", "amd64", "", strings.NewReader(string(artifact)), 4096)
	if err != nil {
		t.Fatal(err)
	}
	env, err := manifest.Sign(&manifest.Manifest{Name: "r2", Version: "2.0.0", Components: []manifest.Component{c},
		Created: time.Now().Add(-time.Hour).UTC().Truncate(time.Second), Expires: time.Now().Add(time.Hour).UTC().Truncate(time.Second),
		HealthChecks: []manifest.HealthCheck{
			{Name: "app", Namespace: "default", Pod: "gateway-app", Exec: []string{"/bin/check", "--quick"}},
			{Name: "modem", Namespace: "default", Pod: "modem", Exec: []string{"true"}},
		}}, key)
	if err != nil {
		t.Fatal(err)
	}
	return &memSource{envelopes: map[string][]byte{"r2": env}, blobs: map[string][]byte{c.SHA256: artifact}}
}

// daemonSetPod returns the node's copy of DaemonSet default/gateway-app's
// pod, of two containers.
func daemonSetPod() *corev1.Pod {
	yes := true
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "gateway-app-x7k2p", Namespace: "default", UID: "uid-app",
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "DaemonSet", Name: "gateway-app", UID: "uid-ds", Controller: &yes}}},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "app", Image: "app:1"}, {Name: "sidecar", Image: "side:1"}}},
	}
}
