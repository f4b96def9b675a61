package endpoints

import (
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
)

func service(mut ...func(*corev1.Service)) *corev1.Service {
	s := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default", Labels: map[string]string{"team": "a"}},
		Spec: corev1.ServiceSpec{
			Selector:   map[string]string{"app": "web"},
			IPFamilies: []corev1.IPFamily{corev1.IPv4Protocol},
			Ports: []corev1.ServicePort{
				{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromString("http")},
				{Name: "metrics", Port: 9090, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt32(9090)},
			},
		},
	}
	for _, m := range mut {
		m(s)
	}
	return s
}

func pod(name, ip string, ready bool, httpPort int32, mut ...func(*corev1.Pod)) *corev1.Pod {
	st := corev1.ConditionFalse
	if ready {
		st = corev1.ConditionTrue
	}
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID(name), Labels: map[string]string{"app": "web"}},
		Spec:       corev1.PodSpec{NodeName: "n1", Containers: []corev1.Container{{Name: "c"}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip, PodIPs: []corev1.PodIP{{IP: ip}},
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: st}}},
	}
	if httpPort != 0 {
		p.Spec.Containers[0].Ports = []corev1.ContainerPort{{Name: "http", ContainerPort: httpPort, Protocol: corev1.ProtocolTCP}}
	}
	for _, m := range mut {
		m(p)
	}
	return p
}

// render prints subsets as "[ports] ready | notready" lines.
func render(ss []corev1.EndpointSubset) string {
	var out []string
	for _, s := range ss {
		var ports, ready, notReady []string
		for _, p := range s.Ports {
			ports = append(ports, fmt.Sprintf("%s=%d", p.Name, p.Port))
		}
		for _, a := range s.Addresses {
			ready = append(ready, a.TargetRef.Name)
		}
		for _, a := range s.NotReadyAddresses {
			notReady = append(notReady, a.TargetRef.Name)
		}
		out = append(out, fmt.Sprintf("[%s] %s | %s", strings.Join(ports, ","), strings.Join(ready, ","), strings.Join(notReady, ",")))
	}
	return strings.Join(out, "\n")
}

func TestDesired(t *testing.T) {
	deleting := func(p *corev1.Pod) { p.DeletionTimestamp = &metav1.Time{Time: time.Unix(100, 0)} }
	for _, tc := range []struct {
		name string
		svc  *corev1.Service
		pods []*corev1.Pod
		want string
	}{
		{"ready and not ready", service(), []*corev1.Pod{
			pod("a", "10.42.0.1", true, 8080), pod("b", "10.42.0.2", false, 8080),
		}, "[http=8080,metrics=9090] a | b"},
		{"repacked by address set", service(), []*corev1.Pod{
			pod("a", "10.42.0.1", true, 8080), pod("b", "10.42.0.2", true, 0), pod("c", "10.42.0.3", true, 8081),
		}, "[http=8080] a | \n[http=8081] c | \n[metrics=9090] a,b,c | "},
		{"terminating pods left out", service(), []*corev1.Pod{
			pod("a", "10.42.0.1", true, 8080, deleting), pod("b", "10.42.0.2", true, 8080),
		}, "[http=8080,metrics=9090] b | "},
		{"publishNotReadyAddresses keeps them, all ready", service(func(s *corev1.Service) { s.Spec.PublishNotReadyAddresses = true }), []*corev1.Pod{
			pod("a", "10.42.0.1", false, 8080, deleting), pod("b", "10.42.0.2", false, 8080),
		}, "[http=8080,metrics=9090] a,b | "},
		{"headless without ports", service(func(s *corev1.Service) { s.Spec.ClusterIP, s.Spec.Ports = corev1.ClusterIPNone, nil }), []*corev1.Pod{
			pod("a", "10.42.0.1", true, 0), pod("b", "10.42.0.2", false, 0),
		}, "[] a | b"},
		{"no IP: left out", service(), []*corev1.Pod{pod("a", "", true, 8080, func(p *corev1.Pod) { p.Status.PodIPs = nil })}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := render(Desired(tc.svc, tc.pods)); got != tc.want {
				t.Errorf("Desired =\n%s\nwant\n%s", got, tc.want)
			}
		})
	}
	ss := Desired(service(), []*corev1.Pod{pod("a", "10.42.0.1", true, 8080)})
	a := ss[0].Addresses[0]
	if a.IP != "10.42.0.1" || a.NodeName == nil || *a.NodeName != "n1" || a.TargetRef.Kind != "Pod" || a.TargetRef.UID != "a" {
		t.Errorf("address %+v", a)
	}
}

