package disruption

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"golang.org/x/sync/errgroup"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	appslisters "k8s.io/client-go/listers/apps/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	policylisters "k8s.io/client-go/listers/policy/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"

	"github.com/outpost-mesh/outpost/hub/controllers"
)

// Workers is how many budgets are synced at once: one, as upstream.
const Workers = 1

// Controller is the disruption controller's client-go shell.
type Controller struct {
	client kubernetes.Interface
	pdbInf cache.SharedIndexInformer
	podInf cache.SharedIndexInformer
	pdbs   policylisters.PodDisruptionBudgetLister
	pods   corelisters.PodLister
	rss    appslisters.ReplicaSetLister
	deps   appslisters.DeploymentLister
	sets   appslisters.StatefulSetLister
	synced []cache.InformerSynced // of the workload listers
	events record.EventRecorder
	clock  clock.WithTicker
	log    *slog.Logger

	// Made by Run: budget keys to compute, and pod keys whose
	// DisruptionTarget condition may be stale.
	queue workqueue.TypedRateLimitingInterface[string]
	stale workqueue.TypedRateLimitingInterface[string]
}

// New returns the disruption controller of c. It registers the informers
// of budgets, pods, ReplicaSets, Deployments and StatefulSets, and starts
// nothing.
func New(c controllers.Context) (*Controller, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	pdbs := c.Informers.Policy().V1().PodDisruptionBudgets()
	pods := c.Informers.Core().V1().Pods()
	rss := c.Informers.Apps().V1().ReplicaSets()
	deps := c.Informers.Apps().V1().Deployments()
	sets := c.Informers.Apps().V1().StatefulSets()
	return &Controller{
		client: c.Client,
		pdbInf: pdbs.Informer(),
		podInf: pods.Informer(),
		pdbs:   pdbs.Lister(),
		pods:   pods.Lister(),
		rss:    rss.Lister(),
		deps:   deps.Lister(),
		sets:   sets.Lister(),
		synced: []cache.InformerSynced{rss.Informer().HasSynced, deps.Informer().HasSynced, sets.Informer().HasSynced},
		// Upstream's component name, as `kubectl describe` shows it.
		events: c.Events("controllermanager"),
		clock:  c.Clock,
		log:    c.Logger,
	}, nil
}

// Run keeps budgets' status until ctx ends, then returns nil once its
// workers have stopped.
func (c *Controller) Run(ctx context.Context) error {
	c.queue = workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
		workqueue.TypedRateLimitingQueueConfig[string]{Name: "disruption", Clock: c.clock})
	defer c.queue.ShutDown()
	c.stale = workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
		workqueue.TypedRateLimitingQueueConfig[string]{Name: "stale_pod_disruption", Clock: c.clock})
	defer c.stale.ShutDown()

	pdbReg, err := c.pdbInf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.enqueueBudget,
		UpdateFunc: func(_, cur any) { c.enqueueBudget(cur) },
		DeleteFunc: c.enqueueBudget,
	})
	if err != nil {
		return fmt.Errorf("poddisruptionbudget handler: %w", err)
	}
	defer c.pdbInf.RemoveEventHandler(pdbReg)
	podReg, err := c.podInf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.podChanged,
		UpdateFunc: func(_, cur any) { c.podChanged(cur) },
		DeleteFunc: c.podDeleted,
	})
	if err != nil {
		return fmt.Errorf("pod handler: %w", err)
	}
	defer c.podInf.RemoveEventHandler(podReg)

	synced := append([]cache.InformerSynced{pdbReg.HasSynced, podReg.HasSynced}, c.synced...)
	var g errgroup.Group
	g.Go(func() error {
		return controllers.Work(ctx, controllers.Workers[string]{
			Queue: c.queue, Count: Workers, Synced: synced,
			Sync: c.sync, Log: c.log, What: "poddisruptionbudget", Started: "started",
		})
	})
	g.Go(func() error {
		return controllers.Work(ctx, controllers.Workers[string]{
			Queue: c.stale, Count: 1, Synced: synced,
			Sync: c.syncStale, Log: c.log, What: "pod",
			Failed: "clear stale DisruptionTarget condition failed, will retry",
		})
	})
	return g.Wait()
}

func keyOf(obj metav1.Object) string { return obj.GetNamespace() + "/" + obj.GetName() }

func (c *Controller) enqueueBudget(obj any) {
	if pdb, ok := controllers.Object[*policyv1.PodDisruptionBudget](obj); ok {
		c.queue.Add(keyOf(pdb))
	}
}

// podChanged queues the budgets that select p, and p itself once its
// DisruptionTarget condition may have gone stale.
func (c *Controller) podChanged(obj any) {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	c.enqueueBudgetsOf(p)
	if stale, after := StaleDisruption(p, c.clock.Now()); stale {
		c.stale.AddAfter(keyOf(p), after)
	}
}

func (c *Controller) podDeleted(obj any) {
	if p, ok := controllers.Object[*corev1.Pod](obj); ok {
		c.enqueueBudgetsOf(p)
	}
}

