package e2e

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/outpost-mesh/outpost/internal/netnstest"
	"github.com/outpost-mesh/outpost/internal/nodetest"
	"github.com/outpost-mesh/outpost/internal/ociimage"
	"github.com/outpost-mesh/outpost/internal/wait"
	"github.com/outpost-mesh/outpost/netd/overlay"
	"github.com/outpost-mesh/outpost/sync/wire"
)

// The site's LAN of TestSiteOverlay: a bridge in the test's network
// namespace, holding the hub's address, and a veth to each node's
// namespace. Nothing on it routes anywhere else.
const (
	lanBridge = "site-lan"
	lanBits   = 24
)

// lanHub is the hub's address on the site's LAN; nodes have .2 and up.
var lanHub = netip.MustParseAddr("192.168.70.1")

// overlayPort is the site overlay's UDP port, VXLAN's (overlay's default).
const overlayPort = 8472

// siteReachTimeout bounds how long a pod waits to reach another node's
// pod once both run: the overlay's peers and the Service's endpoints
// travel through the hub to the node first.
const siteReachTimeout = 90 * time.Second

// TestSiteOverlay: nodes of one site, each an agent on its own
// containerd in a network namespace of its own, joined by a LAN with the
// hub on it, and a node of another site on the same LAN. Each node of
// the site has its VXLAN device with a route to the pod CIDR of each
// other node of the site, and none to the other site's node. A busybox
// client pod on node A (Services routed with eBPF where the kernel runs
// it) and one on node D (nftables) reach node B's httpd pod by its pod
// IP and through a Service's ClusterIP, across the overlay; node C's
// pod, of the other site, does not reach it. Then the hub stops and the
// site narrows routing and DNS by its mesh alone: see testSiteOffline.
func TestSiteOverlay(t *testing.T) {
	if !enterContainerdTest(t) {
		return
	}
	if _, err := exec.LookPath("nsenter"); err != nil {
		t.Skip("needs nsenter(1), from Debian's util-linux, to start each agent in its node's network namespace")
	}
	k := newKubectl(t, "1.33")

	// Names of their own: nodes' cgroups are named after them, and other
	// tests' nodes run beside these. Each bridge name, "vx-" before it,
	// fits a link name's 15 bytes.
	const site, otherSite = "store-70", "store-71"
	const image = "outpost.test/site:1"
	type siteNode struct {
		name, site string
		lan        netip.Addr
		extra      []string // more flags of the agent
		client     bool     // a client pod runs on it that must reach web
		netns      string
		edge       *edge
		node       *corev1.Node
		cidr       netip.Prefix
	}
	nodes := []*siteNode{
		{name: "e2e-site-a", site: site, lan: netip.MustParseAddr("192.168.70.2"), client: true},
		{name: "e2e-site-b", site: site, lan: netip.MustParseAddr("192.168.70.3")},
		{name: "e2e-site-c", site: otherSite, lan: netip.MustParseAddr("192.168.70.4")},
		{name: "e2e-site-d", site: site, lan: netip.MustParseAddr("192.168.70.5"), client: true,
			extra: []string{"--service-routing", "nftables"}},
	}
	a, b, c, d := nodes[0], nodes[1], nodes[2], nodes[3]

	lan := newSiteLAN(t, lanHub)
	for _, n := range nodes {
		n.netns = lan.addNode(t, "node-"+strings.TrimPrefix(n.name, "e2e-site-"), n.lan)
	}
	f := newFleet(t)
	h := startLANHub(f, lanHub)
	k.kubeconfig = filepath.Join(h.dataDir, "admin.kubeconfig")
	k.namespace = metav1.NamespaceDefault
	for _, n := range nodes {
		n.edge, n.node = startSiteNode(f, h, n.netns, n.site, n.name, image, n.extra...)
		if got := nodeInternalIP(n.node); got != n.lan.String() {
			t.Fatalf("node %s InternalIP %q, want its LAN address %s (addresses %v)", n.name, got, n.lan, n.node.Status.Addresses)
		}
		n.cidr = mustPodCIDR(t, n.node)
	}

	// Each node: its VXLAN device, up, on its LAN address, with a route
	// to each other node's pod CIDR of its site and none to another
	// site's. Node C, alone in its site, has its device and no route.
	for _, n := range nodes {
		var peers, strangers []netip.Prefix
		for _, o := range nodes {
			switch {
			case o == n:
			case o.site == n.site:
				peers = append(peers, o.cidr)
			default:
				strangers = append(strangers, o.cidr)
			}
		}
		dev := overlayDeviceName("br-" + n.name)
		f.eventually(siteReachTimeout, fmt.Sprintf("%s of %s routes %v, not %v", dev, n.name, peers, strangers), func() (bool, string) {
			p := overlayProblem(t, n.netns, dev, n.lan, peers, strangers)
			return p == "", p
		})
	}

	// The server on node B, a Service in front of it, and a client pod
	// on each of nodes A, C and D.
	ctx, cancel := h.ctx()
	defer cancel()
	// web is ready while the file ok is in its /ready, a directory of the
	// test's; web-2, on node D, serves the Service too.
	readyDir := t.TempDir()
	readyFile := filepath.Join(readyDir, "ok")
	if err := os.WriteFile(readyFile, []byte("ok\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	web := sitePod("web", b.name, image, "httpd", "-f", "-p", "8080", "-h", "/etc")
	web.Labels = map[string]string{"app": "site-web"}
	mountHostDir(web, "ready", readyDir, "/ready")
	web.Spec.Containers[0].ReadinessProbe = &corev1.Probe{
		ProbeHandler:  corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"cat", "/ready/ok"}}},
		PeriodSeconds: 1, FailureThreshold: 1, SuccessThreshold: 1, TimeoutSeconds: 1,
	}
	web2 := sitePod("web-2", d.name, image, "httpd", "-f", "-p", "8080", "-h", "/etc")
	web2.Labels = map[string]string{"app": "site-web"}
	want := map[string]*siteNode{"web": b, "web-2": d}
	create := []*corev1.Pod{web, web2}
	for _, n := range nodes {
		if n.client || n == c {
			name := "client-" + strings.TrimPrefix(n.name, "e2e-site-")
			create = append(create, sitePod(name, n.name, image, "sleep", "3600"))
			want[name] = n
		}
	}
	for _, p := range create {
		if _, err := h.cs.CoreV1().Pods(metav1.NamespaceDefault).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create pod %s: %v", p.Name, err)
		}
	}
	svc, err := h.cs.CoreV1().Services(metav1.NamespaceDefault).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "site-web"},
		Spec: corev1.ServiceSpec{
			Selector: map[string]string{"app": "site-web"},
			Ports:    []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080), Protocol: corev1.ProtocolTCP}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create service: %v", err)
	}
	clusterIP := svc.Spec.ClusterIP
	if net.ParseIP(clusterIP) == nil {
		t.Fatalf("service site-web has cluster IP %q", clusterIP)
	}
	if _, err := h.cs.CoreV1().Services(metav1.NamespaceDefault).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "site-web-h"},
		Spec: corev1.ServiceSpec{
			ClusterIP: corev1.ClusterIPNone,
			Selector:  map[string]string{"app": "site-web"},
			Ports:     []corev1.ServicePort{{Name: "http", Port: 8080, Protocol: corev1.ProtocolTCP}},
		},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create headless service: %v", err)
	}
	// watch-a, on node A, asks the Service for /hostname and the
	// headless Service's name for its addresses five times a second,
	// and writes down what it got, where the test reads it without the
	// hub.
	watchDir := t.TempDir()
	watch := sitePod("watch-a", a.name, image, "sh", "-c", fmt.Sprintf(
		`while :; do r=$(printf 'GET /hostname HTTP/1.0\r\n\r\n' | nc -w 1 %s 80 | tail -n 1); `+
			`n=$(nslookup -type=a site-web-h.default.svc.cluster.local | awk '/^Address/ && !/:53$/ {print $2}' | sort | tr '\n' ,); `+
			`echo "$r|$n" >> /out/watch; sleep 0.2; done`, clusterIP))
	mountHostDir(watch, "out", watchDir, "/out")
	if _, err := h.cs.CoreV1().Pods(metav1.NamespaceDefault).Create(ctx, watch, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create pod watch-a: %v", err)
	}
	want["watch-a"] = a

	pods := map[string]*corev1.Pod{}
	f.eventually(workloadTimeout, fmt.Sprintf("%d pods running on their nodes", len(want)), func() (bool, string) {
		for name := range want {
			p, err := h.pod(name)
			if err != nil {
				return false, apiProblem(err)
			}
			if why := runningProblem(p); why != "" {
				return false, why
			}
			pods[name] = p
		}
		return true, ""
	})
	for name, n := range want {
		p := pods[name]
		if p.Status.HostIP != n.lan.String() || !n.cidr.Contains(netip.MustParseAddr(p.Status.PodIP)) {
			t.Errorf("pod %s: hostIP %s, podIP %s; want %s and an address of %s", name, p.Status.HostIP, p.Status.PodIP, n.lan, n.cidr)
		}
	}
	webIP := pods["web"].Status.PodIP
	f.logf("web at %s on %s, service site-web at %s", webIP, b.name, clusterIP)

	// From each client node's pod: B's pod by its pod IP, and through the
	// Service, which the client's node routes itself, as it says on its
	// Node. /etc/hostname is the pod's own name.
	for _, n := range nodes {
		if !n.client {
			continue
		}
		wantMode := []string{"ebpf", "nftables"} // eBPF where this kernel runs it
		if slices.Contains(n.extra, "nftables") {
			wantMode = []string{"nftables"}
		}
		f.eventually(joinTimeout, n.name+" says how it routes Services", func() (bool, string) {
			node, err := h.node(n.name)
			if err != nil {
				return false, apiProblem(err)
			}
			m := node.Annotations[wire.AnnotationServiceRouting]
			if !slices.Contains(wantMode, m) {
				return false, fmt.Sprintf("annotation %s=%q, want one of %q", wire.AnnotationServiceRouting, m, wantMode)
			}
			f.logf("%s routes Services with %s", n.name, m)
			return true, ""
		})
		client := "client-" + strings.TrimPrefix(n.name, "e2e-site-")
		for _, target := range []string{net.JoinHostPort(webIP, "8080"), net.JoinHostPort(clusterIP, "80")} {
			f.eventually(siteReachTimeout, client+" gets web's /hostname from "+target, func() (bool, string) {
				r := podHTTPGet(t, k, client, target, "/hostname")
				return r.err == nil && httpBody(r.stdout) == "web", r.String()
			})
		}
		f.logf("%s on %s reached web on %s by pod IP and by ClusterIP", client, n.name, b.name)
	}

	// The traffic crossed the overlay: B's VXLAN device received it.
	var rx uint64
	netnstest.WithNL(t, b.netns, func(nl *netlink.Handle) {
		l, err := nl.LinkByName(overlayDeviceName("br-" + b.name))
		if err != nil {
			t.Fatalf("node B's VXLAN device: %v", err)
		}
		if s := l.Attrs().Statistics; s != nil {
			rx = s.RxPackets
		}
	})
	if rx == 0 {
		t.Errorf("node B's VXLAN device received no packet, though the clients reached web")
	}

	// From node C's pod, of the other site: web's pod IP is unreachable.
	// One attempt, with nc's connect timeout: the other clients got
	// through, so the site's routes were in place by then. kubectl exec
	// into client-c works, so the failure is nc's.
	k.run(t, "exec", "client-c", "--", "true")
	r := podHTTPGet(t, k, "client-c", net.JoinHostPort(webIP, "8080"), "/hostname")
	var ee *exec.ExitError
	switch {
	case r.err == nil || httpBody(r.stdout) != "":
		t.Errorf("client-c, on node %s of site %s, reached web on site %s's node by its pod IP\n%s", c.name, otherSite, site, r)
	case !errors.As(r.err, &ee) || strings.Contains(r.stderr, "error:"):
		t.Errorf("kubectl exec of nc in client-c failed, not nc\n%s", r)
	default:
		f.logf("client-c on %s (site %s) does not reach web: %s%s", c.name, otherSite, r.stdout, r.stderr)
	}

	testSiteOffline(t, f, h, filepath.Join(watchDir, "watch"), readyFile, d.edge, webIP, pods["web-2"].Status.PodIP)
}

