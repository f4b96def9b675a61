package endpointslice_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"

	"github.com/outpost-mesh/outpost/hub/controllers"
	"github.com/outpost-mesh/outpost/hub/controllers/endpointslice"
	"github.com/outpost-mesh/outpost/hub/hubd"
	"github.com/outpost-mesh/outpost/internal/testlog"
	"github.com/outpost-mesh/outpost/internal/wait"
	"github.com/outpost-mesh/outpost/test/hubtest"
)

// startController runs the controller against a real hub (without the
// hub's own controllers) until the test ends.
func startController(t *testing.T) *hubtest.Hub {
	h := hubtest.Start(t, func(c *hubd.Config) { c.Controllers = false })
	inf := informers.NewSharedInformerFactory(h.Client, 0)
	bc := record.NewBroadcaster()
	bc.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: h.Client.CoreV1().Events("")})
	t.Cleanup(bc.Shutdown)
	ctl, err := endpointslice.New(controllers.Context{
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
	bg := wait.Start(t, 30*time.Second, "endpointslice controller", func(ctx context.Context) error {
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

// slicesOf returns the managed slices of service name in default.
func slicesOf(t *testing.T, cs kubernetes.Interface, name string) []discoveryv1.EndpointSlice {
	t.Helper()
	l, err := cs.DiscoveryV1().EndpointSlices("default").List(context.Background(), metav1.ListOptions{
		LabelSelector: labels.Set{discoveryv1.LabelServiceName: name, discoveryv1.LabelManagedBy: endpointslice.ManagedBy}.String()})
	if err != nil {
		t.Fatal(err)
	}
	return l.Items
}

// describe renders the endpoints of slices as "pod:RST" (ready, serving,
// terminating as T/F), sorted.
func describe(ss []discoveryv1.EndpointSlice) string {
	b := func(p *bool) string {
		if p != nil && *p {
			return "T"
		}
		return "F"
	}
	var out []string
	for _, s := range ss {
		for _, ep := range s.Endpoints {
			out = append(out, fmt.Sprintf("%s:%s%s%s", ep.TargetRef.Name, b(ep.Conditions.Ready), b(ep.Conditions.Serving), b(ep.Conditions.Terminating)))
		}
	}
	slices.Sort(out)
	return strings.Join(out, " ")
}

// setStatus plays the kubelet: the pod runs with ip, ready or not.
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
	p.Status.PodIP = ip
	p.Status.PodIPs = []corev1.PodIP{{IP: ip}}
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: st, LastTransitionTime: metav1.Now()}}
	if _, err := cs.CoreV1().Pods("default").UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func TestSlicesFollowPods(t *testing.T) {
	h := startController(t)
	cs := h.Client
	ctx := context.Background()
	if _, err := cs.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "gw-1",
		Labels: map[string]string{endpointslice.LabelSite: "store-42"}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	svc, err := cs.CoreV1().Services("default").Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "web"},
			Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromString("http")}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// A service without a selector gets no slices.
	if _, err := cs.CoreV1().Services("default").Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "manual"},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Before any pod: one empty placeholder.
	wait.For(t, 30*time.Second, "a placeholder slice", func() (bool, string) {
		ss := slicesOf(t, cs, "web")
		return len(ss) == 1 && len(ss[0].Endpoints) == 0, fmt.Sprint(len(ss), " slices")
	})
	for _, name := range []string{"a", "b"} {
		if _, err := cs.CoreV1().Pods("default").Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app": "web"}},
			Spec: corev1.PodSpec{NodeName: "gw-1", Containers: []corev1.Container{{Name: "c", Image: "nginx",
				Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}}}}},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	setStatus(t, cs, "a", "10.42.0.5", true)
	setStatus(t, cs, "b", "10.42.0.6", false)
	wait.For(t, 30*time.Second, "a ready, b not", func() (bool, string) {
		d := describe(slicesOf(t, cs, "web"))
		return d == "a:TTF b:FFF", d
	})
	ss := slicesOf(t, cs, "web")
	if len(ss) != 1 {
		t.Fatalf("%d slices, want 1 (the placeholder reused)", len(ss))
	}
	s := ss[0]
	if s.AddressType != discoveryv1.AddressTypeIPv4 || len(s.Ports) != 1 || *s.Ports[0].Port != 8080 || *s.Ports[0].Name != "http" ||
		len(s.OwnerReferences) != 1 || s.OwnerReferences[0].UID != svc.UID || !strings.HasPrefix(s.Name, "web-") {
		t.Fatalf("slice %s: type %s ports %v owners %v", s.Name, s.AddressType, s.Ports, s.OwnerReferences)
	}
	for _, ep := range s.Endpoints {
		if ep.NodeName == nil || *ep.NodeName != "gw-1" || ep.Hints == nil || ep.Hints.ForZones[0].Name != "store-42" || len(ep.Addresses) != 1 {
			t.Fatalf("endpoint %+v: want node gw-1 and the site as hint", ep)
		}
	}

	setStatus(t, cs, "b", "10.42.0.6", true)
	wait.For(t, 30*time.Second, "b ready", func() (bool, string) {
		d := describe(slicesOf(t, cs, "web"))
		return d == "a:TTF b:TTF", d
	})
	// A graceful delete of a pod bound to a node leaves it terminating
	// until its node confirms.
	if err := cs.CoreV1().Pods("default").Delete(ctx, "a", metav1.DeleteOptions{GracePeriodSeconds: ptr(int64(30))}); err != nil {
		t.Fatal(err)
	}
	wait.For(t, 30*time.Second, "a terminating", func() (bool, string) {
		d := describe(slicesOf(t, cs, "web"))
		return d == "a:FTT b:TTF", d
	})
	if err := cs.CoreV1().Pods("default").Delete(ctx, "a", metav1.DeleteOptions{GracePeriodSeconds: ptr(int64(0))}); err != nil {
		t.Fatal(err)
	}
	wait.For(t, 30*time.Second, "a gone", func() (bool, string) {
		d := describe(slicesOf(t, cs, "web"))
		return d == "b:TTF", d
	})
	if ss := slicesOf(t, cs, "manual"); len(ss) != 0 {
		t.Fatalf("a service without a selector has %d slices", len(ss))
	}
	// A slice deleted by someone else comes back.
	for _, s := range slicesOf(t, cs, "web") {
		if err := cs.DiscoveryV1().EndpointSlices("default").Delete(ctx, s.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	wait.For(t, 30*time.Second, "the slice back", func() (bool, string) {
		d := describe(slicesOf(t, cs, "web"))
		return d == "b:TTF", d
	})
	// The service's deletion takes its slices.
	if err := cs.CoreV1().Services("default").Delete(ctx, "web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	wait.For(t, 30*time.Second, "no slices", func() (bool, string) {
		n := len(slicesOf(t, cs, "web"))
		return n == 0, fmt.Sprint(n, " slices")
	})
}

