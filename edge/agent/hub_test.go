package agent_test

// A hub for the agent: the real sync server and view index, with fakes of
// the hub's parts (admission, status) behind them.

import (
	"context"
	"crypto/ecdsa"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"log/slog"
	"math/big"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/outpost-mesh/outpost/edge/agent"
	"github.com/outpost-mesh/outpost/edge/runtime/fake"
	"github.com/outpost-mesh/outpost/internal/testca"
	"github.com/outpost-mesh/outpost/internal/testlog"
	"github.com/outpost-mesh/outpost/internal/wait"
	"github.com/outpost-mesh/outpost/sync/server"
	"github.com/outpost-mesh/outpost/sync/view"
	"github.com/outpost-mesh/outpost/sync/wire"
)

// authority admits nodes with token after refusing the first refuse
// joins as Unavailable (asking to wait retryAfter), and signs with its CA.
type authority struct {
	ca    *x509.Certificate
	key   *ecdsa.PrivateKey
	token string

	mu         sync.Mutex
	refuse     int
	retryAfter time.Duration
	joins      []time.Time // when each join came
}

func (a *authority) Join(ctx context.Context, _ netip.Addr, req *wire.JoinRequest) ([]byte, []byte, error) {
	a.mu.Lock()
	a.joins = append(a.joins, time.Now())
	refuse := len(a.joins) <= a.refuse
	retryAfter := a.retryAfter
	a.mu.Unlock()
	if refuse {
		return nil, nil, &wire.Error{Code: wire.CodeUnavailable, Message: "read bootstrap token: the API is starting", RetryAfter: retryAfter}
	}
	if req.Token != a.token {
		return nil, nil, &wire.Error{Code: wire.CodeUnauthorized, Message: "bootstrap token not found"}
	}
	cert, err := a.sign(req.NodeName, req.CSR)
	return cert, a.ca.Raw, err
}

func (a *authority) Renew(ctx context.Context, node string, csr []byte) ([]byte, error) {
	return a.sign(node, csr)
}

func (a *authority) sign(node string, csrDER []byte) ([]byte, error) {
	csr, err := x509.ParseCertificateRequest(csrDER)
	if err != nil {
		return nil, &wire.Error{Code: wire.CodeBadRequest, Message: err.Error()}
	}
	if csr.Subject.CommonName != wire.NodeUserPrefix+node {
		return nil, &wire.Error{Code: wire.CodeBadRequest, Message: "CSR for " + csr.Subject.CommonName}
	}
	now := time.Now()
	return x509.CreateCertificate(rand.Reader, &x509.Certificate{
		SerialNumber: big.NewInt(now.UnixNano()),
		Subject:      pkix.Name{CommonName: wire.NodeUserPrefix + node, Organization: []string{wire.NodesGroup}},
		NotBefore:    now.Add(-time.Minute), NotAfter: now.Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}, a.ca, csr.PublicKey, a.key)
}

// sink keeps the last status of each pod the node sent.
type sink struct {
	mu   sync.Mutex
	pods map[string]corev1.PodPhase
}

func (s *sink) ApplyStatus(ctx context.Context, node string, it wire.StatusItem) error {
	if it.Kind != wire.KindPodStatus {
		return nil
	}
	var p corev1.Pod
	if _, _, err := testCodec.Decode(it.Object, nil, &p); err != nil {
		return &wire.Error{Code: wire.CodeBadRequest, Message: err.Error()}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pods[it.Key.Name] = p.Status.Phase
	return nil
}

func (s *sink) phase(name string) corev1.PodPhase {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pods[name]
}

// noObjects is the store behind a test hub's views: it has nothing but
// what the test applies to them with its bytes, pods, which the views
// keep, so no session has to read an object.
type noObjects struct{}

func (noObjects) Object(_ context.Context, key wire.Key, rev int64) ([]byte, error) {
	return nil, fmt.Errorf("read %s at %d: the test hub stores no objects", key, rev)
}

// testHub is a running hub.
type testHub struct {
	addr, caHash string
	auth         *authority
	sink         *sink
	x            *view.Index
	srv          *server.Server
	stop         func()
}

// runWeb puts pod default/web (one nginx container) in node's view, at
// revision 1, and waits for rt to run it.
func (h *testHub) runWeb(t *testing.T, rt *fake.Runtime, node string) {
	t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default", UID: "uid-web"},
		Spec:       corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "main", Image: "nginx:1.27"}}},
	}
	if err := h.x.Apply([]view.Event{{Revision: 1, Key: podKey("web"), Raw: encode(t, pod)}}); err != nil {
		t.Fatal(err)
	}
	wait.For(t, waitLong, "web running", running(t, rt, "web"))
}

func startHub(t *testing.T) *testHub {
	t.Helper()
	return startHubWith(t, func(*server.Config) {})
}

