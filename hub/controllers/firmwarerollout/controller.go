package firmwarerollout

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"

	fwv1 "github.com/outpost-mesh/outpost/firmware/apis/v1"
	"github.com/outpost-mesh/outpost/firmware/rollout"
	"github.com/outpost-mesh/outpost/hub/controllers"
	"github.com/outpost-mesh/outpost/sync/wire"
)

// Component is the source of the Events the controller records, and the
// name of its service account in kube-system.
const Component = "firmware-rollout-controller"

// The resources the controller reads and writes through the dynamic client.
var (
	RolloutsResource = fwv1.SchemeGroupVersion.WithResource("rollouts")
	ReleasesResource = fwv1.SchemeGroupVersion.WithResource("releases")
)

// Controller drives Rollouts. Make one with New; it starts nothing until
// Run.
type Controller struct {
	cfg      Config
	client   kubernetes.Interface
	dynamic  dynamic.Interface
	nodes    corelisters.NodeLister
	factory  dynamicinformer.DynamicSharedInformerFactory
	rollouts cache.GenericLister
	releases cache.GenericLister
	synced   []cache.InformerSynced
	recorder record.EventRecorder
	clock    clock.WithTicker
	log      *slog.Logger
	queue    workqueue.TypedRateLimitingInterface[string]

	mu       sync.Mutex
	progress map[string]progress // by node name
}

// progress is the last change seen of a node's update work.
type progress struct {
	target   string
	state    fwv1.FirmwareState
	received int64
	at       time.Time
}

// New builds the controller from c, which must have a Dynamic client, and
// registers its handlers on the shared node informer and on informers of
// Rollouts and Releases of its own, which Run starts. It starts nothing.
func New(c controllers.Context, cfg Config) (*Controller, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if c.Dynamic == nil {
		return nil, errors.New("firmwarerollout: nil Dynamic client")
	}
	nodeInf := c.Informers.Core().V1().Nodes()
	factory := dynamicinformer.NewDynamicSharedInformerFactory(c.Dynamic, 0)
	ros, rels := factory.ForResource(RolloutsResource), factory.ForResource(ReleasesResource)
	rc := &Controller{
		cfg: cfg, client: c.Client, dynamic: c.Dynamic,
		nodes: nodeInf.Lister(), factory: factory, rollouts: ros.Lister(), releases: rels.Lister(),
		synced:   []cache.InformerSynced{nodeInf.Informer().HasSynced, ros.Informer().HasSynced, rels.Informer().HasSynced},
		recorder: c.Events(Component),
		clock:    c.Clock,
		log:      c.Logger,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "firmware_rollouts", Clock: c.Clock}),
		progress: map[string]progress{},
	}
	if _, err := ros.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(any) { rc.enqueueAll() },
		UpdateFunc: func(old, cur any) {
			o, _ := old.(*unstructured.Unstructured)
			n, _ := cur.(*unstructured.Unstructured)
			if o == nil || n == nil || o.GetGeneration() != n.GetGeneration() || completeU(o) != completeU(n) {
				rc.enqueueAll() // a selector changed, or it completed: ownership may move
				return
			}
			rc.queue.Add(n.GetName())
		},
		DeleteFunc: func(obj any) {
			if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				rc.queue.Add(tomb.Key)
			} else if u, ok := obj.(*unstructured.Unstructured); ok {
				rc.queue.Add(u.GetName())
			}
			rc.enqueueAll()
		},
	}); err != nil {
		return nil, fmt.Errorf("rollout informer: %w", err)
	}
	if _, err := rels.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    rc.enqueueForRelease,
		UpdateFunc: func(_, cur any) { rc.enqueueForRelease(cur) },
		DeleteFunc: rc.enqueueForRelease,
	}); err != nil {
		return nil, fmt.Errorf("release informer: %w", err)
	}
	if _, err := nodeInf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(any) { rc.enqueueAll() },
		UpdateFunc: func(old, cur any) {
			o, _ := old.(*corev1.Node)
			n, _ := cur.(*corev1.Node)
			if o == nil || n == nil || nodeChanged(o, n) {
				rc.enqueueAll()
			}
		},
		DeleteFunc: func(obj any) {
			if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = tomb.Obj
			}
			if n, ok := obj.(*corev1.Node); ok {
				rc.mu.Lock()
				delete(rc.progress, n.Name)
				rc.mu.Unlock()
			}
			rc.enqueueAll()
		},
	}); err != nil {
		return nil, fmt.Errorf("node informer: %w", err)
	}
	return rc, nil
}

