package images

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/containerd/containerd/v2/core/remotes/docker"
	digest "github.com/opencontainers/go-digest"

	"github.com/outpost-mesh/outpost/edge/runtime"
)

// fakeSite is a Site that serves blobs by fetching them from registry
// itself (serve), or answers every request with status (an error), and
// counts the requests for content that reach the registry through
// Origin. It notes the content asked of it and what it is told Done.
type fakeSite struct {
	registry string // base URL
	serve    bool
	status   int

	served, origin atomic.Int64

	mu          sync.Mutex
	asked, done map[digest.Digest]bool
}

// note adds the digest that ends req's path, if any, to set.
func (s *fakeSite) note(set *map[digest.Digest]bool, path string) {
	d, err := digest.Parse(path[strings.LastIndexByte(path, '/')+1:])
	if err != nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if *set == nil {
		*set = map[digest.Digest]bool{}
	}
	(*set)[d] = true
}

func (s *fakeSite) Done(d digest.Digest) { s.note(&s.done, d.String()) }

func (s *fakeSite) Host() docker.RegistryHost {
	return docker.RegistryHost{
		Client: &http.Client{Transport: siteRoundTrip(s.roundTrip)},
		Host:   "site.test", Scheme: "https", Path: "/v2",
		Capabilities: docker.HostCapabilityPull,
	}
}

func (s *fakeSite) roundTrip(req *http.Request) (*http.Response, error) {
	s.note(&s.asked, req.URL.Path)
	if !s.serve {
		return &http.Response{StatusCode: s.status, Status: http.StatusText(s.status), Body: http.NoBody, Header: http.Header{}, Request: req}, nil
	}
	i := strings.Index(req.URL.Path, "/v2/")
	r, err := http.NewRequestWithContext(req.Context(), req.Method, s.registry+req.URL.Path[i:], nil)
	if err != nil {
		return nil, err
	}
	r.Header = req.Header.Clone()
	resp, err := http.DefaultTransport.RoundTrip(r)
	if err == nil && resp.StatusCode == http.StatusOK {
		s.served.Add(1)
	}
	return resp, err
}

func (s *fakeSite) Origin(rt http.RoundTripper) http.RoundTripper {
	return siteRoundTrip(func(req *http.Request) (*http.Response, error) {
		if req.Method == http.MethodGet && (strings.Contains(req.URL.Path, "/blobs/") || strings.Contains(req.URL.Path, "/manifests/sha256:")) {
			s.origin.Add(1)
		}
		return rt.RoundTrip(req)
	})
}

type siteRoundTrip func(*http.Request) (*http.Response, error)

func (f siteRoundTrip) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// A pull takes content by digest from the Site first, and from the
// registry what the Site does not serve, whether it answers 404 or
// another error; the tag is resolved at the registry.
func TestPullSiteFirst(t *testing.T) {
	c, _ := startContainerd(t)
	r := startRegistry(t, "", "")
	for _, tc := range []struct {
		name string
		site *fakeSite
	}{
		{"site serves", &fakeSite{registry: r.URL(), serve: true}},
		{"site has none", &fakeSite{status: http.StatusNotFound}},
		{"site fails", &fakeSite{status: http.StatusBadGateway}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// An image of its own: containerd shares content between
			// namespaces, and would not fetch again what one pulled.
			tag := strings.ReplaceAll(tc.name, " ", "-")
			push(t, r, testImage(t, tc.name), "test/site", tag, "", "")
			ref := r.Addr + "/test/site:" + tag
			s := newService(t, c, func(c *Config) { c.InsecureRegistries = []string{r.Addr}; c.Site = tc.site })
			if _, err := s.Pull(context.Background(), ref, runtime.PullAlways, nil); err != nil {
				t.Fatalf("Pull: %v", err)
			}
			unpacked(t, s, ref)
			served, origin := tc.site.served.Load(), tc.site.origin.Load()
			switch {
			case tc.site.serve && (served == 0 || origin != 0):
				t.Errorf("site served %d, registry %d requests for content by digest; want all from the site", served, origin)
			case !tc.site.serve && origin == 0:
				t.Errorf("registry served no content by digest, though the site served none")
			}
			// The site hears the pull done with each piece of content
			// it was asked for: committed, it need not be waited for.
			tc.site.mu.Lock()
			defer tc.site.mu.Unlock()
			if len(tc.site.asked) == 0 {
				t.Errorf("the site was asked for no content")
			}
			for d := range tc.site.asked {
				if !tc.site.done[d] {
					t.Errorf("the site was asked for %s, and never told the pull was done with it", d)
				}
			}
		})
	}
}