// addrs returns n pods named prefix0.., ready or not, all with port 8080.
func addrs(prefix string, n int, ready bool) []*corev1.Pod {
	var out []*corev1.Pod
	for i := 0; i < n; i++ {
		out = append(out, pod(fmt.Sprintf("%s%04d", prefix, i), fmt.Sprintf("10.%d.%d.%d", map[bool]int{true: 1, false: 2}[ready], i/250, i%250+1), ready, 8080))
	}
	return out
}

func counts(ss []corev1.EndpointSubset) (ready, notReady int) {
	for _, s := range ss {
		ready += len(s.Addresses)
		notReady += len(s.NotReadyAddresses)
	}
	return
}

func TestTruncate(t *testing.T) {
	for _, tc := range []struct {
		name                    string
		ready, notReady         int
		wantReady, wantNotReady int
		cut                     bool
	}{
		{"under", 600, 400, 600, 400, false},
		{"not ready cut", 800, 400, 800, 200, true},
		{"ready cut, not ready dropped", 1200, 30, 1000, 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pods := append(addrs("r", tc.ready, true), addrs("n", tc.notReady, false)...)
			ss, cut := Truncate(Desired(service(), pods))
			r, n := counts(ss)
			if cut != tc.cut || r != tc.wantReady || n != tc.wantNotReady {
				t.Errorf("Truncate(%d ready, %d not) = %d, %d, cut %v; want %d, %d, cut %v", tc.ready, tc.notReady, r, n, cut, tc.wantReady, tc.wantNotReady, tc.cut)
			}
		})
	}
	// Shares per subset: two subsets of 700 and 500 ready get 584 and 416.
	pods := append(addrs("a", 700, true), addrs("b", 500, true)...)
	for _, p := range pods[700:] {
		p.Spec.Containers[0].Ports[0].ContainerPort = 8081
	}
	ss, _ := Truncate(Desired(service(func(s *corev1.Service) { s.Spec.Ports = s.Spec.Ports[:1] }), pods))
	if len(ss) != 2 || len(ss[0].Addresses)+len(ss[1].Addresses) != MaxCapacity || len(ss[0].Addresses) != 584 {
		t.Errorf("shares: %d subsets, %d and %d", len(ss), len(ss[0].Addresses), len(ss[1].Addresses))
	}
}

func TestNeedsUpdate(t *testing.T) {
	svc := service()
	ss := Desired(svc, []*corev1.Pod{pod("a", "10.42.0.1", true, 8080)})
	cur := &corev1.Endpoints{ObjectMeta: metav1.ObjectMeta{Labels: Labels(svc),
		Annotations: map[string]string{corev1.EndpointsLastChangeTriggerTime: "x"}}, Subsets: ss}
	if NeedsUpdate(cur, ss, Labels(svc), false) {
		t.Error("same subsets and labels: want no update")
	}
	if !NeedsUpdate(cur, ss, Labels(svc), true) {
		t.Error("now truncated: want an update")
	}
	if !NeedsUpdate(cur, nil, Labels(svc), false) {
		t.Error("subsets gone: want an update")
	}
	if !NeedsUpdate(cur, ss, map[string]string{"team": "b"}, false) {
		t.Error("labels changed: want an update")
	}
	headless := service(func(s *corev1.Service) { s.Spec.ClusterIP = corev1.ClusterIPNone })
	if _, ok := Labels(headless)[corev1.IsHeadlessService]; !ok {
		t.Error("headless label missing")
	}
	empty := &corev1.Endpoints{ObjectMeta: metav1.ObjectMeta{Labels: Labels(svc)}, Subsets: []corev1.EndpointSubset{}}
	if NeedsUpdate(empty, nil, Labels(svc), false) {
		t.Error("empty and nil subsets: want no update")
	}
}
