package streams_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/outpost-mesh/outpost/edge/runtime"
	"github.com/outpost-mesh/outpost/edge/runtime/fake"
	"github.com/outpost-mesh/outpost/edge/streams"
	"github.com/outpost-mesh/outpost/internal/tunneltest"
	"github.com/outpost-mesh/outpost/sync/wire"
)

// nodePods is the node's pods for the tests: specs by namespace/name,
// the runtime's state from the fake.
type nodePods struct {
	rt   *fake.Runtime
	mu   sync.Mutex
	pods map[string]*corev1.Pod
	ip   string // every pod's IP
}

func (n *nodePods) Pod(ctx context.Context, namespace, name string) (*streams.Pod, error) {
	n.mu.Lock()
	spec := n.pods[namespace+"/"+name]
	n.mu.Unlock()
	if spec == nil {
		return nil, nil
	}
	list, err := n.rt.List(ctx)
	if err != nil {
		return nil, err
	}
	p := &streams.Pod{Spec: spec, IP: n.ip}
	for i := range list {
		if list[i].Pod.UID == string(spec.UID) {
			p.Status = &list[i]
		}
	}
	return p, nil
}

type logDir string

func (d logDir) LogPath(pod runtime.PodRef, c string, attempt int) string {
	return filepath.Join(string(d), pod.Namespace+"_"+pod.Name+"_"+pod.UID, c, strconv.Itoa(attempt)+".log")
}

type env struct {
	t    *testing.T
	rt   *fake.Runtime
	pods *nodePods
	logs logDir
	srv  *streams.Server
	h    map[string]func(context.Context, *wire.TunnelOpen) (func(wire.TunnelStream), error)
}

func newEnv(t *testing.T, exec func(ctx context.Context, pod runtime.PodRef, container string, opts runtime.ExecOptions) (int, error), tweak ...func(*streams.Config)) *env {
	t.Helper()
	rt := fake.New(fake.Config{Exec: exec})
	e := &env{t: t, rt: rt, pods: &nodePods{rt: rt, pods: map[string]*corev1.Pod{}, ip: "127.0.0.1"}, logs: logDir(t.TempDir())}
	cfg := streams.DefaultConfig()
	cfg.Pods, cfg.Logs, cfg.Exec, cfg.Attach = e.pods, e.logs, rt, rt
	cfg.FollowPoll = 10 * time.Millisecond
	for _, f := range tweak {
		f(&cfg)
	}
	srv, err := streams.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	e.srv = srv
	e.h = map[string]func(context.Context, *wire.TunnelOpen) (func(wire.TunnelStream), error){}
	for k, h := range srv.Handlers() {
		e.h[k] = h
	}
	return e
}

// addPod adds a running pod of one container "c" (and "tty", started
// with a terminal).
func (e *env) addPod(name, uid string) runtime.PodRef {
	e.t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, UID: types.UID(uid)},
		Spec: corev1.PodSpec{Containers: []corev1.Container{
			{Name: "c", Image: "busybox"},
			{Name: "tty", Image: "busybox", TTY: true},
		}},
	}
	e.pods.mu.Lock()
	e.pods.pods["default/"+name] = pod
	e.pods.mu.Unlock()
	ref := runtime.PodRef{UID: uid, Namespace: "default", Name: name}
	for _, c := range []string{"c", "tty"} {
		if err := e.rt.StartContainer(context.Background(), ref, runtime.ContainerSpec{Name: c, Image: "busybox"}, 0); err != nil {
			e.t.Fatal(err)
		}
	}
	return ref
}

func open(kind, name, uid string, params ...string) *wire.TunnelOpen {
	o := &wire.TunnelOpen{Kind: kind, Params: []wire.Param{{Name: "namespace", Value: "default"}, {Name: "name", Value: name}, {Name: "uid", Value: uid}}}
	for i := 0; i+1 < len(params); i += 2 {
		o.Params = append(o.Params, wire.Param{Name: params[i], Value: params[i+1]})
	}
	return o
}

// start opens a tunnel and serves it in the background; it returns the
// hub's end, or the refusal.
func (e *env) start(o *wire.TunnelOpen) (*tunneltest.End, error) {
	e.t.Helper()
	h := e.h[o.Kind]
	if h == nil {
		e.t.Fatalf("no %q handler", o.Kind)
	}
	serve, err := h(context.Background(), o)
	if err != nil {
		return nil, err
	}
	hub, node := tunneltest.Pair()
	done := make(chan struct{})
	go func() { defer close(done); serve(node) }()
	e.t.Cleanup(func() {
		hub.Close()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			e.t.Error("tunnel still served 10s after the hub closed it")
		}
	})
	return hub, nil
}

func refusal(t *testing.T, err error) *wire.Error {
	t.Helper()
	var we *wire.Error
	if !errors.As(err, &we) {
		t.Fatalf("error %v is no refusal", err)
	}
	return we
}

// chunks reads an exec or attach tunnel to its end: the output by
// channel, and the exit.
type result struct {
	stdout, stderr bytes.Buffer
	code           int
	msg            string
	exits          int
}

func readChunks(t *testing.T, r io.Reader) *result {
	t.Helper()
	res := &result{code: -2}
	cr := wire.NewChunkReader(r)
	for {
		ch, data, err := cr.Next()
		if errors.Is(err, io.EOF) {
			return res
		}
		if err != nil {
			t.Fatalf("read chunks: %v", err)
		}
		if res.exits > 0 {
			t.Errorf("chunk on channel %d after the exit", ch)
		}
		switch ch {
		case wire.ChanStdout:
			res.stdout.Write(data)
		case wire.ChanStderr:
			res.stderr.Write(data)
		case wire.ChanExit:
			res.exits++
			res.code, res.msg, err = wire.ParseExit(data)
			if err != nil {
				t.Fatal(err)
			}
		default:
			t.Errorf("chunk on channel %d from the node", ch)
		}
	}
}
