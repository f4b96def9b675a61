// Package podint tests real pods: a hub in-process and an edge agent on its
// own containerd (the one it starts and supervises), runc, netd's bridge
// and veths, real volumes and cgroups; each test in a network namespace of
// its own, with no route out.
package podint

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"

	"github.com/outpost-mesh/outpost/edge/agent"
	"github.com/outpost-mesh/outpost/edge/eviction"
	"github.com/outpost-mesh/outpost/hub/auth"
	"github.com/outpost-mesh/outpost/hub/hubd"
	"github.com/outpost-mesh/outpost/internal/netnstest"
	"github.com/outpost-mesh/outpost/internal/nodetest"
	"github.com/outpost-mesh/outpost/internal/ociimage"
	"github.com/outpost-mesh/outpost/internal/testlog"
	"github.com/outpost-mesh/outpost/internal/wait"
	"github.com/outpost-mesh/outpost/sync/wire"
	"github.com/outpost-mesh/outpost/test/hubtest"
)

// containerdEnv names the containerd the tests' agents run instead of
// Debian's, with the shims beside it: `make test-containerd2` runs the
// tests so on a containerd 2.x built from the module proxy.
const containerdEnv = "OUTPOST_TEST_CONTAINERD"

// nodeName is the tests' node. The node's cgroups are named after it
// (/outpost-<node>), which no other package's tests may share while they
// run beside these.
const nodeName = "podint-1"

// busybox is the image of the tests' pods, imported into the node's
// containerd: no registry can be reached.
const busybox = "outpost.test/busybox:1"

// node is a hub with one edge node on containerd.
type node struct {
	hub    *hubtest.Hub
	client kubernetes.Interface
	name   string
	dir    string
	cfg    agent.Config
	bg     *wait.Background // the agent's Run
}

// startNode starts a hub and an agent, on its own containerd, that
// joins it; the node's pod CIDR comes from the hub's node IPAM controller.
// Each option changes the agent's configuration before its start.
func startNode(t *testing.T, options ...func(*agent.Config)) *node {
	t.Helper()
	cc := agent.DefaultContainerdConfig()
	if bin := os.Getenv(containerdEnv); bin != "" {
		cc.Binary = bin
	}
	for _, bin := range []string{cc.Binary, "containerd-shim-runc-v2", "runc"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Skipf("needs %s (Debian's containerd and runc): %v", bin, err)
		}
	}
	if _, err := os.Stat(ociimage.BusyboxPath); err != nil {
		t.Skip(ociimage.ErrNoBusybox)
	}
	h := hubtest.Start(t, func(c *hubd.Config) { c.SyncAddr = "127.0.0.1:0" })
	caPEM := h.Config.TLSClientConfig.CAData
	if len(caPEM) == 0 {
		var err error
		if caPEM, err = os.ReadFile(h.Config.TLSClientConfig.CAFile); err != nil {
			t.Fatal(err)
		}
	}
	b, _ := pem.Decode(caPEM)
	ca, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	id, secret := auth.GenerateToken()
	if _, err := h.Client.CoreV1().Secrets(metav1.NamespaceSystem).Create(context.Background(),
		auth.NewBootstrapTokenSecret(id, secret, "", time.Hour, time.Now()), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	// A short data directory: containerd's sockets live in it.
	dir, err := os.MkdirTemp("", "podint")
	if err != nil {
		t.Fatal(err)
	}
	// Registered first, so run last: after the agent stopped.
	t.Cleanup(func() {
		left, err := nodetest.Cleanup(dir, nodeName)
		if len(left) > 0 {
			t.Logf("left once the agent stopped, as containers outlive it: %s", strings.Join(left, "; "))
		}
		if err != nil {
			t.Errorf("clean up the node: %v", err)
		}
	})
	n := &node{hub: h, client: h.Client, name: nodeName, dir: dir}
	cfg := agent.DefaultConfig()
	cfg.NodeName, cfg.DataDir = n.name, dir
	cfg.HubAddr, cfg.Token, cfg.CAHash = h.SyncAddr(), id+"."+secret, wire.CAHash(ca)
	cfg.Containerd = &cc
	// Kubelet's memory threshold alone: the disks of shared test machines
	// are as full as they are, and kubelet's disk thresholds (imagefs
	// with 15% free) would have every pod refused for DiskPressure.
	ec := eviction.DefaultConfig()
	ec.Thresholds = []eviction.Threshold{eviction.DefaultThresholds()[0]}
	cfg.Eviction = &ec
	cfg.Logger = testlog.New(t, slog.LevelInfo).With("node", n.name)
	cfg.Sync.MinBackoff, cfg.Sync.MaxBackoff = 100*time.Millisecond, time.Second
	for _, o := range options {
		o(&cfg)
	}
	n.cfg = cfg
	n.start(t)
	n.importImage(t)
	wait.For(t, 60*time.Second, "node Ready with a pod CIDR", func() (bool, string) {
		n.running(t)
		nd, err := n.client.CoreV1().Nodes().Get(context.Background(), n.name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		for _, c := range nd.Status.Conditions {
			if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
				return nd.Spec.PodCIDR != "", "no pod CIDR"
			}
		}
		return false, fmt.Sprint(nd.Status.Conditions)
	})
	return n
}

