// Package hubtest runs a real hub in-process for the tests of the hub's
// clients (controllers, the scheduler), which talk to it over HTTPS with
// client-go as they would in production. Only tests import it.
package hubtest

import (
	"log/slog"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/outpost-mesh/outpost/hub/hubd"
	"github.com/outpost-mesh/outpost/internal/testlog"
	"github.com/outpost-mesh/outpost/internal/wait"
)

// Hub is a hub running until its test ends.
type Hub struct {
	*hubd.Hub
	// Config is the admin's client configuration (system:masters),
	// without client-side rate limits.
	Config *rest.Config
	// Client and Metadata are clients of Config.
	Client   kubernetes.Interface
	Metadata metadata.Interface
}

// Start runs a hub with its state in a temporary directory, on a free
// loopback port, until the test ends, and returns it once it is ready.
// opts adjust the configuration (hubd.DefaultConfig) before the hub starts.
func Start(t testing.TB, opts ...func(*hubd.Config)) *Hub {
	t.Helper()
	cfg := hubd.DefaultConfig(t.TempDir())
	cfg.APIAddr = "127.0.0.1:0"
	cfg.Logger = testlog.New(t, slog.LevelInfo)
	for _, o := range opts {
		o(&cfg)
	}
	h, err := hubd.New(cfg)
	if err != nil {
		t.Fatalf("hubd.New: %v", err)
	}
	bg := wait.Start(t, 30*time.Second, "hub Run", h.Run)
	t.Cleanup(func() {
		if err := bg.Stop(); err != nil {
			t.Errorf("hub Run returned %v after cancel, want nil", err)
		}
	})
	select {
	case <-h.Ready():
	case <-bg.Done():
		t.Fatalf("hub Run returned before ready: %v", bg.Err())
	case <-time.After(60 * time.Second):
		t.Fatalf("hub not ready within 60s")
	}
	rc, err := clientcmd.BuildConfigFromFlags("", h.KubeconfigPath())
	if err != nil {
		t.Fatal(err)
	}
	rc.QPS = -1
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	md, err := metadata.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	return &Hub{Hub: h, Config: rc, Client: client, Metadata: md}
}
