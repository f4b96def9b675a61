package hubd

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/outpost-mesh/outpost/hub/auth"
)

// recordingDialer records the pods and ports it is asked for and
// refuses the pods named in refuse.
type recordingDialer struct {
	refuse map[string]bool
	mu     sync.Mutex
	asked  []string
}

func (d *recordingDialer) DialPod(_ context.Context, pod *corev1.Pod, port int32) (net.Conn, error) {
	d.mu.Lock()
	d.asked = append(d.asked, pod.Name+"@"+pod.Spec.NodeName)
	d.mu.Unlock()
	if d.refuse[pod.Name] {
		return nil, errors.New("refused")
	}
	a, b := net.Pipe()
	b.Close()
	_ = port
	return a, nil
}

// TestServiceDialer: a service webhook reaches a ready pod behind the
// Service's EndpointSlices on the slice port of the Service's port, and
// says why when there is none.
func TestServiceDialer(t *testing.T) {
	ctx := auth.WithUser(context.Background(), hubUser)
	st, h, log := startInprocAPI(t)
	cs, err := inprocClient(h, log)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []struct{ name, node string }{{"a", "edge-1"}, {"b", "edge-2"}, {"unready", "edge-1"}} {
		if _, err := cs.CoreV1().Pods("default").Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: p.name},
			Spec: corev1.PodSpec{NodeName: p.node, Containers: []corev1.Container{{Name: "c", Image: "i"}}}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := cs.CoreV1().Services("default").Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "hook"},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 443, TargetPort: intstr.FromInt32(8443)}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	d := &recordingDialer{refuse: map[string]bool{}}
	sd := serviceDialer{st: st, pods: d}
	if _, err := sd.DialService(ctx, "default", "hook", 443); err == nil || !strings.Contains(err.Error(), "no ready endpoints") {
		t.Errorf("dial without endpoints: %v", err)
	}
	endpoint := func(pod string, ready bool) discoveryv1.Endpoint {
		return discoveryv1.Endpoint{Addresses: []string{"10.42.0.9"}, Conditions: discoveryv1.EndpointConditions{Ready: &ready},
			TargetRef: &corev1.ObjectReference{Kind: "Pod", Namespace: "default", Name: pod}}
	}
	empty, port := "", int32(8443)
	if _, err := cs.DiscoveryV1().EndpointSlices("default").Create(ctx, &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: "hook-x", Labels: map[string]string{discoveryv1.LabelServiceName: "hook"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{endpoint("a", true), endpoint("b", true), endpoint("unready", false)},
		Ports:       []discoveryv1.EndpointPort{{Name: &empty, Port: &port}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := sd.DialService(ctx, "default", "hook", 80); err == nil || !strings.Contains(err.Error(), "has no port 80") {
		t.Errorf("dial of a port the Service lacks: %v", err)
	}
	d.refuse["a"] = true
	conn, err := sd.DialService(ctx, "default", "hook", 443)
	if err != nil {
		t.Fatal(err)
	}
	conn.Close()
	d.mu.Lock()
	asked := strings.Join(d.asked, " ")
	d.mu.Unlock()
	if !strings.Contains(asked, "b@edge-2") || strings.Contains(asked, "unready") {
		t.Errorf("pods dialed: %s, want b (a refuses) and never the unready one", asked)
	}
}
