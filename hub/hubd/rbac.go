package hubd

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	rbaclisters "k8s.io/client-go/listers/rbac/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/outpost-mesh/outpost/hub/auth"
	"github.com/outpost-mesh/outpost/hub/auth/rbac"
	"github.com/outpost-mesh/outpost/hub/auth/review"
	"github.com/outpost-mesh/outpost/hub/store"
)

// rbacSyncTimeout bounds the wait for the RBAC caches at start: the hub
// serves nobody but system:masters until they hold the store's roles and
// bindings.
const rbacSyncTimeout = time.Minute

// rbacCache serves the RBAC authorizer the roles and bindings from
// informers' caches, as kube-apiserver's RBAC authorizer reads its
// informers: authorizing a request reads no store.
type rbacCache struct {
	roles               rbaclisters.RoleLister
	clusterRoles        rbaclisters.ClusterRoleLister
	roleBindings        rbaclisters.RoleBindingLister
	clusterRoleBindings rbaclisters.ClusterRoleBindingLister
	synced              []cache.InformerSynced
}

var _ rbac.Policy = (*rbacCache)(nil)

// errRBACNotSynced is returned while the caches are still filling.
var errRBACNotSynced = errors.New("the RBAC caches have not synced yet")

// newRBACCache registers the informers of the four RBAC resources with f;
// the caller starts f.
func newRBACCache(f informers.SharedInformerFactory) *rbacCache {
	r := f.Rbac().V1()
	c := &rbacCache{
		roles:               r.Roles().Lister(),
		clusterRoles:        r.ClusterRoles().Lister(),
		roleBindings:        r.RoleBindings().Lister(),
		clusterRoleBindings: r.ClusterRoleBindings().Lister(),
	}
	c.synced = []cache.InformerSynced{
		r.Roles().Informer().HasSynced, r.ClusterRoles().Informer().HasSynced,
		r.RoleBindings().Informer().HasSynced, r.ClusterRoleBindings().Informer().HasSynced,
	}
	return c
}

func (c *rbacCache) hasSynced() bool {
	for _, s := range c.synced {
		if !s() {
			return false
		}
	}
	return true
}

func (c *rbacCache) GetRole(_ context.Context, namespace, name string) (*rbacv1.Role, error) {
	if !c.hasSynced() {
		return nil, errRBACNotSynced
	}
	r, err := c.roles.Roles(namespace).Get(name)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	return r, err
}

func (c *rbacCache) GetClusterRole(_ context.Context, name string) (*rbacv1.ClusterRole, error) {
	if !c.hasSynced() {
		return nil, errRBACNotSynced
	}
	r, err := c.clusterRoles.Get(name)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	return r, err
}

func (c *rbacCache) ListRoleBindings(_ context.Context, namespace string) ([]*rbacv1.RoleBinding, error) {
	if !c.hasSynced() {
		return nil, errRBACNotSynced
	}
	return c.roleBindings.RoleBindings(namespace).List(labels.Everything())
}

func (c *rbacCache) ListClusterRoleBindings(context.Context) ([]*rbacv1.ClusterRoleBinding, error) {
	if !c.hasSynced() {
		return nil, errRBACNotSynced
	}
	return c.clusterRoleBindings.List(labels.Everything())
}