// start runs the agent until stop is called or the test ends.
func (n *node) start(t *testing.T) {
	t.Helper()
	a, err := agent.New(n.cfg)
	if err != nil {
		t.Fatal(err)
	}
	n.bg = wait.Start(t, 2*time.Minute, "agent Run", a.Run)
}

// running fails the test if the agent stopped.
func (n *node) running(t *testing.T) {
	t.Helper()
	select {
	case <-n.bg.Done():
		t.Fatalf("agent stopped: %v", n.bg.Err())
	default:
	}
}

// importImage imports the busybox test image into the node's
// containerd, in the node's namespace, once it answers.
func (n *node) importImage(t *testing.T) {
	t.Helper()
	im, err := ociimage.Busybox(busybox)
	if err != nil {
		t.Fatal(err)
	}
	var tarball bytes.Buffer
	if err := im.WriteOCI(&tarball); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(n.dir, agent.ContainerdDir, "containerd.sock")
	wait.For(t, 60*time.Second, "containerd socket", func() (bool, string) {
		n.running(t)
		_, err := os.Stat(sock)
		return err == nil, fmt.Sprint(err)
	})
	c, err := client.New(sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := namespaces.WithNamespace(context.Background(), "outpost-"+n.name)
	imgs, err := c.Import(ctx, &tarball)
	if err != nil {
		t.Fatal(err)
	}
	for _, i := range imgs {
		if err := client.NewImage(c, i).Unpack(ctx, "overlayfs"); err != nil {
			t.Fatal(err)
		}
	}
}

// waitPod waits until pod name satisfies ok, and returns it.
func (n *node) waitPod(t *testing.T, name, what string, ok func(*corev1.Pod) bool) *corev1.Pod {
	t.Helper()
	var p *corev1.Pod
	wait.For(t, 90*time.Second, "pod "+name+" "+what, func() (bool, string) {
		n.running(t)
		var err error
		p, err = n.client.CoreV1().Pods("default").Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return ok(p), fmt.Sprintf("%s %+v", p.Status.Phase, p.Status.ContainerStatuses)
	})
	return p
}

func intOrString(port int) intstr.IntOrString { return intstr.FromInt(port) }

func ready(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// get fetches http://addr/path from the node's network namespace (the
// test's), with a short timeout.
func get(addr, path string) (string, error) {
	c := http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get("http://" + addr + path)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("%s: %s", resp.Status, b)
	}
	return string(b), err
}

// TestWebPod: a pod with an init container, two containers, configMap
// and secret volumes and env, and an HTTP readiness probe runs for real:
// it is Ready once its server answers, at its pod IP, from the node and
// from another pod; its secret volume is updated in place.
func TestWebPod(t *testing.T) {
	if !netnstest.Enter(t) {
		return
	}
	n := startNode(t)
	ctx := context.Background()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "site", Namespace: "default"}, Data: map[string]string{"greeting": "hello from a configmap"}}
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "creds", Namespace: "default"}, Data: map[string][]byte{"password": []byte("first")}}
	if _, err := n.client.CoreV1().ConfigMaps("default").Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := n.client.CoreV1().Secrets("default").Create(ctx, sec, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	web := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default"},
		Spec: corev1.PodSpec{
			NodeName: n.name,
			Volumes: []corev1.Volume{
				{Name: "www", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
				{Name: "site", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "site"}}}},
				{Name: "creds", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "creds"}}},
			},
			InitContainers: []corev1.Container{{
				Name: "init", Image: busybox, ImagePullPolicy: corev1.PullNever,
				Command:      []string{"sh", "-c", `cp /site/greeting /www/index.html && echo "$PASSWORD" > /www/password && hostname > /www/hostname`},
				Env:          []corev1.EnvVar{{Name: "PASSWORD", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "creds"}, Key: "password"}}}},
				VolumeMounts: []corev1.VolumeMount{{Name: "www", MountPath: "/www"}, {Name: "site", MountPath: "/site"}},
			}},
			Containers: []corev1.Container{
				{
					Name: "httpd", Image: busybox, ImagePullPolicy: corev1.PullNever,
					Command:        []string{"httpd", "-f", "-p", "8080", "-h", "/www"},
					VolumeMounts:   []corev1.VolumeMount{{Name: "www", MountPath: "/www"}},
					ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/index.html", Port: intOrString(8080)}}, PeriodSeconds: 1},
				},
				{
					Name: "secrets", Image: busybox, ImagePullPolicy: corev1.PullNever,
					Command:      []string{"httpd", "-f", "-p", "8081", "-h", "/creds"},
					VolumeMounts: []corev1.VolumeMount{{Name: "creds", MountPath: "/creds"}},
				},
			},
		},
	}
	if _, err := n.client.CoreV1().Pods("default").Create(ctx, web, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	p := n.waitPod(t, "web", "Running and Ready", func(p *corev1.Pod) bool {
		return p.Status.Phase == corev1.PodRunning && ready(p) && p.Status.PodIP != ""
	})
	ip := p.Status.PodIP

	// The node's status is the machine's: its resources, its pressure,
	// its runtime and its images.
	wait.For(t, 60*time.Second, "the node's status from the machine", func() (bool, string) {
		nd, err := n.client.CoreV1().Nodes().Get(ctx, n.name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		st := nd.Status
		for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory, corev1.ResourceEphemeralStorage, corev1.ResourcePods} {
			c, a := st.Capacity[r], st.Allocatable[r]
			if c.IsZero() || a.IsZero() || a.Cmp(c) > 0 {
				return false, fmt.Sprintf("%s: capacity %s, allocatable %s", r, c.String(), a.String())
			}
		}
		conds := map[corev1.NodeConditionType]corev1.ConditionStatus{}
		for _, c := range st.Conditions {
			conds[c.Type] = c.Status
		}
		for _, c := range []corev1.NodeConditionType{corev1.NodeMemoryPressure, corev1.NodeDiskPressure, corev1.NodePIDPressure} {
			if conds[c] != corev1.ConditionFalse {
				return false, fmt.Sprintf("%s is %q", c, conds[c])
			}
		}
		if !strings.HasPrefix(st.NodeInfo.ContainerRuntimeVersion, "containerd://") || st.NodeInfo.KernelVersion == "" || st.NodeInfo.OSImage == "" {
			return false, fmt.Sprintf("node info %+v", st.NodeInfo)
		}
		for _, im := range st.Images {
			if slices.Contains(im.Names, busybox) && im.SizeBytes > 0 {
				return true, ""
			}
		}
		return false, fmt.Sprintf("images %v, want %s", st.Images, busybox)
	})
	if got, err := get(net.JoinHostPort(ip, "8080"), "/index.html"); err != nil || got != "hello from a configmap" {
		t.Errorf("GET %s:8080/index.html = %q, %v; want the configmap's greeting", ip, got, err)
	}
	if got, err := get(net.JoinHostPort(ip, "8080"), "/password"); err != nil || strings.TrimSpace(got) != "first" {
		t.Errorf("GET /password = %q, %v; want the secret from the init container's env", got, err)
	}
	if got, err := get(net.JoinHostPort(ip, "8080"), "/hostname"); err != nil || strings.TrimSpace(got) != "web" {
		t.Errorf("GET /hostname = %q, %v; want the pod's name", got, err)
	}

	// Another pod reaches it at its IP.
	client := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "client", Namespace: "default"},
		Spec: corev1.PodSpec{
			NodeName:      n.name,
			RestartPolicy: corev1.RestartPolicyNever,
			Containers: []corev1.Container{{
				Name: "nc", Image: busybox, ImagePullPolicy: corev1.PullNever,
				Command: []string{"sh", "-c", fmt.Sprintf(`printf 'GET /index.html HTTP/1.0\r\n\r\n' | nc %s 8080 | grep -q 'hello from a configmap'`, ip)},
			}},
		},
	}
	if _, err := n.client.CoreV1().Pods("default").Create(ctx, client, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	n.waitPod(t, "client", "Succeeded", func(p *corev1.Pod) bool {
		if p.Status.Phase == corev1.PodFailed {
			t.Fatalf("pod client failed: %+v", p.Status.ContainerStatuses)
		}
		return p.Status.Phase == corev1.PodSucceeded
	})

	// The secret volume follows the secret, in place.
	if got, err := get(net.JoinHostPort(ip, "8081"), "/password"); err != nil || got != "first" {
		t.Fatalf("GET :8081/password = %q, %v; want first", got, err)
	}
	sec.Data["password"] = []byte("second")
	if _, err := n.client.CoreV1().Secrets("default").Update(ctx, sec, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	wait.For(t, 90*time.Second, "the secret volume updated in place", func() (bool, string) {
		got, err := get(net.JoinHostPort(ip, "8081"), "/password")
		return err == nil && got == "second", fmt.Sprintf("%q %v", got, err)
	})
	p = n.waitPod(t, "web", "not restarted", func(p *corev1.Pod) bool { return true })
	for _, cs := range p.Status.ContainerStatuses {
		if cs.RestartCount != 0 {
			t.Errorf("container %s restarted %d times", cs.Name, cs.RestartCount)
		}
	}
}

// TestProbesLimitsOOM: a failing liveness probe restarts a container and
// its restart count shows; a memory limit is in the container's cgroup,
// under the pod's; a container past its limit is OOM-killed and reported
// so.
func TestProbesLimitsOOM(t *testing.T) {
	if !netnstest.Enter(t) {
		return
	}
	n := startNode(t)
	ctx := context.Background()
	limits := corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("64Mi"), corev1.ResourceCPU: resource.MustParse("250m")}
	pods := []*corev1.Pod{
		{
			ObjectMeta: metav1.ObjectMeta{Name: "sick", Namespace: "default"},
			Spec: corev1.PodSpec{NodeName: n.name, TerminationGracePeriodSeconds: new(int64(1)), Containers: []corev1.Container{{
				Name: "main", Image: busybox, ImagePullPolicy: corev1.PullNever,
				// Healthy for a moment after each start, then not.
				Command: []string{"sh", "-c", "touch /tmp/alive; sleep 2; rm /tmp/alive; exec sleep 3600"},
				LivenessProbe: &corev1.Probe{
					ProbeHandler:  corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"test", "-f", "/tmp/alive"}}},
					PeriodSeconds: 1, FailureThreshold: 1,
				},
			}}},
		},
		{
			ObjectMeta: metav1.ObjectMeta{Name: "limited", Namespace: "default"},
			Spec: corev1.PodSpec{NodeName: n.name, Containers: []corev1.Container{{
				Name: "main", Image: busybox, ImagePullPolicy: corev1.PullNever,
				Command:   []string{"sleep", "3600"},
				Resources: corev1.ResourceRequirements{Limits: limits},
			}}},
		},
		{
			ObjectMeta: metav1.ObjectMeta{Name: "hungry", Namespace: "default"},
			Spec: corev1.PodSpec{NodeName: n.name, RestartPolicy: corev1.RestartPolicyNever, Containers: []corev1.Container{{
				Name: "main", Image: busybox, ImagePullPolicy: corev1.PullNever,
				Command:   []string{"sh", "-c", "x=0123456789; while true; do x=$x$x; done"},
				Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("16Mi")}},
			}}},
		},
	}
	for _, p := range pods {
		if _, err := n.client.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	n.waitPod(t, "sick", "restarted by its liveness probe", func(p *corev1.Pod) bool {
		return len(p.Status.ContainerStatuses) == 1 && p.Status.ContainerStatuses[0].RestartCount >= 1
	})

	p := n.waitPod(t, "limited", "Running", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodRunning })
	if p.Status.QOSClass != corev1.PodQOSGuaranteed {
		t.Errorf("QoS class %s, want Guaranteed", p.Status.QOSClass)
	}
	// A Guaranteed pod's cgroup is right under the node's kubepods, with
	// the container's under it.
	id := strings.TrimPrefix(p.Status.ContainerStatuses[0].ContainerID, "containerd://")
	cg := filepath.Join("outpost-"+n.name, "kubepods", "pod"+string(p.UID), id)
	if _, err := os.Stat("/sys/fs/cgroup/memory"); err != nil {
		t.Skip("the files of a cgroup v1 machine; cgroup v2's are checked by edge/cgroups")
	}
	for _, f := range []struct{ file, want string }{
		{filepath.Join("/sys/fs/cgroup/memory", cg, "memory.limit_in_bytes"), "67108864"},
		{filepath.Join("/sys/fs/cgroup/cpu", cg, "cpu.cfs_quota_us"), "25000"},
		{filepath.Join("/sys/fs/cgroup/memory", filepath.Dir(cg), "memory.limit_in_bytes"), "67108864"},
	} {
		if b, err := os.ReadFile(f.file); err != nil || strings.TrimSpace(string(b)) != f.want {
			t.Errorf("%s = %q, %v; want %s", f.file, b, err, f.want)
		}
	}

	p = n.waitPod(t, "hungry", "OOM-killed", func(p *corev1.Pod) bool {
		return len(p.Status.ContainerStatuses) == 1 && p.Status.ContainerStatuses[0].State.Terminated != nil
	})
	if term := p.Status.ContainerStatuses[0].State.Terminated; term.Reason != "OOMKilled" || term.ExitCode != 137 {
		t.Errorf("hungry ended %s with %d, want OOMKilled with 137", term.Reason, term.ExitCode)
	}
	if p.Status.Phase != corev1.PodFailed {
		t.Errorf("hungry is %s, want Failed", p.Status.Phase)
	}
}