func TestReconcileAPIEndpoints(t *testing.T) {
	h := hubtest.Start(t, func(c *hubd.Config) { c.Controllers = false })
	cs := h.Client
	ctx := context.Background()
	for _, ip := range []string{"192.0.2.10", "192.0.2.11", "192.0.2.11", "2001:db8::1"} {
		if err := endpointslice.ReconcileAPIEndpoints(ctx, cs, netip.MustParseAddr(ip), 6443); err != nil {
			t.Fatal(err)
		}
		ep, err := cs.CoreV1().Endpoints("default").Get(ctx, "kubernetes", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(ep.Subsets) != 1 || ep.Subsets[0].Addresses[0].IP != ip || ep.Subsets[0].Ports[0].Port != 6443 || ep.Subsets[0].Ports[0].Name != "https" {
			t.Fatalf("endpoints %+v, want %s:6443", ep.Subsets, ip)
		}
		s, err := cs.DiscoveryV1().EndpointSlices("default").Get(ctx, "kubernetes", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if s.Labels[discoveryv1.LabelServiceName] != "kubernetes" || s.Endpoints[0].Addresses[0] != ip || *s.Ports[0].Port != 6443 {
			t.Fatalf("slice %+v, want %s:6443", s, ip)
		}
	}
}

func ptr[T any](v T) *T { return &v }
