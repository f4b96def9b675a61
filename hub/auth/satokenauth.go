package auth

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TokenObjects looks up the objects service account tokens are bound to.
// Each method returns nil and no error when the object does not exist; an
// error means the lookup failed. Its methods must be safe for concurrent
// use; the caller does not modify the objects returned.
type TokenObjects interface {
	ServiceAccount(ctx context.Context, namespace, name string) (*corev1.ServiceAccount, error)
	Pod(ctx context.Context, namespace, name string) (*corev1.Pod, error)
	Secret(ctx context.Context, namespace, name string) (*corev1.Secret, error)
	Node(ctx context.Context, name string) (*corev1.Node, error)
}

// BoundObjects are the objects a token's claims name, as they are now:
// nil for one that does not exist (or that the claims do not name).
type BoundObjects struct {
	ServiceAccount *corev1.ServiceAccount
	Pod            *corev1.Pod
	Secret         *corev1.Secret
	Node           *corev1.Node
}

// CheckBinding reports whether a token with claims c still holds, given
// the objects it is bound to as they are at now, as upstream's validator
// decides: the service account, and the pod, secret or node the token is
// bound to, must exist with the UIDs the token names, and not have been
// deleted more than TokenLeeway ago (a pod in its grace period keeps its
// token). Unlike upstream, a pod that has terminated (phase Succeeded or
// Failed) no longer holds a token either: nothing of it runs that could
// use one, so one that leaked is worth nothing. The node a pod-bound token
// names is informative only, as upstream has it. Errors wrap
// ErrInvalidToken. No I/O.
func CheckBinding(c TokenClaims, objs BoundObjects, now time.Time) error {
	gone := func(m metav1.ObjectMeta) bool {
		return m.DeletionTimestamp != nil && m.DeletionTimestamp.Time.Before(now.Add(-TokenLeeway))
	}
	sa := objs.ServiceAccount
	switch {
	case sa == nil:
		return invalid("service account %s/%s does not exist", c.Namespace, c.ServiceAccount.Name)
	case string(sa.UID) != c.ServiceAccount.UID:
		return invalid("service account UID (%s) does not match claim (%s)", sa.UID, c.ServiceAccount.UID)
	case gone(sa.ObjectMeta):
		return invalid("service account %s/%s has been deleted", c.Namespace, c.ServiceAccount.Name)
	}
	if ref := c.Secret; ref != nil {
		s := objs.Secret
		switch {
		case s == nil:
			return invalid("bound secret %s/%s does not exist: the token has been invalidated", c.Namespace, ref.Name)
		case string(s.UID) != ref.UID:
			return invalid("secret UID (%s) does not match service account secret ref claim (%s)", s.UID, ref.UID)
		case gone(s.ObjectMeta):
			return invalid("bound secret %s/%s has been deleted: the token has been invalidated", c.Namespace, ref.Name)
		}
	}
	if ref := c.Pod; ref != nil {
		p := objs.Pod
		switch {
		case p == nil:
			return invalid("bound pod %s/%s does not exist: the token has been invalidated", c.Namespace, ref.Name)
		case string(p.UID) != ref.UID:
			return invalid("pod UID (%s) does not match service account pod ref claim (%s)", p.UID, ref.UID)
		case gone(p.ObjectMeta):
			return invalid("bound pod %s/%s has been deleted: the token has been invalidated", c.Namespace, ref.Name)
		case p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed:
			return invalid("bound pod %s/%s has terminated (%s): the token has been invalidated", c.Namespace, ref.Name, p.Status.Phase)
		}
	}
	if ref := c.Node; ref != nil && c.Pod == nil {
		n := objs.Node
		switch {
		case n == nil:
			return invalid("bound node %s does not exist: the token has been invalidated", ref.Name)
		case string(n.UID) != ref.UID:
			return invalid("node UID (%s) does not match service account node ref claim (%s)", n.UID, ref.UID)
		case gone(n.ObjectMeta):
			return invalid("bound node %s has been deleted: the token has been invalidated", ref.Name)
		}
	}
	return nil
}

// TokenAuthenticator authenticates requests that bear a service account
// token: it verifies the token, looks up the objects it is bound to and
// checks that they still hold it. Its methods are safe for concurrent use.
type TokenAuthenticator struct {
	verifier *TokenVerifier
	objects  TokenObjects
}

// NewTokenAuthenticator returns an authenticator verifying tokens with v
// and looking their bound objects up in objects (both non-nil).
func NewTokenAuthenticator(v *TokenVerifier, objects TokenObjects) *TokenAuthenticator {
	return &TokenAuthenticator{verifier: v, objects: objects}
}

