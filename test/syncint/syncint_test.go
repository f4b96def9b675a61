// Package syncint tests the hub and edge agents together in one process:
// a real hub (API, store, QUIC sync endpoint) and agents on the fake
// runtime, through the real sync protocol on loopback.
package syncint

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/util/retry"

	"github.com/quic-go/quic-go"

	"github.com/outpost-mesh/outpost/edge/agent"
	edgeruntime "github.com/outpost-mesh/outpost/edge/runtime"
	"github.com/outpost-mesh/outpost/edge/runtime/fake"
	"github.com/outpost-mesh/outpost/hub/auth"
	"github.com/outpost-mesh/outpost/hub/hubd"
	"github.com/outpost-mesh/outpost/internal/netem"
	"github.com/outpost-mesh/outpost/internal/testlog"
	"github.com/outpost-mesh/outpost/internal/wait"
	"github.com/outpost-mesh/outpost/sync/wire"
)

// hub is a hub running for a test.
type hub struct {
	h      *hubd.Hub
	client kubernetes.Interface
	caHash string
	roots  *x509.CertPool // the hub CA
	stop   func()         // stops the hub and waits; the test's end does too
}

func startHub(t *testing.T, dir string) *hub {
	t.Helper()
	return startHubWith(t, dir, func(*hubd.Config) {})
}

// startHubWith starts a hub whose configuration change has changed.
func startHubWith(t *testing.T, dir string, change func(*hubd.Config)) *hub {
	t.Helper()
	cfg := hubd.DefaultConfig(dir)
	cfg.APIAddr = "127.0.0.1:0"
	cfg.SyncAddr = "127.0.0.1:0"
	cfg.Logger = testlog.New(t, slog.LevelInfo)
	change(&cfg)
	h, err := hubd.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.Run(ctx) }()
	stop := sync.OnceFunc(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("hub Run = %v", err)
		}
	})
	t.Cleanup(stop)
	select {
	case <-h.Ready():
	case err := <-done:
		t.Fatalf("hub stopped: %v", err)
	case <-time.After(60 * time.Second):
		t.Fatal("hub not ready in 60s")
	}
	rc, err := clientcmd.BuildConfigFromFlags("", h.KubeconfigPath())
	if err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	caPEM, err := os.ReadFile(filepath.Join(dir, hubd.PKIDir, "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := pem.Decode(caPEM)
	ca, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca)
	return &hub{h: h, client: cs, caHash: wire.CAHash(ca), roots: roots, stop: stop}
}

// token creates a bootstrap token on the hub.
func (h *hub) token(t *testing.T, site string, ttl time.Duration) string {
	t.Helper()
	return h.tokenAt(t, site, ttl, time.Now())
}

// tokenAt creates a bootstrap token as if made at now.
func (h *hub) tokenAt(t *testing.T, site string, ttl time.Duration, now time.Time) string {
	t.Helper()
	id, secret := auth.GenerateToken()
	s := auth.NewBootstrapTokenSecret(id, secret, site, ttl, now)
	if _, err := h.client.CoreV1().Secrets(metav1.NamespaceSystem).Create(context.Background(), s, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return id + "." + secret
}

// runAgent runs an agent until the returned stop is called (or the test
// ends); the runtime is kept by the caller so a restarted agent adopts it.
func runAgent(t *testing.T, cfg agent.Config) (a *agent.Agent, stop func() error) {
	t.Helper()
	a, err := agent.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return a, wait.Start(t, time.Minute, "agent Run", a.Run).Stop
}

func agentConfig(t *testing.T, h *hub, node, token string, rt *fake.Runtime) agent.Config {
	cfg := agent.DefaultConfig()
	cfg.NodeName = node
	cfg.Site = "store-1"
	cfg.DataDir = filepath.Join(t.TempDir(), node)
	cfg.HubAddr = h.h.SyncAddr()
	cfg.Token = token
	cfg.CAHash = h.caHash
	cfg.Runtime = rt
	cfg.RuntimeVersion = "fake://test"
	cfg.Capacity = agent.Capacity{CPUMillis: 4000, MemoryBytes: 4 << 30, Pods: 110}
	cfg.Checkpoint.InMemory = false
	cfg.Logger = testlog.New(t, slog.LevelInfo).With("node", node)
	cfg.Sync.MinBackoff = 100 * time.Millisecond
	cfg.Sync.MaxBackoff = time.Second
	cfg.Resync = 200 * time.Millisecond
	return cfg
}

func pod(name, node, image string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: corev1.PodSpec{
			NodeName:   node,
			Containers: []corev1.Container{{Name: "main", Image: image}},
		},
	}
}

