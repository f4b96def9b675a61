package deployment_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"

	"github.com/outpost-mesh/outpost/hub/controllers"
	"github.com/outpost-mesh/outpost/hub/controllers/deployment"
	"github.com/outpost-mesh/outpost/hub/controllers/replicaset"
	"github.com/outpost-mesh/outpost/hub/hubd"
	"github.com/outpost-mesh/outpost/internal/testlog"
	"github.com/outpost-mesh/outpost/internal/wait"
	"github.com/outpost-mesh/outpost/test/hubtest"
)

// onlyOurs keeps the hub from running its own controllers, so that the
// ones under test are the only ones acting.
func onlyOurs(c *hubd.Config) { c.Controllers = false }

// startControllers runs the Deployment and ReplicaSet controllers against
// h until the test ends.
func startControllers(t *testing.T, h *hubtest.Hub) {
	t.Helper()
	factory := informers.NewSharedInformerFactory(h.Client, 0)
	bc := record.NewBroadcaster()
	bc.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: h.Client.CoreV1().Events("")})
	c := controllers.Context{
		Client:    h.Client,
		Metadata:  h.Metadata,
		Informers: factory,
		Events: func(component string) record.EventRecorder {
			return bc.NewRecorder(scheme.Scheme, corev1.EventSource{Component: component})
		},
		Clock:  clock.RealClock{},
		Logger: testlog.New(t, slog.LevelInfo),
	}
	rsc, err := replicaset.New(c)
	if err != nil {
		t.Fatal(err)
	}
	dc, err := deployment.New(c)
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	factory.Start(stop)
	rsRun := wait.Start(t, 30*time.Second, "replicaset Run", rsc.Run)
	dRun := wait.Start(t, 30*time.Second, "deployment Run", dc.Run)
	t.Cleanup(func() {
		if err := dRun.Stop(); err != nil {
			t.Errorf("deployment Run = %v, want nil", err)
		}
		if err := rsRun.Stop(); err != nil {
			t.Errorf("replicaset Run = %v, want nil", err)
		}
		close(stop)
		factory.Shutdown()
		bc.Shutdown()
	})
}

// kubelet plays the nodes: every pod of ns that is not yet running is
// marked Running and Ready.
func kubelet(t *testing.T, client kubernetes.Interface, ns string) {
	t.Helper()
	ctx := context.Background()
	pods, err := client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatalf("list pods: %v", err)
	}
	for i := range pods.Items {
		p := &pods.Items[i]
		if p.Status.Phase == corev1.PodRunning || p.DeletionTimestamp != nil {
			continue
		}
		now := metav1.Now()
		p.Status.Phase = corev1.PodRunning
		p.Status.StartTime = &now
		p.Status.Conditions = []corev1.PodCondition{
			{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: now},
			{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: now},
			{Type: corev1.ContainersReady, Status: corev1.ConditionTrue, LastTransitionTime: now},
		}
		_, err := client.CoreV1().Pods(ns).UpdateStatus(ctx, p, metav1.UpdateOptions{})
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			t.Fatalf("update status of pod %s: %v", p.Name, err)
		}
	}
}

func webDeployment(name string, n int32, image string) *appsv1.Deployment {
	labels := map[string]string{"app": name}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default",
			Annotations: map[string]string{"kubernetes.io/change-cause": "create " + image}},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(n),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: image}}},
			},
		},
	}
}

// state is what the test sees of a Deployment at one moment.
type state struct {
	d    *appsv1.Deployment
	rss  []appsv1.ReplicaSet // by revision
	pods []corev1.Pod        // active ones
}

func look(t *testing.T, client kubernetes.Interface, name string) state {
	t.Helper()
	ctx := context.Background()
	d, err := client.AppsV1().Deployments("default").Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get deployment: %v", err)
	}
	rss, err := client.AppsV1().ReplicaSets("default").List(ctx, metav1.ListOptions{LabelSelector: "app=" + name})
	if err != nil {
		t.Fatalf("list replicasets: %v", err)
	}
	sort.Slice(rss.Items, func(i, j int) bool {
		return rss.Items[i].Annotations[deployment.RevisionAnnotation] < rss.Items[j].Annotations[deployment.RevisionAnnotation]
	})
	pods, err := client.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=" + name})
	if err != nil {
		t.Fatalf("list pods: %v", err)
	}
	s := state{d: d, rss: rss.Items}
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil {
			s.pods = append(s.pods, p)
		}
	}
	return s
}

