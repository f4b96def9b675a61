package e2e

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/outpost-mesh/outpost/internal/netem"
	"github.com/outpost-mesh/outpost/internal/netnstest"
	"github.com/outpost-mesh/outpost/internal/nodetest"
	"github.com/outpost-mesh/outpost/internal/ociimage"
)

// TestContainerdDeployment: a hub with its controllers and an agent on
// its own containerd, both in a network namespace of their own; kubectl
// 1.27 and 1.33 create a Deployment of the image `outpost image import`
// put on the node. Its pods run for real: `kubectl get pods -o wide`
// shows each Running with its IP and node, and each answers at its IP
// with its own name.
func TestContainerdDeployment(t *testing.T) {
	if !enterContainerdTest(t) {
		return
	}
	f := newFleet(t)
	h := f.startHub()
	// A name of its own: the node's cgroups are named after it, and
	// test/podint's nodes run beside this one.
	const site, name = "store-9", "e2e-ctrd-1"
	const image = "outpost.test/web:1"
	node := startContainerdNode(f, h, site, name, image, nil)
	_, podCIDR, err := net.ParseCIDR(node.Spec.PodCIDR)
	if err != nil {
		t.Fatalf("pod CIDR %q: %v", node.Spec.PodCIDR, err)
	}

	for _, version := range []string{"1.27", "1.33"} {
		t.Run("kubectl-"+version, func(t *testing.T) {
			k := newKubectl(t, version)
			k.kubeconfig = filepath.Join(h.dataDir, "admin.kubeconfig")
			k.namespace = "ctr-" + strings.ReplaceAll(version, ".", "-")
			k.run(t, "create", "namespace", k.namespace)
			k.run(t, "create", "deployment", "web", "--image="+image, "--replicas=2", "--port=8080",
				"--", "httpd", "-f", "-p", "8080", "-h", "/etc")
			k.run(t, "rollout", "status", "deployment/web", "--timeout=50s")
			var rows [][]string
			f.eventually(30*time.Second, "both pods Running with an IP", func() (bool, string) {
				r := k.run(t, "get", "pods", "-o", "wide", "--no-headers")
				rows = rows[:0]
				for _, l := range r.lines() {
					rows = append(rows, strings.Fields(l))
				}
				if len(rows) != 2 {
					return false, r.stdout
				}
				for _, c := range rows {
					// NAME READY STATUS RESTARTS AGE IP NODE ...
					if len(c) < 7 || c[1] != "1/1" || c[2] != "Running" || net.ParseIP(c[5]) == nil {
						return false, r.stdout
					}
				}
				return true, ""
			})
			for _, c := range rows {
				pod, ip, node := c[0], c[5], c[6]
				if node != name {
					t.Errorf("pod %s on %q, want %s", pod, node, name)
				}
				if !podCIDR.Contains(net.ParseIP(ip)) {
					t.Errorf("pod %s at %s, outside the node's pod CIDR %s", pod, ip, podCIDR)
				}
				// /etc/hostname, the pod's own, served by its httpd.
				got, err := httpGet(net.JoinHostPort(ip, "8080"), "/hostname")
				if err != nil || strings.TrimSpace(got) != pod {
					t.Errorf("GET %s:8080/hostname = %q, %v; want %s", ip, got, err, pod)
				}
			}
			k.run(t, "delete", "deployment", "web", "--wait")
			f.eventually(60*time.Second, "the Deployment's pods gone", func() (bool, string) {
				ctx, cancel := h.ctx()
				defer cancel()
				l, err := h.cs.CoreV1().Pods(k.namespace).List(ctx, metav1.ListOptions{})
				if err != nil {
					return false, apiProblem(err)
				}
				return len(l.Items) == 0, fmt.Sprintf("%d pods", len(l.Items))
			})
		})
	}
}