// reconcileBootstrapRBAC creates upstream's bootstrap ClusterRoles and
// ClusterRoleBindings that are missing and adds what an existing one
// lacks, as kube-apiserver does at every start, through cs (a client of
// system:masters): an upgraded hub brings the rules of its version, and a
// role an admin protected with rbac.authorization.kubernetes.io/autoupdate
// "false" is left alone. It logs what it changes.
func reconcileBootstrapRBAC(ctx context.Context, cs kubernetes.Interface, log *slog.Logger) error {
	roles := cs.RbacV1().ClusterRoles()
	for _, want := range rbac.ClusterRoles() {
		have, err := roles.Get(ctx, want.Name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			have = nil
		case err != nil:
			return fmt.Errorf("reconcile clusterrole %s: %w", want.Name, err)
		}
		res, err := rbac.ReconcileClusterRole(&want, have)
		if err != nil {
			return fmt.Errorf("reconcile clusterrole %s: %w", want.Name, err)
		}
		switch res.Op {
		case rbac.OpCreate:
			_, err = roles.Create(ctx, res.Role, metav1.CreateOptions{})
		case rbac.OpUpdate:
			log.Info("bootstrap clusterrole updated", "name", want.Name, "added_rules", len(res.Missing))
			_, err = roles.Update(ctx, res.Role, metav1.UpdateOptions{})
		}
		if err != nil {
			return fmt.Errorf("reconcile clusterrole %s: %w", want.Name, err)
		}
	}
	if err := reconcileBootstrapRoles(ctx, cs, log); err != nil {
		return err
	}
	bindings := cs.RbacV1().ClusterRoleBindings()
	for _, want := range rbac.ClusterRoleBindings() {
		have, err := bindings.Get(ctx, want.Name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			have = nil
		case err != nil:
			return fmt.Errorf("reconcile clusterrolebinding %s: %w", want.Name, err)
		}
		res, err := rbac.ReconcileClusterRoleBinding(&want, have)
		if err != nil {
			return fmt.Errorf("reconcile clusterrolebinding %s: %w", want.Name, err)
		}
		switch res.Op {
		case rbac.OpCreate:
			_, err = bindings.Create(ctx, res.Binding, metav1.CreateOptions{})
		case rbac.OpUpdate:
			log.Info("bootstrap clusterrolebinding updated", "name", want.Name)
			_, err = bindings.Update(ctx, res.Binding, metav1.UpdateOptions{})
		case rbac.OpRecreate:
			log.Info("bootstrap clusterrolebinding recreated with its role", "name", want.Name)
			uid := have.UID
			if err = bindings.Delete(ctx, want.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}}); err == nil {
				_, err = bindings.Create(ctx, res.Binding, metav1.CreateOptions{})
			}
		}
		if err != nil {
			return fmt.Errorf("reconcile clusterrolebinding %s: %w", want.Name, err)
		}
	}
	return nil
}

// reconcileBootstrapRoles creates the bootstrap Roles and RoleBindings
// that are missing and adds what an existing one lacks, as
// reconcileBootstrapRBAC does for the cluster-wide ones: a Role
// reconciles as a ClusterRole of its rules, a RoleBinding as a
// ClusterRoleBinding of its subjects.
func reconcileBootstrapRoles(ctx context.Context, cs kubernetes.Interface, log *slog.Logger) error {
	for _, want := range rbac.Roles() {
		roles := cs.RbacV1().Roles(want.Namespace)
		have, err := roles.Get(ctx, want.Name, metav1.GetOptions{})
		var existing *rbacv1.ClusterRole
		switch {
		case apierrors.IsNotFound(err):
		case err != nil:
			return fmt.Errorf("reconcile role %s/%s: %w", want.Namespace, want.Name, err)
		default:
			existing = &rbacv1.ClusterRole{ObjectMeta: have.ObjectMeta, Rules: have.Rules}
		}
		res, err := rbac.ReconcileClusterRole(&rbacv1.ClusterRole{ObjectMeta: want.ObjectMeta, Rules: want.Rules}, existing)
		if err != nil {
			return fmt.Errorf("reconcile role %s/%s: %w", want.Namespace, want.Name, err)
		}
		if res.Op == rbac.OpNone {
			continue
		}
		role := &rbacv1.Role{ObjectMeta: res.Role.ObjectMeta, Rules: res.Role.Rules}
		role.Namespace = want.Namespace
		if res.Op == rbac.OpCreate {
			_, err = roles.Create(ctx, role, metav1.CreateOptions{})
		} else {
			log.Info("bootstrap role updated", "namespace", want.Namespace, "name", want.Name, "added_rules", len(res.Missing))
			_, err = roles.Update(ctx, role, metav1.UpdateOptions{})
		}
		if err != nil {
			return fmt.Errorf("reconcile role %s/%s: %w", want.Namespace, want.Name, err)
		}
	}
	for _, want := range rbac.RoleBindings() {
		if err := reconcileBootstrapRoleBinding(ctx, cs, want, log); err != nil {
			return fmt.Errorf("reconcile rolebinding %s/%s: %w", want.Namespace, want.Name, err)
		}
	}
	return nil
}

