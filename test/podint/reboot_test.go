package podint

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/outpost-mesh/outpost/internal/netnstest"
	"github.com/outpost-mesh/outpost/internal/nodetest"
	"github.com/outpost-mesh/outpost/internal/wait"
)

// TestRebootOffline: a node that reboots while its hub cannot be reached
// runs its pods again from its checkpoint alone, each at the IP it had,
// with the configMap volume and the secret in env it had: nothing the
// pods use was deleted or expired by the agent while offline.
func TestRebootOffline(t *testing.T) {
	if !netnstest.Enter(t) {
		return
	}
	n := startNode(t)
	ctx := context.Background()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "page", Namespace: "default"}, Data: map[string]string{"index.html": "served from the checkpoint"}}
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "key", Namespace: "default"}, Data: map[string][]byte{"key": []byte("s3cret")}}
	if _, err := n.client.CoreV1().ConfigMaps("default").Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := n.client.CoreV1().Secrets("default").Create(ctx, sec, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	const pods = 3
	for i := range pods {
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("web-%d", i), Namespace: "default"},
			Spec: corev1.PodSpec{
				NodeName:                      n.name,
				TerminationGracePeriodSeconds: new(int64(1)),
				Volumes: []corev1.Volume{{Name: "page", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
					LocalObjectReference: corev1.LocalObjectReference{Name: "page"}}}}},
				Containers: []corev1.Container{{
					Name: "httpd", Image: busybox, ImagePullPolicy: corev1.PullIfNotPresent,
					Command:      []string{"sh", "-c", `mkdir /www && cp /page/index.html /www/ && echo "$KEY" > /www/key && exec httpd -f -p 8080 -h /www`},
					Env:          []corev1.EnvVar{{Name: "KEY", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "key"}, Key: "key"}}}},
					VolumeMounts: []corev1.VolumeMount{{Name: "page", MountPath: "/page"}},
				}},
			},
		}
		if _, err := n.client.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	ips := map[string]string{}
	for i := range pods {
		name := fmt.Sprintf("web-%d", i)
		p := n.waitPod(t, name, "Running", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodRunning && p.Status.PodIP != "" })
		ips[name] = p.Status.PodIP
	}
	serving := func() (bool, string) {
		for name, ip := range ips {
			page, err := get(net.JoinHostPort(ip, "8080"), "/index.html")
			if err != nil || page != "served from the checkpoint" {
				return false, fmt.Sprintf("%s at %s: %q %v", name, ip, page, err)
			}
			key, err := get(net.JoinHostPort(ip, "8080"), "/key")
			if err != nil || strings.TrimSpace(key) != "s3cret" {
				return false, fmt.Sprintf("%s's key: %q %v", name, key, err)
			}
		}
		return true, ""
	}
	wait.For(t, 30*time.Second, "every pod serving", serving)

	// The power goes; the node comes back with its hub unreachable: a
	// port where nothing answers.
	if err := n.bg.Stop(); err != nil {
		t.Fatalf("agent Run = %v", err)
	}
	if err := nodetest.Reboot(n.dir, n.name); err != nil {
		t.Fatalf("reboot: %v", err)
	}
	for name, ip := range ips {
		if _, err := get(net.JoinHostPort(ip, "8080"), "/index.html"); err == nil {
			t.Fatalf("%s still answers at %s after the reboot", name, ip)
		}
	}
	dead, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dead.Close() })
	hub := n.cfg.HubAddr
	n.cfg.HubAddr = dead.LocalAddr().String()
	start := time.Now()
	n.start(t)
	wait.For(t, 60*time.Second, "every pod serving again, offline", func() (bool, string) {
		n.running(t)
		return serving()
	})
	t.Logf("%d pods serving again %v after the agent's start, offline", pods, time.Since(start).Round(time.Millisecond))

	// Back online, the hub sees them Running at the same IPs.
	if err := n.bg.Stop(); err != nil {
		t.Fatalf("agent Run = %v", err)
	}
	n.cfg.HubAddr = hub
	n.start(t)
	for name, ip := range ips {
		n.waitPod(t, name, "Running at "+ip+" once online again", func(p *corev1.Pod) bool {
			return p.Status.Phase == corev1.PodRunning && p.Status.PodIP == ip && ready(p)
		})
	}
}
