package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/outpost-mesh/outpost/internal/wait"
)

// syncBuffer is a bytes.Buffer safe for one writer and one reader.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestUp runs `outpost up` with two nodes and checks that they are Ready
// once it prints the export line, and that it stops on cancel.
func TestUp(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out syncBuffer
	done := make(chan error, 1)
	cfg := upConfig{dir: t.TempDir(), nodes: 2, apiAddr: "127.0.0.1:0", syncAddr: "127.0.0.1:0", site: "test", runtime: "fake"}
	go func() { done <- runUp(ctx, cfg, &out, slog.New(slog.NewTextHandler(io.Discard, nil))) }()

	deadline := time.Now().Add(60 * time.Second)
	var kubeconfig string
	for kubeconfig == "" {
		if line, ok := strings.CutPrefix(strings.TrimSpace(out.String()), "export KUBECONFIG="); ok {
			kubeconfig = line
			break
		}
		select {
		case err := <-done:
			t.Fatalf("runUp returned before it was up: %v", err)
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatal("no export line within 60s")
		}
	}
	rc, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cs := kubernetes.NewForConfigOrDie(rc)
	wait.For(t, time.Until(deadline), "edge-1 and edge-2 Ready", func() (bool, string) {
		nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		ok := err == nil && len(nodes.Items) == 2 && ready(nodes.Items[0]) && ready(nodes.Items[1])
		return ok, fmt.Sprintf("nodes %v, %v", nodes, err)
	})
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("runUp = %v after cancel", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("runUp did not stop within 30s of cancel")
	}
}

func ready(n corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
