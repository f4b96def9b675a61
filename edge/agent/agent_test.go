package agent_test

// These tests run the agent on the fake runtime with no hub at all: its
// address is a UDP port nobody listens on. The agent must run what its
// data directory says (static manifests, the checkpointed view) all the
// same, and keep it running.

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"

	"github.com/outpost-mesh/outpost/edge/agent"
	"github.com/outpost-mesh/outpost/edge/checkpoint"
	edgeruntime "github.com/outpost-mesh/outpost/edge/runtime"
	"github.com/outpost-mesh/outpost/edge/runtime/fake"
	"github.com/outpost-mesh/outpost/internal/testca"
	"github.com/outpost-mesh/outpost/internal/testlog"
	"github.com/outpost-mesh/outpost/internal/wait"
	"github.com/outpost-mesh/outpost/sync/wire"
)

const (
	node     = "edge-1"
	waitLong = 15 * time.Second
)

// deadHub returns the address of a UDP port nobody listens on.
func deadHub(t *testing.T) string {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := pc.LocalAddr().String()
	pc.Close()
	return addr
}

// testAgent is an agent's configuration and what the test watches of it.
type testAgent struct {
	cfg    agent.Config
	rounds *atomic.Int64 // calls of the agent's clock: it advances every round
	ahead  *atomic.Int64 // how far the agent's clock runs ahead of the wall's
}

// newAgentConfig returns the configuration of an agent on dir and rt that
// has a token to join a hub that is not there.
func newAgentConfig(t *testing.T, dir string, rt *fake.Runtime) testAgent {
	t.Helper()
	cfg := agent.DefaultConfig()
	cfg.NodeName = node
	cfg.DataDir = dir
	cfg.HubAddr = deadHub(t)
	cfg.Token = "abcdef.0123456789abcdef"
	cfg.CAHash = "sha256:" + strings.Repeat("ab", 32)
	cfg.Runtime = rt
	cfg.RuntimeVersion = "fake://test"
	cfg.Capacity = agent.Capacity{CPUMillis: 2000, MemoryBytes: 2 << 30, Pods: 20}
	cfg.Resync = 20 * time.Millisecond
	cfg.EventedResync = 20 * time.Millisecond
	cfg.GCInterval = 50 * time.Millisecond // runs alongside everything the tests do
	cfg.Sync.MinBackoff, cfg.Sync.MaxBackoff = 50*time.Millisecond, time.Second
	cfg.Sync.IdleTimeout, cfg.Sync.KeepAlive = 2*time.Second, 500*time.Millisecond
	cfg.Logger = testlog.New(t, slog.LevelInfo)
	rounds, ahead := new(atomic.Int64), new(atomic.Int64)
	cfg.Clock = func() time.Time {
		rounds.Add(1)
		return time.Now().Add(time.Duration(ahead.Load()))
	}
	return testAgent{cfg: cfg, rounds: rounds, ahead: ahead}
}

// run runs the agent until the returned stop is called or the test ends;
// stop fails the test unless Run returns nil promptly.
func run(t *testing.T, ta testAgent) (stop func()) {
	t.Helper()
	a, err := agent.New(ta.cfg)
	if err != nil {
		t.Fatal(err)
	}
	bg := wait.Start(t, waitLong, "agent Run", a.Run)
	stop = func() {
		t.Helper()
		if err := bg.Stop(); err != nil {
			t.Errorf("Run = %v, want nil after its context ended", err)
		}
	}
	t.Cleanup(stop)
	return stop
}

// afterRounds waits until the agent has gone through at least n more
// rounds of its loop.
func (ta testAgent) afterRounds(t *testing.T, n int64) {
	t.Helper()
	from := ta.rounds.Load()
	wait.For(t, waitLong, fmt.Sprintf("%d rounds", n), func() (bool, string) {
		got := ta.rounds.Load() - from
		return got >= n, fmt.Sprintf("%d rounds", got)
	})
}

// runtimePod returns the runtime's pod of that name, or nil.
func runtimePod(t *testing.T, rt *fake.Runtime, name string) *edgeruntime.PodStatus {
	t.Helper()
	ps, err := rt.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for i := range ps {
		if ps[i].Pod.Name == name {
			return &ps[i]
		}
	}
	return nil
}

