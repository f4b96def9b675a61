package server_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/outpost-mesh/outpost/internal/wait"
	"github.com/outpost-mesh/outpost/sync/client"
	"github.com/outpost-mesh/outpost/sync/memnet"
	"github.com/outpost-mesh/outpost/sync/server"
	"github.com/outpost-mesh/outpost/sync/wire"
)

// TestBlackHoledLink: a link that drops everything both ways, without a
// word from either end, is found dead by the client's liveness and the
// hub's idle timeout; meanwhile a tunnel to the node fails at once. Once
// the link heals, the client reconnects by itself, resumes by revision,
// and serves tunnels again.
func TestBlackHoledLink(t *testing.T) {
	opts := defaultHubOptions()
	opts.net = memnet.New()
	h := startHub(t, opts)
	h.feed.put(nodeKey("edge-1"), testNode("edge-1"))
	rev := h.feed.put(podKey("web"), testPod("web", "edge-1"))
	st := newMemStore()
	cfg := h.clientConfig("edge-1", h.ca.nodeCert(t, "edge-1", time.Hour), st)
	cfg.Tunnels = map[string]client.TunnelHandler{
		"echo": func(context.Context, *wire.TunnelOpen) (func(wire.TunnelStream), error) {
			return func(rw wire.TunnelStream) {
				defer rw.Close()
				io.Copy(rw, rw)
			}, nil
		},
	}
	c, _ := runClient(t, cfg)
	wait.For(t, waitLong, "initial view", synced(h, st, "edge-1", rev))
	echo := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), waitLong)
		defer cancel()
		tc, err := h.srv.OpenTunnel(ctx, "edge-1", &wire.TunnelOpen{Kind: "echo"})
		if err != nil {
			return err
		}
		defer tc.Close()
		tc.Write([]byte("ping"))
		tc.CloseWrite()
		got, err := io.ReadAll(tc)
		if err != nil {
			return err
		}
		if string(got) != "ping" {
			return fmt.Errorf("echo %q, want ping", got)
		}
		return nil
	}
	if err := echo(); err != nil {
		t.Fatalf("tunnel before the cut: %v", err)
	}

	opts.net.Cut(memNode)
	start := time.Now()
	wait.For(t, waitLong, "both ends to give the link up", func() (bool, string) {
		_, up := h.presence.state()
		return !c.Connected() && !up["edge-1"], fmt.Sprintf("client connected %v, hub has it %v", c.Connected(), up["edge-1"])
	})
	took := time.Since(start)
	t.Logf("the black-holed link was given up after %v (idle timeout %v)", took, idleTimeout)
	if took < idleTimeout/2 {
		t.Errorf("the link was given up after %v, before any timeout: was it really silent?", took)
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitLong)
	defer cancel()
	tunnelStart := time.Now()
	if _, err := h.srv.OpenTunnel(ctx, "edge-1", &wire.TunnelOpen{Kind: "echo"}); !errors.Is(err, server.ErrNotConnected) {
		t.Errorf("OpenTunnel over a dead link = %v, want ErrNotConnected", err)
	}
	if took := time.Since(tunnelStart); took > time.Second {
		t.Errorf("OpenTunnel over a dead link took %v, want at once", took)
	}
	rev = h.feed.put(podKey("api"), testPod("api", "edge-1"))

	opts.net.Heal(memNode)
	wait.For(t, waitLong, "reconnect after the heal", func() (bool, string) {
		if n := c.Stats().Connects.Load(); n != 2 {
			return false, fmt.Sprintf("%d connects", n)
		}
		return synced(h, st, "edge-1", rev)()
	})
	if err := echo(); err != nil {
		t.Errorf("tunnel after the heal: %v", err)
	}
	if got := h.srv.Stats().Inventories.Load(); got != 0 {
		t.Errorf("%d resumes from an inventory, want a resume by revision", got)
	}
	if opts.net.Dropped() == 0 {
		t.Error("the cut dropped no packet")
	}
}