// Run starts the Rollout and Release informers, drives rollouts until ctx
// ends, and returns once its workers and informers have stopped. The
// owner of the shared informers starts the node informer.
//
// Until the hub serves the firmware API (its CustomResourceDefinitions
// are installed by another part of the hub), Run waits for it, checking
// every APIPollInterval, rather than fill the log with failed watches.
func (rc *Controller) Run(ctx context.Context) error {
	if !rc.waitForAPI(ctx) {
		rc.queue.ShutDown()
		return nil
	}
	rc.factory.Start(ctx.Done())
	defer rc.factory.Shutdown()
	return controllers.Work(ctx, controllers.Workers[string]{
		Queue: rc.queue, Count: rc.cfg.Workers, Synced: rc.synced, Sync: rc.sync, Log: rc.log,
		What: "rollout", Started: "firmware rollout controller started", Failed: "sync rollout",
		Level: controllers.Quiet,
	})
}

// APIPollInterval is how often Run checks whether the hub serves the
// firmware API yet.
const APIPollInterval = 10 * time.Second

// waitForAPI waits until discovery lists Rollouts and Releases; false when
// ctx ended first.
func (rc *Controller) waitForAPI(ctx context.Context) bool {
	logged := false
	for {
		if rc.served() {
			return true
		}
		if !logged {
			rc.log.Info("waiting for the hub to serve the firmware API", "groupVersion", fwv1.SchemeGroupVersion.String())
			logged = true
		}
		t := rc.clock.NewTimer(APIPollInterval)
		select {
		case <-ctx.Done():
			t.Stop()
			return false
		case <-t.C():
		}
	}
}

// served reports whether discovery lists both resources of the firmware
// API.
func (rc *Controller) served() bool {
	list, err := rc.client.Discovery().ServerResourcesForGroupVersion(fwv1.SchemeGroupVersion.String())
	if err != nil || list == nil {
		return false
	}
	found := 0
	for _, r := range list.APIResources {
		if r.Name == RolloutsResource.Resource || r.Name == ReleasesResource.Resource {
			found++
		}
	}
	return found == 2
}

// nodeChanged reports whether a node's update changed what a rollout
// reads of it: its labels, the firmware annotations, or readiness. A
// heartbeat changes none of them.
func nodeChanged(o, n *corev1.Node) bool {
	if !labels.Equals(o.Labels, n.Labels) {
		return true
	}
	for _, k := range []string{fwv1.AnnotationOffer, fwv1.AnnotationState, fwv1.AnnotationFailedVersions} {
		if o.Annotations[k] != n.Annotations[k] {
			return true
		}
	}
	return ready(o) != ready(n)
}

// ready returns n's Ready condition status.
func ready(n *corev1.Node) corev1.ConditionStatus {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status
		}
	}
	return corev1.ConditionUnknown
}

func (rc *Controller) enqueueAll() {
	objs, err := rc.rollouts.List(labels.Everything())
	if err != nil {
		return
	}
	for _, o := range objs {
		if u, ok := o.(*unstructured.Unstructured); ok {
			rc.queue.Add(u.GetName())
		}
	}
}