// running returns a condition: the runtime runs container main of each
// pod named.
func running(t *testing.T, rt *fake.Runtime, names ...string) func() (bool, string) {
	return func() (bool, string) {
		for _, n := range names {
			p := runtimePod(t, rt, n)
			if p == nil {
				return false, n + " not in the runtime"
			}
			if c := p.Container("main"); c == nil || c.State != edgeruntime.StateRunning {
				return false, fmt.Sprintf("%s: %+v", n, p.Containers)
			}
		}
		return true, ""
	}
}

// writeIdentity writes a node certificate, its key and a CA into dir, as
// a node that joined once has them.
func writeIdentity(t *testing.T, dir string) {
	t.Helper()
	ca := testca.New(t)
	cert := ca.Node(t, node)
	for name, b := range map[string][]byte{
		"node.key": testca.KeyPEM(t, cert),
		"node.crt": testca.CertPEM(cert.Certificate[0]),
		"ca.crt":   testca.CertPEM(ca.Cert.Raw),
	} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// writeManifest writes a static pod manifest.
func writeManifest(t *testing.T, dir, file, content string) {
	t.Helper()
	md := filepath.Join(dir, agent.ManifestsDir)
	if err := os.MkdirAll(md, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(md, file), []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

const webManifest = `apiVersion: v1
kind: Pod
metadata:
  name: web
spec:
  containers:
  - name: main
    image: nginx:1.27
`

// The objects of the view, encoded as the hub stores and sends them.
var (
	testScheme = func() *runtime.Scheme {
		s := runtime.NewScheme()
		utilruntime.Must(corev1.AddToScheme(s))
		return s
	}()
	testCodec = protobuf.NewSerializer(testScheme, testScheme)
)

func encode(t *testing.T, obj runtime.Object) []byte {
	t.Helper()
	gvks, _, err := testScheme.ObjectKinds(obj)
	if err != nil {
		t.Fatal(err)
	}
	obj.GetObjectKind().SetGroupVersionKind(gvks[0])
	var buf bytes.Buffer
	if err := testCodec.Encode(obj, &buf); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func decodePod(t *testing.T, raw []byte) *corev1.Pod {
	t.Helper()
	var p corev1.Pod
	if _, _, err := testCodec.Decode(raw, nil, &p); err != nil {
		t.Fatalf("decode pod: %v", err)
	}
	return &p
}

// openCheckpoint opens the checkpoint of an agent's data dir, which no
// agent runs on; the test's end closes it.
func openCheckpoint(t *testing.T, dir string) *checkpoint.Store {
	t.Helper()
	cp, err := checkpoint.Open(filepath.Join(dir, agent.CheckpointDir), checkpoint.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cp.Close() })
	return cp
}

// outbox returns the pending outbox entries of an agent's data dir.
func outbox(t *testing.T, dir string) []wire.StatusItem {
	t.Helper()
	cp := openCheckpoint(t, dir)
	items, err := cp.Pending(0)
	if err != nil {
		t.Fatal(err)
	}
	cp.Close()
	return items
}

// findItem returns the outbox entry of kind and key, or nil.
func findItem(items []wire.StatusItem, kind wire.StatusKind, key wire.Key) *wire.StatusItem {
	for i := range items {
		if items[i].Kind == kind && items[i].Key == key {
			return &items[i]
		}
	}
	return nil
}

func podKey(name string) wire.Key {
	return wire.Key{Resource: wire.ResourcePods, Namespace: "default", Name: name}
}

// TestStaticPodsWithoutHub: the static pods of the manifests directory run
// although the node never reached its hub, and a bad manifest does not
// keep the good one from running. The node's status and the mirror pods
// wait in the outbox.
func TestStaticPodsWithoutHub(t *testing.T) {
	dir := t.TempDir()
	writeManifest(t, dir, "web.yaml", webManifest)
	writeManifest(t, dir, "broken.yaml", "{{{ this is not yaml")
	writeManifest(t, dir, "deploy.yaml", "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: d\n")
	writeManifest(t, dir, "noname.json", `{"apiVersion": "v1", "kind": "Pod", "spec": {"containers": [{"name": "main", "image": "x"}]}}`)
	writeManifest(t, dir, "README.txt", "not a manifest")
	rt := fake.New(fake.Config{})
	ta := newAgentConfig(t, dir, rt)
	logs := testlog.NewRecorder(t, slog.LevelInfo)
	ta.cfg.Logger = slog.New(logs)
	stop := run(t, ta)

	wait.For(t, waitLong, "static pod running", running(t, rt, "web-"+node))
	if ps, _ := rt.List(context.Background()); len(ps) != 1 {
		t.Errorf("the runtime holds %d pods, want only the good manifest's", len(ps))
	}
	// The bad manifests are reported once each, not at every round.
	ta.afterRounds(t, 10)
	if got := logs.Count("static pod manifest not used"); got != 3 {
		t.Errorf("%d warnings of manifests not used, want 3: one per bad manifest", got)
	}
	// A second static pod comes and goes: its mirror is removed.
	writeManifest(t, dir, "cache.yaml", strings.ReplaceAll(webManifest, "web", "cache"))
	wait.For(t, waitLong, "second static pod running", running(t, rt, "cache-"+node))
	ta.afterRounds(t, 3)
	if err := os.Remove(filepath.Join(dir, agent.ManifestsDir, "cache.yaml")); err != nil {
		t.Fatal(err)
	}
	wait.For(t, waitLong, "second static pod removed", func() (bool, string) {
		p := runtimePod(t, rt, "cache-"+node)
		return p == nil, fmt.Sprint(p)
	})
	ta.afterRounds(t, 3)
	stop()

	items := outbox(t, dir)
	if findItem(items, wire.KindNodeStatus, wire.Key{Resource: wire.ResourceNodes, Name: node}) == nil {
		t.Errorf("no node status in the outbox")
	}
	it := findItem(items, wire.KindMirrorPod, podKey("web-"+node))
	if it == nil {
		t.Fatalf("no mirror pod of web in the outbox: %v", items)
	}
	m := decodePod(t, it.Object)
	if m.Annotations[agent.AnnotationConfigMirror] == "" || m.Spec.NodeName != node || m.Status.Phase != corev1.PodRunning {
		t.Errorf("mirror pod: annotations %v, node %q, phase %q; want a mirror annotation, node %s, Running", m.Annotations, m.Spec.NodeName, m.Status.Phase, node)
	}
	if findItem(items, wire.KindMirrorPodDelete, podKey("cache-"+node)) == nil {
		t.Errorf("no removal of the mirror of the static pod whose manifest went away")
	}
	if findItem(items, wire.KindMirrorPodDelete, podKey("web-"+node)) != nil {
		t.Errorf("removal of the mirror of web, whose manifest is there")
	}
}

// TestRestartAdoptsPods: an agent restarted on the same data dir and
// runtime adopts what runs without restarting it. A static pod whose
// manifest changes is replaced, mirror included; one whose manifest went
// away while the agent was down stops, and its mirror is removed.
func TestRestartAdoptsPods(t *testing.T) {
	dir := t.TempDir()
	writeManifest(t, dir, "web.yaml", webManifest)
	rt := fake.New(fake.Config{})
	ta := newAgentConfig(t, dir, rt)
	stop := run(t, ta)
	wait.For(t, waitLong, "static pod running", running(t, rt, "web-"+node))
	ta.afterRounds(t, 5)
	stop()
	before := rt.Stats()
	id := runtimePod(t, rt, "web-"+node).Container("main").ID
	sent := findItem(outbox(t, dir), wire.KindMirrorPod, podKey("web-"+node))
	if sent == nil {
		t.Fatal("no mirror pod in the outbox")
	}

	ta = newAgentConfig(t, dir, rt)
	stop = run(t, ta)
	ta.afterRounds(t, 20)
	if after := rt.Stats(); after != before {
		t.Errorf("runtime calls after the restart: %+v, before %+v: the agent restarted what ran", after, before)
	}
	if got := runtimePod(t, rt, "web-"+node).Container("main").ID; got != id {
		t.Errorf("container %s replaced by %s", id, got)
	}
	// The status is what the last run reported: it is not sent again.
	stop()
	if again := findItem(outbox(t, dir), wire.KindMirrorPod, podKey("web-"+node)); again == nil || again.Seq != sent.Seq {
		t.Errorf("mirror pod in the outbox after the restart: %+v, want the same entry as before, seq %d", again, sent.Seq)
	}
	ta = newAgentConfig(t, dir, rt)
	stop = run(t, ta)

	// The manifest changes: the new pod replaces the old one, and so
	// does its mirror, which must not be removed after it was sent.
	oldUID := runtimePod(t, rt, "web-"+node).Pod.UID
	writeManifest(t, dir, "web.yaml", strings.ReplaceAll(webManifest, "nginx:1.27", "nginx:1.28"))
	wait.For(t, waitLong, "new static pod running", func() (bool, string) {
		p := runtimePod(t, rt, "web-"+node)
		if p == nil || p.Pod.UID == oldUID {
			return false, "the old pod runs"
		}
		ps, _ := rt.List(context.Background())
		return len(ps) == 1, fmt.Sprintf("%d pods", len(ps))
	})
	wait.For(t, waitLong, "new static pod running", running(t, rt, "web-"+node))
	ta.afterRounds(t, 5)
	stop()
	items := outbox(t, dir)
	mirror, del := findItem(items, wire.KindMirrorPod, podKey("web-"+node)), findItem(items, wire.KindMirrorPodDelete, podKey("web-"+node))
	if mirror == nil || del != nil && del.Seq > mirror.Seq {
		t.Errorf("after the manifest changed: mirror %v, removal %v; want the new mirror last", mirror != nil, del != nil)
	}

	// The manifest goes while the agent is down: once back, it stops the
	// pod and has the hub remove its mirror, which only its previous run
	// sent.
	if err := os.Remove(filepath.Join(dir, agent.ManifestsDir, "web.yaml")); err != nil {
		t.Fatal(err)
	}
	ta = newAgentConfig(t, dir, rt)
	stop = run(t, ta)
	wait.For(t, waitLong, "static pod removed", func() (bool, string) {
		p := runtimePod(t, rt, "web-"+node)
		return p == nil, fmt.Sprint(p)
	})
	ta.afterRounds(t, 5)
	stop()
	items = outbox(t, dir)
	mirror, del = findItem(items, wire.KindMirrorPod, podKey("web-"+node)), findItem(items, wire.KindMirrorPodDelete, podKey("web-"+node))
	if del == nil || mirror != nil && mirror.Seq > del.Seq {
		t.Errorf("after the manifest went: mirror %v, removal %v; want the removal last", mirror != nil, del != nil)
	}
}

// envRecorder records the environment of every container the fake runtime
// starts, as the runtime got it.
type envRecorder struct {
	mu  sync.Mutex
	env map[string][]edgeruntime.EnvVar // by pod/container
}

func (r *envRecorder) behave(pod edgeruntime.PodRef, c edgeruntime.ContainerSpec, _ int) fake.Behavior {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.env[pod.Name+"/"+c.Name] = slices.Clone(c.Env)
	return fake.Behavior{}
}

// effective returns the environment the container sees: a later variable
// of a name overrides an earlier one.
func (r *envRecorder) effective(pc string) map[string]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string]string{}
	for _, e := range r.env[pc] {
		out[e.Name] = e.Value
	}
	return out
}

// TestCheckpointedPodsWithoutHub: a node that joined once runs the pods of
// its checkpoint with no hub, with their environment from the checkpoint's
// configmaps and secrets, and keeps them running; a pod whose configmap is
// missing waits with CreateContainerConfigError in the status it reports.
func TestCheckpointedPodsWithoutHub(t *testing.T) {
	dir := t.TempDir()
	writeIdentity(t, dir)
	optional := true
	web := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default", UID: "uid-web"},
		Spec: corev1.PodSpec{NodeName: node, RestartPolicy: corev1.RestartPolicyAlways, Containers: []corev1.Container{{
			Name: "main", Image: "nginx:1.27",
			EnvFrom: []corev1.EnvFromSource{
				{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "cfg"}}},
				{Prefix: "OPT_", ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "absent"}, Optional: &optional}},
			},
			Env: []corev1.EnvVar{
				{Name: "MODE", Value: "literal"}, // overrides the configmap's MODE
				{Name: "PASSWORD", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "db"}, Key: "password"}}},
				{Name: "LEVEL", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "cfg"}, Key: "level"}}},
				{Name: "POD", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
			},
		}}},
	}
	broken := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "broken", Namespace: "default", UID: "uid-broken"},
		Spec: corev1.PodSpec{NodeName: node, RestartPolicy: corev1.RestartPolicyAlways, Containers: []corev1.Container{{
			Name: "main", Image: "nginx:1.27",
			EnvFrom: []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "missing"}}}},
		}}},
	}
	elsewhere := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "elsewhere", Namespace: "default", UID: "uid-elsewhere"},
		Spec:       corev1.PodSpec{NodeName: "edge-2", Containers: []corev1.Container{{Name: "main", Image: "nginx"}}},
	}
	cfg := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cfg", Namespace: "default"}, Data: map[string]string{"MODE": "from-configmap", "level": "debug"}}
	db := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: "default"}, Data: map[string][]byte{"password": []byte("s3cret")}}
	cp := openCheckpoint(t, dir)
	put := func(key wire.Key, rev int64, obj runtime.Object) wire.Change {
		return wire.Change{Op: wire.OpPut, Key: key, Revision: rev, Object: encode(t, obj)}
	}
	if err := cp.ApplyBatch([]wire.Change{
		put(wire.Key{Resource: wire.ResourceConfigMaps, Namespace: "default", Name: "cfg"}, 3, cfg),
		put(wire.Key{Resource: wire.ResourceSecrets, Namespace: "default", Name: "db"}, 4, db),
		put(podKey("web"), 5, web),
		put(podKey("broken"), 6, broken),
		put(podKey("elsewhere"), 7, elsewhere),
	}, 7); err != nil {
		t.Fatal(err)
	}
	cp.Close()

	envs := &envRecorder{env: map[string][]edgeruntime.EnvVar{}}
	rt := fake.New(fake.Config{Behavior: envs.behave})
	ta := newAgentConfig(t, dir, rt)
	stop := run(t, ta)
	wait.For(t, waitLong, "web running", running(t, rt, "web"))
	want := map[string]string{"MODE": "literal", "level": "debug", "PASSWORD": "s3cret", "LEVEL": "debug", "POD": "web"}
	if got := envs.effective("web/main"); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("environment of web: %v, want %v", got, want)
	}

	// No hub, ever: nothing stops.
	ta.afterRounds(t, 30)
	if !func() bool { ok, _ := running(t, rt, "web")(); return ok }() {
		t.Errorf("web stopped without the hub")
	}
	if s := rt.Stats(); s.Stops != 0 || s.Removes != 0 {
		t.Errorf("runtime: %d stops, %d removes without the hub, want none", s.Stops, s.Removes)
	}
	if p := runtimePod(t, rt, "elsewhere"); p != nil {
		t.Errorf("the runtime runs another node's pod")
	}
	if p := runtimePod(t, rt, "broken"); p != nil && p.Container("main") != nil && p.Container("main").State == edgeruntime.StateRunning {
		t.Errorf("broken runs without its configmap")
	}
	stop()

	items := outbox(t, dir)
	it := findItem(items, wire.KindPodStatus, podKey("broken"))
	if it == nil {
		t.Fatalf("no status of broken in the outbox")
	}
	st := decodePod(t, it.Object)
	if st.UID != types.UID("uid-broken") || len(st.Status.ContainerStatuses) != 1 {
		t.Fatalf("status of broken: uid %q, %d container statuses", st.UID, len(st.Status.ContainerStatuses))
	}
	w := st.Status.ContainerStatuses[0].State.Waiting
	if w == nil || w.Reason != "CreateContainerConfigError" || !strings.Contains(w.Message, "missing") {
		t.Errorf("broken's container: %+v, want waiting with CreateContainerConfigError naming configmap missing", st.Status.ContainerStatuses[0].State)
	}
	if st.Status.Phase != corev1.PodPending {
		t.Errorf("broken is %q, want Pending", st.Status.Phase)
	}
	it = findItem(items, wire.KindPodStatus, podKey("web"))
	if it == nil {
		t.Fatalf("no status of web in the outbox")
	}
	if st := decodePod(t, it.Object); st.Status.Phase != corev1.PodRunning {
		t.Errorf("web is %q in its last status, want Running", st.Status.Phase)
	}
}
