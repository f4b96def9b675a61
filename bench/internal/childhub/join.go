package childhub

import (
	"context"
	"errors"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/outpost-mesh/outpost/hub/auth"
	"github.com/outpost-mesh/outpost/sync/wire"
)

// CAHash returns the pin of the hub CA that cfg (the hub's kubeconfig)
// trusts, which nodes join with.
func CAHash(cfg *rest.Config) (string, error) {
	pin, err := wire.CAHashPEM(cfg.CAData)
	if errors.Is(err, wire.ErrNoCA) {
		return "", errors.New("the hub's kubeconfig carries no CA certificate")
	}
	return pin, err
}

// BootstrapToken creates a bootstrap token on the hub, valid for a day and
// described as what, for a benchmark's nodes to join with, and returns it.
func BootstrapToken(ctx context.Context, cs kubernetes.Interface, what string) (string, error) {
	id, secret := auth.GenerateToken()
	s := auth.NewBootstrapTokenSecret(id, secret, "", 24*time.Hour, time.Now())
	s.Data[auth.BootstrapTokenDescriptionKey] = []byte(what)
	if _, err := cs.CoreV1().Secrets(auth.BootstrapTokenNamespace).Create(ctx, s, metav1.CreateOptions{}); err != nil {
		return "", fmt.Errorf("create bootstrap token: %w", err)
	}
	return id + "." + secret, nil
}