// Authenticate returns the user token authenticates: its service account's
// (see ServiceAccountUser). An error wrapping ErrInvalidToken refuses the
// token; any other is a failed lookup, and decides nothing.
func (a *TokenAuthenticator) Authenticate(ctx context.Context, token string) (User, error) {
	c, err := a.verifier.Verify(token)
	if err != nil {
		return User{}, err
	}
	var objs BoundObjects
	if objs.ServiceAccount, err = a.objects.ServiceAccount(ctx, c.Namespace, c.ServiceAccount.Name); err != nil {
		return User{}, fmt.Errorf("authenticate token: get service account %s/%s: %w", c.Namespace, c.ServiceAccount.Name, err)
	}
	if c.Secret != nil {
		if objs.Secret, err = a.objects.Secret(ctx, c.Namespace, c.Secret.Name); err != nil {
			return User{}, fmt.Errorf("authenticate token: get secret %s/%s: %w", c.Namespace, c.Secret.Name, err)
		}
	}
	if c.Pod != nil {
		if objs.Pod, err = a.objects.Pod(ctx, c.Namespace, c.Pod.Name); err != nil {
			return User{}, fmt.Errorf("authenticate token: get pod %s/%s: %w", c.Namespace, c.Pod.Name, err)
		}
	} else if c.Node != nil {
		if objs.Node, err = a.objects.Node(ctx, c.Node.Name); err != nil {
			return User{}, fmt.Errorf("authenticate token: get node %s: %w", c.Node.Name, err)
		}
	}
	if err := CheckBinding(c, objs, a.verifier.now()); err != nil {
		return User{}, err
	}
	return ServiceAccountUser(c.Namespace, c.ServiceAccount.Name), nil
}

// Token lifetimes.
const (
	// MinTokenLifetime and MaxTokenLifetime bound what a TokenRequest may
	// ask for, as upstream's validation does: ten minutes, and 2^32 s.
	MinTokenLifetime = 10 * time.Minute
	MaxTokenLifetime = (1<<32 - 1) * time.Second
	// DefaultTokenLifetime is what a TokenRequest gets without asking,
	// as upstream defaults expirationSeconds.
	DefaultTokenLifetime = time.Hour

	// EdgePodTokenLifetime is the least life of a token bound to a pod
	// on a node. An edge node is offline for days at a time (its offline
	// tolerance, seven days by default) and cannot refresh its pods'
	// tokens while away, so a token must outlive the longest absence the
	// hub tolerates, counted from the node's last refresh. The node
	// refreshes as kubelet does, at 80% of the life the answer reports,
	// and the answer reports the life asked for (an hour by default), so
	// an online node always holds a token with nearly seven days ahead.
	// This is upstream's --service-account-extend-token-expiration, which
	// grants a year to the tokens kubelet asks for (3607 s) and reports
	// the hour: we grant a week, to every pod-on-a-node token, because a
	// week is the offline tolerance and a year is a leaked token's life
	// for no gain. As upstream, the token carries warnafter at the end of
	// the life asked for, so that its staleness can be seen.
	//
	// Over sync the hub re-mints a connected node's pod tokens at least
	// daily, so the week of tolerance holds from any moment the link
	// drops: the life is the tolerance and that day.
	EdgePodTokenLifetime = EdgeOfflineTolerance + 24*time.Hour
	// EdgeOfflineTolerance is how long an edge node is expected to run
	// on its own without the hub, by default: seven days.
	EdgeOfflineTolerance = 7 * 24 * time.Hour
)

// TokenLifetime is the life granted to one token.
type TokenLifetime struct {
	// Reported is the life the TokenRequest's answer reports (its
	// expirationSeconds and expirationTimestamp): the life asked for,
	// shortened to the hub's maximum.
	Reported time.Duration
	// Actual is the life in the token's exp: Reported, or
	// EdgePodTokenLifetime when that is longer for a pod on a node.
	Actual time.Duration
	// Warnings are for the client, such as upstream's "requested
	// expiration of N seconds shortened to M seconds".
	Warnings []string
}

// Extended reports whether the token outlives what its answer reports;
// its warnafter claim is then the end of Reported.
func (l TokenLifetime) Extended() bool { return l.Actual > l.Reported }

// GrantTokenLifetime decides the life of a token asked for requested
// (already validated: at least MinTokenLifetime), with max the hub's
// maximum (0: none), for a token bound to a pod on a node when podOnNode.
// The extension to EdgePodTokenLifetime may exceed max, as upstream's
// extension exceeds --service-account-max-token-expiration: max bounds
// what clients ask for, not the offline tolerance. No I/O.
func GrantTokenLifetime(requested, max time.Duration, podOnNode bool) TokenLifetime {
	l := TokenLifetime{Reported: requested}
	if max > 0 && requested > max {
		l.Reported = max
		l.Warnings = append(l.Warnings, fmt.Sprintf("requested expiration of %d seconds shortened to %d seconds", int64(requested/time.Second), int64(max/time.Second)))
	}
	l.Actual = l.Reported
	if podOnNode && l.Actual < EdgePodTokenLifetime {
		l.Actual = EdgePodTokenLifetime
	}
	return l
}
