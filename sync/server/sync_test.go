package server_test

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outpost-mesh/outpost/internal/wait"
	"github.com/outpost-mesh/outpost/sync/client"
	"github.com/outpost-mesh/outpost/sync/server"
	"github.com/outpost-mesh/outpost/sync/wire"
)

func TestJoin(t *testing.T) {
	h := startHub(t, defaultHubOptions())
	ctx, cancel := context.WithTimeout(context.Background(), waitLong)
	defer cancel()
	join := func(token, pin string) ([]byte, []byte, error) {
		_, csr := newCSR(t, "edge-1")
		return client.Join(ctx, client.JoinConfig{
			HubAddr: h.addr, Token: token, CAHash: pin, NodeName: "edge-1", Site: "store-7", CSR: csr,
		})
	}

	t.Run("good token", func(t *testing.T) {
		certDER, caDER, err := join(h.auth.token, h.caHash)
		if err != nil {
			t.Fatalf("Join = %v, want certificates", err)
		}
		if !bytes.Equal(caDER, h.ca.Cert.Raw) {
			t.Errorf("Join returned another CA than the hub's")
		}
		cert, err := x509.ParseCertificate(certDER)
		if err != nil {
			t.Fatal(err)
		}
		if want := wire.NodeUserPrefix + "edge-1"; cert.Subject.CommonName != want {
			t.Errorf("node certificate for %q, want %q", cert.Subject.CommonName, want)
		}
		if _, err := cert.Verify(x509.VerifyOptions{Roots: h.ca.Pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
			t.Errorf("node certificate does not verify with the hub CA: %v", err)
		}
	})

	t.Run("bad token", func(t *testing.T) {
		_, _, err := join("abcdef.ffffffffffffffff", h.caHash)
		var we *wire.Error
		if !errors.As(err, &we) || we.Code != wire.CodeUnauthorized {
			t.Fatalf("Join with a bad token = %v, want a *wire.Error of code Unauthorized", err)
		}
		if !strings.Contains(we.Message, "abcdef.ffffffffffffffff") || !strings.Contains(we.Message, "not found") {
			t.Errorf("refusal message %q does not carry the authority's", we.Message)
		}
	})

	t.Run("refusal with a detail for the log", func(t *testing.T) {
		want := &wire.Error{Code: wire.CodeUnavailable, Message: "too many failed joins from 127.0.0.1; retry after 8s", RetryAfter: 7500 * time.Millisecond}
		h.auth.mu.Lock()
		h.auth.refuse = fmt.Errorf("%w (%w)", want, errors.New("token abcdef: the hub's own detail"))
		h.auth.mu.Unlock()
		defer func() {
			h.auth.mu.Lock()
			h.auth.refuse = nil
			h.auth.mu.Unlock()
		}()
		_, _, err := join(h.auth.token, h.caHash)
		var we *wire.Error
		if !errors.As(err, &we) || *we != *want {
			t.Fatalf("Join = %#v, want %#v", err, want)
		}
		if strings.Contains(err.Error(), "own detail") {
			t.Errorf("the node was told %q, with the hub's detail", err)
		}
		if !h.logs.Has("join refused: Unavailable: too many failed joins from 127.0.0.1; retry after 8s (token abcdef: the hub's own detail)") {
			t.Errorf("the hub's log does not have the refusal's detail")
		}
	})

	t.Run("source address", func(t *testing.T) {
		h.auth.mu.Lock()
		defer h.auth.mu.Unlock()
		want := netip.MustParseAddr("127.0.0.1")
		if len(h.auth.froms) == 0 {
			t.Fatal("the authority heard no join")
		}
		for i, from := range h.auth.froms {
			if from != want {
				t.Errorf("join %d came from %v, the authority heard %v", i, want, from)
			}
		}
	})

	t.Run("wrong CA pin", func(t *testing.T) {
		joins, _ := h.auth.calls()
		served := h.srv.Stats().Joins.Load()
		for _, pin := range []string{
			wire.CAHash(newTestCA(t).Cert),      // another CA
			"sha256:" + strings.Repeat("0", 64), // nothing
		} {
			_, _, err := join(h.auth.token, pin)
			if !errors.Is(err, wire.ErrPinMismatch) {
				t.Errorf("Join with pin %s = %v, want ErrPinMismatch", pin, err)
			}
		}
		if got, _ := h.auth.calls(); len(got) != len(joins) {
			t.Errorf("the authority heard %d joins with a wrong pin, want none: the token went out", len(got)-len(joins))
		}
		if got := h.srv.Stats().Joins.Load(); got != served {
			t.Errorf("the hub served %d join streams with a wrong pin, want none", got-served)
		}
	})
}

// TestOnlyJoinWithoutCertificate: a connection without a client
// certificate can join and do nothing else.
func TestOnlyJoinWithoutCertificate(t *testing.T) {
	h := startHub(t, defaultHubOptions())
	conn := h.rawConn(t, nil)
	_, csr := newCSR(t, "edge-1")
	for _, m := range []wire.Message{
		&wire.Hello{CapabilityVersion: wire.CapabilityVersion, NodeName: "edge-1"},
		&wire.StatusPush{Items: []wire.StatusItem{{Seq: 1, Kind: wire.KindNodeStatus, Key: nodeKey("edge-1"), Object: []byte("x")}}},
		&wire.RenewRequest{CSR: csr},
	} {
		st := openStream(t, conn)
		st.send(t, m)
		e := st.recvError(t, wire.CodeUnauthorized)
		if !strings.Contains(e.Message, "join first") {
			t.Errorf("%v without a certificate: refused with %q, want a hint to join", m.Type(), e.Message)
		}
	}
	if got := h.sink.heard(); len(got) != 0 {
		t.Errorf("the sink heard %v from a connection without a certificate", got)
	}
	// The same connection can still join.
	st := openStream(t, conn)
	st.send(t, &wire.JoinRequest{CapabilityVersion: wire.CapabilityVersion, Token: h.auth.token, NodeName: "edge-1", CSR: csr})
	if m := st.recv(t); m.Type() != wire.TypeJoinResponse {
		t.Fatalf("join after refusals: got %#v, want a JoinResponse", m)
	}
}

// TestNodeIsolation: a node's certificate is its identity; what it says
// in its messages does not change it.
func TestNodeIsolation(t *testing.T) {
	h := startHub(t, defaultHubOptions())
	h.feed.put(nodeKey("edge-b"), testNode("edge-b"))
	h.feed.put(podKey("b-web"), testPod("b-web", "edge-b"))
	conn := h.rawConn(t, h.ca.nodeCert(t, "edge-a", time.Hour))

	st := openStream(t, conn)
	st.send(t, &wire.Hello{CapabilityVersion: wire.CapabilityVersion, NodeName: "edge-b"})
	e := st.recvError(t, wire.CodeForbidden)
	if !strings.Contains(e.Message, "edge-a") || !strings.Contains(e.Message, "edge-b") {
		t.Errorf("refusal %q does not name both nodes", e.Message)
	}
	if _, err := st.f.Read(); !isStreamEnd(err) {
		t.Errorf("read after the refusal = %v, want the stream's end", err)
	}

	// Status about edge-b's objects is applied as edge-a, for the hub's
	// authorizer to refuse.
	sp := openStream(t, conn)
	items := []wire.StatusItem{
		{Seq: 1, Kind: wire.KindNodeStatus, Key: nodeKey("edge-b"), Object: encode(t, testNode("edge-b"))},
		{Seq: 2, Kind: wire.KindPodStatus, Key: podKey("b-web"), Object: encode(t, testPod("b-web", "edge-b"))},
	}
	sp.send(t, &wire.StatusPush{Items: items})
	ack, ok := sp.recv(t).(*wire.StatusAck)
	if !ok || len(ack.Results) != 2 {
		t.Fatalf("status push: got %#v, want a StatusAck of 2 results", ack)
	}
	for _, c := range h.sink.heard() {
		if c.node != "edge-a" {
			t.Errorf("the sink applied %v as %q, want edge-a, the certificate's node", c.item.Key, c.node)
		}
	}
	if got := len(h.sink.heard()); got != 2 {
		t.Errorf("the sink heard %d items, want 2", got)
	}
}

// synced returns a condition: the store holds exactly node's view of the
// index, and is at its revision or later.
func synced(h *hub, st *memStore, node string, rev int64) func() (bool, string) {
	return func() (bool, string) {
		want := map[wire.Key]int64{}
		for _, e := range h.x.View(node) {
			want[e.Key] = e.Revision
		}
		got := st.view()
		if !maps.Equal(got, want) {
			return false, fmt.Sprintf("store holds %v, view is %v", got, want)
		}
		if r := st.LastRevision(); r < rev {
			return false, fmt.Sprintf("store at revision %d, want %d", r, rev)
		}
		return true, ""
	}
}

// keysOf returns the changes as "op key" strings, sorted.
func keysOf(batches ...[]wire.Change) []string {
	var out []string
	for _, b := range batches {
		for _, c := range b {
			op := "put"
			if c.Op == wire.OpDelete {
				op = "del"
			}
			out = append(out, op+" "+c.Key.String())
		}
	}
	slices.Sort(out)
	return out
}

func TestSession(t *testing.T) {
	opts := defaultHubOptions()
	opts.views.HistoryLimit = 8 // small, to resume from an inventory
	h := startHub(t, opts)
	f := h.feed
	f.put(nodeKey("edge-1"), testNode("edge-1"))
	f.put(nodeKey("edge-2"), testNode("edge-2"))
	f.put(configMapKey("cfg"), testConfigMap("cfg", "1"))
	f.put(configMapKey("unused"), testConfigMap("unused", "1"))
	f.put(podKey("web"), testPod("web", "edge-1", "cfg"))
	rev := f.put(podKey("other"), testPod("other", "edge-2", "unused"))

	st := newMemStore()
	cert := h.ca.nodeCert(t, "edge-1", time.Hour)
	var appliedMu sync.Mutex
	var applied [][]wire.Change
	cfg := h.clientConfig("edge-1", cert, st)
	cfg.Applied = func(c []wire.Change) {
		appliedMu.Lock()
		applied = append(applied, c)
		appliedMu.Unlock()
	}
	c, stop := runClient(t, cfg)

	// The initial view: edge-1's own objects, nothing of edge-2's.
	wait.For(t, waitLong, "initial view", synced(h, st, "edge-1", rev))
	if got, want := keysOf(st.batchesSince(0)...), []string{"put configmaps/default/cfg", "put nodes//edge-1", "put pods/default/web"}; !slices.Equal(got, want) {
		t.Errorf("initial view: %v, want %v", got, want)
	}

	// Live changes: an update, a change elsewhere, a deletion that takes
	// a reference away.
	n := st.batchCount()
	f.put(podKey("other"), testPod("other", "edge-2"))
	rev = f.put(configMapKey("cfg"), testConfigMap("cfg", "2"))
	wait.For(t, waitLong, "configmap update", synced(h, st, "edge-1", rev))
	rev = f.del(podKey("web"))
	wait.For(t, waitLong, "pod deletion", synced(h, st, "edge-1", rev))
	if got, want := keysOf(st.batchesSince(n)...), []string{"del configmaps/default/cfg", "del pods/default/web", "put configmaps/default/cfg"}; !slices.Equal(got, want) {
		t.Errorf("live changes: %v, want %v", got, want)
	}
	appliedMu.Lock()
	if len(applied) == 0 {
		t.Errorf("Applied was never called")
	}
	appliedMu.Unlock()
	if s := c.Stats(); s.Connects.Load() != 1 || s.BatchesApplied.Load() < 3 {
		t.Errorf("client stats: %d connects, %d batches, want 1 and at least 3", s.Connects.Load(), s.BatchesApplied.Load())
	}
	stop()

	// Resume by revision: the edge gets only what changed while it was
	// away.
	f.put(podKey("api"), testPod("api", "edge-1", "cfg"))
	rev = f.put(podKey("other"), testPod("other", "edge-2", "unused"))
	n = st.batchCount()
	c, stop = runClient(t, h.clientConfig("edge-1", cert, st))
	wait.For(t, waitLong, "resume by revision", synced(h, st, "edge-1", rev))
	if got, want := keysOf(st.batchesSince(n)...), []string{"put configmaps/default/cfg", "put pods/default/api"}; !slices.Equal(got, want) {
		t.Errorf("resume by revision sent %v, want only %v", got, want)
	}
	if got := h.srv.Stats().Inventories.Load(); got != 0 {
		t.Errorf("%d inventories asked for, want none", got)
	}
	stop()

	// Resume from the inventory: the edge's revision is older than the
	// history, and it is sent the difference, not everything.
	for i := range 2 * opts.views.HistoryLimit {
		f.put(podKey("other"), testPod("other", "edge-2", fmt.Sprint("cm-", i)))
	}
	rev = f.put(podKey("api"), testPod("api", "edge-1"))
	// The edge also holds what the hub no longer knows of, more than one
	// Inventory frame (and one Batch frame) carries.
	const junk = 12_000
	st.mu.Lock()
	for i := range junk {
		k := wire.Key{Resource: wire.ResourceSecrets, Namespace: "gone", Name: fmt.Sprintf("s-%05d", i)}
		st.objs[k] = wire.Change{Op: wire.OpPut, Key: k, Revision: 1, Object: []byte("x")}
	}
	st.mu.Unlock()
	n = st.batchCount()
	c, stop = runClient(t, h.clientConfig("edge-1", cert, st))
	wait.For(t, waitLong, "resume from the inventory", synced(h, st, "edge-1", rev))
	got := keysOf(st.batchesSince(n)...)
	got = slices.DeleteFunc(got, func(s string) bool { return strings.HasPrefix(s, "del secrets/gone/") })
	if want := []string{"del configmaps/default/cfg", "put pods/default/api"}; !slices.Equal(got, want) {
		t.Errorf("resume from the inventory sent %v and the deletes of the junk, want only %v", got, want)
	}
	if got := len(st.batchesSince(n)); got < 2 {
		t.Errorf("resume from the inventory came in %d batch frames, want the deletes split over several", got)
	}
	if got := h.srv.Stats().Inventories.Load(); got != 1 {
		t.Errorf("server: %d inventories, want 1", got)
	}
	if got := c.Stats().Inventories.Load(); got != 1 {
		t.Errorf("client: %d inventories sent, want 1", got)
	}
	stop()
	if got := h.srv.Stats().Resumes.Load(); got != 2 {
		t.Errorf("server: %d resumes by revision, want 2", got)
	}
}

// TestObjectsOnDemand: configmaps no pod referenced when they were
// written, whose bytes the views do not hold, reach the node that comes to
// need them as they are stored, read from Objects once and then held for
// other nodes; frames are sized by the objects' lengths before they are
// read; and an object whose version is gone when it is read is not sent,
// its newer version is.
func TestObjectsOnDemand(t *testing.T) {
	h := startHub(t, defaultHubOptions())
	f := h.feed
	f.put(nodeKey("edge-1"), testNode("edge-1"))
	f.put(nodeKey("edge-2"), testNode("edge-2"))
	big := strings.Repeat("x", 300<<10) // two to a frame would exceed MaxBatchBytes
	f.put(configMapKey("big-1"), testConfigMap("big-1", big))
	rev := f.put(configMapKey("big-2"), testConfigMap("big-2", big))
	if s := h.x.Stats(); s.Unheld != 2 || s.ObjectBytes > 10<<10 {
		t.Fatalf("views hold %d bytes, %d objects without theirs; want the configmaps' not held", s.ObjectBytes, s.Unheld)
	}
	st1 := newMemStore()
	runClient(t, h.clientConfig("edge-1", h.ca.nodeCert(t, "edge-1", time.Hour), st1))
	wait.For(t, waitLong, "edge-1 synced", synced(h, st1, "edge-1", rev))

	n := st1.batchCount()
	rev = f.put(podKey("web"), testPod("web", "edge-1", "big-1", "big-2"))
	wait.For(t, waitLong, "web and its configmaps on edge-1", synced(h, st1, "edge-1", rev))
	for _, name := range []string{"big-1", "big-2"} {
		st1.mu.Lock()
		got := st1.objs[configMapKey(name)].Object
		st1.mu.Unlock()
		if want := encode(t, testConfigMap(name, big)); !bytes.Equal(got, want) {
			t.Errorf("edge-1 holds %d bytes of %s, want the %d stored", len(got), name, len(want))
		}
	}
	for _, b := range st1.batchesSince(n) {
		if len(keysOf(b)) > 1 && slices.Contains(keysOf(b), "put configmaps/default/big-1") && slices.Contains(keysOf(b), "put configmaps/default/big-2") {
			t.Errorf("both configmaps in one frame of %d changes: its size was not counted", len(b))
		}
	}
	if got, want := f.objectReads(), []string{"configmaps/default/big-1@3", "configmaps/default/big-2@4"}; !slices.Equal(got, want) {
		t.Errorf("objects read = %v, want %v", got, want)
	}

	// Another node's pod needs one of them: held now, not read again.
	st2 := newMemStore()
	rev = f.put(podKey("api"), testPod("api", "edge-2", "big-1"))
	runClient(t, h.clientConfig("edge-2", h.ca.nodeCert(t, "edge-2", time.Hour), st2))
	wait.For(t, waitLong, "edge-2 synced", synced(h, st2, "edge-2", rev))
	if got := f.objectReads(); len(got) != 2 {
		t.Errorf("objects read = %v, want no more", got)
	}

	// A configmap that changes between the session's result and the
	// read, its old version compacted away: the node gets the new one.
	f.put(configMapKey("late"), testConfigMap("late", "1"))
	var newer atomic.Int64
	f.mu.Lock()
	f.beforeRead = func(key wire.Key, rev int64) {
		if key == configMapKey("late") && newer.Load() == 0 {
			newer.Store(f.put(key, testConfigMap("late", "2")))
		}
	}
	f.mu.Unlock()
	f.put(podKey("web"), testPod("web", "edge-1", "big-1", "big-2", "late"))
	wait.For(t, waitLong, "the new late on edge-1", func() (bool, string) {
		if newer.Load() == 0 {
			return false, "not read yet"
		}
		return synced(h, st1, "edge-1", newer.Load())()
	})
	if got := h.srv.Stats().ObjectsGone.Load(); got != 1 {
		t.Errorf("server: %d objects gone, want 1", got)
	}
	for _, b := range st1.batchesSince(0) {
		for _, c := range b {
			if c.Key == configMapKey("late") && c.Revision != newer.Load() {
				t.Errorf("edge-1 was sent %s@%d, want only @%d", c.Key, c.Revision, newer.Load())
			}
		}
	}
}

// TestNodeFailureReported: a node whose checkpoint refuses a write ends
// its session, and the hub hears why and logs it for its operator.
func TestNodeFailureReported(t *testing.T) {
	h := startHub(t, defaultHubOptions())
	st := newMemStore()
	st.applyErr = errors.New("write checkpoint: no space left on device")
	runClient(t, h.clientConfig("edge-1", h.ca.nodeCert(t, "edge-1", time.Hour), st))
	wait.For(t, waitLong, "the hub logs the node's failure", func() (bool, string) {
		return h.logs.Has("node ended its connection on a failure of its own: apply batch: write checkpoint: no space left on device"), "not logged yet"
	})
}

// TestStatusOutbox: what the hub takes or refuses leaves the outbox; what
// it cannot take now stays and comes again.
func TestStatusOutbox(t *testing.T) {
	h := startHub(t, defaultHubOptions())
	h.sink.decide = func(node string, it wire.StatusItem, times int) error {
		switch it.Key.Name {
		case "forbidden":
			return &wire.Error{Code: wire.CodeForbidden, Message: "node edge-1 may not write pod default/forbidden"}
		case "busy":
			if times < 3 {
				return &wire.Error{Code: wire.CodeUnavailable, Message: "try again later"}
			}
		}
		return nil
	}
	st := newMemStore()
	obj := encode(t, testPod("x", "edge-1"))
	st.enqueue(wire.KindPodStatus, podKey("web"), obj)
	st.enqueue(wire.KindPodStatus, podKey("forbidden"), obj)
	st.enqueue(wire.KindPodStatus, podKey("busy"), obj)
	c, _ := runClient(t, h.clientConfig("edge-1", h.ca.nodeCert(t, "edge-1", time.Hour), st))

	wait.For(t, waitLong, "outbox drained", func() (bool, string) {
		p := st.pendingSeqs()
		return len(p) == 0, fmt.Sprintf("pending %v", p)
	})
	times := map[string]int{}
	for _, call := range h.sink.heard() {
		times[call.item.Key.Name]++
		if call.node != "edge-1" {
			t.Errorf("status applied as %q, want edge-1", call.node)
		}
	}
	if want := map[string]int{"web": 1, "forbidden": 1, "busy": 3}; !maps.Equal(times, want) {
		t.Errorf("the sink heard %v, want %v: taken or refused once, unavailable until taken", times, want)
	}
	if got := c.Stats().StatusRefused.Load(); got != 1 {
		t.Errorf("client: %d refused, want 1", got)
	}

	// While connected, a new entry goes when the client is told.
	seq := st.enqueue(wire.KindNodeStatus, nodeKey("edge-1"), encode(t, testNode("edge-1")))
	c.NotifyOutbox()
	wait.For(t, waitLong, "new entry sent", func() (bool, string) {
		p := st.pendingSeqs()
		return !slices.Contains(p, seq), fmt.Sprintf("pending %v", p)
	})
}

func TestTunnels(t *testing.T) {
	h := startHub(t, defaultHubOptions())
	cfg := h.clientConfig("edge-1", h.ca.nodeCert(t, "edge-1", time.Hour), newMemStore())
	params := make(chan string, 1)
	cfg.Tunnels = map[string]client.TunnelHandler{
		"echo": func(ctx context.Context, open *wire.TunnelOpen) (func(wire.TunnelStream), error) {
			if open.Param("pod") == "" {
				return nil, &wire.Error{Code: wire.CodeNotFound, Message: "no pod"}
			}
			return func(rw wire.TunnelStream) {
				defer rw.Close()
				params <- open.Param("pod")
				io.Copy(rw, rw)
			}, nil
		},
	}
	c, _ := runClient(t, cfg)
	wait.For(t, waitLong, "connected", func() (bool, string) { return c.Connected(), "not connected" })
	ctx, cancel := context.WithTimeout(context.Background(), waitLong)
	defer cancel()

	tc, err := h.srv.OpenTunnel(ctx, "edge-1", &wire.TunnelOpen{Kind: "echo", Params: []wire.Param{{Name: "pod", Value: "default/web"}}})
	if err != nil {
		t.Fatalf("OpenTunnel = %v", err)
	}
	if got := <-params; got != "default/web" {
		t.Errorf("handler got pod %q, want default/web", got)
	}
	// Bytes both ways, more than any buffer holds, written while read.
	data := bytes.Repeat([]byte("0123456789abcdef"), 1<<16) // 1 MiB
	werr := make(chan error, 1)
	go func() {
		_, err := tc.Write(data)
		werr <- err
	}()
	got := make([]byte, len(data))
	if _, err := io.ReadFull(tc, got); err != nil {
		t.Fatalf("read the echo: %v", err)
	}
	if err := <-werr; err != nil {
		t.Fatalf("write to the tunnel: %v", err)
	}
	if !bytes.Equal(got, data) {
		t.Errorf("echo differs from what was sent")
	}
	// A half-close: the node reads the end, its echo ends, and the hub
	// reads the rest and then the end.
	tc.Write([]byte("last"))
	if err := tc.CloseWrite(); err != nil {
		t.Errorf("CloseWrite = %v", err)
	}
	if rest, err := io.ReadAll(tc); err != nil || string(rest) != "last" {
		t.Errorf("read after CloseWrite = %q, %v; want \"last\" and the end", rest, err)
	}
	if err := tc.Close(); err != nil {
		t.Errorf("Close = %v", err)
	}
	// The handler refuses what it cannot serve; the hub gets its error.
	_, err = h.srv.OpenTunnel(ctx, "edge-1", &wire.TunnelOpen{Kind: "echo"})
	if we, ok := err.(*wire.Error); !ok || we.Code != wire.CodeNotFound || we.Message != "no pod" {
		t.Errorf("OpenTunnel refused by the handler = %v, want its *wire.Error", err)
	}

	_, err = h.srv.OpenTunnel(ctx, "edge-1", &wire.TunnelOpen{Kind: "exec"})
	var we *wire.Error
	if !errors.As(err, &we) || we.Code != wire.CodeNotFound {
		t.Errorf("OpenTunnel of an unknown kind = %v, want a *wire.Error of code NotFound", err)
	}
	if _, err := h.srv.OpenTunnel(ctx, "edge-9", &wire.TunnelOpen{Kind: "echo", Params: []wire.Param{{Name: "pod", Value: "default/web"}}}); !errors.Is(err, server.ErrNotConnected) {
		t.Errorf("OpenTunnel to a node not connected = %v, want ErrNotConnected", err)
	}
}

// oversized is the start of a frame over the limit: its length and header.
func oversized(typ wire.Type) []byte {
	b := binary.AppendUvarint(nil, wire.DefaultMaxFrameSize+1)
	return append(b, byte(typ), 0)
}

// TestFrameTooLarge: a frame over the limit ends its stream with
// CodeTooLarge; the connection and its other streams go on.
func TestFrameTooLarge(t *testing.T) {
	h := startHub(t, defaultHubOptions())
	rev := h.feed.put(nodeKey("edge-1"), testNode("edge-1"))
	conn := h.rawConn(t, h.ca.nodeCert(t, "edge-1", time.Hour))

	// A session, at the node's view.
	sess := openStream(t, conn)
	sess.send(t, &wire.Hello{CapabilityVersion: wire.CapabilityVersion, NodeName: "edge-1"})
	if w, ok := sess.recv(t).(*wire.Welcome); !ok || w.SendInventory {
		t.Fatalf("got %#v, want a Welcome resuming by revision", w)
	}
	if b, ok := sess.recv(t).(*wire.Batch); !ok || b.Revision != rev {
		t.Fatalf("got %#v, want the initial Batch at revision %d", b, rev)
	}
	sess.send(t, &wire.Ack{Revision: rev})

	// Over the limit as the first frame of a stream, then after a good
	// frame of a status stream.
	for _, first := range []wire.Message{nil, &wire.StatusPush{Items: []wire.StatusItem{{Seq: 1, Kind: wire.KindNodeStatus, Key: nodeKey("edge-1"), Object: []byte("x")}}}} {
		big := openStream(t, conn)
		if first != nil {
			big.send(t, first)
			if m := big.recv(t); m.Type() != wire.TypeStatusAck {
				t.Fatalf("status push: got %#v, want a StatusAck", m)
			}
		}
		if _, err := big.Write(oversized(wire.TypeStatusPush)); err != nil {
			t.Fatal(err)
		}
		e := big.recvError(t, wire.CodeTooLarge)
		t.Logf("refused: %v", e)
		if _, err := big.f.Read(); !isStreamEnd(err) {
			t.Errorf("read after the refusal = %v, want the stream's end", err)
		}
	}

	// The session goes on.
	h.feed.put(configMapKey("cfg"), testConfigMap("cfg", "1"))
	rev = h.feed.put(podKey("web"), testPod("web", "edge-1", "cfg"))
	var got []wire.Change
	for len(got) < 2 {
		b, ok := sess.recv(t).(*wire.Batch)
		if !ok {
			t.Fatalf("session after a refused stream: got %#v, want a Batch", b)
		}
		got = append(got, b.Changes...)
		if b.Revision != 0 {
			sess.send(t, &wire.Ack{Revision: b.Revision})
		}
	}
	if want := []string{"put configmaps/default/cfg", "put pods/default/web"}; !slices.Equal(keysOf(got), want) {
		t.Errorf("session after a refused stream got %v, want %v", keysOf(got), want)
	}

	// Over the limit on the session stream itself (where an Ack goes):
	// that session ends with CodeTooLarge, the connection stays.
	sess.Write(oversized(wire.TypeAck))
	for {
		m := sess.recv(t)
		if e, ok := m.(*wire.Error); ok {
			if e.Code != wire.CodeTooLarge {
				t.Fatalf("session stream ended with %v, want TooLarge", e)
			}
			break
		}
	}
	sess = openStream(t, conn)
	sess.send(t, &wire.Hello{CapabilityVersion: wire.CapabilityVersion, NodeName: "edge-1", LastRevision: rev})
	if w, ok := sess.recv(t).(*wire.Welcome); !ok {
		t.Fatalf("new session on the same connection: got %#v, want a Welcome", w)
	}
	if b, ok := sess.recv(t).(*wire.Batch); !ok || len(b.Changes) != 0 || b.Revision != rev {
		t.Fatalf("new session: got %#v, want an empty Batch at %d", b, rev)
	}
}

// TestServeStopsWithJoinInFlight: Serve returns once its context ends even
// while a node without a certificate is in the middle of a join.
func TestServeStopsWithJoinInFlight(t *testing.T) {
	h := startHub(t, defaultHubOptions())
	// Under the lock: the race detector does not see that the join the
	// server reads it for is sent after, through the network.
	h.auth.mu.Lock()
	h.auth.block = make(chan struct{})
	h.auth.mu.Unlock()
	conn := h.rawConn(t, nil)
	st := openStream(t, conn)
	_, csr := newCSR(t, "edge-1")
	st.send(t, &wire.JoinRequest{CapabilityVersion: wire.CapabilityVersion, Token: h.auth.token, NodeName: "edge-1", CSR: csr})
	wait.For(t, waitLong, "join in flight", func() (bool, string) {
		j, _ := h.auth.calls()
		return len(j) == 1, "no join yet"
	})
	h.stop() // fails the test if Serve does not return
	// The node hears that the hub is gone.
	if _, err := st.f.Read(); err == nil {
		t.Errorf("read on the join stream after the hub stopped = nil error")
	}
}

// TestPresence: the hub hears once that a node is connected, however many
// sessions it has, and once that it is gone.
func TestPresence(t *testing.T) {
	h := startHub(t, defaultHubOptions())
	conn := h.rawConn(t, h.ca.nodeCert(t, "edge-1", time.Hour))
	open := func() *rawStream {
		s := openStream(t, conn)
		s.send(t, &wire.Hello{CapabilityVersion: wire.CapabilityVersion, NodeName: "edge-1"})
		if m := s.recv(t); m.Type() != wire.TypeWelcome {
			t.Fatalf("got %#v, want a Welcome", m)
		}
		return s
	}
	s1, s2 := open(), open()
	wait.For(t, waitLong, "presence", func() (bool, string) {
		_, up := h.presence.state()
		return up["edge-1"], "edge-1 not connected"
	})
	// One session ends: the node is still there.
	s1.Close()
	if _, err := io.Copy(io.Discard, s1); err != nil && !isStreamEnd(err) {
		t.Fatalf("session 1 did not end cleanly: %v", err)
	}
	// The last one ends: the node is gone.
	s2.Close()
	wait.For(t, waitLong, "presence after the last session", func() (bool, string) {
		ev, up := h.presence.state()
		return !up["edge-1"], fmt.Sprint(ev)
	})
	if ev, _ := h.presence.state(); !slices.Equal(ev, []string{"+edge-1", "-edge-1"}) {
		t.Errorf("presence heard %v, want [+edge-1 -edge-1]: the node was marked gone while a session was up", ev)
	}
}

// TestRenew: a client renews its certificate at two thirds of its life,
// as often as needed on one connection, and a renewal the hub cannot do
// now is tried again without dropping the session.
func TestRenew(t *testing.T) {
	const life = 3 * time.Second
	opts := defaultHubOptions()
	opts.certLife = life
	h := startHub(t, opts)
	h.auth.mu.Lock()
	h.auth.renewErr = []error{&wire.Error{Code: wire.CodeUnavailable, Message: "signer busy"}}
	h.auth.mu.Unlock()

	var mu sync.Mutex
	cert := h.ca.nodeCert(t, "edge-1", life)
	var commits []*x509.Certificate
	cfg := h.clientConfig("edge-1", nil, newMemStore())
	cfg.Certificate = func() (*tls.Certificate, error) {
		mu.Lock()
		defer mu.Unlock()
		return cert, nil
	}
	cfg.Renew = func() ([]byte, func([]byte) error, error) {
		key, csr := newCSR(t, "edge-1")
		return csr, func(der []byte) error {
			leaf, err := x509.ParseCertificate(der)
			if err != nil {
				return err
			}
			if !key.PublicKey.Equal(leaf.PublicKey.(*ecdsa.PublicKey)) {
				return errors.New("the renewed certificate is not for the CSR's key")
			}
			mu.Lock()
			defer mu.Unlock()
			commits = append(commits, leaf)
			cert = &tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}
			return nil
		}, nil
	}
	c, _ := runClient(t, cfg)
	wait.For(t, 4*life, "two renewals", func() (bool, string) {
		mu.Lock()
		defer mu.Unlock()
		return len(commits) >= 2, fmt.Sprintf("%d commits", len(commits))
	})
	_, renews := h.auth.calls()
	if len(renews) < 3 {
		t.Errorf("the authority heard %d renewals, want one refused and two done", len(renews))
	}
	for _, n := range renews {
		if n != "edge-1" {
			t.Errorf("renewal asked for as %q, want edge-1", n)
		}
	}
	mu.Lock()
	for _, leaf := range commits {
		if leaf.Subject.CommonName != wire.NodeUserPrefix+"edge-1" {
			t.Errorf("renewed certificate for %q", leaf.Subject.CommonName)
		}
	}
	mu.Unlock()
	if got := c.Stats().Connects.Load(); got != 1 {
		t.Errorf("%d connections, want 1: renewing must not drop the session", got)
	}
}