// testSiteOffline: with the hub stopped, the site narrows routing and
// DNS by its mesh alone, as watch-a on node A sees it (in watchFile):
// web leaves the Service and the headless name when it stops being
// ready (its readyFile goes) and comes back when it is ready again;
// web-2 leaves them when its node's agent dies (its pod runs on) and
// comes back when the agent starts again, from its checkpoint.
func testSiteOffline(t *testing.T, f *fleet, h *syncHub, watchFile, readyFile string, nodeOfWeb2 *edge, webIP, web2IP string) {
	both, onlyWeb2, onlyWeb := watchSees{"web", "web-2"}, watchSees{"web-2"}, watchSees{"web"}
	dnsBoth := []string{webIP, web2IP}
	slices.Sort(dnsBoth)
	f.eventually(siteReachTimeout, "watch-a gets web and web-2, and both their addresses", func() (bool, string) {
		ok, why, _ := both.since(watchLines(watchFile), 0, dnsBoth)
		return ok, why
	})
	h.stop()
	f.logf("the hub is stopped: the site is on its own")

	narrowed := func(what string, want watchSees, dns []string, change func()) {
		t.Helper()
		// When each line was first seen, polled often: the first line
		// of the run that shows the change tells when it happened.
		var seen []time.Time
		from := watchLen(watchFile)
		start := time.Now()
		change()
		var run int
		wait.ForEvery(t, 50*time.Millisecond, 30*time.Second, what, func() (bool, string) {
			lines := watchLines(watchFile)
			for len(seen) < len(lines)-from {
				seen = append(seen, time.Now())
			}
			ok, why, r := want.since(lines, from, dns)
			run = r
			return ok, why
		})
		f.logf("%s: %v after the change, as watch-a saw it (a request and a lookup every 0.2 s or so)", what, seen[run-from].Sub(start).Round(10*time.Millisecond))
	}
	narrowed("web out of routing and DNS once not ready", onlyWeb2, []string{web2IP}, func() {
		if err := os.Remove(readyFile); err != nil {
			t.Fatal(err)
		}
	})
	narrowed("web back once ready", both, dnsBoth, func() {
		if err := os.WriteFile(readyFile, []byte("ok\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	})
	narrowed("web-2 out once its node's agent died", onlyWeb, []string{webIP}, nodeOfWeb2.kill)
	narrowed("web-2 back once its node's agent started again, offline", both, dnsBoth, nodeOfWeb2.start)
}

// watchSees is the set of servers that watch-a's answers must come from.
type watchSees []string

// watchRun is how many answers in a row since a change tell the new
// state: with two servers equally likely, ten in a row miss one of them
// once in 500 runs.
const watchRun = 10

// since reports whether, of lines (watch-a's) after the first from, the
// last watchRun all name a server of want and, together, all of them,
// each with the headless name's addresses dns (sorted), and where the
// run of lines that do so begins.
func (want watchSees) since(lines []string, from int, dns []string) (bool, string, int) {
	if len(lines) < from+watchRun {
		return false, fmt.Sprintf("%d lines since the change", len(lines)-from), 0
	}
	wantDNS := strings.Join(dns, ",") + ","
	fits := func(l string) bool {
		server, addrs, _ := strings.Cut(l, "|")
		return slices.Contains(want, server) && addrs == wantDNS
	}
	run := len(lines)
	for run > from && fits(lines[run-1]) {
		run--
	}
	last := lines[len(lines)-watchRun:]
	if len(lines)-run < watchRun {
		return false, fmt.Sprintf("last lines %q, want answers from %v and addresses %s", last, want, wantDNS), run
	}
	seen := map[string]bool{}
	for _, l := range lines[run:] {
		server, _, _ := strings.Cut(l, "|")
		seen[server] = true
	}
	if len(seen) != len(want) {
		return false, fmt.Sprintf("last lines %q, want answers from each of %v", last, want), run
	}
	return true, "", run
}

// watchLines returns the complete lines of watch-a's file.
func watchLines(file string) []string {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil
	}
	lines := strings.Split(string(b), "\n")
	return lines[:len(lines)-1] // the last is incomplete, or empty
}

func watchLen(file string) int { return len(watchLines(file)) }

// mountHostDir mounts the host's directory dir at path in pod's container,
// as the volume name.
func mountHostDir(pod *corev1.Pod, name, dir, path string) {
	typ := corev1.HostPathDirectory
	pod.Spec.Volumes = append(pod.Spec.Volumes, corev1.Volume{Name: name,
		VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: dir, Type: &typ}}})
	c := &pod.Spec.Containers[0]
	c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: name, MountPath: path})
}