func (s state) String() string {
	var b strings.Builder
	st := s.d.Status
	fmt.Fprintf(&b, "deployment gen %d observed %d replicas %d updated %d ready %d available %d;",
		s.d.Generation, st.ObservedGeneration, st.Replicas, st.UpdatedReplicas, st.ReadyReplicas, st.AvailableReplicas)
	for _, c := range st.Conditions {
		fmt.Fprintf(&b, " %s=%s(%s)", c.Type, c.Status, c.Reason)
	}
	for _, rs := range s.rss {
		fmt.Fprintf(&b, "; rs %s rev %s spec %d status %d ready %d", rs.Name, rs.Annotations[deployment.RevisionAnnotation],
			ptr.Deref(rs.Spec.Replicas, -1), rs.Status.Replicas, rs.Status.ReadyReplicas)
	}
	fmt.Fprintf(&b, "; %d pods", len(s.pods))
	return b.String()
}

// complete reports whether s shows a finished rollout of n replicas of
// image, kubectl rollout status's test, with the conditions upstream sets.
func (s state) complete(n int32, image string) bool {
	d, st := s.d, s.d.Status
	if st.ObservedGeneration < d.Generation || st.UpdatedReplicas != n || st.Replicas != n || st.AvailableReplicas != n || st.ReadyReplicas != n {
		return false
	}
	avail := deployment.Condition(&st, appsv1.DeploymentAvailable)
	prog := deployment.Condition(&st, appsv1.DeploymentProgressing)
	if avail == nil || avail.Status != corev1.ConditionTrue || avail.Reason != deployment.MinimumReplicasAvailable ||
		prog == nil || prog.Status != corev1.ConditionTrue || prog.Reason != deployment.NewReplicaSetAvailable {
		return false
	}
	if int32(len(s.pods)) != n {
		return false
	}
	for _, p := range s.pods {
		if p.Spec.Containers[0].Image != image {
			return false
		}
	}
	return true
}

func (s state) rs(rev string) *appsv1.ReplicaSet {
	for i := range s.rss {
		if s.rss[i].Annotations[deployment.RevisionAnnotation] == rev {
			return &s.rss[i]
		}
	}
	return nil
}

// waitFor plays the kubelet and waits until cond holds of the Deployment.
func waitFor(t *testing.T, h *hubtest.Hub, name, what string, cond func(state) bool) state {
	t.Helper()
	var last state
	wait.ForEvery(t, 50*time.Millisecond, 30*time.Second, what, func() (bool, string) {
		kubelet(t, h.Client, "default")
		last = look(t, h.Client, name)
		return cond(last), last.String()
	})
	return last
}

func events(t *testing.T, client kubernetes.Interface, kind, name string) []string {
	t.Helper()
	list, err := client.CoreV1().Events("default").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatalf("list events: %v", err)
	}
	var out []string
	for _, e := range list.Items {
		if e.InvolvedObject.Kind == kind && e.InvolvedObject.Name == name {
			out = append(out, e.Reason+": "+e.Message)
		}
	}
	return out
}

func hasEvent(t *testing.T, client kubernetes.Interface, kind, name, want string) func() (bool, string) {
	return func() (bool, string) {
		evs := events(t, client, kind, name)
		for _, e := range evs {
			if strings.HasPrefix(e, want) {
				return true, ""
			}
		}
		return false, fmt.Sprintf("events of %s %s: %q", kind, name, evs)
	}
}

