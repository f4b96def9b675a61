package hubd

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/outpost-mesh/outpost/hub/auth"
	"github.com/outpost-mesh/outpost/sync/server"
	"github.com/outpost-mesh/outpost/sync/view"
	"github.com/outpost-mesh/outpost/sync/wire"
)

// syncTokens adapts the hub's token issuer to the sync server: it mints
// the tokens of the pods of nodes' views, bound to the pod and its node,
// as a TokenRequest for the pod would, after looking the pod up again in
// the store, so that a token is minted only for the node the pod is bound
// to now.
type syncTokens struct {
	issuer *auth.TokenIssuer
	objs   storeTokenObjects
}

var _ server.TokenMinter = syncTokens{}

// MintPodTokens implements server.TokenMinter.
func (t syncTokens) MintPodTokens(ctx context.Context, node string, p view.TokenPod, now time.Time) ([]wire.PodToken, error) {
	ns, name := p.Key.Namespace, p.Key.Name
	pod, err := t.objs.Pod(ctx, ns, name)
	switch {
	case err != nil:
		return nil, fmt.Errorf("look up pod %s/%s: %w", ns, name, err)
	case pod == nil || string(pod.UID) != p.UID:
		return nil, fmt.Errorf("pod %s/%s (%s) does not exist: %w", ns, name, p.UID, server.ErrPodGone)
	case pod.Spec.NodeName != node:
		return nil, fmt.Errorf("pod %s/%s is bound to node %q, not %q: %w", ns, name, pod.Spec.NodeName, node, server.ErrPodGone)
	case pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed:
		return nil, fmt.Errorf("pod %s/%s has terminated: %w", ns, name, server.ErrPodGone)
	}
	sa, err := t.objs.ServiceAccount(ctx, ns, p.ServiceAccount)
	switch {
	case err != nil:
		return nil, fmt.Errorf("look up service account %s/%s: %w", ns, p.ServiceAccount, err)
	case sa == nil:
		return nil, fmt.Errorf("service account %s/%s of pod %s does not exist", ns, p.ServiceAccount, name)
	}
	n, err := t.objs.Node(ctx, node)
	if err != nil {
		return nil, fmt.Errorf("look up node %s: %w", node, err)
	}
	if n == nil {
		// As a TokenRequest names a node that is gone: by name alone.
		n = &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}
	}
	var out []wire.PodToken
	for _, src := range p.Sources {
		if src.Declined(sa.AutomountServiceAccountToken) {
			continue
		}
		var auds []string
		if src.Audience != "" {
			auds = []string{src.Audience}
		}
		requested := max(time.Duration(src.ExpirationSeconds)*time.Second, auth.MinTokenLifetime)
		tok, err := t.issuer.Issue(auth.TokenGrant{ServiceAccount: sa, Pod: pod, Node: n, Audiences: auds, Requested: requested, Now: now})
		if err != nil {
			return nil, fmt.Errorf("issue token %s/%s of pod %s/%s: %w", src.Volume, src.Path, ns, name, err)
		}
		// The token's iat and exp, which it holds in whole seconds.
		iat := now.Truncate(time.Second)
		out = append(out, wire.PodToken{
			Volume: src.Volume, Path: src.Path, Audiences: tok.Audiences, Token: tok.Token,
			IssuedAt: iat, Expiry: now.Add(tok.Lifetime.Actual).Truncate(time.Second),
		})
	}
	return out, nil
}