// siteLAN is the site's LAN bridge in the test's network namespace.
type siteLAN struct {
	br netlink.Link
}

// newSiteLAN makes the LAN bridge with address addr/lanBits, up; the
// test's cleanup removes it.
func newSiteLAN(t *testing.T, addr netip.Addr) *siteLAN {
	t.Helper()
	br := &netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: lanBridge}}
	if err := netlink.LinkAdd(br); err != nil {
		t.Fatalf("add LAN bridge: %v", err)
	}
	t.Cleanup(func() {
		if err := netlink.LinkDel(br); err != nil {
			t.Errorf("delete LAN bridge: %v", err)
		}
	})
	l, err := netlink.LinkByName(lanBridge)
	if err != nil {
		t.Fatal(err)
	}
	if err := netlink.AddrAdd(l, &netlink.Addr{IPNet: ipNet(addr, lanBits)}); err != nil {
		t.Fatalf("LAN bridge address: %v", err)
	}
	if err := netlink.LinkSetUp(l); err != nil {
		t.Fatal(err)
	}
	return &siteLAN{br: l}
}

// addNode makes the network namespace of a node, named name, with a veth
// "eth0" on the LAN at addr/lanBits and no other route, and returns its
// path. The test's cleanup removes it (the namespace after the node,
// which the caller registers later).
func (lan *siteLAN) addNode(t *testing.T, name string, addr netip.Addr) string {
	t.Helper()
	path := netnstest.NewNS(t, name)
	ns, err := netns.GetFromPath(path)
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	host := "lan-" + strings.TrimPrefix(name, "node-")
	v := &netlink.Veth{
		LinkAttrs: netlink.LinkAttrs{Name: host, MasterIndex: lan.br.Attrs().Index},
		PeerName:  "eth0", PeerNamespace: netlink.NsFd(int(ns)),
	}
	if err := netlink.LinkAdd(v); err != nil {
		t.Fatalf("add veth of %s: %v", name, err)
	}
	t.Cleanup(func() {
		// Gone already once the node's namespace is: a veth goes with
		// its peer.
		if l, err := netlink.LinkByName(host); err == nil {
			if err := netlink.LinkDel(l); err != nil {
				t.Errorf("delete veth %s: %v", host, err)
			}
		}
	})
	l, err := netlink.LinkByName(host)
	if err != nil {
		t.Fatal(err)
	}
	if err := netlink.LinkSetUp(l); err != nil {
		t.Fatal(err)
	}
	netnstest.WithNL(t, path, func(nl *netlink.Handle) {
		eth, err := nl.LinkByName("eth0")
		if err == nil {
			err = nl.AddrAdd(eth, &netlink.Addr{IPNet: ipNet(addr, lanBits)})
		}
		if err == nil {
			err = nl.LinkSetUp(eth)
		}
		if err != nil {
			t.Fatalf("LAN link of %s: %v", name, err)
		}
	})
	return path
}

