package agent_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/outpost-mesh/outpost/edge/agent"
	edgeruntime "github.com/outpost-mesh/outpost/edge/runtime"
	"github.com/outpost-mesh/outpost/edge/runtime/fake"
	"github.com/outpost-mesh/outpost/internal/wait"
	"github.com/outpost-mesh/outpost/sync/view"
	"github.com/outpost-mesh/outpost/sync/wire"
)

// TestTunnels: the agent serves the hub's exec tunnels itself, over its
// QUIC session, for the pods bound to it, and refuses a pod it does not
// hold by that UID.
func TestTunnels(t *testing.T) {
	h := startHub(t)
	dir := t.TempDir()
	rt, a := startEchoAgent(t, h, dir, 3)
	h.runWeb(t, rt, node)
	wait.For(t, waitLong, "connected", func() (bool, string) { return a.Connected(), "" })

	var st wire.TunnelStream
	var err error
	wait.For(t, waitLong, "an exec tunnel", func() (bool, string) {
		// The session may still be starting.
		st, err = h.srv.OpenTunnel(context.Background(), node, execOpen("web", "uid-web"))
		return err == nil, fmt.Sprint(err)
	})
	if out, code := readExec(t, st); out != "echo hi in web/main" || code != 3 {
		t.Errorf("exec through the hub = %q exit %d, want echo hi in web/main, 3", out, code)
	}

	_, err = h.srv.OpenTunnel(context.Background(), node, execOpen("web", "uid-other"))
	var we *wire.Error
	if !errors.As(err, &we) || we.Code != wire.CodeNotFound {
		t.Errorf("exec in a pod of another UID = %v, want NotFound", err)
	}
}

// TestTunnelsStaticPod: a stream to a mirror pod reaches the static pod
// it stands for, by the UID of the mirror's annotation, as the hub sends
// it.
func TestTunnelsStaticPod(t *testing.T) {
	h := startHub(t)
	dir := t.TempDir()
	writeManifest(t, dir, "web.yaml", webManifest)
	rt, _ := startEchoAgent(t, h, dir, 0)
	name := "web-" + node
	wait.For(t, waitLong, "static pod running", running(t, rt, name))
	static := runtimePod(t, rt, name)
	// The mirror as the hub holds it: a UID of its own, the static pod's
	// in its annotation.
	mirror := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: "uid-mirror",
			Annotations: map[string]string{wire.AnnotationMirror: static.Pod.UID}},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "main", Image: "nginx:1.27"}}},
	}
	if err := h.x.Apply([]view.Event{{Revision: 1, Key: podKey(name), Raw: encode(t, mirror)}}); err != nil {
		t.Fatal(err)
	}
	var st wire.TunnelStream
	var err error
	wait.For(t, waitLong, "an exec tunnel to the static pod", func() (bool, string) {
		st, err = h.srv.OpenTunnel(context.Background(), node, execOpen(name, static.Pod.UID))
		return err == nil, fmt.Sprint(err)
	})
	if out, code := readExec(t, st); out != "echo hi in "+name+"/main" || code != 0 {
		t.Errorf("exec in the static pod = %q exit %d", out, code)
	}
	_, err = h.srv.OpenTunnel(context.Background(), node, execOpen(name, "uid-mirror"))
	var we *wire.Error
	if !errors.As(err, &we) || we.Code != wire.CodeNotFound {
		t.Errorf("exec by the mirror's own UID = %v, want NotFound: the hub sends the static pod's", err)
	}
}

// startEchoAgent runs an agent on dir joined to h, on a fake runtime
// whose exec prints "COMMAND in POD/CONTAINER" and exits code, until the
// test ends.
func startEchoAgent(t *testing.T, h *testHub, dir string, code int) (*fake.Runtime, *agent.Agent) {
	t.Helper()
	rt := fake.New(fake.Config{Exec: func(ctx context.Context, pod edgeruntime.PodRef, c string, opts edgeruntime.ExecOptions) (int, error) {
		fmt.Fprintf(opts.Stdout, "%s in %s/%s", strings.Join(opts.Command, " "), pod.Name, c)
		return code, nil
	}})
	ta := newAgentConfig(t, dir, rt)
	ta.cfg.HubAddr, ta.cfg.Token, ta.cfg.CAHash = h.addr, h.auth.token, h.caHash
	a, err := agent.New(ta.cfg)
	if err != nil {
		t.Fatal(err)
	}
	bg := wait.Start(t, waitLong, "agent Run", a.Run)
	t.Cleanup(func() {
		if err := bg.Stop(); err != nil {
			t.Errorf("Run = %v", err)
		}
	})
	return rt, a
}

// execOpen opens `echo hi` in container main of pod name by uid.
func execOpen(name, uid string) *wire.TunnelOpen {
	return &wire.TunnelOpen{Kind: "exec", Params: []wire.Param{
		{Name: "namespace", Value: "default"}, {Name: "name", Value: name}, {Name: "uid", Value: uid},
		{Name: "container", Value: "main"}, {Name: "command", Value: "echo"}, {Name: "command", Value: "hi"},
		{Name: "stdout", Value: "true"},
	}}
}

// readExec reads an exec tunnel to its end and returns its stdout and
// exit code, and closes it.
func readExec(t *testing.T, st wire.TunnelStream) (string, int) {
	t.Helper()
	defer st.Close()
	var out bytes.Buffer
	code := -2
	cr := wire.NewChunkReader(st)
	for {
		ch, data, err := cr.Next()
		if errors.Is(err, io.EOF) {
			return out.String(), code
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
}