// enterContainerdTest skips t without containerd, runc or busybox, and
// otherwise runs it again in a network namespace of its own, as
// netnstest.Enter: the caller returns at once when it returns false.
func enterContainerdTest(t *testing.T) bool {
	skipShort(t)
	t.Parallel()
	for _, bin := range []string{"/usr/bin/containerd", "/usr/bin/containerd-shim-runc-v2", "/usr/sbin/runc"} {
		if _, err := os.Stat(bin); err != nil {
			if _, lerr := exec.LookPath(filepath.Base(bin)); lerr != nil {
				t.Skipf("needs %s (Debian's containerd and runc)", filepath.Base(bin))
			}
		}
	}
	if _, err := os.Stat(ociimage.BusyboxPath); err != nil {
		t.Skip(ociimage.ErrNoBusybox)
	}
	outpostBinary(t) // once, outside: the test run again inside uses it
	return netnstest.Enter(t)
}

// startContainerdNode starts node name of site on its own containerd,
// dialing h through relay (nil: directly), with the agent's extra flags,
// puts image on it with
// `outpost image import`, and returns the Node once it is Ready with a
// pod CIDR. The test's cleanup stops the agent and removes what the node
// left on the machine.
func startContainerdNode(f *fleet, h *syncHub, site, name, image string, relay *netem.Relay, extra ...string) *corev1.Node {
	f.t.Helper()
	_, n := startContainerdEdge(f, h, site, name, image, relay, extra...)
	return n
}

// startContainerdEdge is startContainerdNode that also returns the agent,
// for tests that kill and restart it or look in its data directory.
func startContainerdEdge(f *fleet, h *syncHub, site, name, image string, relay *netem.Relay, extra ...string) (*edge, *corev1.Node) {
	t := f.t
	t.Helper()
	token, caHash := h.createToken(site)
	// A short data directory: containerd's sockets live in it. Its
	// cleanup, registered first, runs once the agent stopped.
	dir, err := os.MkdirTemp("", "e2e-node")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if _, err := nodetest.Cleanup(dir, name); err != nil {
			t.Errorf("clean up the node: %v", err)
		}
	})
	hub := h.syncAddr
	if relay != nil {
		hub = relay.Addr()
	}
	e := &edge{f: f, name: name, dataDir: dir, relay: relay, args: []string{"edge", "--hub", hub, "--token", token, "--ca-cert-hash", caHash,
		"--node-name", name, "--data-dir", dir, "--runtime", "containerd", "--bridge", "br-" + name,
		// The test machine's disk may be under kubelet's disk thresholds.
		"--eviction-hard", "memory.available<100Mi"}}
	e.args = append(e.args, meshFlags(extra)...)
	t.Cleanup(e.shutdown)
	e.start()

	// The image comes from a file, as at a site without a registry.
	im, err := ociimage.Busybox(image)
	if err != nil {
		t.Fatal(err)
	}
	tarball := filepath.Join(t.TempDir(), "image.tar")
	if err := im.WriteFile(tarball, false); err != nil {
		t.Fatal(err)
	}
	f.eventually(joinTimeout, "the image imported into the node's containerd", func() (bool, string) {
		out, err := exec.Command(outpostBinary(t), "image", "import", "--data-dir", dir, tarball).CombinedOutput()
		return err == nil, fmt.Sprintf("%v: %s", err, out)
	})
	var n *corev1.Node
	f.eventually(joinTimeout, "node Ready with a pod CIDR", func() (bool, string) {
		n, err = h.node(name)
		if err != nil {
			return false, apiProblem(err)
		}
		if p := nodeProblem(n, site, runtime.GOOS, runtime.GOARCH); p != "" {
			return false, p
		}
		return n.Spec.PodCIDR != "", "no pod CIDR"
	})
	if v := n.Status.NodeInfo.ContainerRuntimeVersion; !strings.HasPrefix(v, "containerd://") {
		t.Errorf("runtime version %q, want containerd://VERSION", v)
	}
	return e, n
}

// httpGet fetches http://addr/path, with a short timeout.
func httpGet(addr, path string) (string, error) {
	c := http.Client{Timeout: 2 * time.Second}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+path, nil)
	if err != nil {
		return "", err
	}
	resp, err := c.Do(req)
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