func TestJoinAndRunPod(t *testing.T) {
	ctx := context.Background()
	h := startHub(t, t.TempDir())
	tok := h.token(t, "store-1", time.Hour)
	rt := fake.New(fake.Config{})
	cfg := agentConfig(t, h, "edge-1", tok, rt)
	logs := testlog.NewRecorder(t, slog.LevelInfo)
	cfg.Logger = slog.New(logs).With("node", "edge-1")
	runAgent(t, cfg)

	wait.For(t, 20*time.Second, "node edge-1 Ready", func() (bool, string) {
		n, err := h.client.CoreV1().Nodes().Get(ctx, "edge-1", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		for _, c := range n.Status.Conditions {
			if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
				return n.Labels[wire.SiteLabel] == "store-1" && n.Labels[corev1.LabelArchStable] != "", fmt.Sprint(n.Labels)
			}
		}
		return false, fmt.Sprint(n.Status.Conditions)
	})
	if _, err := h.client.CoreV1().Pods("default").Create(ctx, pod("web", "edge-1", "nginx"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	wait.For(t, 20*time.Second, "pod web Running", func() (bool, string) {
		p, err := h.client.CoreV1().Pods("default").Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return p.Status.Phase == corev1.PodRunning, fmt.Sprintf("%s %v", p.Status.Phase, p.Status.ContainerStatuses)
	})
	wait.For(t, 20*time.Second, "lease of edge-1", func() (bool, string) {
		l, err := h.client.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(ctx, "edge-1", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return l.Spec.RenewTime != nil, "no renew time"
	})
	// The node's events about the pod are on the hub, found as kubectl
	// describe finds them.
	web, err := h.client.CoreV1().Pods("default").Get(ctx, "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	wait.For(t, 20*time.Second, "event Started of web", func() (bool, string) {
		evs, err := h.client.CoreV1().Events("default").List(ctx, metav1.ListOptions{
			FieldSelector: "involvedObject.kind=Pod,involvedObject.name=web,involvedObject.namespace=default,involvedObject.uid=" + string(web.UID),
		})
		if err != nil {
			return false, err.Error()
		}
		var seen []string
		for _, ev := range evs.Items {
			if ev.Reason == "Started" && ev.Source.Host == "edge-1" && ev.InvolvedObject.FieldPath == "spec.containers{main}" {
				return true, ""
			}
			seen = append(seen, ev.Reason+": "+ev.Message)
		}
		return false, fmt.Sprint(seen)
	})

	// Deleting the pod on the hub stops it on the edge, which confirms.
	if err := h.client.CoreV1().Pods("default").Delete(ctx, "web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	wait.For(t, 40*time.Second, "pod web gone", func() (bool, string) {
		_, err := h.client.CoreV1().Pods("default").Get(ctx, "web", metav1.GetOptions{})
		if err == nil {
			return false, "still there"
		}
		ps, _ := rt.List(ctx)
		return len(ps) == 0, fmt.Sprintf("runtime holds %d pods", len(ps))
	})
	// A confirmation that crossed the hub's deletion is not found, not
	// refused.
	if n := logs.Count("hub refused a status update"); n != 0 {
		t.Errorf("the hub refused %d status updates", n)
	}
}

// TestConfigMapFromBeforeRestart: a configmap written before the hub
// restarted, which no pod referenced then, so that the restarted hub's
// views never held its bytes, reaches the node of a pod that comes to
// reference it as it is stored: its container gets its data.
func TestConfigMapFromBeforeRestart(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	first := startHub(t, dir)
	value := strings.Repeat("outpost ", 32<<10) // 256 KB
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "settings", Namespace: "default"}, Data: map[string]string{"SETTINGS": value, "MODE": "edge"}}
	if _, err := first.client.CoreV1().ConfigMaps("default").Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	first.stop()

	h := startHub(t, dir)
	var mu sync.Mutex
	env := map[string]string{}
	rt := fake.New(fake.Config{Behavior: func(_ edgeruntime.PodRef, c edgeruntime.ContainerSpec, _ int) fake.Behavior {
		mu.Lock()
		defer mu.Unlock()
		for _, e := range c.Env {
			env[e.Name] = e.Value
		}
		return fake.Behavior{}
	}})
	a, _ := runAgent(t, agentConfig(t, h, "edge-1", h.token(t, "", time.Hour), rt))
	wait.For(t, 20*time.Second, "edge-1 connected", func() (bool, string) { return a.Connected(), "" })
	p := pod("app", "edge-1", "nginx")
	p.Spec.Containers[0].EnvFrom = []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "settings"}}}}
	if _, err := h.client.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	wait.For(t, 20*time.Second, "pod app Running", func() (bool, string) {
		p, err := podPhase(ctx, h, "app")
		if err != nil {
			return false, err.Error()
		}
		return p.Status.Phase == corev1.PodRunning, fmt.Sprintf("%s %v", p.Status.Phase, p.Status.ContainerStatuses)
	})
	mu.Lock()
	defer mu.Unlock()
	if env["SETTINGS"] != value || env["MODE"] != "edge" {
		t.Errorf("container env from the configmap: SETTINGS of %d bytes, MODE %q; want the %d bytes stored and %q", len(env["SETTINGS"]), env["MODE"], len(value), "edge")
	}
}

