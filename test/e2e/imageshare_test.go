package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/outpost-mesh/outpost/internal/nodetest"
	"github.com/outpost-mesh/outpost/internal/ociimage"
	"github.com/outpost-mesh/outpost/sync/wire"
)

// TestImageShare: three nodes of one site, each an agent on its own
// containerd in its own network namespace on the site's LAN, start a pod
// each of a daemon set (one replica a node) of an image that only a registry beyond their uplinks holds (a
// docker-registry on loopback, reached through a proxy on the hub's LAN
// address that counts what it serves). The registry serves the image's
// blobs once: the nodes take them from each other over the LAN. Then
// node A's copy of the layer is corrupted on disk and a fourth node
// joins the site, where the daemon set starts a pod of the image: it skips A, whose bytes are bad, and takes
// the layer from another peer; the registry serves no blob again.
func TestImageShare(t *testing.T) {
	if !enterContainerdTest(t) {
		return
	}
	if _, err := exec.LookPath("nsenter"); err != nil {
		t.Skip("needs nsenter(1), from Debian's util-linux, to start each agent in its node's network namespace")
	}
	reg, err := ociimage.StartRegistry(context.Background(), t.TempDir(), "", "")
	if err == ociimage.ErrNoRegistry {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Close()
	im, err := ociimage.Busybox("share/busybox:1")
	if err != nil {
		t.Fatal(err)
	}
	if err := im.Push(context.Background(), ociimage.PushOptions{Registry: reg.URL(), Repository: "share/busybox", Tag: "1"}); err != nil {
		t.Fatal(err)
	}
	blobs, blobBytes := imageBlobs(t, reg.URL(), "share/busybox", "1")

	const site = "store-72"
	lan := newSiteLAN(t, lanHub)
	proxy := startCountingProxy(t, lanHub, reg.URL())
	image := proxy.addr + "/share/busybox:1"
	f := newFleet(t)
	h := startLANHub(f, lanHub)
	type shareNode struct {
		name  string
		lan   netip.Addr
		dir   string
		netns string
		e     *edge
	}
	nodes := []*shareNode{
		{name: "e2e-share-a", lan: netip.MustParseAddr("192.168.70.2")},
		{name: "e2e-share-b", lan: netip.MustParseAddr("192.168.70.3")},
		{name: "e2e-share-c", lan: netip.MustParseAddr("192.168.70.4")},
		{name: "e2e-share-d", lan: netip.MustParseAddr("192.168.70.5")},
	}
	for _, n := range nodes {
		n.netns = lan.addNode(t, "node-"+strings.TrimPrefix(n.name, "e2e-share-"), n.lan)
	}
	ctx, cancel := h.ctx()
	defer cancel()
	// startNodes starts ns and waits until every node started holds the
	// others alive in the site's mesh, where each says the port it
	// serves its images on.
	startNodes := func(ns []*shareNode) {
		for _, n := range ns {
			n.e, n.dir = startShareNode(f, h, n.netns, site, n.name, "--insecure-registry", proxy.addr)
		}
		var started []*edge
		for _, n := range nodes {
			if n.e != nil {
				started = append(started, n.e)
			}
		}
		waitSiteSharing(f, h, started)
	}
	// runningOn waits until the daemon set's pod runs on each node of ns.
	runningOn := func(ns []*shareNode) {
		f.eventually(workloadTimeout, fmt.Sprintf("a pod of the daemon set running on each of %d nodes", len(ns)), func() (bool, string) {
			pods, err := h.pods()
			if err != nil {
				return false, apiProblem(err)
			}
			on := map[string]bool{}
			for _, p := range running(pods, "app=share") {
				on[p.Spec.NodeName] = true
			}
			for _, n := range ns {
				if !on[n.name] {
					return false, fmt.Sprintf("running on %v, not on %s", on, n.name)
				}
			}
			return true, ""
		})
	}

	startNodes(nodes[:3])
	labels := map[string]string{"app": "share"}
	ds := &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: "share", Namespace: metav1.NamespaceDefault},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					NodeSelector:                  map[string]string{wire.SiteLabel: site},
					TerminationGracePeriodSeconds: new(int64),
					Containers: []corev1.Container{{Name: "main", Image: image, ImagePullPolicy: corev1.PullIfNotPresent,
						Command: []string{"sleep", "3600"}}},
				},
			},
		},
	}
	if _, err := h.cs.AppsV1().DaemonSets(metav1.NamespaceDefault).Create(ctx, ds, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	runningOn(nodes[:3])
	got, manifests := proxy.blobs.Load(), proxy.manifests.Load()
	f.logf("registry served %d bytes of blobs (the image's %d blobs are %d bytes) and %d bytes of manifests to 3 nodes", got, len(blobs), blobBytes, manifests)
	if got != blobBytes {
		t.Errorf("registry served %d bytes of blobs to 3 nodes, want one image's %d", got, blobBytes)
		for _, n := range nodes[:3] {
			for _, l := range n.e.logLines("image share") {
				f.logf("%s: %s", n.name, l)
			}
		}
	}

	// Node A's copy of the layer goes bad on disk; node D pulls the
	// image from its peers and skips A.
	layer := blobs[len(blobs)-1]
	file := filepath.Join(nodes[0].dir, "containerd", "root", "io.containerd.content.v1.content", "blobs", "sha256", strings.TrimPrefix(layer, "sha256:"))
	if err := corruptFile(file); err != nil {
		t.Fatalf("corrupt node A's layer: %v", err)
	}
	startNodes(nodes[3:])
	runningOn(nodes)
	if got2 := proxy.blobs.Load(); got2 != got {
		t.Errorf("registry served %d more bytes of blobs to node D, want none: its peers hold the image", got2-got)
	}
	if l := nodes[3].e.logLines("served bad bytes"); len(l) == 0 || !strings.Contains(l[0], nodes[0].name) {
		t.Errorf("node D did not say it skipped %s for bad bytes: %q", nodes[0].name, l)
	} else {
		f.logf("node D: %s", l[0])
	}
}

