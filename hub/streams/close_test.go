package streams_test

import (
	"bufio"
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/outpost-mesh/outpost/hub/streams"
)

// TestClose checks that Close ends a streaming log, so that the HTTP
// server's Shutdown need not wait for it, and refuses new streams.
func TestClose(t *testing.T) {
	node := newFakeNode()
	node.addPod("edge-1", "default", "web", "u1")
	t.Cleanup(node.wait)
	s, err := streams.New(streams.Config{Tunnels: node})
	if err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default", UID: "u1"},
		Spec: corev1.PodSpec{NodeName: "edge-1", Containers: []corev1.Container{{Name: "main"}}}}
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := s.ServePodStream(w, r, pod, "log"); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
		}
	}))
	defer hs.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", hs.URL+"?follow=true", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	lines := bufio.NewScanner(resp.Body)
	for range 3 {
		if !lines.Scan() {
			t.Fatalf("log ended early: %v", lines.Err())
		}
	}
	s.Close()
	for lines.Scan() {
	}
	if err := lines.Err(); err != nil {
		t.Errorf("log after Close ended with %v, want a clean end", err)
	}
	resp2, err := http.Get(hs.URL)
	if err != nil {
		t.Fatal(err)
	}
	resp2.Body.Close()
	if resp2.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("a stream after Close = %d, want 503", resp2.StatusCode)
	}
}