// enqueueBudgetsOf queues every budget that selects p, warning on p when
// there are several (the eviction subresource refuses such pods).
func (c *Controller) enqueueBudgetsOf(p *corev1.Pod) {
	pdbs, err := c.pdbs.GetPodPodDisruptionBudgets(p)
	if err != nil {
		return // none
	}
	if len(pdbs) > 1 {
		c.events.Eventf(p, corev1.EventTypeWarning, "MultiplePodDisruptionBudgets",
			"Pod %q/%q matches multiple PodDisruptionBudgets.  Chose %q arbitrarily.", p.Namespace, p.Name, pdbs[0].Name)
	}
	for _, pdb := range pdbs {
		c.queue.Add(keyOf(pdb))
	}
}

// sync computes and writes the status of the budget of key.
func (c *Controller) sync(ctx context.Context, key string) error {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil // never queued by us
	}
	pdb, err := c.pdbs.PodDisruptionBudgets(ns).Get(name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	now := c.clock.Now()
	sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
	if err != nil {
		c.events.Eventf(pdb, corev1.EventTypeWarning, "NoPods", "Failed to get pods: %v", err)
		return c.write(ctx, pdb, FailSafe(pdb, err, now))
	}
	pods, err := c.pods.Pods(ns).List(sel)
	if err != nil {
		return err
	}
	if len(pods) == 0 {
		c.events.Eventf(pdb, corev1.EventTypeNormal, "NoPods", "No matching pods found")
	}
	var owners map[types.UID]Owner
	if NeedsScale(pdb) {
		if owners, err = c.owners(ctx, pods); err != nil {
			if ctx.Err() != nil {
				return err
			}
			c.events.Eventf(pdb, corev1.EventTypeWarning, "CalculateExpectedPodCountFailed", "Failed to calculate the number of expected pods: %v", err)
			return c.write(ctx, pdb, FailSafe(pdb, err, now))
		}
	}
	res := Compute(Input{Budget: pdb, Pods: pods, Owners: owners, Now: now})
	if res.Err != nil {
		c.events.Eventf(pdb, corev1.EventTypeWarning, "CalculateExpectedPodCountFailed", "Failed to calculate the number of expected pods: %v", res.Err)
	}
	if len(res.Unmanaged) > 0 {
		c.log.Debug("budget selects unmanaged pods", "poddisruptionbudget", key, "pods", res.Unmanaged)
		c.events.Eventf(pdb, corev1.EventTypeWarning, "UnmanagedPods", "Pods selected by this PodDisruptionBudget (selector: %v) were found "+
			"to be unmanaged. As a result, the status of the PDB cannot be calculated correctly, which may result in undefined behavior. "+
			"To account for these pods please set \".spec.minAvailable\" field of the PDB to an integer value.", pdb.Spec.Selector)
	}
	for _, p := range pods {
		for _, n := range res.NotDeleted {
			if p.Name == n {
				c.log.Info("pod was expected to be deleted but was not", "pod", keyOf(p), "poddisruptionbudget", key)
				c.events.Eventf(p, corev1.EventTypeWarning, "NotDeleted", "Pod was expected by PDB %s/%s to be deleted but it wasn't", pdb.Namespace, pdb.Name)
			}
		}
	}
	if !res.Changed {
		c.recheck(key, res)
		return nil
	}
	err = c.write(ctx, pdb, res.Status)
	switch {
	case err == nil:
		c.recheck(key, res)
		return nil
	case apierrors.IsConflict(err), apierrors.IsNotFound(err), ctx.Err() != nil, res.Err != nil:
		// A conflict is retried with a fresh cache, as upstream, without
		// the fail-safe: the write that won is newer.
		return err
	}
	// Any other failure: at least stop evictions on this budget.
	return errors.Join(err, c.write(ctx, pdb, FailSafe(pdb, err, now)))
}

// recheck queues key again when its next recorded eviction expires.
func (c *Controller) recheck(key string, res Result) {
	if res.Recheck > 0 {
		c.queue.AddAfter(key, res.Recheck)
	}
}