func ipNet(a netip.Addr, bits int) *net.IPNet {
	return &net.IPNet{IP: a.AsSlice(), Mask: net.CIDRMask(bits, a.BitLen())}
}

// startLANHub starts a hub whose API and sync endpoint listen on addr,
// its LAN address, where the nodes reach it; the API's certificate names
// the address.
func startLANHub(f *fleet, addr netip.Addr) *syncHub {
	f.t.Helper()
	_, port, err := net.SplitHostPort(freeSyncAddr(f.t))
	if err != nil {
		f.t.Fatal(err)
	}
	h := &syncHub{
		f: f, dataDir: filepath.Join(f.t.TempDir(), "hub"),
		syncAddr: net.JoinHostPort(addr.String(), port),
		// After start's --api-addr, which it overrides.
		extra: []string{"--api-addr", net.JoinHostPort(addr.String(), "0")},
	}
	f.t.Cleanup(h.shutdown)
	h.start()
	return h
}

// startSiteNode is startContainerdNode for a node in the network
// namespace at netnsPath: its agent, and so its containerd and their
// shims, runs there, started through nsenter(1); its --site is site.
func startSiteNode(f *fleet, h *syncHub, netnsPath, site, name, image string, extra ...string) (*edge, *corev1.Node) {
	t := f.t
	t.Helper()
	token, caHash := h.createToken(site)
	dir, err := os.MkdirTemp("", "e2e-node")
	if err != nil {
		t.Fatal(err)
	}
	// Registered after the namespace's removal, so run before it: the
	// node's shims, which hold the namespace, are gone first.
	t.Cleanup(func() {
		if _, err := nodetest.Cleanup(dir, name); err != nil {
			t.Errorf("clean up node %s: %v", name, err)
		}
	})
	e := &edge{f: f, name: name, dataDir: dir, netns: netnsPath, args: []string{"edge", "--hub", h.syncAddr, "--token", token, "--ca-cert-hash", caHash,
		"--node-name", name, "--site", site, "--data-dir", dir, "--runtime", "containerd", "--bridge", "br-" + name,
		"--eviction-hard", "memory.available<100Mi"}}
	e.args = append(e.args, extra...)
	t.Cleanup(e.shutdown)
	e.start()

	im, err := ociimage.Busybox(image)
	if err != nil {
		t.Fatal(err)
	}
	tarball := filepath.Join(t.TempDir(), "image.tar")
	if err := im.WriteFile(tarball, false); err != nil {
		t.Fatal(err)
	}
	f.eventually(joinTimeout, "the image imported into "+name+"'s containerd", func() (bool, string) {
		if !e.proc.running() {
			t.Fatalf("%s exited: %v\n%s", name, e.proc.waitErr, e.proc.describe())
		}
		out, err := exec.Command(outpostBinary(t), "image", "import", "--data-dir", dir, tarball).CombinedOutput()
		return err == nil, fmt.Sprintf("%v: %s", err, out)
	})
	var n *corev1.Node
	f.eventually(joinTimeout, name+" Ready with a pod CIDR", func() (bool, string) {
		n, err = h.node(name)
		if err != nil {
			return false, apiProblem(err)
		}
		if p := nodeProblem(n, site, runtime.GOOS, runtime.GOARCH); p != "" {
			return false, p
		}
		return n.Spec.PodCIDR != "", "no pod CIDR"
	})
	return e, n
}

