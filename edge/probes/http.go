package probes

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// maxHeaderBytes bounds the response headers an HTTP probe or hook reads.
const maxHeaderBytes = 64 << 10

// maxRedirects bounds the redirects an HTTP probe or hook follows, as Go's
// and kubelet's clients do.
const maxRedirects = 10

// httpClient makes the GET requests of HTTP probes and hooks as kubelet
// does: no proxy, no keep-alive, no compression, TLS without verifying
// the server, redirects followed only to the same host. It is safe for
// concurrent use.
type httpClient struct {
	userAgent string
	transport *http.Transport
}

// newHTTPClient returns a client whose default User-Agent is
// "kube-<purpose>/<KubeVersion>".
func newHTTPClient(purpose string) *httpClient {
	return &httpClient{
		userAgent: "kube-" + purpose + "/" + KubeVersion,
		transport: &http.Transport{
			Proxy: nil,
			DialContext: func(ctx context.Context, _, addr string) (net.Conn, error) {
				return dial(ctx, addr, 0) // the request's deadline bounds it
			},
			TLSClientConfig:        &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // as kubelet: pods serve self-signed certificates
			DisableKeepAlives:      true,
			DisableCompression:     true,
			MaxResponseHeaderBytes: maxHeaderBytes,
		},
	}
}

// request builds the GET request of g for target t: scheme, host (the
// pod's IP if g has none), port (a number or the name of one of the
// container's ports), path and query, g's headers, and kubelet's
// User-Agent and Accept unless g sets them (an empty Accept removes it).
func (c *httpClient) request(ctx context.Context, g *corev1.HTTPGetAction, t target) (*http.Request, error) {
	scheme, err := httpScheme(g.Scheme)
	if err != nil {
		return nil, err
	}
	port, err := resolvePort(g.Port, t.container)
	if err != nil {
		return nil, err
	}
	addr, err := hostPort(g.Host, port, t)
	if err != nil {
		return nil, err
	}
	u, err := url.Parse(g.Path)
	if err != nil {
		// As kubelet: a path that does not parse is sent as it is.
		u = &url.URL{Path: g.Path}
	}
	u.Scheme, u.Host = scheme, addr
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, err
	}
	h := make(http.Header, len(g.HTTPHeaders)+2)
	for _, kv := range g.HTTPHeaders {
		h.Add(kv.Name, kv.Value)
	}
	if _, ok := h["User-Agent"]; !ok {
		h.Set("User-Agent", c.userAgent)
	}
	if _, ok := h["Accept"]; !ok {
		h.Set("Accept", "*/*")
	} else if h.Get("Accept") == "" {
		h.Del("Accept")
	}
	req.Header = h
	req.Host = h.Get("Host")
	return req, nil
}

// response is what an HTTP GET got back.
type response struct {
	status     int
	body       string // the first maxOutput bytes
	redirected bool   // a redirect was not followed: the status is its 3xx
}

// get sends req and reads the first maxOutput bytes of its response,
// within timeout.
func (c *httpClient) get(req *http.Request, timeout time.Duration) (response, error) {
	client := &http.Client{
		Transport: c.transport,
		Timeout:   timeout,
		CheckRedirect: func(r *http.Request, via []*http.Request) error {
			if r.URL.Hostname() != via[0].URL.Hostname() {
				return http.ErrUseLastResponse
			}
			if len(via) >= maxRedirects {
				return fmt.Errorf("stopped after %d redirects", maxRedirects)
			}
			return nil
		},
	}
	res, err := client.Do(req)
	if err != nil {
		return response{}, err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(io.LimitReader(res.Body, maxOutput))
	if err != nil {
		return response{}, fmt.Errorf("read response from %s: %w", req.URL.Redacted(), err)
	}
	r := response{status: res.StatusCode, body: string(b)}
	r.redirected = r.status >= 300 && r.status < 400
	return r, nil
}

// probe runs the HTTP probe g against t: a status from 200 to 399 is
// Success (a 3xx means a redirect to another host, not followed), any
// other Failure, as is a request that fails or times out.
func (c *httpClient) probe(ctx context.Context, g *corev1.HTTPGetAction, t target, timeout time.Duration) Observation {
	req, err := c.request(ctx, g, t)
	if err != nil {
		return Observation{Errored, err.Error()}
	}
	res, err := c.get(req, timeout)
	if err != nil {
		return Observation{Failure, err.Error()}
	}
	if res.status < 200 || res.status >= 400 {
		return Observation{Failure, fmt.Sprintf("HTTP probe failed with statuscode: %d", res.status)}
	}
	if res.redirected {
		return Observation{Success, "Probe terminated redirects, Response body: " + res.body}
	}
	return Observation{Success, res.body}
}

// isHTTPResponseError reports whether err is Go's error for an HTTPS
// request answered in plain HTTP.
func isHTTPResponseError(err error) bool {
	return errors.Is(err, http.ErrSchemeMismatch)
}