func (rc *Controller) enqueueForRelease(obj any) {
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	rel, ok := obj.(*unstructured.Unstructured)
	if !ok {
		rc.enqueueAll()
		return
	}
	objs, err := rc.rollouts.List(labels.Everything())
	if err != nil {
		return
	}
	for _, o := range objs {
		if u, ok := o.(*unstructured.Unstructured); ok {
			if name, _, _ := unstructured.NestedString(u.Object, "spec", "release"); name == rel.GetName() {
				rc.queue.Add(u.GetName())
			}
		}
	}
}

// sync drives the rollout of that name one step.
func (rc *Controller) sync(ctx context.Context, name string) error {
	obj, err := rc.rollouts.Get(name)
	if apierrors.IsNotFound(err) {
		return rc.withdrawAll(ctx, name)
	} else if err != nil {
		return err
	}
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return fmt.Errorf("rollout %s: unexpected %T in cache", name, obj)
	}
	ro, err := toRollout(u)
	if err != nil {
		return fmt.Errorf("rollout %s: %w", name, err)
	}
	if ro.DeletionTimestamp != nil {
		return nil
	}
	now := rc.clock.Now()
	allNodes, err := rc.nodes.List(labels.Everything())
	if err != nil {
		return err
	}
	version, releaseCond := rc.release(ro.Spec.Release)
	var spec rollout.Spec
	blocked := blockedConditions(releaseCond.Reason, releaseCond.Message)
	ok = releaseCond.Status == metav1.ConditionTrue
	if ok {
		if spec, err = ro.Spec.PlannerSpec(version); err != nil {
			ok, blocked = false, blockedConditions("InvalidSpec", err.Error())
		}
	}
	in := input{name: ro.Name, release: ro.Spec.Release, spec: spec, olders: map[string]string{},
		prev: ro.Status, now: now, cfg: rc.cfg}
	if ok {
		if err := rc.partition(ro, allNodes, &in); err != nil {
			ok, blocked = false, blockedConditions("InvalidSpec", err.Error())
		}
	}
	if !ok {
		// Nothing to offer: withdraw what this rollout offered, but for
		// installs and trials under way, and show why.
		if err := rc.withdrawAll(ctx, ro.Name); err != nil {
			return err
		}
		st := *ro.Status.DeepCopy()
		st.ObservedGeneration = ro.Generation
		setConditions(&st, ro.Status.Conditions, blocked, releaseCond, ro.Generation, now)
		if c := meta.FindStatusCondition(ro.Status.Conditions, ConditionReleaseReady); c == nil || c.Status != releaseCond.Status || c.Reason != releaseCond.Reason {
			if releaseCond.Status != metav1.ConditionTrue {
				rc.recorder.Event(u, corev1.EventTypeWarning, EventReleaseNotReady, releaseCond.Message)
			}
		}
		return rc.writeStatus(ctx, u, ro, st)
	}
	in.progressAt = rc.observe(in.nodes, spec.Version, now)
	out := decide(in)
	for _, p := range out.patches {
		if err := rc.patchNode(ctx, p); err != nil {
			return err
		}
	}
	if out.pause {
		patch := []byte(`{"spec":{"paused":true}}`)
		pu, err := rc.dynamic.Resource(RolloutsResource).Patch(ctx, ro.Name, types.MergePatchType, patch, metav1.PatchOptions{})
		if err != nil {
			return fmt.Errorf("pause rollout %s: %w", ro.Name, err)
		}
		// The status goes on the object as patched: its resource
		// version moved on.
		pro, err := toRollout(pu)
		if err != nil {
			return fmt.Errorf("rollout %s: %w", name, err)
		}
		pro.Status = ro.Status
		u, ro = pu, pro
	}
	st := out.status
	st.ObservedGeneration = ro.Generation
	setConditions(&st, ro.Status.Conditions, out.res.Conditions, releaseCond, ro.Generation, now)
	if err := rc.writeStatus(ctx, u, ro, st); err != nil {
		return err
	}
	for _, e := range out.events {
		kind := corev1.EventTypeNormal
		if e.warning {
			kind = corev1.EventTypeWarning
		}
		rc.recorder.Event(u, kind, e.reason, e.message)
	}
	if !out.requeue.IsZero() {
		rc.queue.AddAfter(name, max(out.requeue.Sub(now), time.Second))
	}
	return nil
}