// TestReconnect: the client notices a hub that went away and reconnects,
// resuming by revision, once it is back on the same address; a hub with
// the same stateless-reset key is noticed at once.
func TestReconnect(t *testing.T) {
	h := startHub(t, defaultHubOptions())
	h.feed.put(nodeKey("edge-1"), testNode("edge-1"))
	rev := h.feed.put(podKey("web"), testPod("web", "edge-1"))
	st := newMemStore()
	c, _ := runClient(t, h.clientConfig("edge-1", h.ca.nodeCert(t, "edge-1", time.Hour), st))
	wait.For(t, waitLong, "initial view", synced(h, st, "edge-1", rev))
	addr := h.addr

	// The hub dies without a word and another starts at once: the edge
	// learns from a stateless reset at its next keep-alive, well before
	// its idle timeout.
	h.crash()
	rev = h.feed.put(podKey("api"), testPod("api", "edge-1"))
	start := time.Now()
	h.start(addr)
	wait.For(t, waitLong, "reconnect after a crash", func() (bool, string) {
		if n := c.Stats().Connects.Load(); n != 2 {
			return false, fmt.Sprintf("%d connects", n)
		}
		return synced(h, st, "edge-1", rev)()
	})
	took := time.Since(start)
	t.Logf("reconnected %v after the hub restarted (idle timeout %v, keep-alive %v)", took, idleTimeout, keepAlive)
	if took >= idleTimeout {
		t.Errorf("reconnected %v after the hub restarted, want under the idle timeout %v: the stateless reset was not heard", took, idleTimeout)
	}

	// The hub stops and stays away while the edge tries; it comes back.
	h.stop()
	wait.For(t, waitLong, "disconnected", func() (bool, string) { return !c.Connected(), "still connected" })
	pc, err := net.ListenPacket("udp", addr)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 2048)
	pc.SetReadDeadline(time.Now().Add(waitLong))
	for range 2 { // the edge is knocking
		if _, _, err := pc.ReadFrom(buf); err != nil {
			t.Fatalf("the edge did not try to reconnect: %v", err)
		}
	}
	pc.Close()
	rev = h.feed.put(podKey("db"), testPod("db", "edge-1"))
	start = time.Now()
	h.start(addr)
	wait.For(t, waitLong, "reconnect after an outage", func() (bool, string) {
		if n := c.Stats().Connects.Load(); n != 3 {
			return false, fmt.Sprintf("%d connects", n)
		}
		return synced(h, st, "edge-1", rev)()
	})
	t.Logf("reconnected %v after the hub came back", time.Since(start))
	if got := h.srv.Stats().Inventories.Load(); got != 0 {
		t.Errorf("%d resumes from an inventory, want resumes by revision", got)
	}

	// A hub that lost its keys cannot resume the edge's session: the edge
	// goes on with a full handshake.
	h.stop()
	var ticket [32]byte
	rand.Read(ticket[:])
	h.cfg.SessionTicketKeys = [][32]byte{ticket}
	rev = h.feed.put(podKey("cache"), testPod("cache", "edge-1"))
	h.start(addr)
	wait.For(t, waitLong, "reconnect to a hub with new keys", func() (bool, string) {
		if n := c.Stats().Connects.Load(); n != 4 {
			return false, fmt.Sprintf("%d connects", n)
		}
		return synced(h, st, "edge-1", rev)()
	})
}