func TestDeploymentLifecycle(t *testing.T) {
	h := hubtest.Start(t, onlyOurs)
	startControllers(t, h)
	ctx := context.Background()
	deploys := h.Client.AppsV1().Deployments("default")
	if _, err := deploys.Create(ctx, webDeployment("web", 3, "nginx:1.27"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	// Created: one ReplicaSet of 3 at revision 1, its pods ready.
	s := waitFor(t, h, "web", "first rollout", func(s state) bool { return s.complete(3, "nginx:1.27") && len(s.rss) == 1 })
	rs1 := s.rss[0]
	hash := rs1.Labels[appsv1.DefaultDeploymentUniqueLabelKey]
	if hash == "" || rs1.Name != "web-"+hash || rs1.Spec.Selector.MatchLabels[appsv1.DefaultDeploymentUniqueLabelKey] != hash ||
		rs1.Spec.Template.Labels[appsv1.DefaultDeploymentUniqueLabelKey] != hash {
		t.Errorf("replicaset %s: labels %v selector %v template labels %v, want pod-template-hash in all and in the name",
			rs1.Name, rs1.Labels, rs1.Spec.Selector.MatchLabels, rs1.Spec.Template.Labels)
	}
	if want := deployment.ComputeHash(&s.d.Spec.Template, nil); hash != want {
		t.Errorf("pod-template-hash = %s, want ComputeHash of the template %s", hash, want)
	}
	if ref := metav1.GetControllerOf(&rs1); ref == nil || ref.UID != s.d.UID || !ptr.Deref(ref.BlockOwnerDeletion, false) {
		t.Errorf("replicaset controller reference = %+v, want the deployment's, blocking", ref)
	}
	for k, want := range map[string]string{
		deployment.RevisionAnnotation:        "1",
		deployment.DesiredReplicasAnnotation: "3",
		deployment.MaxReplicasAnnotation:     "4", // 3 + 25% rounded up
		"kubernetes.io/change-cause":         "create nginx:1.27",
	} {
		if got := rs1.Annotations[k]; got != want {
			t.Errorf("replicaset annotation %s = %q, want %q", k, got, want)
		}
	}
	if got := s.d.Annotations[deployment.RevisionAnnotation]; got != "1" {
		t.Errorf("deployment revision annotation = %q, want 1", got)
	}
	for _, p := range s.pods {
		ref := metav1.GetControllerOf(&p)
		if ref == nil || ref.UID != rs1.UID || ref.Kind != "ReplicaSet" || !ptr.Deref(ref.BlockOwnerDeletion, false) ||
			p.GenerateName != rs1.Name+"-" || !strings.HasPrefix(p.Name, rs1.Name+"-") {
			t.Errorf("pod %s (generateName %s) controller %+v, want %s's", p.Name, p.GenerateName, ref, rs1.Name)
		}
	}
	if rs1.Status.ObservedGeneration != rs1.Generation || rs1.Status.FullyLabeledReplicas != 3 || rs1.Status.AvailableReplicas != 3 {
		t.Errorf("replicaset status = %+v, want 3 fully labeled and available, generation observed", rs1.Status)
	}
	wait.For(t, 10*time.Second, "scaling event", hasEvent(t, h.Client, "Deployment", "web", "ScalingReplicaSet: Scaled up replica set "+rs1.Name+" from 0 to 3"))
	wait.For(t, 10*time.Second, "create event", hasEvent(t, h.Client, "ReplicaSet", rs1.Name, "SuccessfulCreate: Created pod: "+rs1.Name+"-"))

	// kubectl set image: a rolling update to revision 2.
	setImage := func(image string) {
		t.Helper()
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			d, err := deploys.Get(ctx, "web", metav1.GetOptions{})
			if err != nil {
				return err
			}
			d.Spec.Template.Spec.Containers[0].Image = image
			d.Annotations["kubernetes.io/change-cause"] = "set image " + image
			_, err = deploys.Update(ctx, d, metav1.UpdateOptions{})
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	setImage("nginx:1.28")
	s = waitFor(t, h, "web", "rollout to nginx:1.28", func(s state) bool {
		return s.complete(3, "nginx:1.28") && len(s.rss) == 2 && s.rs("1") != nil && s.rs("1").Status.Replicas == 0 && s.rs("2") != nil
	})
	if old := s.rs("1"); ptr.Deref(old.Spec.Replicas, -1) != 0 {
		t.Errorf("old replicaset %s spec.replicas = %d, want 0", old.Name, ptr.Deref(old.Spec.Replicas, -1))
	}
	rs2 := s.rs("2")
	if rs2.Annotations["kubernetes.io/change-cause"] != "set image nginx:1.28" || s.d.Annotations[deployment.RevisionAnnotation] != "2" {
		t.Errorf("after set image: new replicaset annotations %v, deployment's %v", rs2.Annotations, s.d.Annotations)
	}
	wait.For(t, 10*time.Second, "scale down event", hasEvent(t, h.Client, "Deployment", "web", "ScalingReplicaSet: Scaled down replica set "+rs1.Name))

	// kubectl scale to 0 and back.
	scale := func(n int32) {
		t.Helper()
		_, err := deploys.UpdateScale(ctx, "web", &autoscalingv1.Scale{
			ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default"},
			Spec:       autoscalingv1.ScaleSpec{Replicas: n}}, metav1.UpdateOptions{})
		if err != nil {
			t.Fatal(err)
		}
	}
	scale(0)
	waitFor(t, h, "web", "scaled to 0", func(s state) bool {
		rs := s.rs("2")
		return len(s.pods) == 0 && s.d.Status.ObservedGeneration >= s.d.Generation && s.d.Status.Replicas == 0 &&
			rs != nil && ptr.Deref(rs.Spec.Replicas, -1) == 0 && rs.Status.Replicas == 0
	})
	wait.For(t, 10*time.Second, "delete event", hasEvent(t, h.Client, "ReplicaSet", rs2.Name, "SuccessfulDelete: Deleted pod: "))
	scale(3)
	waitFor(t, h, "web", "scaled back to 3", func(s state) bool { return s.complete(3, "nginx:1.28") })

	// kubectl rollout undo, done client-side as kubectl does: revision 1's
	// template goes back into the Deployment, and its ReplicaSet becomes
	// revision 3 with 1 in its history.
	undo := s.rs("1").Spec.Template.DeepCopy()
	delete(undo.Labels, appsv1.DefaultDeploymentUniqueLabelKey)
	patch, _ := json.Marshal([]any{map[string]any{"op": "replace", "path": "/spec/template", "value": undo}})
	if _, err := deploys.Patch(ctx, "web", types.JSONPatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	s = waitFor(t, h, "web", "rollout undo", func(s state) bool {
		rs := s.rs("3")
		return s.complete(3, "nginx:1.27") && rs != nil && rs.UID == rs1.UID && s.rs("2") != nil && s.rs("2").Status.Replicas == 0
	})
	if got := s.rs("3").Annotations[deployment.RevisionHistoryAnnotation]; got != "1" {
		t.Errorf("revision history of the rolled back replicaset = %q, want 1", got)
	}

	// kubectl rollout pause, set image, scale: no rollout while paused,
	// but the scale applies.
	pause := func(p bool) {
		t.Helper()
		patch := fmt.Sprintf(`{"spec":{"paused":%t}}`, p)
		if _, err := deploys.Patch(ctx, "web", types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	pause(true)
	waitFor(t, h, "web", "paused condition", func(s state) bool {
		c := deployment.Condition(&s.d.Status, appsv1.DeploymentProgressing)
		return c != nil && c.Reason == deployment.Paused && c.Status == corev1.ConditionUnknown
	})
	setImage("nginx:1.29")
	scale(4)
	s = waitFor(t, h, "web", "scaled while paused", func(s state) bool {
		return s.d.Status.ObservedGeneration >= s.d.Generation && len(s.pods) == 4 && s.d.Status.AvailableReplicas == 4
	})
	for _, p := range s.pods {
		if p.Spec.Containers[0].Image != "nginx:1.27" {
			t.Errorf("paused deployment rolled out: pod %s runs %s", p.Name, p.Spec.Containers[0].Image)
		}
	}
	if len(s.rss) != 2 {
		t.Errorf("paused deployment has %d replicasets, want 2 (no new one): %v", len(s.rss), s)
	}
	pause(false)
	waitFor(t, h, "web", "rollout after resume", func(s state) bool { return s.complete(4, "nginx:1.29") && len(s.rss) == 3 })
}

func TestRecreate(t *testing.T) {
	h := hubtest.Start(t, onlyOurs)
	startControllers(t, h)
	ctx := context.Background()
	d := webDeployment("db", 2, "postgres:16")
	d.Spec.Strategy = appsv1.DeploymentStrategy{Type: appsv1.RecreateDeploymentStrategyType}
	deploys := h.Client.AppsV1().Deployments("default")
	if _, err := deploys.Create(ctx, d, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, h, "db", "first rollout", func(s state) bool { return s.complete(2, "postgres:16") })
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		d, err := deploys.Get(ctx, "db", metav1.GetOptions{})
		if err != nil {
			return err
		}
		d.Spec.Template.Spec.Containers[0].Image = "postgres:17"
		_, err = deploys.Update(ctx, d, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	// Never old and new pods at once.
	waitFor(t, h, "db", "recreated", func(s state) bool {
		images := map[string]bool{}
		for _, p := range s.pods {
			images[p.Spec.Containers[0].Image] = true
		}
		if len(images) > 1 {
			t.Fatalf("old and new pods run together: %v", s)
		}
		return s.complete(2, "postgres:17")
	})
	// The max-replicas annotation has no surge for Recreate.
	s := look(t, h.Client, "db")
	if got := s.rs("2").Annotations[deployment.MaxReplicasAnnotation]; got != "2" {
		t.Errorf("Recreate max-replicas = %q, want 2", got)
	}
}

func TestRevisionHistoryLimit(t *testing.T) {
	h := hubtest.Start(t, onlyOurs)
	startControllers(t, h)
	ctx := context.Background()
	d := webDeployment("api", 1, "api:1")
	d.Spec.RevisionHistoryLimit = ptr.To(int32(1))
	d.Spec.Strategy.RollingUpdate = &appsv1.RollingUpdateDeployment{MaxSurge: ptr.To(intstr.FromInt32(1)), MaxUnavailable: ptr.To(intstr.FromInt32(0))}
	deploys := h.Client.AppsV1().Deployments("default")
	if _, err := deploys.Create(ctx, d, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, h, "api", "first rollout", func(s state) bool { return s.complete(1, "api:1") })
	for _, image := range []string{"api:2", "api:3"} {
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			d, err := deploys.Get(ctx, "api", metav1.GetOptions{})
			if err != nil {
				return err
			}
			d.Spec.Template.Spec.Containers[0].Image = image
			_, err = deploys.Update(ctx, d, metav1.UpdateOptions{})
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		waitFor(t, h, "api", "rollout to "+image, func(s state) bool { return s.complete(1, image) })
	}
	// Revision 1 is cleaned up; 2 is kept for an undo.
	waitFor(t, h, "api", "history of 1", func(s state) bool { return len(s.rss) == 2 && s.rs("1") == nil && s.rs("2") != nil })
}

func TestBadInputRefused(t *testing.T) {
	h := hubtest.Start(t, onlyOurs)
	ctx := context.Background()
	for _, tc := range []struct {
		name   string
		change func(*appsv1.Deployment)
		field  string
	}{
		{"selector not matching the template", func(d *appsv1.Deployment) { d.Spec.Template.Labels = map[string]string{"app": "other"} }, "spec.template.metadata.labels"},
		{"both fenceposts zero", func(d *appsv1.Deployment) {
			d.Spec.Strategy.RollingUpdate = &appsv1.RollingUpdateDeployment{MaxSurge: ptr.To(intstr.FromInt32(0)), MaxUnavailable: ptr.To(intstr.FromString("0%"))}
		}, "spec.strategy.rollingUpdate.maxUnavailable"},
		{"Recreate with rollingUpdate", func(d *appsv1.Deployment) {
			d.Spec.Strategy = appsv1.DeploymentStrategy{Type: appsv1.RecreateDeploymentStrategyType, RollingUpdate: &appsv1.RollingUpdateDeployment{}}
		}, "spec.strategy.rollingUpdate"},
		{"negative surge", func(d *appsv1.Deployment) {
			d.Spec.Strategy.RollingUpdate = &appsv1.RollingUpdateDeployment{MaxSurge: ptr.To(intstr.FromInt32(-1))}
		}, "spec.strategy.rollingUpdate.maxSurge"},
		{"unavailable over 100%", func(d *appsv1.Deployment) {
			d.Spec.Strategy.RollingUpdate = &appsv1.RollingUpdateDeployment{MaxUnavailable: ptr.To(intstr.FromString("101%"))}
		}, "spec.strategy.rollingUpdate.maxUnavailable"},
		{"negative replicas", func(d *appsv1.Deployment) { d.Spec.Replicas = ptr.To(int32(-1)) }, "spec.replicas"},
	} {
		d := webDeployment("bad", 1, "nginx")
		tc.change(d)
		_, err := h.Client.AppsV1().Deployments("default").Create(ctx, d, metav1.CreateOptions{})
		if !apierrors.IsInvalid(err) {
			t.Errorf("%s: create = %v, want 422 Invalid", tc.name, err)
			continue
		}
		var fields []string
		if st, ok := err.(apierrors.APIStatus); ok && st.Status().Details != nil {
			for _, c := range st.Status().Details.Causes {
				fields = append(fields, c.Field)
			}
		}
		found := false
		for _, f := range fields {
			found = found || f == tc.field
		}
		if !found {
			t.Errorf("%s: causes at %v, want one at %s", tc.name, fields, tc.field)
		}
	}
}
