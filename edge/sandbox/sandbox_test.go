package sandbox

import (
	"net/netip"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/outpost-mesh/outpost/netd"
)

func TestHostPorts(t *testing.T) {
	pod := &corev1.Pod{Spec: corev1.PodSpec{
		InitContainers: []corev1.Container{{Ports: []corev1.ContainerPort{{ContainerPort: 53, HostPort: 5353, Protocol: corev1.ProtocolUDP}}}},
		Containers: []corev1.Container{{Ports: []corev1.ContainerPort{
			{ContainerPort: 80, HostPort: 8080, HostIP: "127.0.0.1"},
			{ContainerPort: 443},             // no hostPort: none
			{ContainerPort: 0, HostPort: 90}, // invalid: left out
			{ContainerPort: 70000, HostPort: 91},
		}}},
	}}
	got := hostPorts(pod)
	want := []netd.HostPort{
		{Protocol: netd.Protocol("UDP"), HostPort: 5353, ContainerPort: 53},
		{HostIP: netip.MustParseAddr("127.0.0.1"), HostPort: 8080, ContainerPort: 80},
	}
	if !slices.Equal(got, want) {
		t.Errorf("hostPorts = %+v, want %+v", got, want)
	}
}

func TestPodFilesPod(t *testing.T) {
	long := "a-very-long-pod-name-that-goes-on-and-on-and-on-well-past-sixty-three-characters"
	for _, tt := range []struct {
		name string
		pod  corev1.Pod
		host string
		dom  string
	}{
		{"name", corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "shop"}}, "web", ""},
		{"spec hostname and subdomain", corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web-0", Namespace: "shop"}, Spec: corev1.PodSpec{Hostname: "db", Subdomain: "svc"}}, "db", "svc.shop.svc.cluster.local"},
		{"long name cut", corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: long, Namespace: "shop"}}, long[:63], ""},
		{"host network: the node's", corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "agent", Namespace: "kube-system"}, Spec: corev1.PodSpec{HostNetwork: true}}, "gw-1", ""},
	} {
		p := podFilesPod(&tt.pod, "gw-1", "cluster.local", nil)
		if p.Hostname != tt.host || p.Domain != tt.dom {
			t.Errorf("%s: hostname %q domain %q, want %q %q", tt.name, p.Hostname, p.Domain, tt.host, tt.dom)
		}
	}
}

func TestLogDirUID(t *testing.T) {
	for name, want := range map[string]string{
		"shop_web_0b6d0c1e-8b1f-4f0e-9b55-1f2a3b4c5d6e": "0b6d0c1e-8b1f-4f0e-9b55-1f2a3b4c5d6e",
		"kube_system_web_uid-1":                         "uid-1",
		"nounderscore":                                  "",
		"shop_web_../etc":                               "",
		"shop_web_":                                     "",
	} {
		if got := logDirUID(name); got != want {
			t.Errorf("logDirUID(%q) = %q, want %q", name, got, want)
		}
	}
	for _, bad := range []string{"", ".", "..", "a/b", "a b"} {
		if checkUID(bad) == nil {
			t.Errorf("checkUID(%q) = nil, want an error", bad)
		}
	}
}
