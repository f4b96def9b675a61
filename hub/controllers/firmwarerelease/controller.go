// Package firmwarerelease is the hub's controller of firmware Releases
// (firmware.outpost.dev/v1): it writes each Release's status, whether its
// signed envelope verifies with the hub's trusted keys (the ConfigMap of
// firmware/trust), with which keys, and whether every artifact its
// manifest lists is in the hub's artifact store with the right size. The
// check informs the operator; nodes verify every release themselves.
//
// The decision is Decide, pure but for the store's Stat; Controller is
// the informer and work-queue shell around it.
package firmwarerelease

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"

	firmwarev1 "github.com/outpost-mesh/outpost/firmware/apis/v1"
	"github.com/outpost-mesh/outpost/firmware/manifest"
	"github.com/outpost-mesh/outpost/firmware/trust"
	"github.com/outpost-mesh/outpost/hub/controllers"
)

// Component names the controller: its service account in kube-system,
// bound to its bootstrap role.
const Component = "firmware-release-controller"

// ReleasesResource is the resource of Releases.
var ReleasesResource = firmwarev1.SchemeGroupVersion.WithResource("releases")

// Config configures a Controller.
type Config struct {
	// Store is the hub's artifact store; non-nil.
	Store Stater
	// Workers is how many Releases are checked at once.
	Workers int
	// MissingRecheck is how often a Release whose artifacts are missing
	// is checked again: uploads raise no event.
	MissingRecheck time.Duration
	// Collect, when not nil, has the controller remove the artifacts no
	// Release refers to, every CollectInterval and after a Release is
	// deleted, once they were stored more than CollectGrace ago (an
	// upload comes before its Release).
	Collect         Collector
	CollectInterval time.Duration
	CollectGrace    time.Duration
}

// DefaultConfig returns the defaults for the artifact store s, collected
// when it is a Collector too.
func DefaultConfig(s Stater) Config {
	c, _ := s.(Collector)
	return Config{
		Store:           s,
		Workers:         2,                // releases are few; verification is cheap
		MissingRecheck:  30 * time.Second, // an upload in progress is seen soon after it ends
		Collect:         c,
		CollectInterval: 10 * time.Minute, // disk is freed soon, listing is cheap
		CollectGrace:    time.Hour,        // far longer than an upload takes to get its Release
	}
}

// Validate reports the first problem with c.
func (c Config) Validate() error {
	switch {
	case c.Store == nil:
		return errors.New("firmwarerelease: nil Store")
	case c.Workers < 1:
		return errors.New("firmwarerelease: Workers below 1")
	case c.MissingRecheck <= 0:
		return errors.New("firmwarerelease: MissingRecheck not positive")
	case c.Collect != nil && (c.CollectInterval <= 0 || c.CollectGrace < 0):
		return errors.New("firmwarerelease: CollectInterval not positive or CollectGrace negative")
	}
	return nil
}

// Controller keeps the status of Releases. Make one with New.
type Controller struct {
	cfg      Config
	client   dynamic.NamespaceableResourceInterface
	factory  dynamicinformer.DynamicSharedInformerFactory
	releases cache.GenericLister
	synced   []cache.InformerSynced
	cms      corelisters.ConfigMapNamespaceLister
	clock    clock.WithTicker
	log      *slog.Logger
	queue    workqueue.TypedRateLimitingInterface[string]
	// deleted wakes the artifact collector after a Release is deleted.
	deleted chan struct{}
}

// New builds the controller from c, which must have a Dynamic client,
// and registers its handlers: on a Release informer of its own and on
// the shared ConfigMap informer. It starts nothing.
func New(c controllers.Context, cfg Config) (*Controller, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	if c.Dynamic == nil {
		return nil, errors.New("firmwarerelease: nil Dynamic client")
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	factory := dynamicinformer.NewDynamicSharedInformerFactory(c.Dynamic, 0)
	rel := factory.ForResource(ReleasesResource)
	cmInf := c.Informers.Core().V1().ConfigMaps()
	ctl := &Controller{
		cfg:      cfg,
		client:   c.Dynamic.Resource(ReleasesResource),
		factory:  factory,
		releases: rel.Lister(),
		synced:   []cache.InformerSynced{rel.Informer().HasSynced, cmInf.Informer().HasSynced},
		cms:      cmInf.Lister().ConfigMaps(trust.Namespace),
		clock:    c.Clock,
		log:      c.Logger,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "firmware_releases", Clock: c.Clock}),
		deleted: make(chan struct{}, 1),
	}
	if _, err := rel.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    ctl.enqueue,
		UpdateFunc: func(_, cur any) { ctl.enqueue(cur) },
		DeleteFunc: func(any) {
			select {
			case ctl.deleted <- struct{}{}:
			default: // a collection is due already
			}
		},
	}); err != nil {
		return nil, fmt.Errorf("release informer: %w", err)
	}
	trustChanged := func(obj any) {
		if isTrust(obj) {
			ctl.enqueueAll()
		}
	}
	if _, err := cmInf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    trustChanged,
		UpdateFunc: func(_, cur any) { trustChanged(cur) },
		DeleteFunc: trustChanged,
	}); err != nil {
		return nil, fmt.Errorf("configmap informer: %w", err)
	}
	return ctl, nil
}