func TestJoinRefused(t *testing.T) {
	logs := testlog.NewRecorder(t, slog.LevelInfo)
	h := startHubWith(t, t.TempDir(), func(c *hubd.Config) { c.Logger = slog.New(logs) })
	expired := h.tokenAt(t, "", time.Minute, time.Now().Add(-time.Hour))
	// A token id that does not exist and a wrong secret are refused
	// alike, so that nobody learns which ids exist; the hub's log says
	// which it was.
	refused := auth.ErrTokenRefused.Error()
	for _, tc := range []struct {
		name, token, hash, want, logged string
	}{
		{"unknown token", "abcdef.0123456789abcdef", h.caHash, refused, "bootstrap token not found"},
		{"expired token", expired, h.caHash, "expired", ""},
		{"wrong secret", expired[:7] + "0000000000000000", h.caHash, refused, "bootstrap token secret does not match"},
		{"wrong CA hash", h.token(t, "", time.Hour), "sha256:" + strings.Repeat("ab", 32), "CA hash", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := agentConfig(t, h, "edge-x", tc.token, fake.New(fake.Config{}))
			cfg.CAHash = tc.hash
			a, err := agent.New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			err = a.Run(ctx)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Run = %v, want a refusal mentioning %q", err, tc.want)
			}
			if tc.logged != "" && !logs.Has("join refused: Unauthorized: "+refused+" ("+tc.logged) {
				t.Errorf("the hub's log does not say the join was refused for %q", tc.logged)
			}
			t.Logf("refused: %v", err)
		})
	}
}

// joiner speaks the join protocol as a node would, from one source
// address, each join on a stream of one connection.
type joiner struct {
	conn *quic.Conn
	csrs map[string][]byte // by node name
}

func newJoiner(t *testing.T, h *hub, src string) *joiner {
	t.Helper()
	pc, err := net.ListenPacket("udp", net.JoinHostPort(src, "0"))
	if err != nil {
		t.Fatal(err)
	}
	tr := &quic.Transport{Conn: pc}
	t.Cleanup(func() { tr.Close(); pc.Close() })
	to, err := net.ResolveUDPAddr("udp", h.h.SyncAddr())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := tr.Dial(ctx, to, &tls.Config{RootCAs: h.roots, ServerName: "127.0.0.1", NextProtos: []string{wire.ALPN}, MinVersion: tls.VersionTLS13}, nil)
	if err != nil {
		t.Fatalf("dial the hub from %s: %v", src, err)
	}
	t.Cleanup(func() { conn.CloseWithError(0, "") })
	return &joiner{conn: conn, csrs: map[string][]byte{}}
}

// join asks to admit node with token and returns the hub's answer, a
// JoinResponse or an Error.
func (j *joiner) join(t *testing.T, token, node string) wire.Message {
	t.Helper()
	csr, ok := j.csrs[node]
	if !ok {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		csr, err = x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{
			Subject: pkix.Name{CommonName: wire.NodeUserPrefix + node, Organization: []string{wire.NodesGroup}},
		}, key)
		if err != nil {
			t.Fatal(err)
		}
		j.csrs[node] = csr
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	qs, err := j.conn.OpenStreamSync(ctx)
	if err != nil {
		t.Fatal(err)
	}
	qs.SetDeadline(time.Now().Add(10 * time.Second))
	if err := wire.NewWriter(qs).Write(&wire.JoinRequest{CapabilityVersion: wire.CapabilityVersion, Token: token, NodeName: node, CSR: csr}); err != nil {
		t.Fatal(err)
	}
	qs.Close()
	m, err := wire.NewReader(qs, 0).Read()
	if err != nil {
		t.Fatalf("read the join's answer: %v", err)
	}
	return m
}

// outcome says in a word what a join's answer was.
func outcome(m wire.Message) string {
	switch m := m.(type) {
	case *wire.JoinResponse:
		return "joined"
	case *wire.Error:
		return m.Code.String()
	}
	return m.Type().String()
}

