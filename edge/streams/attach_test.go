package streams_test

import (
	"context"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/outpost-mesh/outpost/edge/runtime"
	"github.com/outpost-mesh/outpost/internal/wait"
	"github.com/outpost-mesh/outpost/sync/wire"
)

// addStdinPod adds a running pod whose containers have a stdin: "in",
// "once" (stdinOnce) and "term" (stdinOnce with a TTY).
func (e *env) addStdinPod(name, uid string) {
	e.t.Helper()
	cs := []corev1.Container{
		{Name: "in", Image: "busybox", Stdin: true},
		{Name: "once", Image: "busybox", Stdin: true, StdinOnce: true},
		{Name: "term", Image: "busybox", Stdin: true, StdinOnce: true, TTY: true},
	}
	e.pods.mu.Lock()
	e.pods.pods["default/"+name] = &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, UID: types.UID(uid)},
		Spec:       corev1.PodSpec{Containers: cs},
	}
	e.pods.mu.Unlock()
	ref := runtime.PodRef{UID: uid, Namespace: "default", Name: name}
	for _, c := range cs {
		spec := runtime.ContainerSpec{Name: c.Name, Image: c.Image, Stdin: c.Stdin, TTY: c.TTY}
		if err := e.rt.StartContainer(context.Background(), ref, spec, 0); err != nil {
			e.t.Fatal(err)
		}
	}
}

// stdinIs waits until the fake has had want on the container's stdin,
// closed or not.
func (e *env) stdinIs(uid, name, want string, closed bool) {
	e.t.Helper()
	wait.For(e.t, 5*time.Second, name+"'s stdin "+want, func() (bool, string) {
		b, c, err := e.rt.Stdin(uid, name)
		return string(b) == want && c == closed && err == nil, string(b)
	})
}

func TestAttachStdin(t *testing.T) {
	e := newEnv(t, nil)
	e.addStdinPod("web", "u1")
	attach := func(c string, params ...string) (*wire.ChunkWriter, <-chan *result) {
		t.Helper()
		hub, err := e.start(open("attach", "web", "u1", append([]string{"container", c, "stdin", "true", "stdout", "true"}, params...)...))
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan *result, 1)
		go func() { done <- readChunks(t, hub) }()
		wait.For(t, 5*time.Second, "the attach", func() (bool, string) { return e.rt.Attached("u1", c) == 1, "" })
		return wire.NewChunkWriter(hub), done
	}

	// The end of the hub's stdin ends the attach; the stdin stays open.
	cw, done := attach("in")
	cw.Write(wire.ChanStdin, []byte("hello\n"))
	e.stdinIs("u1", "in", "hello\n", false)
	e.rt.Output("u1", "in", false, []byte("got hello\n"))
	cw.End(wire.ChanStdin)
	if res := <-done; res.code != 0 || res.stdout.String() != "got hello\n" {
		t.Errorf("attach = out %q exit %d %q, want got hello, 0", res.stdout.String(), res.code, res.msg)
	}
	e.stdinIs("u1", "in", "hello\n", false)

	// stdinOnce: the end closes the container's stdin; the attach lasts
	// until the container exits.
	cw, done = attach("once")
	cw.Write(wire.ChanStdin, []byte("x"))
	cw.End(wire.ChanStdin)
	e.stdinIs("u1", "once", "x", true)
	if err := e.rt.Exit("u1", "once", 4); err != nil {
		t.Fatal(err)
	}
	if res := <-done; res.code != 4 {
		t.Errorf("attach of stdinOnce: exit %d %q, want 4", res.code, res.msg)
	}

	// A terminal: resizes reach the container; stdinOnce does not
	// close its stdin.
	cw, done = attach("term", "tty", "true")
	cw.Write(wire.ChanResize, wire.AppendResize(nil, 100, 37))
	wait.For(t, 5*time.Second, "the resize", func() (bool, string) {
		return slices.Equal(e.rt.Resizes("u1", "term"), []runtime.TermSize{{Width: 100, Height: 37}}), ""
	})
	cw.Write(wire.ChanStdin, []byte("ls\r"))
	cw.End(wire.ChanStdin)
	if res := <-done; res.code != 0 || res.exits != 1 {
		t.Errorf("attach with a TTY: exit %d %q, want 0", res.code, res.msg)
	}
	e.stdinIs("u1", "term", "ls\r", false)
}
