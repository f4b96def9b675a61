package edgenode

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/containerd/containerd/v2/client"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/outpost-mesh/outpost/edge/images"
	"github.com/outpost-mesh/outpost/hub/auth"
	"github.com/outpost-mesh/outpost/internal/ociimage"
	"github.com/outpost-mesh/outpost/sync/wire"
)

// Prepare creates the namespace, unless it exists, and a bootstrap token
// valid for an hour described as what, and returns the token.
func Prepare(ctx context.Context, c kubernetes.Interface, namespace, what string) (string, error) {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}
	if _, err := c.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return "", fmt.Errorf("create namespace %s: %w", namespace, err)
	}
	id, secret := auth.GenerateToken()
	s := auth.NewBootstrapTokenSecret(id, secret, "", time.Hour, time.Now())
	s.Data[auth.BootstrapTokenDescriptionKey] = []byte(what)
	if _, err := c.CoreV1().Secrets(auth.BootstrapTokenNamespace).Create(ctx, s, metav1.CreateOptions{}); err != nil {
		return "", fmt.Errorf("create bootstrap token: %w", err)
	}
	return id + "." + secret, nil
}

// CAHash returns the pin of the hub CA the client config trusts.
func CAHash(cfg *rest.Config) (string, error) {
	data := cfg.CAData
	if len(data) == 0 && cfg.CAFile != "" {
		var err error
		if data, err = os.ReadFile(cfg.CAFile); err != nil {
			return "", fmt.Errorf("read the hub CA: %w", err)
		}
	}
	pin, err := wire.CAHashPEM(data)
	if errors.Is(err, wire.ErrNoCA) {
		return "", errors.New("the hub's kubeconfig carries no CA certificate")
	}
	return pin, err
}

// ImportBusybox imports an image named image made from this machine's
// busybox (see ociimage.Busybox) into the node's containerd, once the
// agent named it, waiting at most timeout for that.
func ImportBusybox(ctx context.Context, n *Node, image string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	var ep images.Endpoint
	for {
		var err error
		if ep, err = images.ReadEndpoint(n.Dir); err == nil {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the agent named no containerd within %v: %w", timeout, err)
		}
		if err := n.Running(); err != nil {
			return err
		}
		if err := sleep(ctx, 100*time.Millisecond); err != nil {
			return err
		}
	}
	im, err := ociimage.Busybox(image)
	if err != nil {
		return fmt.Errorf("build the image: %w", err)
	}
	var b bytes.Buffer
	if err := im.WriteOCI(&b); err != nil {
		return fmt.Errorf("build the image: %w", err)
	}
	c, err := client.New(ep.Address, client.WithDefaultNamespace(ep.Namespace))
	if err != nil {
		return fmt.Errorf("connect to containerd at %s: %w", ep.Address, err)
	}
	defer c.Close()
	icfg := images.DefaultConfig()
	icfg.Client, icfg.Namespace = c, ep.Namespace
	if ep.Snapshotter != "" {
		icfg.Snapshotter = ep.Snapshotter
	}
	svc, err := images.New(icfg)
	if err != nil {
		return err
	}
	if _, err := svc.Import(ctx, &b); err != nil {
		return fmt.Errorf("import the image: %w", err)
	}
	return nil
}

// WaitReady waits, at most timeout, for the node to be Ready with a pod
// CIDR, as the hub client c sees it.
func WaitReady(ctx context.Context, c kubernetes.Interface, n *Node, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	last := "no Node yet"
	for {
		if err := n.Running(); err != nil {
			return err
		}
		nd, err := c.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
		switch {
		case err != nil:
			last = err.Error()
		case nd.Spec.PodCIDR == "":
			last = "no pod CIDR"
		default:
			last = "not Ready"
			for _, c := range nd.Status.Conditions {
				if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
					return nil
				}
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("node %s not Ready with a pod CIDR within %v: %s%s", n.Name, timeout, last, n.LogTail())
		}
		if err := sleep(ctx, 100*time.Millisecond); err != nil {
			return err
		}
	}
}

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