// TestJoinRateLimited: failed joins are budgeted per source address and
// per token id. Past a source's budget its joins are refused at once,
// even with a good token, with when to try again; other sources are not;
// and past a token id's budget, joins with that id are refused from any
// address. An agent so refused waits as asked, then joins.
func TestJoinRateLimited(t *testing.T) {
	limits := auth.DefaultJoinLimitConfig()
	limits.PerSource.Every, limits.PerTokenID.Every = 3*time.Second, 3*time.Second
	logs := testlog.NewRecorder(t, slog.LevelInfo)
	h := startHubWith(t, t.TempDir(), func(c *hubd.Config) {
		c.JoinLimits = limits
		c.Logger = slog.New(logs)
	})
	good := h.token(t, "", time.Hour)

	// From 127.0.0.1, 40 joins with tokens that do not exist.
	j := newJoiner(t, h, "127.0.0.1")
	start := time.Now()
	var got []string
	var limited *wire.Error
	for i := range 40 {
		m := j.join(t, fmt.Sprintf("bad%03d.0123456789abcdef", i), "edge-x")
		got = append(got, outcome(m))
		if e, ok := m.(*wire.Error); ok && e.Code == wire.CodeUnavailable && limited == nil {
			limited = e
		}
	}
	m := j.join(t, good, "edge-1")
	elapsed := time.Since(start)
	t.Logf("40 failed joins and a good one from one address in %v: %v, then %s", elapsed, got, outcome(m))
	unauthorized := strings.Count(strings.Join(got, " "), "Unauthorized")
	// The budget refills by one every 3s while this runs.
	if most := limits.PerSource.Burst + int(elapsed/limits.PerSource.Every); unauthorized < limits.PerSource.Burst || unauthorized > most {
		t.Errorf("%d of 40 failed joins from one address had their token checked, want %d..%d", unauthorized, limits.PerSource.Burst, most)
	}
	if limited == nil {
		t.Fatal("no join was refused for too many failures")
	}
	if !strings.Contains(limited.Message, "too many failed joins from 127.0.0.1; retry after ") || limited.RetryAfter <= 0 || limited.RetryAfter > limits.PerSource.Every {
		t.Errorf("refusal %q, RetryAfter %v: want a retry within %v", limited.Message, limited.RetryAfter, limits.PerSource.Every)
	}
	if elapsed < limits.PerSource.Every {
		if e, ok := m.(*wire.Error); !ok || e.Code != wire.CodeUnavailable {
			t.Errorf("a good token from the limited address: %#v, want it refused before it is looked at", m)
		}
	}

	// Another address is not held back by that one.
	if m := newJoiner(t, h, "127.0.0.2").join(t, good, "edge-2"); outcome(m) != "joined" {
		t.Errorf("a good token from another address: %#v, want a JoinResponse", m)
	}

	// Guessing one token's secret from many addresses.
	id := good[:6]
	start = time.Now()
	for i := range limits.PerTokenID.Burst {
		src := fmt.Sprintf("127.0.1.%d", i+1)
		m := newJoiner(t, h, src).join(t, id+".0000000000000000", "edge-x")
		if e, ok := m.(*wire.Error); !ok || e.Code != wire.CodeUnauthorized || e.Message != auth.ErrTokenRefused.Error() {
			t.Fatalf("wrong secret from %s: %#v, want Unauthorized: %v", src, m, auth.ErrTokenRefused)
		}
	}
	fresh := newJoiner(t, h, "127.0.2.1")
	m = fresh.join(t, good, "edge-3")
	if time.Since(start) < limits.PerTokenID.Every {
		e, ok := m.(*wire.Error)
		if !ok || e.Code != wire.CodeUnavailable || !strings.Contains(e.Message, "too many failed joins with token id "+id) || e.RetryAfter <= 0 {
			t.Errorf("the guessed token from a fresh address: %#v, want it refused for its id's failures", m)
		}
	}
	if m := fresh.join(t, h.token(t, "", time.Hour), "edge-3"); outcome(m) != "joined" {
		t.Errorf("another token from that address: %#v, want a JoinResponse", m)
	}

	// An agent on the limited address is told to wait, waits, and joins.
	for i := 0; outcome(j.join(t, "zzzzzz.0123456789abcdef", "edge-x")) != "Unavailable"; i++ {
		if i > limits.PerSource.Burst {
			t.Fatal("failed joins from 127.0.0.1 are not refused any more")
		}
	}
	cfg := agentConfig(t, h, "edge-4", h.token(t, "", time.Hour), fake.New(fake.Config{}))
	agentLogs := testlog.NewRecorder(t, slog.LevelInfo)
	cfg.Logger = slog.New(agentLogs)
	a, _ := runAgent(t, cfg)
	wait.For(t, 20*time.Second, "edge-4 connected", func() (bool, string) { return a.Connected(), "" })
	if n := agentLogs.Count("hub cannot admit the node now; pods run meanwhile"); n < 1 || n > 2 {
		t.Errorf("the agent was refused %d times, want once or twice: it waits as told", n)
	}
}

func podPhase(ctx context.Context, h *hub, name string) (*corev1.Pod, error) {
	return h.client.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
}

