// Package aggregator is the hub's aggregation layer, as upstream's
// kube-aggregator: it keeps a local APIService for every group version
// the hub serves itself (autoregistration, with those of custom
// resources coming and going with their definitions), checks the
// availability of APIServices backed by a Service, lists the available
// ones in discovery with the resources they serve, proxies requests for
// their group versions to the Service's pods as the front proxy, and
// publishes whom extension API servers should trust
// (extension-apiserver-authentication). Only hub/hubd wires it.
package aggregator

import (
	"context"
	"fmt"
	"log/slog"
	"reflect"
	"sync"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apiextensionsinformers "k8s.io/apiextensions-apiserver/pkg/client/informers/externalversions"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	apiregistrationv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
	aggregatorclient "k8s.io/kube-aggregator/pkg/client/clientset_generated/clientset"
	apiregistrationclient "k8s.io/kube-aggregator/pkg/client/clientset_generated/clientset/typed/apiregistration/v1"
	aggregatorinformers "k8s.io/kube-aggregator/pkg/client/informers/externalversions"
	apiregistrationlisters "k8s.io/kube-aggregator/pkg/client/listers/apiregistration/v1"
)

// The label that marks an APIService the hub manages, and its values, as
// upstream's autoregister controller names them.
const (
	// ManagedLabel marks an APIService the autoregistration keeps.
	ManagedLabel = "kube-aggregator.kubernetes.io/automanaged"
	// ManagedOnStart is the value of ManagedLabel for a built-in group
	// version: created (or corrected) once, when the hub starts.
	ManagedOnStart = "onstart"
	// ManagedContinuously is the value of ManagedLabel for a custom
	// resource's group version: kept as long as the definition serves it.
	ManagedContinuously = "true"
)

// LocalAPIService returns the local APIService of gv with priority p,
// labelled for management as managed (ManagedOnStart or
// ManagedContinuously): a new object the caller owns.
func LocalAPIService(gv schema.GroupVersion, p Priority, managed string) *apiregistrationv1.APIService {
	return &apiregistrationv1.APIService{
		ObjectMeta: metav1.ObjectMeta{Name: gv.Version + "." + gv.Group, Labels: map[string]string{ManagedLabel: managed}},
		Spec: apiregistrationv1.APIServiceSpec{
			Group: gv.Group, Version: gv.Version,
			GroupPriorityMinimum: p.Group, VersionPriority: p.Version,
		},
	}
}

// crdGroupVersions returns the group versions crd serves.
func crdGroupVersions(crd *apiextensionsv1.CustomResourceDefinition) []schema.GroupVersion {
	var gvs []schema.GroupVersion
	for _, v := range crd.Spec.Versions {
		if v.Served {
			gvs = append(gvs, schema.GroupVersion{Group: crd.Spec.Group, Version: v.Name})
		}
	}
	return gvs
}

// action is what the registration does about one APIService.
type action int

const (
	none action = iota
	create
	update
	remove
)

// decide returns what to do about the APIService named as desired or
// curr, as upstream's autoregister controller decides (its cases 1-6):
// desired is what the hub wants (nil for nothing), curr what is stored
// (nil for nothing), synced whether the name was synced once since start,
// and atStart whether curr existed when the hub started. Only APIServices
// with ManagedLabel are changed or deleted; an onstart one is synced once
// and then left as it is, a continuous one is kept.
func decide(desired, curr *apiregistrationv1.APIService, synced, atStart bool) action {
	switch {
	case curr == nil && desired == nil:
		return none
	case desired != nil && desired.Labels[ManagedLabel] == ManagedOnStart && synced:
		return none
	case curr == nil:
		return create
	case curr.Labels[ManagedLabel] == "":
		return none
	case curr.Labels[ManagedLabel] == ManagedOnStart && (!atStart || synced):
		return none
	case desired == nil:
		return remove
	case reflect.DeepEqual(curr.Spec, desired.Spec):
		return none
	}
	return update
}

// Registrar keeps the local APIServices of the hub's group versions: the
// built-in ones given to NewRegistrar, synced once at start, and those of
// the custom resource definitions there are, kept as the definitions
// change (upstream's autoregister and crdRegistration controllers in
// one).
type Registrar struct {
	client   apiregistrationclient.APIServiceInterface
	services apiregistrationlisters.APIServiceLister
	factory  aggregatorinformers.SharedInformerFactory
	crds     apiextensionsinformers.SharedInformerFactory
	synced   []cache.InformerSynced
	queue    workqueue.TypedRateLimitingInterface[string]
	log      *slog.Logger

	mu      sync.Mutex
	desired map[string]*apiregistrationv1.APIService
	// once are the names synced once since start; atStart those that
	// existed when the informer first synced.
	once    map[string]bool
	atStart map[string]bool
	// crdGVs are the group versions each definition serves.
	crdGVs map[string][]schema.GroupVersion
}