// Run keeps Releases' status, and collects the artifacts no Release
// refers to, until ctx ends, and returns once its workers, its collector
// and its Release informer have stopped. The shared informers'
// owner starts them.
func (ctl *Controller) Run(ctx context.Context) error {
	// At a hub's first start the Release definition is installed just
	// before the controllers run and served a moment later: wait for it
	// rather than have the informer log failed lists.
	if err := wait.PollUntilContextCancel(ctx, time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := ctl.client.List(ctx, metav1.ListOptions{Limit: 1})
		return err == nil, nil
	}); err != nil {
		ctl.queue.ShutDown()
		return nil // ctx ended
	}
	ctl.factory.Start(ctx.Done())
	defer ctl.factory.Shutdown()
	if ctl.cfg.Collect != nil {
		var wg sync.WaitGroup
		defer wg.Wait()
		wg.Go(func() {
			if cache.WaitForCacheSync(ctx.Done(), ctl.synced...) {
				ctl.runCollector(ctx)
			}
		})
	}
	return controllers.Work(ctx, controllers.Workers[string]{
		Queue: ctl.queue, Count: ctl.cfg.Workers, Synced: ctl.synced, Sync: ctl.sync, Log: ctl.log,
		What: "release", Started: "firmware release controller started",
	})
}

func isTrust(obj any) bool {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	cm, ok := obj.(*corev1.ConfigMap)
	return ok && cm.Namespace == trust.Namespace && cm.Name == trust.Name
}

func (ctl *Controller) enqueue(obj any) {
	if m, ok := obj.(metav1.Object); ok {
		ctl.queue.Add(m.GetName())
	}
}

func (ctl *Controller) enqueueAll() {
	objs, err := ctl.releases.List(labels.Everything())
	if err != nil {
		return
	}
	for _, o := range objs {
		ctl.enqueue(o)
	}
}

// trustSet reads the hub's trust set from the ConfigMap cache: the empty
// set when there is no ConfigMap.
func (ctl *Controller) trustSet() (manifest.Trust, error) {
	cm, err := ctl.cms.Get(trust.Name)
	switch {
	case apierrors.IsNotFound(err):
		return manifest.Trust{}, nil
	case err != nil:
		return manifest.Trust{}, err
	}
	return trust.ParseTrust(cm.Data)
}

func (ctl *Controller) sync(ctx context.Context, name string) error {
	obj, err := ctl.releases.Get(name)
	if apierrors.IsNotFound(err) {
		return nil
	} else if err != nil {
		return err
	}
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return fmt.Errorf("release %s: a %T in the cache", name, obj)
	}
	var rel firmwarev1.Release
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &rel); err != nil {
		return fmt.Errorf("release %s: decode: %w", name, err)
	}
	ts, terr := ctl.trustSet()
	now := ctl.clock.Now()
	st, recheck := Decide(&rel, Input{Trust: ts, TrustErr: terr, Store: ctl.cfg.Store, Now: now})
	if !recheck.IsZero() {
		ctl.queue.AddAfter(name, recheck.Sub(now)+time.Second)
	}
	if !isTrue(st.Conditions, firmwarev1.ReleaseArtifactsStored) {
		ctl.queue.AddAfter(name, ctl.cfg.MissingRecheck)
	}
	if equality.Semantic.DeepEqual(st, rel.Status) {
		return nil
	}
	rel.Status = st
	body, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&rel)
	if err != nil {
		return fmt.Errorf("release %s: encode: %w", name, err)
	}
	out := &unstructured.Unstructured{Object: body}
	out.SetAPIVersion(firmwarev1.SchemeGroupVersion.String())
	out.SetKind("Release")
	if _, err := ctl.client.UpdateStatus(ctx, out, metav1.UpdateOptions{}); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("release %s: update status: %w", name, err)
	}
	ctl.log.Debug("release status", "release", name, "verified", condStatus(st.Conditions, firmwarev1.ReleaseVerified),
		"stored", condStatus(st.Conditions, firmwarev1.ReleaseArtifactsStored))
	return nil
}

func condStatus(cs []metav1.Condition, typ string) metav1.ConditionStatus {
	for _, c := range cs {
		if c.Type == typ {
			return c.Status
		}
	}
	return metav1.ConditionUnknown
}

func isTrue(cs []metav1.Condition, typ string) bool {
	return condStatus(cs, typ) == metav1.ConditionTrue
}
