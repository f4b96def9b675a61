package server_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/outpost-mesh/outpost/internal/wait"
	"github.com/outpost-mesh/outpost/sync/server"
	"github.com/outpost-mesh/outpost/sync/view"
	"github.com/outpost-mesh/outpost/sync/wire"
)

// fakeMinter mints tokens "<node>/<pod>/<volume>/<path>#<n>" that live a
// week, and records what it was asked.
type fakeMinter struct {
	mu    sync.Mutex
	n     int
	calls []string // node/pod of each call
	// fail, if set, says what to fail a call with.
	fail func(node string, pod view.TokenPod) error
}

var _ server.TokenMinter = (*fakeMinter)(nil)

func (m *fakeMinter) MintPodTokens(_ context.Context, node string, pod view.TokenPod, now time.Time) ([]wire.PodToken, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.calls = append(m.calls, node+"/"+pod.Key.Name)
	if m.fail != nil {
		if err := m.fail(node, pod); err != nil {
			return nil, err
		}
	}
	m.n++
	var out []wire.PodToken
	for _, s := range pod.Sources {
		out = append(out, wire.PodToken{
			Volume: s.Volume, Path: s.Path, Audiences: []string{"api"},
			Token:    fmt.Sprintf("%s/%s/%s/%s#%d", node, pod.Key.Name, s.Volume, s.Path, m.n),
			IssuedAt: now.Truncate(time.Second), Expiry: now.Truncate(time.Second).Add(7 * 24 * time.Hour),
		})
	}
	return out, nil
}

func (m *fakeMinter) called() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.calls)
}

// tokensOf returns the pod tokens st holds of pod (by its test UID).
func tokensOf(st *memStore, pod string) (*wire.PodTokens, int64, bool) {
	st.mu.Lock()
	c, ok := st.objs[wire.PodTokensKey("default", "uid-"+pod)]
	st.mu.Unlock()
	if !ok {
		return nil, 0, false
	}
	p, err := wire.UnmarshalPodTokens(c.Object)
	if err != nil {
		panic(err)
	}
	return p, c.Revision, true
}

// heldTokens lists the pod tokens and mesh keys st holds, as the agent
// does for Hello.
func heldTokens(st *memStore) func() ([]wire.InventoryEntry, error) {
	return func() ([]wire.InventoryEntry, error) {
		inv, _ := st.Inventory()
		return slices.DeleteFunc(inv, func(e wire.InventoryEntry) bool {
			return e.Key.Resource != wire.ResourcePodTokens && e.Key.Resource != wire.ResourceMeshKeys
		}), nil
	}
}

// waitGone waits until the hub's session of node has ended.
func (h *hub) waitGone(t *testing.T, node string) {
	t.Helper()
	wait.For(t, waitLong, node+"'s session ended", func() (bool, string) {
		_, up := h.presence.state()
		return !up[node], ""
	})
}

func tokenHub(t *testing.T, policy view.TokenPolicy) (*hub, *fakeMinter) {
	t.Helper()
	h := startHub(t, defaultHubOptions())
	h.stop()
	m := &fakeMinter{}
	h.cfg.Tokens, h.cfg.TokenPolicy = m, policy
	h.start(h.addr)
	return h, m
}

