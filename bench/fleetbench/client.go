package fleetbench

import (
	"context"
	"fmt"
	"net/http"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/outpost-mesh/outpost/bench/internal/childhub"
)

// loadConfig returns the client config of the kubeconfig at path, without
// client-side rate limiting, speaking client-go's default for built-in
// types, protobuf.
func loadConfig(path string) (*rest.Config, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		return nil, fmt.Errorf("load kubeconfig: %w", err)
	}
	cfg.QPS = -1 // no client-side rate limit
	cfg.Burst = 1 << 20
	cfg.Timeout = 0 // watches are long; each request's context bounds it
	cfg.UserAgent = "outpost-bench-fleet"
	return cfg, nil
}

// client is a clientset over a transport of its own, so that it has its
// own connection to the hub: client-go would otherwise share one transport,
// and so one HTTP/2 connection, among every clientset of equal config.
type client struct {
	*kubernetes.Clientset
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
	rt, err := rest.HTTPWrappersForConfig(cfg, tr)
	if err != nil {
		return nil, fmt.Errorf("client transport: %w", err)
	}
	cs, err := kubernetes.NewForConfigAndClient(cfg, &http.Client{Transport: rt})
	if err != nil {
		tr.CloseIdleConnections()
		return nil, fmt.Errorf("new clientset: %w", err)
	}
	return &client{Clientset: cs, transport: tr}, nil
}

// close closes the client's idle connections; call it once its requests
// and watches have ended.
func (c *client) close() { c.transport.CloseIdleConnections() }

// prepare creates the namespace, which must hold no pods, and a bootstrap
// token for the fleet, valid for a day; it returns the token.
func prepare(ctx context.Context, c *client, namespace string) (string, error) {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}
	if _, err := c.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return "", fmt.Errorf("create namespace %s: %w", namespace, err)
	}
	list, err := c.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{Limit: 1})
	if err != nil {
		return "", fmt.Errorf("list pods: %w", err)
	}
	if len(list.Items) > 0 {
		return "", fmt.Errorf("namespace %s of the fresh hub already holds pods", namespace)
	}
	return childhub.BootstrapToken(ctx, c, "outpost bench fleet")
}