// TestAdoption: an agent that restarts adopts the containers it ran: the
// same container IDs, the same processes, no restart; and their volumes
// still follow their objects.
func TestAdoption(t *testing.T) {
	if !netnstest.Enter(t) {
		return
	}
	n := startNode(t)
	ctx := context.Background()
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "token", Namespace: "default"}, Data: map[string][]byte{"value": []byte("before")}}
	if _, err := n.client.CoreV1().Secrets("default").Create(ctx, sec, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "steady", Namespace: "default"},
		Spec: corev1.PodSpec{
			NodeName: n.name,
			Volumes:  []corev1.Volume{{Name: "token", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "token"}}}},
			Containers: []corev1.Container{{
				Name: "main", Image: busybox, ImagePullPolicy: corev1.PullNever,
				Command:      []string{"sh", "-c", "echo $$ > /tmp/pid; exec httpd -f -p 8080 -h /tmp"},
				VolumeMounts: []corev1.VolumeMount{{Name: "token", MountPath: "/tmp/token"}},
			}},
		},
	}
	if _, err := n.client.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	before := n.waitPod(t, "steady", "Running", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodRunning && p.Status.PodIP != "" })
	pid, err := get(net.JoinHostPort(before.Status.PodIP, "8080"), "/pid")
	if err != nil {
		t.Fatal(err)
	}
	if err := n.bg.Stop(); err != nil {
		t.Fatalf("agent Run = %v", err)
	}
	n.start(t)
	wait.For(t, 60*time.Second, "agent connected again", func() (bool, string) {
		n.running(t)
		l, err := n.hub.Client.CoordinationV1().Leases("kube-node-lease").Get(ctx, n.name, metav1.GetOptions{})
		return err == nil && l.Spec.RenewTime != nil && time.Since(l.Spec.RenewTime.Time) < 5*time.Second, fmt.Sprint(err)
	})
	after := n.waitPod(t, "steady", "Running", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodRunning })
	b, a := before.Status.ContainerStatuses[0], after.Status.ContainerStatuses[0]
	if a.ContainerID != b.ContainerID || a.RestartCount != 0 || !a.State.Running.StartedAt.Equal(&b.State.Running.StartedAt) {
		t.Errorf("after the agent's restart: %s restarts=%d started %v; before: %s started %v", a.ContainerID, a.RestartCount, a.State.Running, b.ContainerID, b.State.Running)
	}
	if after.Status.PodIP != before.Status.PodIP {
		t.Errorf("pod IP %s after the restart, %s before", after.Status.PodIP, before.Status.PodIP)
	}
	if got, err := get(net.JoinHostPort(before.Status.PodIP, "8080"), "/pid"); err != nil || got != pid {
		t.Errorf("the container's process is %q (%v), was %q", got, err, pid)
	}

	// The adopted pod's secret volume still follows its secret.
	sec.Data["value"] = []byte("after")
	if _, err := n.client.CoreV1().Secrets("default").Update(ctx, sec, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	wait.For(t, 90*time.Second, "the adopted pod's secret volume updated in place", func() (bool, string) {
		got, err := get(net.JoinHostPort(before.Status.PodIP, "8080"), "/token/value")
		return err == nil && got == "after", fmt.Sprintf("%q %v", got, err)
	})
}
