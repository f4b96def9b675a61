package garbagecollector_test

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"

	"github.com/outpost-mesh/outpost/hub/controllers"
	"github.com/outpost-mesh/outpost/hub/controllers/garbagecollector"
	"github.com/outpost-mesh/outpost/hub/hubd"
	"github.com/outpost-mesh/outpost/internal/testlog"
	"github.com/outpost-mesh/outpost/internal/wait"
	"github.com/outpost-mesh/outpost/test/hubtest"
)

// startCollector runs the garbage collector alone against a real hub
// until the test ends.
func startCollector(t *testing.T) *hubtest.Hub {
	t.Helper()
	h := hubtest.Start(t, func(c *hubd.Config) { c.Controllers = false })
	inf := informers.NewSharedInformerFactory(h.Client, 0)
	events := record.NewBroadcaster()
	events.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: h.Client.CoreV1().Events("")})
	t.Cleanup(events.Shutdown)
	gc, err := garbagecollector.New(controllers.Context{
		Client: h.Client, Metadata: h.Metadata, Informers: inf, Clock: clock.RealClock{},
		Events: func(component string) record.EventRecorder {
			return events.NewRecorder(scheme.Scheme, corev1.EventSource{Component: component})
		},
		Logger: testlog.New(t, slog.LevelInfo),
	})
	if err != nil {
		t.Fatal(err)
	}
	bg := wait.Start(t, 30*time.Second, "garbage collector Run", gc.Run)
	t.Cleanup(func() {
		if err := bg.Stop(); err != nil {
			t.Errorf("Run = %v", err)
		}
	})
	return h
}

func ref(apiVersion, kind, name string, uid types.UID, block bool) metav1.OwnerReference {
	return metav1.OwnerReference{APIVersion: apiVersion, Kind: kind, Name: name, UID: uid, BlockOwnerDeletion: &block}
}

func cmRef(cm *corev1.ConfigMap) metav1.OwnerReference {
	return ref("v1", "ConfigMap", cm.Name, cm.UID, true)
}

func newPod(name string, finalizers []string, owners ...metav1.OwnerReference) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, OwnerReferences: owners, Finalizers: finalizers},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox"}}},
	}
}

type fixture struct {
	t   *testing.T
	h   *hubtest.Hub
	ctx context.Context
	ns  string
}

