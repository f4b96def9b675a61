package agent_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/outpost-mesh/outpost/edge/agent"
	edgeruntime "github.com/outpost-mesh/outpost/edge/runtime"
	"github.com/outpost-mesh/outpost/edge/runtime/fake"
	"github.com/outpost-mesh/outpost/internal/wait"
	"github.com/outpost-mesh/outpost/sync/wire"
)

// TestTunnels: the agent serves the hub's exec tunnels itself, over its
// QUIC session, for the pods bound to it, and refuses a pod it does not
// hold by that UID.
func TestTunnels(t *testing.T) {
	h := startHub(t)
	dir := t.TempDir()
	rt := fake.New(fake.Config{Exec: func(ctx context.Context, pod edgeruntime.PodRef, c string, opts edgeruntime.ExecOptions) (int, error) {
		fmt.Fprintf(opts.Stdout, "%s in %s/%s", strings.Join(opts.Command, " "), pod.Name, c)
		return 3, nil
	}})
	ta := newAgentConfig(t, dir, rt)
	ta.cfg.HubAddr, ta.cfg.Token, ta.cfg.CAHash = h.addr, h.auth.token, h.caHash
	a, err := agent.New(ta.cfg)
	if err != nil {
		t.Fatal(err)
	}
	bg := wait.Start(t, waitLong, "agent Run", a.Run)
	defer func() {
		if err := bg.Stop(); err != nil {
			t.Errorf("Run = %v", err)
		}
	}()
	h.runWeb(t, rt, node)
	wait.For(t, waitLong, "connected", func() (bool, string) { return a.Connected(), "" })

	open := func(uid string) *wire.TunnelOpen {
		return &wire.TunnelOpen{Kind: "exec", Params: []wire.Param{
			{Name: "namespace", Value: "default"}, {Name: "name", Value: "web"}, {Name: "uid", Value: uid},
			{Name: "container", Value: "main"}, {Name: "command", Value: "echo"}, {Name: "command", Value: "hi"},
			{Name: "stdout", Value: "true"},
		}}
	}
	var st wire.TunnelStream
	wait.For(t, waitLong, "an exec tunnel", func() (bool, string) {
		// The session may still be starting.
		st, err = h.srv.OpenTunnel(context.Background(), node, open("uid-web"))
		return err == nil, fmt.Sprint(err)
	})
	defer st.Close()
	var out bytes.Buffer
	code := -2
	cr := wire.NewChunkReader(st)
	for {
		ch, data, err := cr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		switch ch {
		case wire.ChanStdout:
			out.Write(data)
		case wire.ChanExit:
			code, _, _ = wire.ParseExit(data)
		}
	}
	if out.String() != "echo hi in web/main" || code != 3 {
		t.Errorf("exec through the hub = %q exit %d, want echo hi in web/main, 3", out.String(), code)
	}

	_, err = h.srv.OpenTunnel(context.Background(), node, open("uid-other"))
	var we *wire.Error
	if !errors.As(err, &we) || we.Code != wire.CodeNotFound {
		t.Errorf("exec in a pod of another UID = %v, want NotFound", err)
	}
}