// TestOfflineAndResume cuts one node off for longer than the idle timeout
// while pods change on both sides, then checks that everything converges
// and that the resume sent little.
func TestOfflineAndResume(t *testing.T) {
	ctx := context.Background()
	h := startHub(t, t.TempDir())
	relay, err := netem.Listen(h.h.SyncAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer relay.Close()
	tok := h.token(t, "", time.Hour)
	rt := fake.New(fake.Config{})
	cfg := agentConfig(t, h, "edge-1", tok, rt)
	cfg.HubAddr = relay.Addr()
	a, _ := runAgent(t, cfg)

	for _, name := range []string{"a", "b"} {
		if _, err := h.client.CoreV1().Pods("default").Create(ctx, pod(name, "edge-1", "nginx"), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	running := func(names ...string) func() (bool, string) {
		return func() (bool, string) {
			for _, n := range names {
				p, err := podPhase(ctx, h, n)
				if err != nil {
					return false, err.Error()
				}
				if p.Status.Phase != corev1.PodRunning {
					return false, n + " is " + string(p.Status.Phase)
				}
			}
			return true, ""
		}
	}
	wait.For(t, 20*time.Second, "pods a, b Running", running("a", "b"))

	relay.Set(netem.Conditions{Blackhole: true})
	// On the hub: a new pod, and a deletion; on the edge: a crash.
	if _, err := h.client.CoreV1().Pods("default").Create(ctx, pod("c", "edge-1", "nginx"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := h.client.CoreV1().Pods("default").Delete(ctx, "b", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	pa, _ := podPhase(ctx, h, "a")
	if err := rt.Exit(string(pa.UID), "main", 1); err != nil {
		t.Fatal(err)
	}
	// Offline, the edge restarts the crashed container by itself.
	wait.For(t, 20*time.Second, "a restarted offline", func() (bool, string) {
		ps, _ := rt.List(ctx)
		for _, p := range ps {
			if p.Pod.UID == string(pa.UID) {
				c := p.Container("main")
				return c != nil && c.State == "running" && c.Attempt == 1, fmt.Sprint(c)
			}
		}
		return false, "pod a not in the runtime"
	})
	// Past the idle timeout: the session is gone.
	wait.For(t, 30*time.Second, "edge notices the link is down", func() (bool, string) {
		return !a.Connected(), "still connected"
	})
	up0, down0 := relay.Bytes()
	relay.Set(netem.Conditions{})
	wait.For(t, 40*time.Second, "c Running, b gone, a restarted on the hub", func() (bool, string) {
		if ok, why := running("a", "c")(); !ok {
			return false, why
		}
		if _, err := podPhase(ctx, h, "b"); err == nil {
			return false, "b still on the hub"
		}
		p, _ := podPhase(ctx, h, "a")
		if len(p.Status.ContainerStatuses) == 0 || p.Status.ContainerStatuses[0].RestartCount != 1 {
			return false, fmt.Sprint("a: ", p.Status.ContainerStatuses)
		}
		return true, ""
	})
	up1, down1 := relay.Bytes()
	t.Logf("resume: %d bytes up, %d bytes down through the relay", up1-up0, down1-down0)
}

// TestNodeIsolation: node A's certificate, on the sync protocol, cannot
// write node B's pod status, and its view holds none of node B's secrets.
func TestNodeIsolation(t *testing.T) {
	ctx := context.Background()
	h := startHub(t, t.TempDir())
	tok := h.token(t, "", time.Hour)
	cfgA := agentConfig(t, h, "edge-a", tok, fake.New(fake.Config{}))
	a, stopA := runAgent(t, cfgA)
	// Of another site: the Nodes of a node's own site are in its view.
	cfgB := agentConfig(t, h, "edge-b", h.token(t, "store-2", time.Hour), fake.New(fake.Config{}))
	cfgB.Site = "store-2"
	runAgent(t, cfgB)
	wait.For(t, 20*time.Second, "edge-a connected", func() (bool, string) { return a.Connected(), "" })

	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "b-only", Namespace: "default"}, Data: map[string][]byte{"k": []byte("v")}}
	if _, err := h.client.CoreV1().Secrets("default").Create(ctx, secret, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pb := pod("on-b", "edge-b", "nginx")
	pb.Spec.Volumes = []corev1.Volume{{Name: "s", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "b-only"}}}}
	if _, err := h.client.CoreV1().Pods("default").Create(ctx, pb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	wait.For(t, 20*time.Second, "on-b Running", func() (bool, string) {
		p, err := podPhase(ctx, h, "on-b")
		if err != nil {
			return false, err.Error()
		}
		return p.Status.Phase == corev1.PodRunning, string(p.Status.Phase)
	})
	onB, _ := podPhase(ctx, h, "on-b")
	if err := stopA(); err != nil {
		t.Fatal(err)
	}

	// Node A's certificate, speaking the protocol itself.
	conn := dialAs(ctx, t, h, cfgA.DataDir)
	forged := onB.DeepCopy()
	forged.Status.Phase = corev1.PodFailed
	forged.Status.Message = "forged by edge-a"
	res := pushStatus(ctx, t, conn, "on-b", forged)
	if res.Code != wire.CodeForbidden {
		t.Fatalf("status push for node B's pod = %#v, want CodeForbidden", res)
	}
	t.Logf("refused: %s", res.Message)
	if p, _ := podPhase(ctx, h, "on-b"); p.Status.Phase != corev1.PodRunning || p.Status.Message != "" {
		t.Fatalf("on-b status after the forged push = %s %q, want Running untouched", p.Status.Phase, p.Status.Message)
	}

	// A session for node B with node A's certificate is refused.
	qs2, err := conn.OpenStreamSync(ctx)
	if err != nil {
		t.Fatal(err)
	}
	w2, r2 := wire.NewWriter(qs2), wire.NewReader(qs2, 0)
	w2.Write(&wire.Hello{CapabilityVersion: wire.CapabilityVersion, NodeName: "edge-b"})
	m, err := r2.Read()
	if e, ok := m.(*wire.Error); err != nil || !ok || e.Code != wire.CodeForbidden {
		t.Fatalf("Hello as edge-b with edge-a's certificate = %v, %v; want CodeForbidden", m, err)
	}

	// Node A's whole view holds none of node B's objects.
	qs3, err := conn.OpenStreamSync(ctx)
	if err != nil {
		t.Fatal(err)
	}
	w3, r3 := wire.NewWriter(qs3), wire.NewReader(qs3, 0)
	w3.Write(&wire.Hello{CapabilityVersion: wire.CapabilityVersion, NodeName: "edge-a"})
	m, err = r3.Read()
	welcome, ok := m.(*wire.Welcome)
	if err != nil || !ok {
		t.Fatalf("Hello as edge-a = %v, %v; want a Welcome", m, err)
	}
	if welcome.SendInventory {
		w3.Write(&wire.Inventory{})
	}
	var keys []wire.Key
	for {
		m, err := r3.Read()
		if err != nil {
			t.Fatal(err)
		}
		b, ok := m.(*wire.Batch)
		if !ok {
			t.Fatalf("got %v, want Batch", m.Type())
		}
		for _, c := range b.Changes {
			keys = append(keys, c.Key)
		}
		if b.Revision != 0 {
			break
		}
	}
	if len(keys) == 0 {
		t.Fatal("node A's view is empty; want at least its Node")
	}
	for _, k := range keys {
		if k.Name == "b-only" || k.Name == "on-b" || k.Name == "edge-b" {
			t.Errorf("node A's view holds %v", k)
		}
	}
	t.Logf("node A's view: %v", keys)
}

// TestStaleStatusReport: a node's report on a pod that has since been
// replaced by a newer one of the same name is acknowledged and dropped;
// the newer pod's status is untouched. A report on the pod itself is
// applied, keeping everything of the pod but its status.
func TestStaleStatusReport(t *testing.T) {
	ctx := context.Background()
	h := startHub(t, t.TempDir())
	conn := joinedAs(ctx, t, h, "edge-a")
	// The agent is stopped: nothing but this test reports on the pod.
	created, err := h.client.CoreV1().Pods("default").Create(ctx, pod("p", "edge-a", "nginx"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}

	old := created.DeepCopy()
	old.UID = "uid-of-an-older-p"
	old.Status = corev1.PodStatus{Phase: corev1.PodFailed, Message: "about the older pod"}
	if res := pushStatus(ctx, t, conn, "p", old); res.Code != wire.CodeOK {
		t.Fatalf("stale report = %#v, want CodeOK (acknowledged, dropped)", res)
	}
	if p, _ := podPhase(ctx, h, "p"); p.Status.Phase == corev1.PodFailed || p.ResourceVersion != created.ResourceVersion {
		t.Fatalf("pod after a stale report: phase %s, resourceVersion %s; want it untouched at %s", p.Status.Phase, p.ResourceVersion, created.ResourceVersion)
	}

	cur := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "default", UID: created.UID}, Status: *created.Status.DeepCopy()}
	cur.Status.Phase, cur.Status.PodIP = corev1.PodRunning, "10.0.0.9"
	if res := pushStatus(ctx, t, conn, "p", cur); res.Code != wire.CodeOK {
		t.Fatalf("report = %#v, want CodeOK", res)
	}
	p, err := podPhase(ctx, h, "p")
	if err != nil || p.Status.Phase != corev1.PodRunning || p.Status.PodIP != "10.0.0.9" || p.Spec.NodeName != "edge-a" || len(p.Spec.Containers) != 1 {
		t.Fatalf("pod after the report = %v, %+v; want the status applied and the spec kept", err, p)
	}
}

// TestEventRepeats: a repeat of an event the node counted on the first
// reaches the hub as that event's count and last time; a resend changes
// nothing.
func TestEventRepeats(t *testing.T) {
	ctx := context.Background()
	h := startHub(t, t.TempDir())
	conn := joinedAs(ctx, t, h, "edge-a")
	first := metav1.NewTime(time.Now().Add(-time.Minute).Truncate(time.Second))
	ev := &corev1.Event{
		TypeMeta:       metav1.TypeMeta{APIVersion: "v1", Kind: "Event"},
		ObjectMeta:     metav1.ObjectMeta{Name: "web.1", Namespace: "default"},
		InvolvedObject: corev1.ObjectReference{Kind: "Pod", Namespace: "default", Name: "web", UID: "u"},
		Reason:         "BackOff", Message: "Back-off restarting failed container", Type: corev1.EventTypeWarning,
		Source:         corev1.EventSource{Component: "kubelet", Host: "edge-a"},
		FirstTimestamp: first, LastTimestamp: first, Count: 1,
	}
	send := func(count int32, last metav1.Time) {
		t.Helper()
		e := ev.DeepCopy()
		e.Count, e.LastTimestamp = count, last
		res := push(ctx, t, conn, wire.StatusItem{Kind: wire.KindEvent, Key: wire.Key{Resource: wire.ResourceEvents, Namespace: "default", Name: "web.1"}, Object: encode(t, e)})
		if res.Code != wire.CodeOK {
			t.Fatalf("event x%d = %#v, want CodeOK", count, res)
		}
	}
	check := func(wantCount int32, wantLast metav1.Time) {
		t.Helper()
		got, err := h.client.CoreV1().Events("default").Get(ctx, "web.1", metav1.GetOptions{})
		if err != nil || got.Count != wantCount || !got.LastTimestamp.Equal(&wantLast) || !got.FirstTimestamp.Equal(&first) {
			t.Fatalf("event on the hub = %v, %+v; want x%d, last %v, first %v", err, got, wantCount, wantLast, first)
		}
	}
	send(1, first)
	check(1, first)
	later := metav1.NewTime(first.Add(30 * time.Second))
	send(3, later)
	check(3, later)
	send(1, first) // a resend of the first
	check(3, later)
}

// TestNodeStatusRestricted: a joined node's report of its Node that
// carries what a node may not set on itself (upstream's NodeRestriction,
// and the hub's site label) changes none of that on the hub's Node; the
// status and the labels a node may set are applied.
func TestNodeStatusRestricted(t *testing.T) {
	ctx := context.Background()
	h := startHub(t, t.TempDir())
	conn := joinedAs(ctx, t, h, "edge-a")
	nodes := h.client.CoreV1().Nodes()
	// An administrator's taint and role label on the Node the hub
	// registered with the site the node joined with.
	// The node IPAM controller gives the new Node its pod CIDR: once it
	// has, the spec changes by no one else's hand; read again on a
	// conflict all the same, as any client does.
	wait.For(t, 20*time.Second, "the Node's pod CIDR", func() (bool, string) {
		n, err := nodes.Get(ctx, "edge-a", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return n.Spec.PodCIDR != "", "none yet"
	})
	var before *corev1.Node
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur, err := nodes.Get(ctx, "edge-a", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if cur.Labels[wire.SiteLabel] != "store-1" {
			t.Fatalf("site label at join = %q, want store-1", cur.Labels[wire.SiteLabel])
		}
		cur.Labels["node-role.kubernetes.io/pos"] = ""
		cur.Spec.Taints = []corev1.Taint{{Key: "dedicated", Value: "pos", Effect: corev1.TaintEffectNoSchedule}}
		before, err = nodes.Update(ctx, cur, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}

	report := before.DeepCopy()
	report.TypeMeta = metav1.TypeMeta{APIVersion: "v1", Kind: "Node"}
	for k, v := range map[string]string{
		// refused
		"node-role.kubernetes.io/control-plane": "",
		"node-restriction.kubernetes.io/pci":    "true",
		"kubernetes.io/role":                    "master",
		wire.SiteLabel:                          "store-2",
		"fleet.outpost.dev/wave":                "0",
		// allowed
		corev1.LabelArchStable:         "riscv64",
		corev1.LabelInstanceTypeStable: "pi5",
		"example.com/x":                "y",
	} {
		report.Labels[k] = v
	}
	delete(report.Labels, "node-role.kubernetes.io/pos")
	report.Annotations = map[string]string{
		wire.AnnotationServiceRouting: "ebpf", // allowed: the node says it of itself
		"example.com/not-the-nodes":   "x",    // refused
	}
	report.Spec.Taints = []corev1.Taint{{Key: "k", Effect: corev1.TaintEffectNoExecute}}
	report.Spec.PodCIDR, report.Spec.PodCIDRs = "10.244.9.0/24", []string{"10.244.9.0/24"}
	report.Spec.ProviderID = "outpost://elsewhere"
	report.Spec.ConfigSource = &corev1.NodeConfigSource{ConfigMap: &corev1.ConfigMapNodeConfigSource{Namespace: "kube-system", Name: "x", KubeletConfigKey: "kubelet"}}
	report.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: "gone", UID: "no-such-uid"}}
	report.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady", Message: "the report's"}}
	res := push(ctx, t, conn, wire.StatusItem{Kind: wire.KindNodeStatus, Key: wire.Key{Resource: wire.ResourceNodes, Name: "edge-a"}, Object: encode(t, report)})
	if res.Code != wire.CodeOK {
		t.Fatalf("node status push = %#v, want CodeOK", res)
	}

	after, err := nodes.Get(ctx, "edge-a", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if c := after.Status.Conditions; len(c) != 1 || c[0].Message != "the report's" {
		t.Errorf("status after the report = %+v, want the report's", after.Status.Conditions)
	}
	for k, want := range map[string]string{
		corev1.LabelArchStable:         "riscv64",
		corev1.LabelInstanceTypeStable: "pi5",
		"example.com/x":                "y",
		wire.SiteLabel:                 "store-1",
		"node-role.kubernetes.io/pos":  "",
	} {
		if got, ok := after.Labels[k]; !ok || got != want {
			t.Errorf("label %s after the report = %q (set %v), want %q", k, got, ok, want)
		}
	}
	for _, k := range []string{"node-role.kubernetes.io/control-plane", "node-restriction.kubernetes.io/pci", "kubernetes.io/role", "fleet.outpost.dev/wave"} {
		if v, ok := after.Labels[k]; ok {
			t.Errorf("label %s=%q after the report, want none", k, v)
		}
	}
	if a := after.Annotations; a[wire.AnnotationServiceRouting] != "ebpf" || a["example.com/not-the-nodes"] != "" {
		t.Errorf("annotations after the report = %v, want the service routing's alone", a)
	}
	if !reflect.DeepEqual(after.Spec, before.Spec) || len(after.OwnerReferences) != 0 {
		t.Errorf("Node after the report: spec %+v, owners %v; want spec %+v and no owners", after.Spec, after.OwnerReferences, before.Spec)
	}
}

// joinedAs joins node with an agent, stops the agent and connects to the
// hub's sync endpoint with the node's certificate, for the test to speak
// the protocol as the node.
func joinedAs(ctx context.Context, t *testing.T, h *hub, node string) *quic.Conn {
	t.Helper()
	cfg := agentConfig(t, h, node, h.token(t, "", time.Hour), fake.New(fake.Config{}))
	a, stop := runAgent(t, cfg)
	wait.For(t, 20*time.Second, node+" connected", func() (bool, string) { return a.Connected(), "" })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	return dialAs(ctx, t, h, cfg.DataDir)
}

// dialAs connects to the hub's sync endpoint with the certificate of the
// node whose data dir is dir; the connection is closed when the test ends.
func dialAs(ctx context.Context, t *testing.T, h *hub, dir string) *quic.Conn {
	t.Helper()
	certPEM, _ := os.ReadFile(filepath.Join(dir, "node.crt"))
	keyPEM, _ := os.ReadFile(filepath.Join(dir, "node.key"))
	caPEM, _ := os.ReadFile(filepath.Join(dir, "ca.crt"))
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(caPEM)
	conn, err := quic.DialAddr(ctx, h.h.SyncAddr(), &tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: roots, ServerName: "127.0.0.1", NextProtos: []string{wire.ALPN}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.CloseWithError(0, "") })
	return conn
}

// pushStatus sends one pod status report for default/name on a stream of
// its own and returns the hub's result.
func pushStatus(ctx context.Context, t *testing.T, conn *quic.Conn, name string, p *corev1.Pod) wire.StatusResult {
	t.Helper()
	p = p.DeepCopy()
	p.TypeMeta = metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"}
	return push(ctx, t, conn, wire.StatusItem{Kind: wire.KindPodStatus, Key: wire.Key{Resource: wire.ResourcePods, Namespace: "default", Name: name}, Object: encode(t, p)})
}

// push sends one outbox item on a stream of its own and returns the hub's
// result.
func push(ctx context.Context, t *testing.T, conn *quic.Conn, item wire.StatusItem) wire.StatusResult {
	t.Helper()
	qs, err := conn.OpenStreamSync(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer qs.Close()
	item.Seq = 1
	w, r := wire.NewWriter(qs), wire.NewReader(qs, 0)
	if err := w.Write(&wire.StatusPush{Items: []wire.StatusItem{item}}); err != nil {
		t.Fatal(err)
	}
	m, err := r.Read()
	if err != nil {
		t.Fatal(err)
	}
	ack, ok := m.(*wire.StatusAck)
	if !ok || len(ack.Results) != 1 {
		t.Fatalf("status push = %#v, want a StatusAck with one result", m)
	}
	return ack.Results[0]
}

// encode encodes an object as Kubernetes protobuf, as agents send it.
func encode(t *testing.T, obj runtime.Object) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := protobuf.NewSerializer(scheme.Scheme, scheme.Scheme).Encode(obj, &buf); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}