func (f *fixture) configMap(name string) *corev1.ConfigMap {
	f.t.Helper()
	cm, err := f.h.Client.CoreV1().ConfigMaps(f.ns).Create(f.ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil {
		f.t.Fatal(err)
	}
	return cm
}

func (f *fixture) pod(p *corev1.Pod) *corev1.Pod {
	f.t.Helper()
	p, err := f.h.Client.CoreV1().Pods(f.ns).Create(f.ctx, p, metav1.CreateOptions{})
	if err != nil {
		f.t.Fatal(err)
	}
	return p
}

func (f *fixture) waitGone(what string, get func() error) {
	f.t.Helper()
	wait.For(f.t, 30*time.Second, what+" is deleted", func() (bool, string) {
		err := get()
		return apierrors.IsNotFound(err), fmt.Sprintf("get: %v", err)
	})
}

func (f *fixture) podGone(name string) {
	f.t.Helper()
	f.waitGone("pod "+name, func() error {
		_, err := f.h.Client.CoreV1().Pods(f.ns).Get(f.ctx, name, metav1.GetOptions{})
		return err
	})
}

func (f *fixture) cmGone(name string) {
	f.t.Helper()
	f.waitGone("configmap "+name, func() error {
		_, err := f.h.Client.CoreV1().ConfigMaps(f.ns).Get(f.ctx, name, metav1.GetOptions{})
		return err
	})
}

// caughtUp waits until the collector has seen every pod created so far:
// a watch delivers one resource's events in order, so once a pod made
// after them with a dangling owner is collected, the collector's graph
// holds them. Without it, a foreground delete right after its dependents'
// creation may finish before the collector knows of them, as upstream's
// may.
func (f *fixture) caughtUp(probe string) {
	f.t.Helper()
	f.pod(newPod(probe, nil, ref("v1", "ConfigMap", "no-such-owner", types.UID("0b0e0d0c-0000-0000-0000-"+fmt.Sprintf("%012d", len(probe))), true)))
	f.podGone(probe)
}

func (f *fixture) deleteCM(name string, policy metav1.DeletionPropagation) {
	f.t.Helper()
	if err := f.h.Client.CoreV1().ConfigMaps(f.ns).Delete(f.ctx, name, metav1.DeleteOptions{PropagationPolicy: &policy}); err != nil {
		f.t.Fatal(err)
	}
}

// TestCascadingDeletion: a ConfigMap owning pods, deleted with each
// propagation, against a real hub, behaves as upstream.
func TestCascadingDeletion(t *testing.T) {
	h := startCollector(t)
	f := &fixture{t: t, h: h, ctx: context.Background(), ns: "default"}

	t.Run("background", func(t *testing.T) {
		f.t = t
		owner := f.configMap("bg-owner")
		f.pod(newPod("bg-1", nil, cmRef(owner)))
		f.pod(newPod("bg-2", nil, cmRef(owner)))
		f.deleteCM("bg-owner", metav1.DeletePropagationBackground)
		f.cmGone("bg-owner")
		f.podGone("bg-1")
		f.podGone("bg-2")
	})

	t.Run("foreground waits for blocking dependents", func(t *testing.T) {
		f.t = t
		owner := f.configMap("fg-owner")
		f.pod(newPod("fg-held", []string{"example.com/hold"}, cmRef(owner)))
		f.pod(newPod("fg-free", nil, cmRef(owner)))
		f.caughtUp("probe-fg")
		f.deleteCM("fg-owner", metav1.DeletePropagationForeground)
		f.podGone("fg-free")
		// The held pod is being deleted but stays; its owner waits.
		wait.For(t, 30*time.Second, "held pod marked for deletion", func() (bool, string) {
			p, err := h.Client.CoreV1().Pods(f.ns).Get(f.ctx, "fg-held", metav1.GetOptions{})
			return err == nil && p.DeletionTimestamp != nil, fmt.Sprintf("%v", err)
		})
		cm, err := h.Client.CoreV1().ConfigMaps(f.ns).Get(f.ctx, "fg-owner", metav1.GetOptions{})
		if err != nil || cm.DeletionTimestamp == nil || len(cm.Finalizers) != 1 || cm.Finalizers[0] != metav1.FinalizerDeleteDependents {
			t.Fatalf("owner while a blocking dependent remains: %v %v, want it kept with foregroundDeletion", cm, err)
		}
		p, err := h.Client.CoreV1().Pods(f.ns).Get(f.ctx, "fg-held", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		p.Finalizers = nil
		if _, err := h.Client.CoreV1().Pods(f.ns).Update(f.ctx, p, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		f.podGone("fg-held")
		f.cmGone("fg-owner")
	})

	t.Run("foreground does not wait for non-blocking dependents", func(t *testing.T) {
		f.t = t
		owner := f.configMap("fgnb-owner")
		nb := ref("v1", "ConfigMap", owner.Name, owner.UID, false)
		f.pod(newPod("fgnb-held", []string{"example.com/hold"}, nb))
		f.caughtUp("probe-fgnb")
		f.deleteCM("fgnb-owner", metav1.DeletePropagationForeground)
		f.cmGone("fgnb-owner")
		wait.For(t, 30*time.Second, "non-blocking dependent marked for deletion", func() (bool, string) {
			p, err := h.Client.CoreV1().Pods(f.ns).Get(f.ctx, "fgnb-held", metav1.GetOptions{})
			return err == nil && p.DeletionTimestamp != nil, fmt.Sprintf("%v", err)
		})
		p, _ := h.Client.CoreV1().Pods(f.ns).Get(f.ctx, "fgnb-held", metav1.GetOptions{})
		p.Finalizers = nil
		if _, err := h.Client.CoreV1().Pods(f.ns).Update(f.ctx, p, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		f.podGone("fgnb-held")
	})

	t.Run("orphan", func(t *testing.T) {
		f.t = t
		owner := f.configMap("or-owner")
		other := f.configMap("or-other")
		f.pod(newPod("or-1", nil, cmRef(owner)))
		f.pod(newPod("or-2", nil, cmRef(owner), cmRef(other)))
		f.caughtUp("probe-or")
		f.deleteCM("or-owner", metav1.DeletePropagationOrphan)
		f.cmGone("or-owner")
		for name, want := range map[string]int{"or-1": 0, "or-2": 1} {
			p, err := h.Client.CoreV1().Pods(f.ns).Get(f.ctx, name, metav1.GetOptions{})
			if err != nil {
				t.Fatalf("orphaned pod %s: %v, want it kept", name, err)
			}
			if len(p.OwnerReferences) != want {
				t.Errorf("orphaned pod %s has owners %v, want %d", name, p.OwnerReferences, want)
			}
		}
	})

	t.Run("dangling reference", func(t *testing.T) {
		f.t = t
		// The name exists, but as another object (another uid).
		f.configMap("reborn")
		f.pod(newPod("dangling", nil, ref("v1", "ConfigMap", "reborn", "0b0e0d0c-aaaa-bbbb-cccc-000000000000", true)))
		f.podGone("dangling")
		f.pod(newPod("never", nil, ref("v1", "ConfigMap", "never-was", "0b0e0d0c-aaaa-bbbb-cccc-000000000001", true)))
		f.podGone("never")
	})

	t.Run("one owner of two gone", func(t *testing.T) {
		f.t = t
		a, b := f.configMap("two-a"), f.configMap("two-b")
		f.pod(newPod("two", nil, cmRef(a), cmRef(b)))
		f.deleteCM("two-a", metav1.DeletePropagationBackground)
		wait.For(t, 30*time.Second, "the reference to the deleted owner removed", func() (bool, string) {
			p, err := h.Client.CoreV1().Pods(f.ns).Get(f.ctx, "two", metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			return len(p.OwnerReferences) == 1 && p.OwnerReferences[0].UID == b.UID, fmt.Sprintf("owners %v", p.OwnerReferences)
		})
	})
}

// TestDeploymentChain: deleting a Deployment removes its ReplicaSet and
// the ReplicaSet's pods, as `kubectl delete deploy` does upstream; with
// orphan they stay.
func TestDeploymentChain(t *testing.T) {
	h := startCollector(t)
	ctx := context.Background()
	f := &fixture{t: t, h: h, ctx: ctx, ns: "default"}
	labels := map[string]string{"app": "web"}
	tmpl := corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: newPod("x", nil).Spec}
	chain := func(name string) {
		t.Helper()
		one := int32(1)
		d, err := h.Client.AppsV1().Deployments("default").Create(ctx, &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: appsv1.DeploymentSpec{Replicas: &one, Selector: &metav1.LabelSelector{MatchLabels: labels}, Template: tmpl}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		ctl := true
		rs, err := h.Client.AppsV1().ReplicaSets("default").Create(ctx, &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Name: name + "-rs",
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "Deployment", Name: d.Name, UID: d.UID, Controller: &ctl, BlockOwnerDeletion: &ctl}}},
			Spec: appsv1.ReplicaSetSpec{Replicas: &one, Selector: &metav1.LabelSelector{MatchLabels: labels}, Template: tmpl}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		f.pod(newPod(name+"-pod", nil, metav1.OwnerReference{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: rs.Name, UID: rs.UID, Controller: &ctl, BlockOwnerDeletion: &ctl}))
	}
	// rsCaughtUp is caughtUp for replicasets.
	rsCaughtUp := func(probe string) {
		t.Helper()
		one := int32(1)
		if _, err := h.Client.AppsV1().ReplicaSets("default").Create(ctx, &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Name: probe,
			OwnerReferences: []metav1.OwnerReference{ref("apps/v1", "Deployment", "no-such", types.UID("0b0e0d0c-1111-0000-0000-"+fmt.Sprintf("%012d", len(probe))), true)}},
			Spec: appsv1.ReplicaSetSpec{Replicas: &one, Selector: &metav1.LabelSelector{MatchLabels: labels}, Template: tmpl}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		f.waitGone("replicaset "+probe, func() error {
			_, err := h.Client.AppsV1().ReplicaSets("default").Get(ctx, probe, metav1.GetOptions{})
			return err
		})
	}
	chain("web")
	bg := metav1.DeletePropagationBackground
	if err := h.Client.AppsV1().Deployments("default").Delete(ctx, "web", metav1.DeleteOptions{PropagationPolicy: &bg}); err != nil {
		t.Fatal(err)
	}
	f.waitGone("replicaset web-rs", func() error {
		_, err := h.Client.AppsV1().ReplicaSets("default").Get(ctx, "web-rs", metav1.GetOptions{})
		return err
	})
	f.podGone("web-pod")

	chain("kept")
	f.caughtUp("probe-kept")
	rsCaughtUp("probe-rs-kept")
	fg := metav1.DeletePropagationForeground
	orphan := metav1.DeletePropagationOrphan
	if err := h.Client.AppsV1().Deployments("default").Delete(ctx, "kept", metav1.DeleteOptions{PropagationPolicy: &orphan}); err != nil {
		t.Fatal(err)
	}
	f.waitGone("deployment kept", func() error {
		_, err := h.Client.AppsV1().Deployments("default").Get(ctx, "kept", metav1.GetOptions{})
		return err
	})
	rs, err := h.Client.AppsV1().ReplicaSets("default").Get(ctx, "kept-rs", metav1.GetOptions{})
	if err != nil || len(rs.OwnerReferences) != 0 {
		t.Fatalf("orphaned replicaset: %v %v, want it kept without owners", rs, err)
	}
	if _, err := h.Client.CoreV1().Pods("default").Get(ctx, "kept-pod", metav1.GetOptions{}); err != nil {
		t.Fatalf("pod of an orphaned replicaset: %v, want it kept", err)
	}

	// Foreground through the chain: the Deployment goes last.
	chain("fg")
	f.caughtUp("probe-chain")
	rsCaughtUp("probe-rs-chain")
	if err := h.Client.AppsV1().Deployments("default").Delete(ctx, "fg", metav1.DeleteOptions{PropagationPolicy: &fg}); err != nil {
		t.Fatal(err)
	}
	f.waitGone("deployment fg", func() error {
		_, err := h.Client.AppsV1().Deployments("default").Get(ctx, "fg", metav1.GetOptions{})
		return err
	})
	for _, get := range []func() error{
		func() error {
			_, err := h.Client.AppsV1().ReplicaSets("default").Get(ctx, "fg-rs", metav1.GetOptions{})
			return err
		},
		func() error {
			_, err := h.Client.CoreV1().Pods("default").Get(ctx, "fg-pod", metav1.GetOptions{})
			return err
		},
	} {
		if err := get(); !apierrors.IsNotFound(err) {
			t.Errorf("a dependent after its foreground-deleted Deployment went: %v, want it gone first", err)
		}
	}
}
