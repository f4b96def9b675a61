package streams_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/outpost-mesh/outpost/hub/streams"
	"github.com/outpost-mesh/outpost/internal/wait"
)

// TestDialPod: DialPod reaches a pod's port through its node's tunnel as
// a net.Conn, and is refused as a port-forward is.
func TestDialPod(t *testing.T) {
	node := newFakeNode()
	t.Cleanup(node.wait)
	s, err := streams.New(streams.Config{Tunnels: node})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "hook", UID: "u1"}, Spec: corev1.PodSpec{NodeName: "edge-1"}}
	node.addPod("edge-1", "default", "hook", "u1")
	ctx := context.Background()

	c, err := s.DialPod(ctx, pod, 80)
	if err != nil {
		t.Fatalf("DialPod: %v", err)
	}
	if _, err := c.Write([]byte("hello")); err != nil {
		t.Fatal(err)
	}
	c.(interface{ CloseWrite() error }).CloseWrite()
	got, err := io.ReadAll(c)
	if err != nil || string(got) != "hello" {
		t.Errorf("echo through the tunnel = %q, %v; want hello", got, err)
	}
	if c.RemoteAddr().String() != "default/hook:80" || c.RemoteAddr().Network() != "tunnel" {
		t.Errorf("RemoteAddr = %v %v", c.RemoteAddr().Network(), c.RemoteAddr())
	}
	c.Close()
	c.Close()
	wait.For(t, 5*time.Second, "tunnel closed", func() (bool, string) { return node.openCount() == 0, "tunnels open" })

	// A passed deadline ends a read that waits.
	c, err = s.DialPod(ctx, pod, 80)
	if err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
	if _, err := c.Read(make([]byte, 1)); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("read past the deadline: %v, want os.ErrDeadlineExceeded", err)
	}
	c.Close()

	for _, tc := range []struct {
		name string
		pod  *corev1.Pod
		port int32
		down bool
		code int32
		msg  string
	}{
		{"refused port", pod, 81, false, http.StatusServiceUnavailable, "dial tcp 10.42.0.5:81: connect: connection refused"},
		{"no node", &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "pending"}}, 80, false, http.StatusBadRequest, "pod pending does not have a host assigned"},
		{"node down", pod, 80, true, http.StatusServiceUnavailable, "node edge-1 is not connected to the hub"},
		{"unknown pod", &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "ghost", UID: "u2"}, Spec: corev1.PodSpec{NodeName: "edge-1"}}, 80, false,
			http.StatusNotFound, "pod default/ghost not found on node edge-1"},
	} {
		node.setDown("edge-1", tc.down)
		_, err := s.DialPod(ctx, tc.pod, tc.port)
		st, ok := err.(apierrors.APIStatus)
		if !ok || st.Status().Code != tc.code || st.Status().Message != tc.msg {
			t.Errorf("%s: DialPod = %v, want %d %q", tc.name, err, tc.code, tc.msg)
		}
	}
	node.setDown("edge-1", false)
	if _, err := s.DialPod(ctx, pod, 0); err == nil {
		t.Errorf("DialPod to port 0 succeeded")
	}
}