// TestPodTokens: a pod bound to the node gets its tokens in the view,
// minted for that node; another node's pod does not; the tokens go when
// the pod goes; a node that reconnects holding tokens not yet due is
// minted none.
func TestPodTokens(t *testing.T) {
	h, m := tokenHub(t, view.DefaultTokenPolicy())
	h.feed.put(nodeKey("edge-1"), testNode("edge-1"))
	h.feed.put(podKey("web"), testPod("web", "edge-1"))
	h.feed.put(podKey("other"), testPod("other", "edge-2"))
	st := newMemStore()
	cfg := h.clientConfig("edge-1", h.ca.nodeCert(t, "edge-1", time.Hour), st)
	cfg.HeldTokens = heldTokens(st)
	_, stop := runClient(t, cfg)

	wait.For(t, waitLong, "tokens of web on edge-1", func() (bool, string) {
		_, _, ok := tokensOf(st, "web")
		return ok, fmt.Sprint(st.view())
	})
	p, rev, _ := tokensOf(st, "web")
	if len(p.Tokens) != 1 || p.Pod != "web" || p.Tokens[0].Path != "token" || p.Tokens[0].Volume != wire.AutomountVolume || p.Tokens[0].Token != "edge-1/web//token#1" {
		t.Fatalf("tokens of web = %+v, want the automounted token minted for edge-1", p)
	}
	// The revision is when they are due: a day after issue.
	if due := time.Unix(rev, 0); due.Before(p.Tokens[0].IssuedAt.Add(24*time.Hour)) || due.After(p.Tokens[0].IssuedAt.Add(24*time.Hour+time.Second)) {
		t.Errorf("revision of web's tokens = %v, want a day after %v", due, p.Tokens[0].IssuedAt)
	}
	if got := m.called(); !slices.Equal(got, []string{"edge-1/web"}) {
		t.Errorf("mints = %v, want edge-1/web only", got)
	}

	// Reconnecting with the tokens not due mints nothing.
	stop()
	h.waitGone(t, "edge-1")
	h.feed.put(podKey("web2"), testPod("web2", "edge-1"))
	_, stop = runClient(t, cfg)
	wait.For(t, waitLong, "tokens of web2", func() (bool, string) {
		_, _, ok := tokensOf(st, "web2")
		return ok, fmt.Sprint(st.view())
	})
	if got := m.called(); !slices.Equal(got, []string{"edge-1/web", "edge-1/web2"}) {
		t.Errorf("mints after a reconnect = %v, want web2's only", got)
	}

	// A pod that goes takes its tokens; one that opts out gets none.
	h.feed.del(podKey("web"))
	noToken := testPod("batch", "edge-1")
	noToken.Spec.AutomountServiceAccountToken = new(bool)
	h.feed.put(podKey("batch"), noToken)
	wait.For(t, waitLong, "web's tokens gone", func() (bool, string) {
		_, _, ok := tokensOf(st, "web")
		_, _, batch := tokensOf(st, "batch")
		return !ok && !batch && st.view()[podKey("batch")] != 0, fmt.Sprint(st.view())
	})
	// While offline, the pod went: the node returns holding its tokens,
	// which are deleted.
	stop()
	h.waitGone(t, "edge-1")
	h.feed.del(podKey("web2"))
	runClient(t, cfg)
	wait.For(t, waitLong, "web2's tokens gone", func() (bool, string) {
		_, _, ok := tokensOf(st, "web2")
		return !ok, fmt.Sprint(st.view())
	})
}

// TestPodTokensRefresh: tokens are minted again when due, the node
// holding one object of the newest, and a node that comes back after
// they fell due gets fresh ones at once.
func TestPodTokensRefresh(t *testing.T) {
	p := view.DefaultTokenPolicy()
	p.MaxAge = 2 * time.Second
	h, m := tokenHub(t, p)
	h.feed.put(nodeKey("edge-1"), testNode("edge-1"))
	h.feed.put(podKey("web"), testPod("web", "edge-1"))
	st := newMemStore()
	cfg := h.clientConfig("edge-1", h.ca.nodeCert(t, "edge-1", time.Hour), st)
	cfg.HeldTokens = heldTokens(st)
	_, stop := runClient(t, cfg)

	token := func() string {
		p, _, ok := tokensOf(st, "web")
		if !ok {
			return ""
		}
		return p.Tokens[0].Token
	}
	wait.For(t, waitLong, "first token", func() (bool, string) { return token() == "edge-1/web//token#1", token() })
	start := time.Now()
	wait.For(t, waitLong, "refreshed token", func() (bool, string) { return token() == "edge-1/web//token#2", token() })
	if d := time.Since(start); d < 500*time.Millisecond {
		t.Errorf("token refreshed after %v, want about the max age, 2s", d)
	}
	if n := len(m.called()); n > 3 {
		t.Errorf("%d mints in about 2s with a 2s max age: the session spins", n)
	}

	// Away past the refresh: the node gets a fresh token on return.
	stop()
	before := len(m.called())
	wait.For(t, waitLong, "refresh time past", func() (bool, string) {
		_, rev, _ := tokensOf(st, "web")
		return time.Now().Unix() > rev, ""
	})
	runClient(t, cfg)
	wait.For(t, waitLong, "fresh token on return", func() (bool, string) {
		return len(m.called()) > before && token() != "edge-1/web//token#2", token()
	})
}