// write replaces pdb's status by st, once: a conflict is retried by the
// queue on a fresh cache.
func (c *Controller) write(ctx context.Context, pdb *policyv1.PodDisruptionBudget, st policyv1.PodDisruptionBudgetStatus) error {
	p := pdb.DeepCopy()
	p.Status = st
	_, err := c.client.PolicyV1().PodDisruptionBudgets(p.Namespace).UpdateStatus(ctx, p, metav1.UpdateOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// owners resolves the controller references of pods to the workloads
// whose scale they stand for. A reference that leads nowhere is left out
// (Compute then fails, as upstream); an error is one of the API's.
func (c *Controller) owners(ctx context.Context, pods []*corev1.Pod) (map[types.UID]Owner, error) {
	out := map[types.UID]Owner{}
	tried := map[types.UID]bool{}
	for _, p := range pods {
		ref := metav1.GetControllerOfNoCopy(p)
		if ref == nil || tried[ref.UID] {
			continue
		}
		tried[ref.UID] = true
		o, ok, err := c.owner(ctx, ref, p.Namespace)
		if err != nil {
			return nil, err
		}
		if ok {
			out[ref.UID] = o
		}
	}
	return out, nil
}

// owner resolves one controller reference in ns, as upstream's finders:
// a ReplicaSet to the Deployment that controls it, if any, else to
// itself; a StatefulSet to itself; any other kind through its scale
// subresource. ok is false when the reference names nothing of its UID.
func (c *Controller) owner(ctx context.Context, ref *metav1.OwnerReference, ns string) (o Owner, ok bool, err error) {
	gv, err := schema.ParseGroupVersion(ref.APIVersion)
	if err != nil {
		return Owner{}, false, err
	}
	apps := gv.Group == appsv1.GroupName || gv.Group == "extensions"
	switch {
	case ref.Kind == "ReplicaSet" && apps:
		rs, err := c.rss.ReplicaSets(ns).Get(ref.Name)
		if err != nil || rs.UID != ref.UID {
			return Owner{}, false, nil
		}
		if dref := metav1.GetControllerOfNoCopy(rs); dref != nil && dref.Kind == "Deployment" {
			if d, err := c.deps.Deployments(ns).Get(dref.Name); err == nil && d.UID == dref.UID {
				return Owner{UID: d.UID, Replicas: ptr.Deref(d.Spec.Replicas, 1)}, true, nil
			}
		}
		return Owner{UID: rs.UID, Replicas: ptr.Deref(rs.Spec.Replicas, 1)}, true, nil
	case ref.Kind == "StatefulSet" && gv.Group == appsv1.GroupName:
		ss, err := c.sets.StatefulSets(ns).Get(ref.Name)
		if err != nil || ss.UID != ref.UID {
			return Owner{}, false, nil
		}
		return Owner{UID: ss.UID, Replicas: ptr.Deref(ss.Spec.Replicas, 1)}, true, nil
	}
	return c.scaleOwner(ctx, ref, gv, ns)
}

// scaleOwner reads the scale subresource of the object ref names in ns,
// finding its resource through discovery: an error when the kind is not
// served or has no scale subresource.
func (c *Controller) scaleOwner(ctx context.Context, ref *metav1.OwnerReference, gv schema.GroupVersion, ns string) (Owner, bool, error) {
	list, err := c.client.Discovery().ServerResourcesForGroupVersion(gv.String())
	if err != nil {
		return Owner{}, false, fmt.Errorf("find resource of %s %s: %w", ref.APIVersion, ref.Kind, err)
	}
	plural := ""
	for _, r := range list.APIResources {
		if r.Kind == ref.Kind && !strings.Contains(r.Name, "/") {
			plural = r.Name
			break
		}
	}
	if plural == "" {
		return Owner{}, false, fmt.Errorf("no matches for kind %q in version %q", ref.Kind, gv)
	}
	scalable := false
	for _, r := range list.APIResources {
		if r.Name == plural+"/scale" && r.Kind == "Scale" {
			scalable = true
		}
	}
	gr := schema.GroupResource{Group: gv.Group, Resource: plural}
	if !scalable {
		return Owner{}, false, fmt.Errorf("%s does not implement the scale subresource", gr)
	}
	path := "/apis/" + gv.Group + "/" + gv.Version
	if gv.Group == "" {
		path = "/api/" + gv.Version
	}
	path += "/namespaces/" + ns + "/" + plural + "/" + ref.Name + "/scale"
	scale := &autoscalingv1.Scale{}
	err = c.client.AutoscalingV1().RESTClient().Get().AbsPath(path).Do(ctx).Into(scale)
	switch {
	case apierrors.IsNotFound(err):
		return Owner{}, false, nil
	case err != nil:
		return Owner{}, false, fmt.Errorf("get scale of %s %s/%s: %w", gr, ns, ref.Name, err)
	case scale.UID != ref.UID:
		return Owner{}, false, nil
	}
	return Owner{UID: scale.UID, Replicas: scale.Spec.Replicas}, true, nil
}

// syncStale sets the DisruptionTarget condition of the pod of key back to
// False once it has stayed True for StaleDisruptionTimeout without the
// pod being deleted: the eviction that set it did not go through.
func (c *Controller) syncStale(ctx context.Context, key string) error {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil
	}
	p, err := c.pods.Pods(ns).Get(name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	now := c.clock.Now()
	stale, after := StaleDisruption(p, now)
	switch {
	case !stale:
		return nil
	case after > 0:
		c.stale.AddAfter(key, after)
		return nil
	}
	cleared := ClearDisruption(p, now)
	if cleared == nil {
		return nil
	}
	if _, err := c.client.CoreV1().Pods(ns).UpdateStatus(ctx, cleared, metav1.UpdateOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	c.log.Info("reset stale DisruptionTarget condition to False", "pod", key)
	return nil
}
