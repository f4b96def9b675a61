// Package webhookclient reaches the webhooks the hub calls (admission
// webhooks and the conversion webhooks of CustomResourceDefinitions) at
// a url or at a Service, over TLS, as kube-apiserver's webhook client
// manager does: a url with the system's roots or its caBundle, a Service
// through a dialer (for pods on edge nodes, the node's sync session) with
// the server name NAME.NAMESPACE.svc. Posts are JSON, bounded in time
// and in the size of the answer, and fail as client-go's REST client
// words its errors.
package webhookclient

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// maxErrorBody bounds the text of a non-JSON error answer quoted in an
// error, as client-go's REST client bounds it.
const maxErrorBody = 2048

// Config says where a webhook is: a url, or a Service; and the CA
// bundle that signs its serving certificate (the system's roots without
// one).
type Config struct {
	URL      *string
	Service  *Service
	CABundle []byte
}

// Service is a webhook served by a Service.
type Service struct {
	Namespace, Name string
	Path            *string
	Port            *int32 // 443 when nil
}

// DialService connects to port of Service namespace/name. It must honour
// ctx, which carries the call's timeout.
type DialService func(ctx context.Context, namespace, name string, port int32) (net.Conn, error)

// Client posts to one webhook. It is safe for concurrent use.
type Client struct {
	// URL is where posts go, without the timeout parameter.
	URL  string
	http *http.Client
}

// New returns the client of the webhook cfg names; dial reaches a
// Service's (nil fails them: "service webhooks are not served"). On an
// error the returned URL, if any, still names the webhook, for messages.
func New(cfg Config, dial DialService) (*Client, error) {
	tlsConfig := &tls.Config{MinVersion: tls.VersionTLS12}
	if len(cfg.CABundle) > 0 {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(cfg.CABundle) {
			return nil, errors.New("unable to load root certificates: unable to parse bytes as PEM block")
		}
		tlsConfig.RootCAs = pool
	}
	tr := &http.Transport{
		TLSClientConfig:     tlsConfig,
		MaxIdleConnsPerHost: 4,
		IdleConnTimeout:     90 * time.Second,
		TLSHandshakeTimeout: 10 * time.Second,
	}
	c := &Client{http: &http.Client{Transport: tr}}
	switch {
	case cfg.Service != nil:
		s := cfg.Service
		port := int32(443)
		if s.Port != nil {
			port = *s.Port
		}
		serverName := s.Name + "." + s.Namespace + ".svc"
		tlsConfig.ServerName = serverName
		u := url.URL{Scheme: "https", Host: net.JoinHostPort(serverName, strconv.Itoa(int(port)))}
		if s.Path != nil {
			u.Path = *s.Path
		}
		c.URL = u.String()
		if dial == nil {
			return c, errors.New("service webhooks are not served")
		}
		ns, name := s.Namespace, s.Name
		tr.DialContext = func(ctx context.Context, _, _ string) (net.Conn, error) { return dial(ctx, ns, name, port) }
	case cfg.URL != nil:
		u, err := url.Parse(*cfg.URL)
		if err != nil {
			return nil, fmt.Errorf("Unparsable URL: %v", err)
		}
		c.URL = u.String()
		tr.Proxy = nil
	default:
		return nil, errors.New("webhook configuration must have either service or URL")
	}
	return c, nil
}

// Close closes the client's idle connections.
func (c *Client) Close() { c.http.CloseIdleConnections() }

// Post posts body, JSON, within timeout and returns the answer of a 2xx
// status, at most maxAnswer bytes of it. A non-2xx answer is the Status
// it carries as an API error, or client-go's generic error quoting it.
func (c *Client) Post(ctx context.Context, timeout time.Duration, body []byte, maxAnswer int64) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	target := c.URL
	if deadline, ok := ctx.Deadline(); ok {
		// Sent as client-go sends a request's timeout: rounded up to
		// whole seconds.
		t := time.Until(deadline)
		if tr := t.Truncate(time.Second); tr != t {
			t = tr + time.Second
		}
		target += "?timeout=" + t.String()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, target, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, */*")
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	answer, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer+1))
	if err != nil {
		return nil, err
	}
	if int64(len(answer)) > maxAnswer {
		return nil, fmt.Errorf("the response of the webhook is larger than %d bytes", maxAnswer)
	}
	if resp.StatusCode < http.StatusOK || resp.StatusCode > http.StatusPartialContent {
		return nil, StatusError(resp.StatusCode, answer)
	}
	return answer, nil
}

// StatusError is the error of a webhook that answered code with body:
// the failure Status it sent, or client-go's generic error quoting what
// it sent.
func StatusError(code int, body []byte) error {
	var st metav1.Status
	if json.Unmarshal(body, &st) == nil && st.Kind == "Status" && st.Status != metav1.StatusSuccess {
		return apierrors.FromObject(&st)
	}
	if len(body) > maxErrorBody {
		body = body[:maxErrorBody]
	}
	return apierrors.NewGenericServerResponse(code, "POST", schema.GroupResource{}, "", string(body), 0, true)
}
