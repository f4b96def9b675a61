package apibench

import (
	"fmt"
	"net/http"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// loadConfig returns the client config of the kubeconfig at path, without
// client-side rate limiting, speaking JSON if asked and otherwise
// client-go's default for built-in types, protobuf.
func loadConfig(path string, asJSON bool) (*rest.Config, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		return nil, fmt.Errorf("load kubeconfig: %w", err)
	}
	cfg.QPS = -1 // no client-side rate limit
	cfg.Burst = 1 << 20
	cfg.Timeout = 0 // watches are long; each request's context bounds it
	cfg.UserAgent = "outpost-bench-api"
	if asJSON {
		cfg.ContentType = runtime.ContentTypeJSON
		cfg.AcceptContentTypes = runtime.ContentTypeJSON
	}
	return cfg, nil
}

// client is a clientset over a transport of its own, so that it has its
// own connection to the hub: client-go would otherwise share one transport,
// and so one HTTP/2 connection, among every clientset of equal config.
type client struct {
	*kubernetes.Clientset
	meta metadata.Interface
	// http makes raw requests over the client's connection, with its
	// credentials.
	http      *http.Client
	transport *http.Transport
}

// newClient returns a client of cfg with a connection of its own. The
// caller must call close.
func newClient(cfg *rest.Config) (*client, error) {
	tlsCfg, err := rest.TLSConfigFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("client tls config: %w", err)
	}
	tr := &http.Transport{
		TLSClientConfig:     tlsCfg,
		ForceAttemptHTTP2:   true,
		TLSHandshakeTimeout: 10 * time.Second,
		MaxIdleConnsPerHost: 100,
	}
	// client-go's own wrappers (user agent, credentials) over it.
	rt, err := rest.HTTPWrappersForConfig(cfg, tr)
	if err != nil {
		return nil, fmt.Errorf("client transport: %w", err)
	}
	hc := &http.Client{Transport: rt}
	cs, err := kubernetes.NewForConfigAndClient(cfg, hc)
	if err != nil {
		tr.CloseIdleConnections()
		return nil, fmt.Errorf("new clientset: %w", err)
	}
	mc, err := metadata.NewForConfigAndClient(cfg, hc)
	if err != nil {
		tr.CloseIdleConnections()
		return nil, fmt.Errorf("new metadata client: %w", err)
	}
	return &client{Clientset: cs, meta: mc, http: hc, transport: tr}, nil
}

// close closes the client's idle connections; call it once its requests
// and watches have ended.
func (c *client) close() { c.transport.CloseIdleConnections() }