// startHubWith starts a hub whose server configuration change has
// changed.
func startHubWith(t *testing.T, change func(*server.Config)) *testHub {
	t.Helper()
	ca := testca.New(t)
	h := &testHub{
		caHash: wire.CAHash(ca.Cert),
		auth:   &authority{ca: ca.Cert, key: ca.Key, token: "abcdef.0123456789abcdef"},
		sink:   &sink{pods: map[string]corev1.PodPhase{}},
		x:      view.NewIndex(view.DefaultConfig()),
	}
	if err := h.x.Reset(0, nil); err != nil {
		t.Fatal(err)
	}
	cfg := server.DefaultConfig()
	cfg.Certificate = ca.Serving(t)
	cfg.ClientCAs = ca.Pool
	cfg.Views, cfg.Objects, cfg.Authority, cfg.Sink = h.x, noObjects{}, h.auth, h.sink
	cfg.IdleTimeout, cfg.KeepAlive = 2*time.Second, 500*time.Millisecond
	cfg.Logger = testlog.New(t, slog.LevelInfo).With("side", "hub")
	change(&cfg)
	srv, err := server.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h.addr, h.srv = pc.LocalAddr().String(), srv
	bg := wait.Start(t, waitLong, "hub Serve", func(ctx context.Context) error { return srv.Serve(ctx, pc) })
	h.stop = func() {
		if err := bg.Stop(); err != nil {
			t.Errorf("Serve = %v", err)
		}
	}
	t.Cleanup(h.stop)
	return h
}

// TestJoinLoseHub: an agent joins through a hub that cannot admit it at
// first, runs the pod the hub binds to it and reports it; then the hub
// goes away, and the pod runs on.
func TestJoinLoseHub(t *testing.T) {
	h := startHub(t)
	h.auth.refuse = 1
	dir := t.TempDir()
	rt := fake.New(fake.Config{})
	ta := newAgentConfig(t, dir, rt)
	ta.cfg.HubAddr, ta.cfg.Token, ta.cfg.CAHash = h.addr, h.auth.token, h.caHash
	ta.cfg.JoinRetry = 200 * time.Millisecond
	a, err := agent.New(ta.cfg)
	if err != nil {
		t.Fatal(err)
	}
	bg := wait.Start(t, waitLong, "agent Run", a.Run)
	defer func() {
		if err := bg.Stop(); err != nil {
			t.Errorf("Run = %v, want nil after its context ended", err)
		}
	}()

	wait.For(t, waitLong, "joined and connected", func() (bool, string) {
		select {
		case <-bg.Done():
			err := bg.Err()
			if errors.Is(err, agent.ErrJoinRefused) {
				t.Fatalf("Run = %v: the hub could not admit the node then, it did not refuse it", err)
			}
			t.Fatalf("Run = %v while joining", err)
		default:
		}
		return a.Connected(), "not connected"
	})
	for _, f := range []string{"node.crt", "node.key", "ca.crt"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Errorf("identity not stored: %v", err)
		}
	}

	h.runWeb(t, rt, node)
	wait.For(t, waitLong, "web reported Running", func() (bool, string) {
		p := h.sink.phase("web")
		return p == corev1.PodRunning, string(p)
	})

	h.stop()
	wait.For(t, waitLong, "hub lost", func() (bool, string) { return !a.Connected(), "still connected" })
	ta.afterRounds(t, 30)
	if ok, why := running(t, rt, "web")(); !ok {
		t.Errorf("web stopped when the hub went away: %s", why)
	}
	if s := rt.Stats(); s.Stops != 0 || s.Removes != 0 {
		t.Errorf("runtime: %d stops, %d removes after the hub went away, want none", s.Stops, s.Removes)
	}
}

// TestJoinWaitsAsAsked: a hub that cannot admit the node now and says when
// to try again is not asked again before then, however short the agent's
// own back-off.
func TestJoinWaitsAsAsked(t *testing.T) {
	h := startHub(t)
	h.auth.refuse, h.auth.retryAfter = 2, 700*time.Millisecond
	ta := newAgentConfig(t, t.TempDir(), fake.New(fake.Config{}))
	ta.cfg.HubAddr, ta.cfg.Token, ta.cfg.CAHash = h.addr, h.auth.token, h.caHash
	ta.cfg.JoinRetry = 50 * time.Millisecond
	a, err := agent.New(ta.cfg)
	if err != nil {
		t.Fatal(err)
	}
	bg := wait.Start(t, waitLong, "agent Run", a.Run)
	defer func() {
		if err := bg.Stop(); err != nil {
			t.Errorf("Run = %v, want nil after its context ended", err)
		}
	}()
	wait.For(t, waitLong, "joined and connected", func() (bool, string) { return a.Connected(), "not connected" })
	h.auth.mu.Lock()
	joins := slices.Clone(h.auth.joins)
	h.auth.mu.Unlock()
	if len(joins) != 3 {
		t.Fatalf("%d joins, want 3: two refused, one admitted", len(joins))
	}
	for i := 1; i < len(joins); i++ {
		if d := joins[i].Sub(joins[i-1]); d < h.auth.retryAfter {
			t.Errorf("join %d came %v after the refusal that asked for %v", i, d, h.auth.retryAfter)
		}
	}
}
