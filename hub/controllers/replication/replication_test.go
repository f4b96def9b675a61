package replication

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	metadatafake "k8s.io/client-go/metadata/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"

	"github.com/outpost-mesh/outpost/hub/controllers"
	"github.com/outpost-mesh/outpost/internal/testlog"
	"github.com/outpost-mesh/outpost/internal/wait"
)

func testRC(replicas int32) *corev1.ReplicationController {
	labels := map[string]string{"app": "web"}
	return &corev1.ReplicationController{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default", UID: "rc-uid", Generation: 2, ResourceVersion: "7"},
		Spec: corev1.ReplicationControllerSpec{
			Replicas:        ptr.To(replicas),
			MinReadySeconds: 3,
			Selector:        labels,
			Template: &corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "nginx"}}},
			},
		},
		Status: corev1.ReplicationControllerStatus{
			Replicas: 2, FullyLabeledReplicas: 2, ReadyReplicas: 1, AvailableReplicas: 1, ObservedGeneration: 1,
			Conditions: []corev1.ReplicationControllerCondition{{
				Type: corev1.ReplicationControllerReplicaFailure, Status: corev1.ConditionTrue,
				Reason: "FailedCreate", Message: "exceeded quota",
			}},
		},
	}
}

// TestConversionRoundTrip checks that an RC seen as a ReplicaSet and back
// is the same RC, and that the view has the RC's selector and template.
func TestConversionRoundTrip(t *testing.T) {
	rc := testRC(3)
	rs := ToReplicaSet(rc)
	if rs.Spec.Selector == nil || rs.Spec.Selector.MatchLabels["app"] != "web" || len(rs.Spec.Selector.MatchExpressions) != 0 ||
		rs.Spec.Template.Labels["app"] != "web" || *rs.Spec.Replicas != 3 || rs.UID != "rc-uid" ||
		len(rs.Status.Conditions) != 1 || rs.Status.Conditions[0].Type != "ReplicaFailure" {
		t.Errorf("ToReplicaSet(%+v) = %+v", rc, rs)
	}
	rs.Spec.Template.Labels["app"] = "changed"
	if rc.Spec.Template.Labels["app"] != "web" {
		t.Errorf("ToReplicaSet shares the template's labels with the RC")
	}
	rs.Spec.Template.Labels["app"] = "web"
	back := FromReplicaSet(rs)
	back.TypeMeta = rc.TypeMeta
	if !apiequality.Semantic.DeepEqual(back, rc) {
		t.Errorf("FromReplicaSet(ToReplicaSet(rc)) = %+v, want %+v", back, rc)
	}

	bare := &corev1.ReplicationController{ObjectMeta: metav1.ObjectMeta{Name: "bare"}}
	if rs := ToReplicaSet(bare); rs.Spec.Selector != nil || len(rs.Spec.Template.Labels) != 0 {
		t.Errorf("ToReplicaSet(%+v) = %+v, want no selector or template", bare, rs)
	}
}

// TestFailureCondition runs the controller on a fake API that refuses
// pods as exceeding a quota, as upstream's "should surface a failure
// condition on a common issue like exceeded quota": the RC gets the
// ReplicaFailure condition with reason FailedCreate and the refusal as
// message, and loses it once it asks for no more pods than it has.
func TestFailureCondition(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	client := fake.NewClientset(testRC(3))
	var n atomic.Int32
	client.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		i := n.Add(1)
		if i > 2 {
			return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, "", fmt.Errorf("exceeded quota: condition-test, requested: pods=1, used: pods=2, limited: pods=2"))
		}
		p := a.(k8stesting.CreateAction).GetObject().(*corev1.Pod)
		// The fake does not generate names; creates run concurrently, so
		// the name comes from this call's own count, not a later Load.
		p.Name = fmt.Sprintf("%s%d", p.GenerateName, i)
		return false, nil, nil
	})
	// The fake replaces the whole object on a status update: a sync that
	// read the RC before the test's patch of its replicas would write the
	// old spec back with its status. Keep the spec, as the API server does.
	client.PrependReactor("update", "replicationcontrollers", func(a k8stesting.Action) (bool, runtime.Object, error) {
		u := a.(k8stesting.UpdateAction)
		if u.GetSubresource() != "status" {
			return false, nil, nil
		}
		in := u.GetObject().(*corev1.ReplicationController)
		cur, err := client.Tracker().Get(u.GetResource(), in.Namespace, in.Name)
		if err != nil {
			return true, nil, err
		}
		out := cur.(*corev1.ReplicationController).DeepCopy()
		out.Status = in.Status
		if err := client.Tracker().Update(u.GetResource(), out, in.Namespace); err != nil {
			return true, nil, err
		}
		return true, out, nil
	})
	factory := informers.NewSharedInformerFactory(client, 0)
	events := record.NewFakeRecorder(100)
	c, err := New(controllers.Context{
		Client:    client,
		Metadata:  metadatafake.NewSimpleMetadataClient(runtime.NewScheme()),
		Informers: factory,
		Events:    func(string) record.EventRecorder { return events },
		Clock:     clock.RealClock{},
		Logger:    testlog.New(t, slog.LevelInfo),
	})
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	factory.Start(stop)
	run := wait.Start(t, 10*time.Second, "Run", c.Run)
	defer func() {
		if err := run.Stop(); err != nil {
			t.Errorf("Run = %v, want nil", err)
		}
		close(stop)
		factory.Shutdown()
	}()
	rcs := client.CoreV1().ReplicationControllers("default")
	wait.For(t, 30*time.Second, "failure condition", func() (bool, string) {
		rc, err := rcs.Get(context.Background(), "web", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		for _, cond := range rc.Status.Conditions {
			if cond.Type == corev1.ReplicationControllerReplicaFailure && cond.Status == corev1.ConditionTrue &&
				cond.Reason == "FailedCreate" && strings.Contains(cond.Message, "exceeded quota") {
				return rc.Status.Replicas == 2 && rc.Status.ObservedGeneration == rc.Generation, fmt.Sprintf("%+v", rc.Status)
			}
		}
		return false, fmt.Sprintf("%+v", rc.Status)
	})
	pods, err := client.CoreV1().Pods("default").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		ref := metav1.GetControllerOf(&p)
		if ref == nil || ref.Kind != "ReplicationController" || ref.APIVersion != "v1" || ref.UID != "rc-uid" || !ptr.Deref(ref.BlockOwnerDeletion, false) {
			t.Errorf("pod %s has controller %+v, want the RC", p.Name, ref)
		}
	}

	if _, err := client.CoreV1().ReplicationControllers("default").Patch(context.Background(), "web", "application/merge-patch+json", []byte(`{"spec":{"replicas":2}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	wait.For(t, 30*time.Second, "condition removed", func() (bool, string) {
		rc, err := rcs.Get(context.Background(), "web", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return len(rc.Status.Conditions) == 0, fmt.Sprintf("%+v", rc.Status)
	})
}
