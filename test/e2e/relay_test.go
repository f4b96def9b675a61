package e2e

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/outpost-mesh/outpost/internal/netem"
)

// Lines of the agent's log about relaying (edge/relay, sync/client).
const (
	logRelayCounters = `msg="relay counters"`
	logDirectBack    = `msg="the direct path to the hub works again; leaving the relay"`
)

// relayedStatusTimeout is how soon after A's session came back through a
// peer a pod created for A must run there and say so on the hub (issue
// 14: 10 s).
const relayedStatusTimeout = 10 * time.Second

// TestSiteRelay: three nodes of one site, each an agent on the fake
// runtime with its uplink through a netem relay and its mesh on a
// loopback address of its own. With A's uplink cut, A's sync session
// comes back through B's or C's relay, as A itself, and a pod created on
// the hub for A runs on A and says so on the hub; once A's uplink
// returns, A's session goes direct again and the peer's relay carries
// nothing more of it.
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

	// A's uplink is cut; the LAN is not.
	a.relay.Set(netem.Conditions{Blackhole: true})
	cut := time.Now()
	f.logf("relay-a's uplink cut")
	line := a.waitConnects(sessions, 90*time.Second)
	route := logField(line, "route")
	if !strings.HasPrefix(route, "relay 127.15.0.") {
		t.Fatalf("relay-a's session came back by %q, want through a peer's relay: %s", route, line)
	}
	relayedAt := logTime(t, line)
	for _, l := range a.logLines(logEnded) {
		if logTime(t, l).After(cut) {
			f.logf("relay-a: session ended %v after the cut (route %s): %s", logTime(t, l).Sub(cut).Round(time.Millisecond), logField(l, "route"), logField(l, "err"))
		}
	}
	f.logf("relay-a's session back through %s, %v after the cut", route, relayedAt.Sub(cut).Round(time.Millisecond))
	relayer := edges["relay-b"]
	if strings.HasPrefix(route, "relay 127.15.0.3:") {
		relayer = edges["relay-c"]
	}
	f.eventually(relayedStatusTimeout, "relay-a Ready=True on the hub", func() (bool, string) {
		n, err := h.node("relay-a")
		if err != nil {
			return false, apiProblem(err)
		}
		s := readyStatus(n)
		return s == corev1.ConditionTrue, "Ready " + string(s)
	})

	// A pod created for A runs there, and its status reaches the hub
	// through the peer.
	created := time.Now()
	h.createPod(newPod("relayed-web", "relay-a", "nginx"))
	f.eventually(relayedStatusTimeout, "relayed-web Running on the hub", func() (bool, string) {
		p, err := h.pod("relayed-web")
		if err != nil {
			return false, apiProblem(err)
		}
		if why := runningProblem(p); why != "" {
			return false, why
		}
		return true, ""
	})
	f.logf("relayed-web Running on the hub %v after it was created, %v after the relayed session began",
		time.Since(created).Round(time.Millisecond), time.Since(relayedAt).Round(time.Millisecond))
	if n := len(a.logLines(logConnected)); n != sessions+1 {
		t.Errorf("relay-a opened %d sessions since the cut, want 1", n-sessions)
	}

	// A's uplink returns: its session goes direct again.
	a.relay.Set(netem.Conditions{})
	restored := time.Now()
	f.logf("relay-a's uplink restored")
	line = a.waitConnects(sessions+1, 60*time.Second)
	if got := logField(line, "route"); got != "direct" {
		t.Fatalf("relay-a's session after the uplink returned is %q, want direct: %s", got, line)
	}
	back := a.logLines(logDirectBack)
	if len(back) == 0 {
		t.Fatalf("relay-a reconnected direct without saying it left the relay")
	}
	leftAt := logTime(t, back[len(back)-1])
	f.logf("relay-a direct again, %v after the uplink returned", logTime(t, line).Sub(restored).Round(time.Millisecond))

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

	// One session at a time: every session of A's ended before the next
	// began (the hub, for its part, keeps one connection per node and
	// closes the one a newer replaces).
	checkOneSessionAtATime(t, a)
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
		case strings.Contains(l, logEnded), strings.Contains(l, logDirectBack):
			up = false
		}
	}
}