// NewRegistrar returns a Registrar of builtin, the group versions the hub
// serves itself, through the clients given; it starts nothing.
func NewRegistrar(ac aggregatorclient.Interface, ec apiextensionsclient.Interface, builtin []schema.GroupVersion, log *slog.Logger) (*Registrar, error) {
	r := &Registrar{
		client:  ac.ApiregistrationV1().APIServices(),
		factory: aggregatorinformers.NewSharedInformerFactory(ac, 0),
		crds:    apiextensionsinformers.NewSharedInformerFactory(ec, 0),
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "autoregister"}),
		log:     log.With("component", "autoregister"),
		desired: map[string]*apiregistrationv1.APIService{},
		once:    map[string]bool{},
		atStart: map[string]bool{},
		crdGVs:  map[string][]schema.GroupVersion{},
	}
	for _, gv := range builtin {
		s := LocalAPIService(gv, BuiltinPriority(gv), ManagedOnStart)
		r.desired[s.Name] = s
	}
	inf := r.factory.Apiregistration().V1().APIServices()
	r.services = inf.Lister()
	enqueue := func(obj any) {
		if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
			r.queue.Add(key)
		}
	}
	services, err := inf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: enqueue, UpdateFunc: func(_, obj any) { enqueue(obj) }, DeleteFunc: enqueue,
	})
	if err != nil {
		return nil, err
	}
	// As upstream, the definitions there are are known before the first
	// sync, which would otherwise delete their APIServices: the
	// handler's own HasSynced says it has seen them all.
	crds, err := r.crds.Apiextensions().V1().CustomResourceDefinitions().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: r.crdChanged, UpdateFunc: func(_, obj any) { r.crdChanged(obj) }, DeleteFunc: r.crdGone,
	})
	if err != nil {
		return nil, err
	}
	r.synced = []cache.InformerSynced{services.HasSynced, crds.HasSynced}
	return r, nil
}

// crdChanged records the group versions a definition serves now.
func (r *Registrar) crdChanged(obj any) {
	crd, ok := obj.(*apiextensionsv1.CustomResourceDefinition)
	if !ok {
		return
	}
	r.setCRD(crd.Name, crdGroupVersions(crd))
}

// crdGone forgets the group versions of a deleted definition.
func (r *Registrar) crdGone(obj any) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	if crd, ok := obj.(*apiextensionsv1.CustomResourceDefinition); ok {
		r.setCRD(crd.Name, nil)
	}
}

// setCRD sets the group versions definition name serves and queues the
// APIServices whose wanted state that may change.
func (r *Registrar) setCRD(name string, gvs []schema.GroupVersion) {
	r.mu.Lock()
	defer r.mu.Unlock()
	touched := map[schema.GroupVersion]bool{}
	for _, gv := range r.crdGVs[name] {
		touched[gv] = true
	}
	for _, gv := range gvs {
		touched[gv] = true
	}
	if len(gvs) == 0 {
		delete(r.crdGVs, name)
	} else {
		r.crdGVs[name] = gvs
	}
	for gv := range touched {
		r.setCRDVersion(gv)
	}
}

// setCRDVersion makes the wanted APIService of gv that of a custom
// resource if some definition serves gv, and removes it otherwise, unless
// it is a built-in group version. The caller holds mu.
func (r *Registrar) setCRDVersion(gv schema.GroupVersion) {
	s := LocalAPIService(gv, crdPriority, ManagedContinuously)
	if d := r.desired[s.Name]; d != nil && d.Labels[ManagedLabel] == ManagedOnStart {
		return
	}
	served := false
	for _, gvs := range r.crdGVs {
		for _, g := range gvs {
			served = served || g == gv
		}
	}
	if served {
		r.desired[s.Name] = s
	} else {
		delete(r.desired, s.Name)
	}
	r.queue.Add(s.Name)
}

// Run keeps the APIServices until ctx ends, and returns once its
// goroutines have exited.
func (r *Registrar) Run(ctx context.Context) error {
	defer r.queue.ShutDown()
	r.factory.Start(ctx.Done())
	r.crds.Start(ctx.Done())
	defer r.factory.Shutdown()
	defer r.crds.Shutdown()
	if !cache.WaitForCacheSync(ctx.Done(), r.synced...) {
		return nil // ctx ended
	}
	r.mu.Lock()
	all, err := r.services.List(labels.Everything())
	if err != nil {
		r.mu.Unlock()
		return fmt.Errorf("list apiservices: %w", err)
	}
	for _, s := range all {
		r.atStart[s.Name] = true
		r.queue.Add(s.Name)
	}
	for name := range r.desired {
		r.queue.Add(name)
	}
	r.mu.Unlock()
	var wg sync.WaitGroup
	wg.Go(func() {
		for r.work(ctx) {
		}
	})
	<-ctx.Done()
	r.queue.ShutDown()
	wg.Wait()
	return nil
}

// work syncs one queued name; it reports false once the queue is shut.
func (r *Registrar) work(ctx context.Context) bool {
	name, quit := r.queue.Get()
	if quit {
		return false
	}
	defer r.queue.Done(name)
	if err := r.sync(ctx, name); err != nil {
		r.log.Warn("apiservice not synced; retrying", "apiservice", name, "err", err)
		r.queue.AddRateLimited(name)
		return true
	}
	r.queue.Forget(name)
	return true
}

// sync brings the APIService name to what decide says.
func (r *Registrar) sync(ctx context.Context, name string) error {
	r.mu.Lock()
	desired, synced, atStart := r.desired[name], r.once[name], r.atStart[name]
	r.mu.Unlock()
	curr, err := r.services.Get(name)
	if apierrors.IsNotFound(err) {
		curr, err = nil, nil
	}
	if err != nil {
		return err
	}
	err = r.apply(ctx, decide(desired, curr, synced, atStart), desired, curr)
	if err == nil {
		r.mu.Lock()
		r.once[name] = true
		r.mu.Unlock()
	}
	return err
}

// apply carries out act; a conflict or a lost race is no error, as the
// informer queues the name again.
func (r *Registrar) apply(ctx context.Context, act action, desired, curr *apiregistrationv1.APIService) error {
	var err error
	switch act {
	case create:
		_, err = r.client.Create(ctx, desired, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			err = nil
		}
	case update:
		s := curr.DeepCopy()
		s.Spec = desired.Spec
		_, err = r.client.Update(ctx, s, metav1.UpdateOptions{})
	case remove:
		err = r.client.Delete(ctx, curr.Name, metav1.DeleteOptions{Preconditions: metav1.NewUIDPreconditions(string(curr.UID))})
	}
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		err = nil
	}
	return err
}