// sitePod returns a busybox pod bound to node, running cmd in container
// "main", stopped at once when deleted.
func sitePod(name, node, image string, cmd ...string) *corev1.Pod {
	p := newPod(name, node, image)
	p.Spec.TerminationGracePeriodSeconds = new(int64)
	p.Spec.Containers[0].Command = cmd
	p.Spec.Containers[0].ImagePullPolicy = corev1.PullNever
	return p
}

// podHTTPGet asks, from pod's container with busybox nc, GET path of the
// HTTP server at addr (host:port).
func podHTTPGet(t *testing.T, k *kubectl, pod, addr, path string) result {
	t.Helper()
	host, port, _ := net.SplitHostPort(addr)
	script := fmt.Sprintf(`printf 'GET %s HTTP/1.0\r\n\r\n' | nc -w 3 %s %s`, path, host, port)
	return k.exec(t, "exec", pod, "--", "sh", "-c", script)
}

// httpBody returns the body of an HTTP response, trimmed; "" without
// one.
func httpBody(resp string) string {
	if !strings.HasPrefix(resp, "HTTP/1.") || !strings.Contains(resp, " 200 ") {
		return ""
	}
	_, body, ok := strings.Cut(resp, "\r\n\r\n")
	if !ok {
		return ""
	}
	return strings.TrimSpace(body)
}