// reconcileBootstrapRoleBinding makes the RoleBinding want holds exist
// with its subjects, as reconcileBootstrapRoles.
func reconcileBootstrapRoleBinding(ctx context.Context, cs kubernetes.Interface, want rbacv1.RoleBinding, log *slog.Logger) error {
	bindings := cs.RbacV1().RoleBindings(want.Namespace)
	have, err := bindings.Get(ctx, want.Name, metav1.GetOptions{})
	var existing *rbacv1.ClusterRoleBinding
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		return err
	default:
		existing = &rbacv1.ClusterRoleBinding{ObjectMeta: have.ObjectMeta, RoleRef: have.RoleRef, Subjects: have.Subjects}
	}
	res, err := rbac.ReconcileClusterRoleBinding(&rbacv1.ClusterRoleBinding{ObjectMeta: want.ObjectMeta, RoleRef: want.RoleRef, Subjects: want.Subjects}, existing)
	if err != nil || res.Op == rbac.OpNone {
		return err
	}
	b := &rbacv1.RoleBinding{ObjectMeta: res.Binding.ObjectMeta, RoleRef: res.Binding.RoleRef, Subjects: res.Binding.Subjects}
	b.Namespace = want.Namespace
	switch res.Op {
	case rbac.OpCreate:
		_, err = bindings.Create(ctx, b, metav1.CreateOptions{})
	case rbac.OpUpdate:
		log.Info("bootstrap rolebinding updated", "namespace", want.Namespace, "name", want.Name)
		_, err = bindings.Update(ctx, b, metav1.UpdateOptions{})
	case rbac.OpRecreate:
		log.Info("bootstrap rolebinding recreated with its role", "namespace", want.Namespace, "name", want.Name)
		uid := have.UID
		if err = bindings.Delete(ctx, want.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}}); err == nil {
			_, err = bindings.Create(ctx, b, metav1.CreateOptions{})
		}
	}
	return err
}

// lateAuth answers the review resources with the hub's authorizer and
// RBAC rules, which exist only once the API server they authorize does:
// startRBAC sets them before the hub serves anyone but system:masters,
// and until then they fail. Safe for concurrent use.
type lateAuth struct {
	tokens review.Tokens // non-nil
	authz  atomic.Pointer[auth.Authorizer]
	rules  atomic.Pointer[rbac.Authorizer]
}

var (
	_ review.Authorizer = (*lateAuth)(nil)
	_ review.Rules      = (*lateAuth)(nil)
)

var errAuthStarting = errors.New("authorization is starting")

func (l *lateAuth) set(authz *auth.Authorizer, rules *rbac.Authorizer) {
	l.authz.Store(authz)
	l.rules.Store(rules)
}

func (l *lateAuth) Authorize(ctx context.Context, u auth.User, a auth.Attributes) (auth.Decision, error) {
	z := l.authz.Load()
	if z == nil {
		return auth.Decision{}, errAuthStarting
	}
	return z.Authorize(ctx, u, a)
}

func (l *lateAuth) RulesFor(ctx context.Context, u auth.User, namespace string) ([]rbacv1.PolicyRule, error) {
	r := l.rules.Load()
	if r == nil {
		return nil, errAuthStarting
	}
	return r.RulesFor(ctx, u, namespace)
}

// startRBAC reconciles the bootstrap roles and bindings, then chains the
// RBAC authorizer after handler's own rules, readies escalation (when not
// nil) and starts the RBAC caches as a part of parts, returning once they
// have synced (or failing after rbacSyncTimeout). Until it returns,
// handler authorizes only system:masters, the hub's controllers, nodes
// and public paths; it must return before handler serves anyone else.
func startRBAC(ctx context.Context, parts *parts, handler *apiHandler, st store.Reader, hooks *policyHooks, log *slog.Logger) (*part, error) {
	cs, _, err := inprocClientsAs(handler, hubUser, "outpost-hub/rbac", log)
	if err != nil {
		return nil, err
	}
	if err := reconcileBootstrapRBAC(ctx, cs, log); err != nil {
		return nil, err
	}
	f := informers.NewSharedInformerFactory(cs, 0)
	c := newRBACCache(f)
	synced := c.synced
	rules := rbac.New(c)
	handler.authz = auth.NewAuthorizer(storePods{st}, rules)
	if hooks != nil {
		hooks.escalation.Set(handler.authz, rules, c)
		hooks.reviews.set(handler.authz, rules)
		synced = append(synced, hooks.caches.register(f, cs)...)
	}
	p := parts.start("rbac cache", context.WithoutCancel(ctx), func(ctx context.Context) error {
		f.Start(ctx.Done())
		<-ctx.Done()
		f.Shutdown()
		return nil
	})
	wait, cancel := context.WithTimeout(ctx, rbacSyncTimeout)
	defer cancel()
	if !cache.WaitForCacheSync(wait.Done(), synced...) {
		return p, fmt.Errorf("rbac and admission caches did not sync within %v", rbacSyncTimeout)
	}
	if hooks != nil {
		hooks.caches.ready.Store(true)
	}
	return p, nil
}
