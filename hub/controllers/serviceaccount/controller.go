package serviceaccount

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"

	"github.com/outpost-mesh/outpost/hub/controllers"
)

// Component names the controller in events and logs.
const Component = "serviceaccount-controller"

// workers is how many namespaces are synced at once.
const workers = 2

// Controller keeps each namespace's default ServiceAccount and
// kube-root-ca.crt ConfigMap. It watches namespaces through the shared
// informers, and only the service accounts and config maps of those two
// names through informers of its own (a field selector on the name), so
// that it does not hold every config map of the cluster in memory.
type Controller struct {
	client kubernetes.Interface
	events record.EventRecorder
	log    *slog.Logger
	caPEM  []byte

	namespaces   corelisters.NamespaceLister
	nsSynced     cache.InformerSynced
	accounts     cache.SharedIndexInformer
	rootCAs      cache.SharedIndexInformer
	accountsList corelisters.ServiceAccountLister
	rootCAList   corelisters.ConfigMapLister

	queue workqueue.TypedRateLimitingInterface[string]
}

// New returns the controller publishing caPEM, the hub CA's certificate
// in PEM, to every namespace. It registers its handlers and starts nothing.
func New(c controllers.Context, caPEM []byte) (*Controller, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	if err := checkCA(caPEM); err != nil {
		return nil, err
	}
	named := func(name string) func(*metav1.ListOptions) {
		return func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", name).String()
		}
	}
	indexers := cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc}
	ctl := &Controller{
		client:   c.Client,
		events:   c.Events(Component),
		log:      c.Logger,
		caPEM:    append([]byte(nil), caPEM...),
		accounts: coreinformers.NewFilteredServiceAccountInformer(c.Client, metav1.NamespaceAll, 0, indexers, named(DefaultName)),
		rootCAs:  coreinformers.NewFilteredConfigMapInformer(c.Client, metav1.NamespaceAll, 0, indexers, named(RootCAName)),
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "serviceaccount", Clock: c.Clock}),
	}
	ctl.accountsList = corelisters.NewServiceAccountLister(ctl.accounts.GetIndexer())
	ctl.rootCAList = corelisters.NewConfigMapLister(ctl.rootCAs.GetIndexer())

	nsInformer := c.Informers.Core().V1().Namespaces()
	ctl.namespaces = nsInformer.Lister()
	ctl.nsSynced = nsInformer.Informer().HasSynced
	if _, err := nsInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    ctl.enqueueOwn,
		UpdateFunc: func(_, obj any) { ctl.enqueueOwn(obj) },
	}); err != nil {
		return nil, fmt.Errorf("serviceaccount: watch namespaces: %w", err)
	}
	// What is in a namespace matters when it goes or changes.
	inNamespace := cache.ResourceEventHandlerFuncs{
		UpdateFunc: func(_, obj any) { ctl.enqueueNamespaceOf(obj) },
		DeleteFunc: ctl.enqueueNamespaceOf,
	}
	if _, err := ctl.accounts.AddEventHandler(inNamespace); err != nil {
		return nil, fmt.Errorf("serviceaccount: watch service accounts: %w", err)
	}
	if _, err := ctl.rootCAs.AddEventHandler(inNamespace); err != nil {
		return nil, fmt.Errorf("serviceaccount: watch config maps: %w", err)
	}
	return ctl, nil
}

// checkCA reports whether caPEM holds at least one certificate, and
// nothing but certificates.
func checkCA(caPEM []byte) error {
	rest, n := caPEM, 0
	for {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			break
		}
		if b.Type != "CERTIFICATE" {
			return fmt.Errorf("serviceaccount: CA bundle holds a %q block, want only certificates", b.Type)
		}
		if _, err := x509.ParseCertificate(b.Bytes); err != nil {
			return fmt.Errorf("serviceaccount: CA bundle: %w", err)
		}
		n++
	}
	if n == 0 {
		return errors.New("serviceaccount: CA bundle holds no certificate")
	}
	return nil
}

// enqueueOwn queues the namespace obj is.
func (c *Controller) enqueueOwn(obj any) {
	if ns, ok := obj.(*corev1.Namespace); ok {
		c.queue.Add(ns.Name)
	}
}

// enqueueNamespaceOf queues the namespace of obj, a service account or
// config map or the tombstone of one.
func (c *Controller) enqueueNamespaceOf(obj any) {
	if m, ok := controllers.Object[metav1.Object](obj); ok {
		c.queue.Add(m.GetNamespace())
	}
}

// Run waits for its caches, syncs namespaces until ctx ends, and returns
// once its informers and workers have stopped.
func (c *Controller) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() { c.accounts.RunWithContext(ctx) })
	wg.Go(func() { c.rootCAs.RunWithContext(ctx) })
	return controllers.Work(ctx, controllers.Workers[string]{
		Queue: c.queue, Count: workers, Synced: []cache.InformerSynced{c.nsSynced, c.accounts.HasSynced, c.rootCAs.HasSynced},
		Sync: c.sync, Log: c.log, What: "namespace", Started: "started", Failed: "sync failed; retrying", Level: controllers.Loud,
	})
}

// sync carries out the plan of namespace name.
func (c *Controller) sync(ctx context.Context, name string) error {
	ns, err := c.namespaces.Get(name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	sa, err := c.accountsList.ServiceAccounts(name).Get(DefaultName)
	if err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	cm, err := c.rootCAList.ConfigMaps(name).Get(RootCAName)
	if err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	p := Decide(ns, sa, cm, c.caPEM)
	var errs []error
	if p.CreateServiceAccount != nil {
		_, err := c.client.CoreV1().ServiceAccounts(name).Create(ctx, p.CreateServiceAccount, metav1.CreateOptions{})
		errs = append(errs, c.outcome(ns, "FailedCreate", "creating service account "+DefaultName, err))
	}
	if p.CreateRootCA != nil {
		_, err := c.client.CoreV1().ConfigMaps(name).Create(ctx, p.CreateRootCA, metav1.CreateOptions{})
		errs = append(errs, c.outcome(ns, "FailedCreate", "creating config map "+RootCAName, err))
	}
	if p.UpdateRootCA != nil {
		_, err := c.client.CoreV1().ConfigMaps(name).Update(ctx, p.UpdateRootCA, metav1.UpdateOptions{})
		if apierrors.IsNotFound(err) {
			err = nil // deleted meanwhile: its delete queues a create
		}
		errs = append(errs, c.outcome(ns, "FailedUpdate", "updating config map "+RootCAName, err))
	}
	return errors.Join(errs...)
}

// outcome sorts the error of a write (doing) in ns: nil when there is
// nothing to retry (it succeeded, the object is already there, or the
// namespace is gone or terminating), else the error to retry with back-off.
// A refusal that no retry will cure soon (invalid, forbidden) is also
// recorded as a Warning event with reason on the namespace, for
// `kubectl describe`.
func (c *Controller) outcome(ns *corev1.Namespace, reason, doing string, err error) error {
	switch {
	case err == nil, apierrors.IsAlreadyExists(err):
		return nil
	case apierrors.IsNotFound(err), apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause):
		return nil
	case apierrors.IsInvalid(err), apierrors.IsForbidden(err), apierrors.IsBadRequest(err):
		c.events.Eventf(ns, corev1.EventTypeWarning, reason, "Error %s: %v", doing, err)
	}
	return fmt.Errorf("%s in %s: %w", doing, ns.Name, err)
}