// overlayDeviceName is the VXLAN device of the agent whose pods' bridge
// is bridge: "vx-" and the bridge's name, cut to a link name's 15 bytes.
func overlayDeviceName(bridge string) string {
	name := "vx-" + bridge
	if len(name) > 15 {
		name = name[:15]
	}
	return name
}

// overlayProblem returns what keeps the VXLAN device dev in the namespace
// at ns from being the site overlay of a node at self routing exactly to
// peers' pod CIDRs and to none of strangers', or "".
func overlayProblem(t *testing.T, ns, dev string, self netip.Addr, peers, strangers []netip.Prefix) string {
	t.Helper()
	var problem string
	netnstest.WithNL(t, ns, func(nl *netlink.Handle) {
		l, err := nl.LinkByName(dev)
		if err != nil {
			problem = fmt.Sprintf("no device %s: %v", dev, err)
			return
		}
		vx, ok := l.(*netlink.Vxlan)
		switch {
		case !ok:
			problem = fmt.Sprintf("%s is a %s, not a vxlan device", dev, l.Type())
			return
		case vx.Port != overlayPort || !net.IP(self.AsSlice()).Equal(vx.SrcAddr):
			problem = fmt.Sprintf("%s: port %d, local %v; want %d and %s", dev, vx.Port, vx.SrcAddr, overlayPort, self)
			return
		case l.Attrs().Flags&net.FlagUp == 0:
			problem = dev + " is down"
			return
		}
		routes, err := nl.RouteList(l, netlink.FAMILY_V4)
		if err != nil {
			problem = fmt.Sprintf("routes of %s: %v", dev, err)
			return
		}
		routed := map[netip.Prefix]bool{}
		for _, r := range routes {
			if r.Protocol != overlay.RouteProtocol || r.Dst == nil {
				continue
			}
			a, _ := netip.AddrFromSlice(r.Dst.IP.To4())
			bits, _ := r.Dst.Mask.Size()
			routed[netip.PrefixFrom(a, bits)] = true
		}
		for _, p := range peers {
			if !routed[p] {
				problem = fmt.Sprintf("%s: no route to %s (overlay routes %v)", dev, p, routed)
				return
			}
		}
		for _, p := range strangers {
			if routed[p] {
				problem = fmt.Sprintf("%s: a route to %s, of another site's node", dev, p)
				return
			}
		}
		if len(routed) != len(peers) {
			problem = fmt.Sprintf("%s routes %v, want %v", dev, routed, peers)
		}
	})
	return problem
}

// nodeInternalIP returns n's InternalIP, "" without one.
func nodeInternalIP(n *corev1.Node) string {
	for _, a := range n.Status.Addresses {
		if a.Type == corev1.NodeInternalIP {
			return a.Address
		}
	}
	return ""
}

func mustPodCIDR(t *testing.T, n *corev1.Node) netip.Prefix {
	t.Helper()
	p, err := netip.ParsePrefix(n.Spec.PodCIDR)
	if err != nil || !p.Addr().Is4() {
		t.Fatalf("node %s pod CIDR %q: %v", n.Name, n.Spec.PodCIDR, errors.Join(err, errors.New("want IPv4")))
	}
	return p
}
