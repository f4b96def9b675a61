package e2e

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/outpost-mesh/outpost/internal/netem"
)

// Lines of the agent's log about relaying (edge/relay, sync/client).
const (
	logRelayCounters = `msg="relay counters"`
	logMoved         = `msg="the hub went silent on this path; the session moved"`
	logMovedBack     = `msg="the direct path to the hub works again; the session moved back"`
	logHubSilent     = `msg="node link silent; closing it"`
)

// relayedStatusTimeout is how soon after A's uplink is cut a pod created
// for A then must run there and say so on the hub, through a peer
// (issue 14: 10 s).
const relayedStatusTimeout = 10 * time.Second

// TestSiteRelay: three nodes of one site, each an agent on the fake
// runtime with its uplink through a netem relay and its mesh on a
// loopback address of its own. With A's uplink cut, A's sync session
// moves through B's or C's relay by QUIC connection migration, still
// A's own: a pod created on the hub for A as the uplink is cut runs on A
// and says so on the hub within 10 s of the cut. Once A's uplink
// returns, the session moves back and the peer's relay carries nothing
// more of it. The hub holds one session for A throughout: A never
// reconnects, and never goes not-ready.
func TestSiteRelay(t *testing.T) {
	skipShort(t)
	t.Parallel()
	f := newFleet(t)
	h := f.startHub("--node-monitor-grace-period", offlineGrace.String())
	const site = "store-15"
	nodes := []string{"relay-a", "relay-b", "relay-c"}
	// 127.15.0.0/16 is this test's: the mesh at the default port, the
	// relay at the next, on an address of each node's own.
	edges := startMeshSite(f, h, site, "127.15.0", nodes)
	a := edges["relay-a"]
	sessions := a.connects()
	// A holds its peers' relays on offer once they say their uplinks
	// work, which they do once their sessions are up: wait for each.
	for _, e := range edges {
		e.waitConnects(0, joinTimeout)
	}

	// A's uplink is cut; the LAN is not. A pod for A is created at once,
	// with a Secret of its own, which reaches A through the peer.
	ctx, cancel := h.ctx()
	defer cancel()
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "relayed-secret", Namespace: metav1.NamespaceDefault},
		StringData: map[string]string{"password": "only-for-relay-a"},
	}
	if _, err := h.cs.CoreV1().Secrets(metav1.NamespaceDefault).Create(ctx, secret, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod := newPod("relayed-web", "relay-a", "nginx")
	pod.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "PASSWORD", ValueFrom: &corev1.EnvVarSource{
		SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: secret.Name}, Key: "password"},
	}}}
	a.relay.Set(netem.Conditions{Blackhole: true})
	cut := time.Now()
	f.logf("relay-a's uplink cut")
	h.createPod(pod)
	var line string
	f.eventually(relayedStatusTimeout, "relay-a's session moved through a peer's relay", func() (bool, string) {
		ls := a.logLines(logMoved)
		if len(ls) == 0 {
			return false, "not moved"
		}
		line = ls[len(ls)-1]
		return true, ""
	})
	route := logField(line, "to")
	if !strings.HasPrefix(route, "relay 127.15.0.") {
		t.Fatalf("relay-a's session moved to %q, want through a peer's relay: %s", route, line)
	}
	f.logf("relay-a's session moved through %s %v after the cut (silent %s)", route, logTime(t, line).Sub(cut).Round(time.Millisecond), logField(line, "silent"))
	relayer := edges["relay-b"]
	if strings.HasPrefix(route, "relay 127.15.0.3:") {
		relayer = edges["relay-c"]
	}
	f.eventually(time.Until(cut.Add(relayedStatusTimeout)), "relayed-web Running on the hub within 10s of the cut", func() (bool, string) {
		p, err := h.pod("relayed-web")
		if err != nil {
			return false, apiProblem(err)
		}
		if why := runningProblem(p); why != "" {
			return false, why
		}
		return true, ""
	})
	f.logf("relayed-web Running on the hub %v after the cut", time.Since(cut).Round(time.Millisecond))
	n, err := h.node("relay-a")
	if err != nil {
		t.Fatal(err)
	}
	if s := readyStatus(n); s != corev1.ConditionTrue {
		t.Errorf("relay-a Ready=%s on the hub while its session was relayed, want True", s)
	}
	// The peer that relays A's session carries it, but it is A's: the
	// peer, as itself, may not read A's Secret; A may.
	for _, c := range []struct {
		e    *edge
		want bool
	}{{relayer, false}, {a, true}} {
		_, err := asNode(t, h, c.e).CoreV1().Secrets(metav1.NamespaceDefault).Get(ctx, secret.Name, metav1.GetOptions{})
		switch {
		case c.want && err != nil:
			t.Errorf("%s reading the Secret of its own pod: %v", c.e.name, err)
		case !c.want && !apierrors.IsForbidden(err):
			t.Errorf("%s reading relay-a's Secret = %v, want Forbidden", c.e.name, err)
		}
	}

	// A's uplink returns: its session moves back.
	a.relay.Set(netem.Conditions{})
	restored := time.Now()
	f.logf("relay-a's uplink restored")
	f.eventually(60*time.Second, "relay-a's session back on its uplink", func() (bool, string) {
		ls := a.logLines(logMovedBack)
		if len(ls) == 0 {
			return false, "not moved back"
		}
		line = ls[len(ls)-1]
		return true, ""
	})
	leftAt := logTime(t, line)
	f.logf("relay-a's session back on its uplink %v after it returned", leftAt.Sub(restored).Round(time.Millisecond))

	// What the peer relayed for A is in the hub's metrics, from the
	// peer's usage reports (every 15 s).
	peerA := "127.15.0.1"
	f.eventually(45*time.Second, relayer.name+"'s relay counters for relay-a in the hub's metrics", func() (bool, string) {
		up, err := hubMetric(h, "outpost_node_relay_bytes_total", `node="`+relayer.name+`"`, `peer="`+peerA+`"`, `direction="up"`)
		if err != nil {
			return false, err.Error()
		}
		return up > 0, fmt.Sprintf("%v bytes up", up)
	})

	// The peer's relay carries nothing of A's from then: its counters,
	// logged every 10 s when they change, stop changing within a tick.
	quietFrom := leftAt.Add(12 * time.Second)
	f.waitUntil(quietFrom.Add(12*time.Second), "the relay's counters to have had a tick to change")
	var last string
	for _, l := range relayer.logLines(logRelayCounters) {
		if logTime(t, l).After(quietFrom) {
			t.Errorf("%s's relay counters changed after relay-a left it: %s", relayer.name, l)
		}
		last = l
	}
	if last == "" {
		t.Errorf("%s never logged its relay counters", relayer.name)
	} else {
		f.logf("%s's relay counters, last logged: peers=%q", relayer.name, logField(last, "peers"))
	}

	// One session throughout: A never reconnected, and the hub never
	// closed A's link as silent.
	if n := a.connects(); n != sessions {
		t.Errorf("relay-a opened %d sessions since the cut, want none: the session moves, it does not reconnect", n-sessions)
	}
	for l := range strings.SplitSeq(h.proc.stderr.String(), "\n") {
		if strings.Contains(l, logHubSilent) && logField(l, "node") == "relay-a" {
			t.Errorf("the hub closed relay-a's link as silent: %s", l)
		}
	}
	checkOneSessionAtATime(t, a)
}