// release returns the version of the Release named name and the
// ReleaseReady condition: false when the Release is missing, its
// signatures are not verified (yet), or its artifacts are known missing.
func (rc *Controller) release(name string) (string, metav1.Condition) {
	cond := metav1.Condition{Type: ConditionReleaseReady, Status: metav1.ConditionFalse}
	obj, err := rc.releases.Get(name)
	if err != nil {
		cond.Reason, cond.Message = "ReleaseNotFound", fmt.Sprintf("release %s: %v", name, err)
		return "", cond
	}
	u, ok := obj.(*unstructured.Unstructured)
	var rel fwv1.Release
	if !ok || runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &rel) != nil {
		cond.Reason, cond.Message = "ReleaseUnreadable", fmt.Sprintf("release %s cannot be read", name)
		return "", cond
	}
	verified := meta.FindStatusCondition(rel.Status.Conditions, fwv1.ReleaseVerified)
	switch {
	case verified == nil:
		cond.Reason, cond.Message = "ReleaseNotVerified", fmt.Sprintf("release %s: the hub has not checked its signatures yet", name)
	case verified.Status != metav1.ConditionTrue:
		cond.Reason, cond.Message = "ReleaseNotVerified", fmt.Sprintf("release %s: %s: %s", name, verified.Reason, verified.Message)
	case meta.IsStatusConditionFalse(rel.Status.Conditions, fwv1.ReleaseArtifactsStored):
		cond.Reason, cond.Message = "ArtifactsMissing", fmt.Sprintf("release %s: not every artifact is in the hub's store", name)
	case rel.Spec.Version == "":
		cond.Reason, cond.Message = "NoVersion", fmt.Sprintf("release %s has no version", name)
	default:
		cond.Status, cond.Reason = metav1.ConditionTrue, "Verified"
		cond.Message = fmt.Sprintf("release %s, version %s, verified", name, rel.Spec.Version)
		return rel.Spec.Version, cond
	}
	return "", cond
}

// partition sorts nodes for ro into in: those it selects and owns, those
// it selects that a rollout preceding it owns, and the others that carry
// one of its offers.
func (rc *Controller) partition(ro *fwv1.Rollout, nodes []*corev1.Node, in *input) error {
	sel, err := selects(ro)
	if err != nil {
		return err
	}
	type other struct {
		ro  *fwv1.Rollout
		sel func(*corev1.Node) bool
	}
	var olders []other
	objs, err := rc.rollouts.List(labels.Everything())
	if err != nil {
		return err
	}
	for _, o := range objs {
		u, ok := o.(*unstructured.Unstructured)
		if !ok || u.GetName() == ro.Name || u.GetDeletionTimestamp() != nil {
			continue
		}
		r, err := toRollout(u)
		if err != nil || !precedes(r, ro) {
			continue
		}
		if s, err := selects(r); err == nil {
			olders = append(olders, other{r, s})
		}
	}
	for _, n := range nodes {
		if !sel(n) {
			if o, err := fwv1.DecodeOffer(n.Annotations[fwv1.AnnotationOffer]); err == nil && o.Rollout == ro.Name {
				in.strays = append(in.strays, n)
			}
			continue
		}
		var owner *fwv1.Rollout
		for _, o := range olders {
			if o.sel(n) && (owner == nil || precedes(o.ro, owner)) {
				owner = o.ro
			}
		}
		if owner != nil {
			in.olders[n.Name] = owner.Name
			in.olderN = append(in.olderN, n)
			continue
		}
		in.nodes = append(in.nodes, n)
	}
	return nil
}

