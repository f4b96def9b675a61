package endpoints_test

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"

	"github.com/outpost-mesh/outpost/hub/controllers"
	"github.com/outpost-mesh/outpost/hub/controllers/endpoints"
	"github.com/outpost-mesh/outpost/hub/hubd"
	"github.com/outpost-mesh/outpost/internal/testlog"
	"github.com/outpost-mesh/outpost/internal/wait"
	"github.com/outpost-mesh/outpost/test/hubtest"
)

func startController(t *testing.T) *hubtest.Hub {
	h := hubtest.Start(t, func(c *hubd.Config) { c.Controllers = false })
	inf := informers.NewSharedInformerFactory(h.Client, 0)
	bc := record.NewBroadcaster()
	bc.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: h.Client.CoreV1().Events("")})
	t.Cleanup(bc.Shutdown)
	ctl, err := endpoints.New(controllers.Context{
		Client: h.Client, Metadata: h.Metadata, Informers: inf,
		Events: func(c string) record.EventRecorder {
			return bc.NewRecorder(scheme.Scheme, corev1.EventSource{Component: c})
		},
		Clock:  clock.RealClock{},
		Logger: testlog.New(t, slog.LevelInfo),
	})
	if err != nil {
		t.Fatal(err)
	}
	bg := wait.Start(t, 30*time.Second, "endpoints controller", func(ctx context.Context) error {
		inf.Start(ctx.Done())
		defer inf.Shutdown()
		return ctl.Run(ctx)
	})
	t.Cleanup(func() {
		if err := bg.Stop(); err != nil {
			t.Errorf("Run = %v", err)
		}
	})
	return h
}

// summary renders Endpoints as "ready | notready" pod names.
func summary(cs kubernetes.Interface, name string) (string, *corev1.Endpoints) {
	ep, err := cs.CoreV1().Endpoints("default").Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		return err.Error(), nil
	}
	var ready, notReady []string
	for _, s := range ep.Subsets {
		for _, a := range s.Addresses {
			ready = append(ready, a.TargetRef.Name)
		}
		for _, a := range s.NotReadyAddresses {
			notReady = append(notReady, a.TargetRef.Name)
		}
	}
	return fmt.Sprintf("%v | %v", ready, notReady), ep
}

func setStatus(t *testing.T, cs kubernetes.Interface, name, ip string, ready bool) {
	t.Helper()
	ctx := context.Background()
	p, err := cs.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	st := corev1.ConditionFalse
	if ready {
		st = corev1.ConditionTrue
	}
	p.Status.Phase = corev1.PodRunning
	p.Status.PodIP, p.Status.PodIPs = ip, []corev1.PodIP{{IP: ip}}
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: st, LastTransitionTime: metav1.Now()}}
	if _, err := cs.CoreV1().Pods("default").UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func TestEndpointsFollowPods(t *testing.T) {
	h := startController(t)
	cs := h.Client
	ctx := context.Background()
	if _, err := cs.CoreV1().Services("default").Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Labels: map[string]string{"team": "a"}},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "web"},
			Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080)}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	manual := &corev1.Endpoints{ObjectMeta: metav1.ObjectMeta{Name: "manual"},
		Subsets: []corev1.EndpointSubset{{Addresses: []corev1.EndpointAddress{{IP: "192.0.2.1"}}, Ports: []corev1.EndpointPort{{Port: 80}}}}}
	if _, err := cs.CoreV1().Services("default").Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "manual"},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().Endpoints("default").Create(ctx, manual, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"a", "b"} {
		if _, err := cs.CoreV1().Pods("default").Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app": "web"}},
			Spec:       corev1.PodSpec{NodeName: "gw-1", Containers: []corev1.Container{{Name: "c", Image: "nginx"}}},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	setStatus(t, cs, "a", "10.42.0.5", true)
	setStatus(t, cs, "b", "10.42.0.6", false)
	wait.For(t, 30*time.Second, "a ready, b not", func() (bool, string) {
		s, _ := summary(cs, "web")
		return s == "[a] | [b]", s
	})
	_, ep := summary(cs, "web")
	if ep.Labels["team"] != "a" || ep.Annotations[corev1.EndpointsLastChangeTriggerTime] == "" || ep.Subsets[0].Ports[0].Port != 8080 {
		t.Fatalf("endpoints %+v", ep)
	}
	setStatus(t, cs, "b", "10.42.0.6", true)
	wait.For(t, 30*time.Second, "both ready", func() (bool, string) {
		s, _ := summary(cs, "web")
		return s == "[a b] | []", s
	})
	// A terminating pod leaves at once.
	if err := cs.CoreV1().Pods("default").Delete(ctx, "a", metav1.DeleteOptions{GracePeriodSeconds: ptr(int64(30))}); err != nil {
		t.Fatal(err)
	}
	wait.For(t, 30*time.Second, "a gone", func() (bool, string) {
		s, _ := summary(cs, "web")
		return s == "[b] | []", s
	})
	// A service without a selector keeps the Endpoints its user wrote.
	if got, err := cs.CoreV1().Endpoints("default").Get(ctx, "manual", metav1.GetOptions{}); err != nil ||
		len(got.Subsets) != 1 || got.Subsets[0].Addresses[0].IP != "192.0.2.1" {
		t.Fatalf("the user's Endpoints changed: %+v, %v", got, err)
	}
	if err := cs.CoreV1().Services("default").Delete(ctx, "web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	wait.For(t, 30*time.Second, "the Endpoints deleted with the service", func() (bool, string) {
		_, err := cs.CoreV1().Endpoints("default").Get(ctx, "web", metav1.GetOptions{})
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
}

func ptr[T any](v T) *T { return &v }