// hubMetric returns the value of the first sample of metric in the hub's
// /metrics whose labels hold every one of labels.
func hubMetric(h *syncHub, metric string, labels ...string) (float64, error) {
	resp, err := h.hc.Get(h.rest.Host + "/metrics")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return 0, err
	}
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("GET /metrics: %s", resp.Status)
	}
	for l := range strings.SplitSeq(string(body), "\n") {
		if !strings.HasPrefix(l, metric+"{") {
			continue
		}
		i := strings.LastIndexByte(l, ' ')
		if i < 0 || !allIn(l[:i], labels) {
			continue
		}
		return strconv.ParseFloat(l[i+1:], 64)
	}
	return 0, fmt.Errorf("no %s sample with %v", metric, labels)
}

// allIn reports whether s holds every one of subs.
func allIn(s string, subs []string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}

// asNode returns a client of h's API as the node of e, with the key and
// certificate its agent keeps in its data directory.
func asNode(t *testing.T, h *syncHub, e *edge) kubernetes.Interface {
	t.Helper()
	cfg := rest.AnonymousClientConfig(h.rest)
	// The bytes, not the files: client-go watches a certificate given by
	// file with goroutines that never stop.
	var err error
	if cfg.TLSClientConfig.CertData, err = os.ReadFile(filepath.Join(e.dataDir, "node.crt")); err != nil {
		t.Fatal(err)
	}
	if cfg.TLSClientConfig.KeyData, err = os.ReadFile(filepath.Join(e.dataDir, "node.key")); err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// checkOneSessionAtATime fails t unless the agent of e logged the end
// of each of its sessions before the next began.
func checkOneSessionAtATime(t *testing.T, e *edge) {
	t.Helper()
	up := false
	for l := range strings.SplitSeq(e.proc.stderr.String(), "\n") {
		switch {
		case strings.Contains(l, logConnected):
			if up {
				t.Errorf("%s began a session before the last ended: %s", e.name, l)
			}
			up = true
		case strings.Contains(l, logEnded):
			up = false
		}
	}
}