// TestPodTokensMintFails: a pod whose tokens cannot be minted is tried
// again with a back-off, and the session goes on with the others.
func TestPodTokensMintFails(t *testing.T) {
	h, m := tokenHub(t, view.DefaultTokenPolicy())
	var failing sync.Map
	failing.Store("bad", true)
	m.fail = func(_ string, pod view.TokenPod) error {
		if _, ok := failing.Load(pod.Key.Name); ok {
			return fmt.Errorf("service account %s not found", pod.ServiceAccount)
		}
		return nil
	}
	h.feed.put(nodeKey("edge-1"), testNode("edge-1"))
	h.feed.put(podKey("bad"), testPod("bad", "edge-1"))
	h.feed.put(podKey("good"), testPod("good", "edge-1"))
	st := newMemStore()
	cfg := h.clientConfig("edge-1", h.ca.nodeCert(t, "edge-1", time.Hour), st)
	runClient(t, cfg)
	wait.For(t, waitLong, "good's tokens", func() (bool, string) {
		_, _, ok := tokensOf(st, "good")
		return ok, fmt.Sprint(st.view())
	})
	wait.For(t, waitLong, "bad tried again", func() (bool, string) {
		n := 0
		for _, c := range m.called() {
			if c == "edge-1/bad" {
				n++
			}
		}
		return n >= 2, fmt.Sprint(m.called())
	})
	failing.Delete("bad")
	wait.For(t, waitLong, "bad's tokens once it can be minted", func() (bool, string) {
		_, _, ok := tokensOf(st, "bad")
		return ok, fmt.Sprint(m.called())
	})
	// From 1s doubling: a handful of tries in these few seconds.
	if n := len(m.called()); n > 8 {
		t.Errorf("%d mints: the failing pod is not backed off", n)
	}
	if !h.logs.Has("cannot mint a pod's service account tokens; trying again later") {
		t.Error("the failed mint is not logged")
	}
}

// TestPodTokensOlderEdge: a node speaking capability version 2 gets a
// view without tokens, and nothing is minted for it.
func TestPodTokensOlderEdge(t *testing.T) {
	h, m := tokenHub(t, view.DefaultTokenPolicy())
	h.feed.put(nodeKey("edge-1"), testNode("edge-1"))
	h.feed.put(podKey("web"), testPod("web", "edge-1"))
	conn := h.rawConn(t, h.ca.nodeCert(t, "edge-1", time.Hour))
	s := openStream(t, conn)
	s.send(t, &wire.Hello{CapabilityVersion: 2, NodeName: "edge-1"})
	w, ok := s.recv(t).(*wire.Welcome)
	if !ok || w.CapabilityVersion != 2 {
		t.Fatalf("welcome = %#v, want version 2", w)
	}
	if w.SendInventory {
		s.send(t, &wire.Inventory{})
	}
	var keys []wire.Key
	for {
		b, ok := s.recv(t).(*wire.Batch)
		if !ok {
			t.Fatal("want a Batch")
		}
		for _, c := range b.Changes {
			keys = append(keys, c.Key)
		}
		if b.Revision != 0 {
			break
		}
	}
	if !slices.Contains(keys, podKey("web")) {
		t.Fatalf("view = %v, want pod web", keys)
	}
	// Give the session the moment it would take to mint.
	s.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
	if m, err := s.f.Read(); err == nil {
		t.Errorf("a version 2 node was sent %#v after its view", m)
	}
	for _, k := range keys {
		if k.Resource == wire.ResourcePodTokens {
			t.Errorf("a version 2 node was sent %v", k)
		}
	}
	if got := m.called(); len(got) != 0 {
		t.Errorf("mints for a version 2 node: %v", got)
	}
}

// TestPodTokensPodGone: a mint refused for a pod that is no longer the
// node's is no warning.
func TestPodTokensPodGone(t *testing.T) {
	h, m := tokenHub(t, view.DefaultTokenPolicy())
	m.fail = func(node string, pod view.TokenPod) error {
		return fmt.Errorf("pod %s: %w", pod.Key, server.ErrPodGone)
	}
	h.feed.put(nodeKey("edge-1"), testNode("edge-1"))
	h.feed.put(podKey("web"), testPod("web", "edge-1"))
	st := newMemStore()
	runClient(t, h.clientConfig("edge-1", h.ca.nodeCert(t, "edge-1", time.Hour), st))
	wait.For(t, waitLong, "a mint", func() (bool, string) { return len(m.called()) > 0, "" })
	if h.logs.Has("cannot mint") {
		t.Error("a pod gone is logged as a failure")
	}
	if _, _, ok := tokensOf(st, "web"); ok {
		t.Error("tokens sent for a pod the minter refused")
	}
}