// waitSiteSharing waits until each node of es serves its images (and
// over-the-air artifacts) to its site and holds the others alive in the
// site's mesh, where each says the port it serves on.
func waitSiteSharing(f *fleet, h *syncHub, es []*edge) {
	f.t.Helper()
	for _, e := range es {
		f.eventually(joinTimeout, e.name+" serves its images and holds its site peers alive", func() (bool, string) {
			if len(e.logLines("serving images to the site's peers")) == 0 {
				return false, "not serving its images"
			}
			node, err := h.node(e.name)
			if err != nil {
				return false, apiProblem(err)
			}
			alive := node.Annotations[wire.AnnotationMeshAlive]
			for _, o := range es {
				if o != e && !strings.Contains(alive, o.name) {
					return false, fmt.Sprintf("alive %q, not %s", alive, o.name)
				}
			}
			return true, ""
		})
	}
}

// imageBlobs returns the digests of the blobs (config, then layers) of
// the image repo:tag at registry, and their bytes.
func imageBlobs(t *testing.T, registry, repo, tag string) ([]string, int64) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, registry+"/v2/"+repo+"/manifests/"+tag, nil)
	req.Header.Set("Accept", "application/vnd.oci.image.manifest.v1+json, application/vnd.docker.distribution.manifest.v2+json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var m struct {
		Config struct {
			Digest string
			Size   int64
		}
		Layers []struct {
			Digest string
			Size   int64
		}
	}
	if err := json.NewDecoder(resp.Body).Decode(&m); err != nil {
		t.Fatalf("manifest of %s:%s: %v", repo, tag, err)
	}
	out, size := []string{m.Config.Digest}, m.Config.Size
	for _, l := range m.Layers {
		out = append(out, l.Digest)
		size += l.Size
	}
	return out, size
}

