package images

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/containerd/containerd/v2/client"

	"github.com/outpost-mesh/outpost/edge/runtime"
	"github.com/outpost-mesh/outpost/internal/wait"
)

func TestPullCoalesced(t *testing.T) {
	c, _ := startContainerd(t)
	r := startRegistry(t, "", "")
	push(t, r, testImage(t, "shared"), "test/shared", "1", "", "")
	// A proxy in front of the registry that counts manifest lookups and
	// holds the first until released.
	u, _ := url.Parse(r.URL())
	proxy := httputil.NewSingleHostReverseProxy(u)
	var heads atomic.Int32
	first, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.Method == http.MethodHead && strings.Contains(req.URL.Path, "/manifests/") {
			if heads.Add(1) == 1 {
				close(first)
				<-release
			}
		}
		proxy.ServeHTTP(w, req)
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { once.Do(func() { close(release) }) })
	host := strings.TrimPrefix(srv.URL, "http://")
	s := newService(t, c, func(c *Config) { c.InsecureRegistries = []string{host} })
	ref := host + "/test/shared:1"
	ctx := context.Background()

	const n = 4
	type result struct {
		img client.Image
		err error
	}
	results := make(chan result, n)
	pull := func() {
		img, err := s.Pull(ctx, ref, runtime.PullAlways, nil)
		results <- result{img, err}
	}
	go pull()
	select {
	case <-first:
	case <-time.After(30 * time.Second):
		t.Fatal("the first pull did not reach the registry")
	}
	for range n - 1 {
		go pull()
	}
	wait.For(t, 30*time.Second, "pulls waiting on the first", func() (bool, string) {
		s.mu.Lock()
		defer s.mu.Unlock()
		for _, f := range s.flights {
			return f.waiters == n-1, fmt.Sprintf("%d waiting", f.waiters)
		}
		return false, "no pull under way"
	})
	once.Do(func() { close(release) })
	var digest string
	for range n {
		res := <-results
		if res.err != nil {
			t.Fatalf("pull: %v", res.err)
		}
		if digest == "" {
			digest = res.img.Target().Digest.String()
		} else if d := res.img.Target().Digest.String(); d != digest {
			t.Errorf("pulls got %s and %s", digest, d)
		}
	}
	if got := heads.Load(); got != 1 {
		t.Errorf("%d manifest lookups for %d concurrent pulls, want 1", got, n)
	}

	// Pulls with other credentials are other pulls.
	cred := runtime.Credential{Registry: host, Username: "u", Password: "p"}
	other := cred
	other.Password = "q"
	if k := flightKey(ref, nil); k == flightKey(ref, []*runtime.Credential{&cred}) || flightKey(ref, []*runtime.Credential{&cred}) == flightKey(ref, []*runtime.Credential{&other}) {
		t.Error("pulls with different credentials share a key")
	}
}

func TestCoalesceLeaderCanceled(t *testing.T) {
	s := &Service{flights: map[string]*flight{}}
	leaderCtx, cancelLeader := context.WithCancel(context.Background())
	started, proceed := make(chan struct{}), make(chan struct{})
	var calls atomic.Int32
	fn := func(ctx context.Context) (client.Image, error) {
		if calls.Add(1) == 1 {
			close(started)
			<-proceed
			return nil, ctx.Err()
		}
		return nil, nil
	}
	leaderDone := make(chan error, 1)
	go func() { _, err := s.coalesce(leaderCtx, "k", fn); leaderDone <- err }()
	<-started
	waiterDone := make(chan error, 1)
	go func() { _, err := s.coalesce(context.Background(), "k", fn); waiterDone <- err }()
	wait.For(t, 10*time.Second, "a waiter", func() (bool, string) {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.flights["k"] != nil && s.flights["k"].waiters == 1, "no waiter yet"
	})
	cancelLeader()
	close(proceed)
	if err := <-leaderDone; err != context.Canceled {
		t.Errorf("leader: %v, want context.Canceled", err)
	}
	if err := <-waiterDone; err != nil {
		t.Errorf("waiter: %v, want its own pull to succeed", err)
	}
	if got := calls.Load(); got != 2 {
		t.Errorf("fn called %d times, want 2 (the waiter pulls itself)", got)
	}
}