// selects returns the predicate of the nodes ro selects: its node
// selector and its sites.
func selects(ro *fwv1.Rollout) (func(*corev1.Node) bool, error) {
	sel := labels.Everything()
	if ro.Spec.NodeSelector != nil {
		s, err := metav1.LabelSelectorAsSelector(ro.Spec.NodeSelector)
		if err != nil {
			return nil, fmt.Errorf("node selector: %w", err)
		}
		sel = s
	}
	sites := set(ro.Spec.Sites)
	return func(n *corev1.Node) bool {
		if !sel.Matches(labels.Set(n.Labels)) {
			return false
		}
		return len(sites) == 0 || sites[n.Labels[wire.SiteLabel]]
	}, nil
}

// observe records the update work of nodes for version and returns when
// each last progressed.
func (rc *Controller) observe(nodes []*corev1.Node, version string, now time.Time) map[string]time.Time {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	at := make(map[string]time.Time, len(nodes))
	for _, n := range nodes {
		var p progress
		if nf, err := fwv1.DecodeNodeFirmware(n.Annotations[fwv1.AnnotationState]); err == nil {
			p.target, p.state = nf.Target, nf.State
			if nf.Transfer != nil {
				p.received = nf.Transfer.Received
			}
		}
		old, seen := rc.progress[n.Name]
		if !seen || old.target != p.target || old.state != p.state || old.received != p.received {
			p.at = now
		} else {
			p.at = old.at
		}
		rc.progress[n.Name] = p
		at[n.Name] = p.at
	}
	return at
}

// withdrawAll removes rollout name's offers from every node that carries
// one and is not installing it or on trial.
func (rc *Controller) withdrawAll(ctx context.Context, name string) error {
	nodes, err := rc.nodes.List(labels.Everything())
	if err != nil {
		return err
	}
	for _, n := range nodes {
		if p, ok := withdrawStray(n, name); ok {
			if err := rc.patchNode(ctx, p); err != nil {
				return err
			}
		}
	}
	return nil
}

// patchNode applies p to its Node's annotations.
func (rc *Controller) patchNode(ctx context.Context, p nodePatch) error {
	ann := map[string]any{}
	for k, v := range map[string]*string{fwv1.AnnotationOffer: p.offer, fwv1.AnnotationFailedVersions: p.failed} {
		switch {
		case v == nil:
		case *v == "":
			ann[k] = nil
		default:
			ann[k] = *v
		}
	}
	body, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": ann}})
	if err != nil {
		return err
	}
	_, err = rc.client.CoreV1().Nodes().Patch(ctx, p.name, types.MergePatchType, body, metav1.PatchOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("patch node %s: %w", p.name, err)
	}
	return nil
}

// writeStatus writes st as ro's status through the status subresource,
// unless it is what ro has.
func (rc *Controller) writeStatus(ctx context.Context, u *unstructured.Unstructured, ro *fwv1.Rollout, st fwv1.RolloutStatus) error {
	if apiequality.Semantic.DeepEqual(ro.Status, st) {
		return nil
	}
	next := ro.DeepCopy()
	next.Status = st
	obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(next)
	if err != nil {
		return fmt.Errorf("rollout %s: %w", ro.Name, err)
	}
	nu := &unstructured.Unstructured{Object: obj}
	nu.SetAPIVersion(u.GetAPIVersion())
	nu.SetKind(u.GetKind())
	if _, err := rc.dynamic.Resource(RolloutsResource).UpdateStatus(ctx, nu, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("rollout %s status: %w", ro.Name, err)
	}
	return nil
}

// toRollout converts u to a Rollout.
func toRollout(u *unstructured.Unstructured) (*fwv1.Rollout, error) {
	var ro fwv1.Rollout
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &ro); err != nil {
		return nil, fmt.Errorf("decode: %w", err)
	}
	return &ro, nil
}

// completeU reports whether the Rollout u says it is complete.
func completeU(u *unstructured.Unstructured) bool {
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, c := range conds {
		if m, ok := c.(map[string]any); ok && m["type"] == rollout.ConditionComplete {
			return m["status"] == string(metav1.ConditionTrue)
		}
	}
	return false
}