// countingProxy is a reverse proxy in front of a registry that counts the
// bytes of blobs and manifests it serves.
type countingProxy struct {
	addr             string
	blobs, manifests atomic.Int64
}

// startCountingProxy serves registry's API on addr (a free port), until
// the test ends.
func startCountingProxy(t *testing.T, addr netip.Addr, registry string) *countingProxy {
	t.Helper()
	u, err := url.Parse(registry)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(addr.String(), "0"))
	if err != nil {
		t.Fatal(err)
	}
	p := &countingProxy{addr: ln.Addr().String()}
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.ModifyResponse = func(resp *http.Response) error {
		if resp.Request.Method != http.MethodGet || resp.StatusCode != http.StatusOK {
			return nil
		}
		switch {
		case strings.Contains(resp.Request.URL.Path, "/blobs/"):
			resp.Body = &countingBody{ReadCloser: resp.Body, n: &p.blobs}
		case strings.Contains(resp.Request.URL.Path, "/manifests/"):
			resp.Body = &countingBody{ReadCloser: resp.Body, n: &p.manifests}
		}
		return nil
	}
	srv := &http.Server{Handler: rp}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return p
}

// countingBody adds the bytes read through it to n.
type countingBody struct {
	io.ReadCloser
	n *atomic.Int64
}

func (b *countingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.n.Add(int64(n))
	return n, err
}

// corruptFile changes the first byte of file, keeping its size.
func corruptFile(file string) error {
	f, err := os.OpenFile(file, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	b := make([]byte, 1)
	if _, err := f.ReadAt(b, 0); err != nil {
		return err
	}
	b[0] ^= 0xff
	_, err = f.WriteAt(b, 0)
	return err
}

// startShareNode is startSiteNode without the image imported: the node
// has no image but what it pulls. It returns the agent and its data
// directory.
func startShareNode(f *fleet, h *syncHub, netnsPath, site, name string, extra ...string) (*edge, string) {
	t := f.t
	t.Helper()
	token, caHash := h.createToken(site)
	dir, err := os.MkdirTemp("", "e2e-node")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if _, err := nodetest.Cleanup(dir, name); err != nil {
			t.Errorf("clean up node %s: %v", name, err)
		}
	})
	e := &edge{f: f, name: name, dataDir: dir, args: []string{"edge", "--hub", h.syncAddr, "--token", token, "--ca-cert-hash", caHash,
		"--node-name", name, "--site", site, "--data-dir", dir, "--runtime", "containerd", "--bridge", "br-" + name,
		"--eviction-hard", "memory.available<100Mi", "--log-level", "debug"}}
	e.args = append(e.args, extra...)
	t.Cleanup(e.shutdown)
	bin, args := outpostBinary(t), e.args
	if f.edgeBin != "" {
		bin, args = f.edgeBin, args[1:] // without "edge"
	}
	args = append([]string{"--net=" + netnsPath, "--", bin}, args...)
	e.starts++
	e.proc = startProc(t, exec.Command("nsenter", args...))
	f.track(fmt.Sprintf("%s#%d", name, e.starts), e.proc)
	f.logf("%s#%d started in %s, dialing the hub at %s", name, e.starts, netnsPath, h.syncAddr)
	var n *corev1.Node
	f.eventually(joinTimeout, name+" Ready with a pod CIDR", func() (bool, string) {
		if !e.proc.running() {
			t.Fatalf("%s exited: %v\n%s", name, e.proc.waitErr, e.proc.describe())
		}
		n, err = h.node(name)
		if err != nil {
			return false, apiProblem(err)
		}
		if p := nodeProblem(n, site, runtime.GOOS, runtime.GOARCH); p != "" {
			return false, p
		}
		return n.Spec.PodCIDR != "", "no pod CIDR"
	})
	return e, dir
}
