package e2e

import (
	"bufio"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/outpost-mesh/outpost/edge/agent"
	"github.com/outpost-mesh/outpost/internal/wait"
	"github.com/outpost-mesh/outpost/sync/wire"
)

// The services tests reach the client pod through kubectl exec where the
// hub and the agent stay up. Where they restart or stop, or where timing
// matters, requests come from the client pod's network namespace itself,
// entered from the test (requestsIn, nsLookup): kubectl exec rides the
// agent's connection to the hub, and each exec takes the best part of a
// second.

// The service routing modes the tests run in: the agent's default, eBPF
// socket load-balancing, and nftables alone. Each runs on a node of its
// own, the node's cgroups being named after it.
var routingModes = []struct{ mode, short string }{
	{"ebpf", "ebpf"},
	{"nftables", "nft"},
}

// TestServicesRouting: Services of a Deployment of two pods on a real
// containerd node, in each routing mode. From a client pod, through
// kubectl exec, the ClusterIP reaches both pods, the NodePort answers at
// the node's address, and the node's DNS server, reached at the kube-dns
// ClusterIP over UDP, resolves the Service's name to its ClusterIP and the
// headless Service's to the pods. A process on the node's LAN reaches the
// NodePort. A pod deleted leaves routing within seconds while a
// connection it had open finishes.
func TestServicesRouting(t *testing.T) {
	skipShort(t)
	t.Parallel()
	for _, m := range routingModes {
		t.Run(m.mode, func(t *testing.T) {
			if !enterContainerdTest(t) {
				return
			}
			s := startServicesNode(t, m.mode, "svcr-"+m.short)
			if !t.Run("cluster-ip-nodeport-dns", s.testFromClientPod) {
				return
			}
			t.Run("nodeport-from-lan", s.testNodePortFromLAN)
			t.Run("backend-deleted", s.testBackendDeleted)
		})
	}
}

// TestServicesNodeAlone: the node routes Services on its own. The agent
// killed and started again keeps an established connection through the
// ClusterIP and never fails a new one; with the hub stopped, names still
// resolve and the ClusterIP still routes, and a backend whose container
// is killed on the node leaves routing within 2s.
func TestServicesNodeAlone(t *testing.T) {
	skipShort(t)
	t.Parallel()
	for _, m := range routingModes {
		t.Run(m.mode, func(t *testing.T) {
			if !enterContainerdTest(t) {
				return
			}
			s := startServicesNode(t, m.mode, "svch-"+m.short)
			if !t.Run("agent-restart", s.testAgentRestart) {
				return
			}
			t.Run("hub-stopped", s.testHubStopped)
		})
	}
}

const (
	svcNamespace = "demo"
	svcImage     = "outpost.test/busybox:svc"
	// The node's end of the LAN and the LAN client's address.
	lanNodeAddr   = "192.168.60.1/24"
	lanClientAddr = "192.168.60.2/24"
	// backendGrace is the backends' termination grace period: their
	// httpd, PID 1 without a SIGTERM handler, serves until it ends, so a
	// deleted backend's open connections keep working for that long.
	backendGrace = 90
)

// backendScript runs in each backend: an id of the container, its pod's
// name and a random uuid, served by httpd at /id on 8080; and on 9000 an
// echo server that first sends the id.
const backendScript = `mkdir -p /tmp/www
echo "$(cat /etc/hostname) $(cat /proc/sys/kernel/random/uuid)" > /tmp/www/id
nc -ll -p 9000 -e sh -c 'cat /tmp/www/id; exec cat' &
exec httpd -f -p 8080 -h /tmp/www`

// svcNode is a hub, a containerd node routing Services in one mode, a
// Deployment "web" of two backends behind Services, and a client pod.
type svcNode struct {
	t    *testing.T
	f    *fleet
	h    *syncHub
	e    *edge
	k    *kubectl
	mode string
	name string

	nodeIP    string
	dnsIP     string // the kube-dns ClusterIP
	clusterIP string // web's
	nodePort  int    // web-np's
	lan       netns.NsHandle
	client    *corev1.Pod
	clientNS  netns.NsHandle // the client pod's network namespace
	pins      *bpfPins
}

// startServicesNode makes the LAN, starts the hub and the node (routing
// in mode), and the workload, and returns once the backends and the client
// run.
func startServicesNode(t *testing.T, mode, name string) *svcNode {
	s := &svcNode{t: t, mode: mode, name: name, pins: &bpfPins{}}
	// Registered before the node's cleanup, so it runs after it: the
	// node removed, nothing it pinned may be left in the kernel.
	t.Cleanup(func() { s.pins.checkGone(t) })
	s.lan = newLAN(t)
	s.f = newFleet(t)
	s.h = s.f.startHub()
	var node *corev1.Node
	s.e, node = startContainerdEdge(s.f, s.h, "store-svc", name, svcImage, nil, "--service-routing", mode)
	for _, a := range node.Status.Addresses {
		if a.Type == corev1.NodeInternalIP {
			s.nodeIP = a.Address
		}
	}
	if want, _, _ := strings.Cut(lanNodeAddr, "/"); s.nodeIP != want {
		t.Fatalf("node InternalIP %q, want %s, its LAN address", s.nodeIP, want)
	}
	s.f.eventually(joinTimeout, "the Node annotated "+wire.AnnotationServiceRouting+"="+mode, func() (bool, string) {
		n, err := s.h.node(name)
		if err != nil {
			return false, apiProblem(err)
		}
		return n.Annotations[wire.AnnotationServiceRouting] == mode, fmt.Sprintf("annotations %v", n.Annotations)
	})
	// Routing is in place once the node says how it routes: what it
	// pinned is its eBPF dataplane's, and only eBPF mode pins anything.
	s.pins.read(t, s.pinDir())
	if got := len(s.pins.links); (mode == "ebpf") != (got > 0) {
		t.Errorf("%d eBPF links pinned under %s in %s mode", got, s.pinDir(), mode)
	}
	// Beside the socket hooks, tc programs translate NodePorts reached
	// from outside, on the LAN interface: in and out.
	tc := &bpfPins{}
	tc.read(t, s.pinDir()+"-tc")
	if got := len(tc.links); mode == "ebpf" && got != 2 || mode != "ebpf" && got != 0 {
		t.Errorf("%d tc links pinned under %s-tc in %s mode", got, s.pinDir(), mode)
	}
	s.pins.add(tc)
	slices.Sort(s.pins.links)
	s.f.logf("pinned under %s: links %v, programs %v, maps %v", s.pinDir(), s.pins.links, s.pins.progs, s.pins.maps)
	s.k = newKubectl(t, "1.33")
	s.k.kubeconfig = filepath.Join(s.h.dataDir, "admin.kubeconfig")
	s.k.namespace = svcNamespace
	s.createWorkload()
	return s
}

// pinDir is where the agent pins its eBPF dataplane.
func (s *svcNode) pinDir() string {
	return filepath.Join(s.e.dataDir, agent.BPFDir, "outpost-"+s.name)
}

// createWorkload creates the namespace, the Deployment, its Services and
// the client pod, and waits until the pods run and the Services have
// their addresses.
func (s *svcNode) createWorkload() {
	t, h := s.t, s.h
	ctx, cancel := h.ctx()
	defer cancel()
	if _, err := h.cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: svcNamespace}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	labels := map[string]string{"app": "web"}
	grace := int64(backendGrace)
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: appsv1.DeploymentSpec{
			Replicas: new(int32(2)),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					TerminationGracePeriodSeconds: &grace,
					Containers: []corev1.Container{{
						Name: "main", Image: svcImage, ImagePullPolicy: corev1.PullNever,
						Command: []string{"sh", "-c", backendScript},
						// Ready once httpd listens: a restarted container
						// gets traffic only then.
						ReadinessProbe: &corev1.Probe{
							ProbeHandler:  corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(8080)}},
							PeriodSeconds: 1,
						},
					}},
				},
			},
		},
	}
	if _, err := h.cs.AppsV1().Deployments(svcNamespace).Create(ctx, d, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	svc := func(name string, typ corev1.ServiceType, ports ...corev1.ServicePort) *corev1.Service {
		return &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec:       corev1.ServiceSpec{Type: typ, Selector: labels, Ports: ports},
		}
	}
	port := func(name string, port, target int32) corev1.ServicePort {
		return corev1.ServicePort{Name: name, Protocol: corev1.ProtocolTCP, Port: port, TargetPort: intstr.FromInt32(target)}
	}
	headless := svc("web-headless", corev1.ServiceTypeClusterIP, port("http", 8080, 8080))
	headless.Spec.ClusterIP = corev1.ClusterIPNone
	for _, sv := range []*corev1.Service{
		svc("web", corev1.ServiceTypeClusterIP, port("http", 80, 8080), port("echo", 9000, 9000)),
		svc("web-np", corev1.ServiceTypeNodePort, port("http", 80, 8080)),
		headless,
	} {
		out, err := h.cs.CoreV1().Services(svcNamespace).Create(ctx, sv, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("create service %s: %v", sv.Name, err)
		}
		switch out.Name {
		case "web":
			s.clusterIP = out.Spec.ClusterIP
		case "web-np":
			s.nodePort = int(out.Spec.Ports[0].NodePort)
		}
	}
	if net.ParseIP(s.clusterIP) == nil || s.nodePort == 0 {
		t.Fatalf("service web at %q, web-np on node port %d", s.clusterIP, s.nodePort)
	}
	dns, err := h.cs.CoreV1().Services("kube-system").Get(ctx, "kube-dns", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the cluster DNS Service: %v", err)
	}
	s.dnsIP = dns.Spec.ClusterIP

	client := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "client"},
		Spec: corev1.PodSpec{
			NodeName: s.name, TerminationGracePeriodSeconds: new(int64),
			Containers: []corev1.Container{{Name: "main", Image: svcImage, ImagePullPolicy: corev1.PullNever, Command: []string{"sleep", "1000000"}}},
		},
	}
	if _, err := h.cs.CoreV1().Pods(svcNamespace).Create(ctx, client, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	s.f.eventually(workloadTimeout, "the backends and the client running and ready", func() (bool, string) {
		pods, err := s.pods()
		if err != nil {
			return false, apiProblem(err)
		}
		if len(pods) != 3 {
			return false, fmt.Sprintf("%d pods", len(pods))
		}
		for _, p := range pods {
			if p := runningProblem(p); p != "" {
				return false, p
			}
		}
		s.client = pods["client"]
		return true, ""
	})
	path := filepath.Join(s.e.dataDir, agent.NetNSDir, string(s.client.UID))
	s.clientNS, err = netns.GetFromPath(path)
	if err != nil {
		t.Fatalf("the client pod's network namespace: %v", err)
	}
	t.Cleanup(func() { s.clientNS.Close() })
}

// pods returns the namespace's pods that are not being deleted, by name.
func (s *svcNode) pods() (map[string]*corev1.Pod, error) {
	ctx, cancel := s.h.ctx()
	defer cancel()
	l, err := s.h.cs.CoreV1().Pods(svcNamespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	out := map[string]*corev1.Pod{}
	for i := range l.Items {
		if l.Items[i].DeletionTimestamp == nil {
			out[l.Items[i].Name] = &l.Items[i]
		}
	}
	return out, nil
}

// backends returns the backends running and ready, pod name to IP.
func (s *svcNode) backends() (map[string]string, error) {
	pods, err := s.pods()
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for name, p := range pods {
		if p.Labels["app"] == "web" && runningProblem(p) == "" {
			out[name] = p.Status.PodIP
		}
	}
	return out, nil
}

// testFromClientPod: the ClusterIP, the NodePort and the cluster DNS from
// the client pod, through kubectl exec.
func (s *svcNode) testFromClientPod(t *testing.T) {
	backends, err := s.backends()
	if err != nil || len(backends) != 2 {
		t.Fatalf("backends %v, %v; want 2", backends, err)
	}
	r := s.k.run(t, "exec", "client", "--", "cat", "/etc/resolv.conf")
	wantMatch(t, r, r.stdout, `(?m)^nameserver `+strings.ReplaceAll(s.dnsIP, ".", `\.`)+`$`)

	clusterAddr := net.JoinHostPort(s.clusterIP, "80")
	s.f.eventually(time.Minute, "requests to the ClusterIP from the client pod reach both backends", func() (bool, string) {
		got, out := s.podRequests(t, clusterAddr, 10)
		if got.all(10) && got.reached(backends) {
			s.f.logf("from the client pod to %s: %s", clusterAddr, got)
			return true, ""
		}
		return false, out
	})
	nodeAddr := net.JoinHostPort(s.nodeIP, strconv.Itoa(s.nodePort))
	s.f.eventually(30*time.Second, "requests to NODEIP:NODEPORT from the client pod answered by the backends", func() (bool, string) {
		got, out := s.podRequests(t, nodeAddr, 6)
		if got.all(6) && got.onlyFrom(backends) {
			s.f.logf("from the client pod to %s: %s", nodeAddr, got)
			return true, ""
		}
		return false, out
	})

	// Names, through the kube-dns ClusterIP, over UDP.
	name := "web." + svcNamespace + ".svc.cluster.local"
	s.f.eventually(30*time.Second, "nslookup "+name+" through "+s.dnsIP, func() (bool, string) {
		addrs, out := s.podLookup(t, name)
		return slices.Equal(addrs, []string{s.clusterIP}), out
	})
	headless := "web-headless." + svcNamespace + ".svc.cluster.local"
	var want []string
	for _, ip := range backends {
		want = append(want, ip)
	}
	slices.Sort(want)
	var addrs []string
	s.f.eventually(30*time.Second, "nslookup "+headless+" answers the backends' IPs", func() (bool, string) {
		var out string
		addrs, out = s.podLookup(t, headless)
		return slices.Equal(addrs, want), out
	})
	s.f.logf("from the client pod, %s is %s and %s is %v", name, s.clusterIP, headless, addrs)
	for _, a := range addrs {
		got, out := s.podRequests(t, net.JoinHostPort(a, "8080"), 1)
		if !got.all(1) || got.from[podAt(backends, a)] != 1 {
			t.Errorf("request to %s, an address of %s, not answered by the pod there:\n%s", a, headless, out)
		}
	}
}

// testNodePortFromLAN: the NodePort at the node's LAN address, from a
// process in another network namespace on that LAN.
func (s *svcNode) testNodePortFromLAN(t *testing.T) {
	backends, err := s.backends()
	if err != nil {
		t.Fatal(err)
	}
	addr := net.JoinHostPort(s.nodeIP, strconv.Itoa(s.nodePort))
	s.f.eventually(30*time.Second, "requests to NODEIP:NODEPORT from the LAN reach both backends", func() (bool, string) {
		got := requestsIn(s.lan, addr, 10)
		if got.all(10) && got.reached(backends) {
			s.f.logf("from the LAN to %s: %s", addr, got)
			return true, ""
		}
		return false, got.String()
	})
}

// testBackendDeleted: a backend deleted leaves routing within seconds,
// while a connection it had open through the ClusterIP keeps working
// during its grace period.
func (s *svcNode) testBackendDeleted(t *testing.T) {
	c := s.echoConn(t)
	defer c.Close()
	victim := c.backend
	backends, err := s.backends()
	if err != nil || backends[victim] == "" {
		t.Fatalf("backends %v, %v; want %s among them", backends, err, victim)
	}
	ctx, cancel := s.h.ctx()
	defer cancel()
	if err := s.h.cs.CoreV1().Pods(svcNamespace).Delete(ctx, victim, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	addr := net.JoinHostPort(s.clusterIP, "80")
	s.f.eventually(10*time.Second, "new connections to the ClusterIP avoid the deleted "+victim, func() (bool, string) {
		got := requestsIn(s.clientNS, addr, 10)
		return got.all(10) && got.from[victim] == 0, got.String()
	})
	s.f.logf("%s left routing %.1fs after its deletion", victim, time.Since(t0).Seconds())
	got := requestsIn(s.clientNS, addr, 20)
	if !got.all(20) || got.from[victim] != 0 {
		t.Errorf("after %s left routing, 20 requests to the ClusterIP: %s", victim, got)
	}
	// Still within its grace period, the deleted backend serves the
	// connection it had.
	c.roundTrip(t, "after the deletion")
	ctx, cancel = s.h.ctx()
	defer cancel()
	if p, err := s.h.cs.CoreV1().Pods(svcNamespace).Get(ctx, victim, metav1.GetOptions{}); err != nil || p.DeletionTimestamp == nil {
		t.Errorf("%s: %v, want it terminating still (the check above proves nothing otherwise)", victim, err)
	}
}

// testAgentRestart: the agent killed and started again, the hub up: an
// established connection through the ClusterIP survives, and new ones
// keep working throughout.
func (s *svcNode) testAgentRestart(t *testing.T) {
	c := s.echoConn(t)
	defer c.Close()
	addr := net.JoinHostPort(s.clusterIP, "80")
	s.f.eventually(30*time.Second, "requests to the ClusterIP from the client's namespace", func() (bool, string) {
		got := requestsIn(s.clientNS, addr, 4)
		return got.all(4), got.String()
	})
	l := startLoad(s.clientNS, addr)
	defer l.stop()

	s.e.kill()
	s.e.start()
	// The new agent routes again once it logs how; then let the load run
	// for a while more.
	s.f.eventually(joinTimeout, "the new agent routes Services", func() (bool, string) {
		return len(s.e.logLines(`msg="services routed with`)) > 0, "not yet"
	})
	s.e.waitConnects(0, joinTimeout)
	n := l.count()
	s.f.eventually(30*time.Second, "20 more requests under the new agent", func() (bool, string) {
		return l.count() >= n+20, fmt.Sprintf("%d requests", l.count()-n)
	})
	got := l.stop()
	s.f.logf("%d requests through the agent's restart: %s", got.n, got)
	if !got.all(got.n) {
		t.Errorf("requests to the ClusterIP failed while the agent restarted: %s", got)
	}
	c.roundTrip(t, "after the agent's restart")
	if s.mode == "ebpf" {
		// The new agent adopted the pinned links rather than making
		// new ones: routing had no gap.
		var now bpfPins
		now.read(t, s.pinDir())
		now.read(t, s.pinDir()+"-tc")
		slices.Sort(now.links)
		if !slices.Equal(now.links, s.pins.links) {
			t.Errorf("eBPF links after the restart %v, want those before %v, adopted", now.links, s.pins.links)
			s.pins.add(&now)
		}
	}
}

// testHubStopped: with the hub stopped, names resolve and the ClusterIP
// routes from the client pod; a backend whose container is killed on the
// node leaves routing within 2s.
func (s *svcNode) testHubStopped(t *testing.T) {
	backends, err := s.backends()
	if err != nil || len(backends) != 2 {
		t.Fatalf("backends %v, %v; want 2", backends, err)
	}
	uids := map[string]string{}
	pods, err := s.pods()
	if err != nil {
		t.Fatal(err)
	}
	for name := range backends {
		uids[name] = string(pods[name].UID)
	}
	s.h.stop()

	name := "web." + svcNamespace + ".svc.cluster.local"
	s.f.eventually(10*time.Second, "nslookup "+name+" without the hub", func() (bool, string) {
		addrs, out := s.nsLookup(t, name)
		return slices.Equal(addrs, []string{s.clusterIP}), out
	})
	headless := "web-headless." + svcNamespace + ".svc.cluster.local"
	var want []string
	for _, ip := range backends {
		want = append(want, ip)
	}
	slices.Sort(want)
	s.f.eventually(10*time.Second, "nslookup "+headless+" without the hub", func() (bool, string) {
		addrs, out := s.nsLookup(t, headless)
		return slices.Equal(addrs, want), out
	})
	addr := net.JoinHostPort(s.clusterIP, "80")
	var ids map[string]string // backend -> its container's id
	s.f.eventually(10*time.Second, "requests to the ClusterIP without the hub reach both backends", func() (bool, string) {
		got := requestsIn(s.clientNS, addr, 10)
		ids = got.ids
		return got.all(10) && got.reached(backends), got.String()
	})

	var victim string
	for name := range backends {
		victim = name
		break
	}
	killed := killPodProcesses(t, s.name, uids[victim])
	t0 := time.Now()
	s.f.logf("killed the container of %s (%s): %v", victim, ids[victim], killed)
	// Requests to the killed backend fail; a container restarted in its
	// place has another id and gets requests only once ready.
	// Twenty at a time: with the killed backend still routed, each goes
	// to it at even odds, so a round that passes by chance is one in a
	// million.
	s.f.eventually(2*time.Second, "requests to the ClusterIP no longer go to the killed container", func() (bool, string) {
		got := requestsIn(s.clientNS, addr, 20)
		return got.all(20) && !got.fromID(ids[victim]), got.String()
	})
	s.f.logf("the killed container left routing %.1fs after the kill", time.Since(t0).Seconds())
	got := requestsIn(s.clientNS, addr, 20)
	if !got.all(20) || got.fromID(ids[victim]) {
		t.Errorf("after the killed container left routing, 20 requests to the ClusterIP: %s", got)
	}
}

// answers is what a run of requests got: the answering container's id
// line ("POD UUID") of each, "" for a failure.
type answers struct {
	n    int
	ok   int
	from map[string]int    // pod name -> answers
	ids  map[string]string // pod name -> its container's id, the last seen
	seen map[string]bool   // every container id that answered
	errs []string
}

func newAnswers() *answers {
	return &answers{from: map[string]int{}, ids: map[string]string{}, seen: map[string]bool{}}
}

func (a *answers) add(id string, err error) {
	a.n++
	pod, _, _ := strings.Cut(id, " ")
	if err != nil || pod == "" {
		if err == nil {
			err = fmt.Errorf("answer %q", id)
		}
		if len(a.errs) < 5 {
			a.errs = append(a.errs, err.Error())
		}
		return
	}
	a.ok++
	a.from[pod]++
	a.ids[pod] = id
	a.seen[id] = true
}

// all reports whether n requests were made and all were answered.
func (a *answers) all(n int) bool { return a.n == n && a.ok == n }

// reached reports whether every pod of backends answered and no other.
func (a *answers) reached(backends map[string]string) bool {
	return len(a.from) == len(backends) && a.onlyFrom(backends)
}

// onlyFrom reports whether only pods of backends answered.
func (a *answers) onlyFrom(backends map[string]string) bool {
	for p := range a.from {
		if _, ok := backends[p]; !ok {
			return false
		}
	}
	return true
}

// fromID reports whether the container of that id answered.
func (a *answers) fromID(id string) bool { return a.seen[id] }

func (a *answers) String() string {
	return fmt.Sprintf("%d requests, %d answered: by pod %v; errors %q", a.n, a.ok, a.from, a.errs)
}

// podAt returns the name of the backend at ip.
func podAt(backends map[string]string, ip string) string {
	for name, a := range backends {
		if a == ip {
			return name
		}
	}
	return ""
}

// podRequests makes n HTTP requests for /id to addr from the client pod,
// through kubectl exec, with busybox nc.
func (s *svcNode) podRequests(t *testing.T, addr string, n int) (*answers, string) {
	host, port, _ := net.SplitHostPort(addr)
	script := fmt.Sprintf(`for i in $(seq %d); do r=$(printf 'GET /id HTTP/1.0\r\n\r\n' | nc -w 2 %s %s | tail -n 1); echo "[$r]"; done`, n, host, port)
	r := s.k.exec(t, "exec", "client", "--", "sh", "-c", script)
	got := newAnswers()
	if r.err != nil {
		return got, r.String()
	}
	for _, l := range r.lines() {
		id := strings.TrimSuffix(strings.TrimPrefix(strings.TrimSpace(l), "["), "]")
		got.add(strings.TrimSpace(id), nil)
	}
	return got, got.String() + "\n" + r.String()
}

// podLookup resolves name from the client pod, through kubectl exec,
// with busybox nslookup asking the kube-dns ClusterIP for A records, and
// returns the addresses answered, sorted.
func (s *svcNode) podLookup(t *testing.T, name string) ([]string, string) {
	r := s.k.exec(t, "exec", "client", "--", "nslookup", "-type=a", name, s.dnsIP)
	if r.err != nil {
		return nil, r.String()
	}
	return nslookupAddrs(r.stdout), r.String()
}

// nsLookup is podLookup without kubectl: busybox nslookup runs in the
// client pod's network namespace, started from the test.
func (s *svcNode) nsLookup(t *testing.T, name string) ([]string, string) {
	path := filepath.Join(s.e.dataDir, agent.NetNSDir, string(s.client.UID))
	cmd := exec.Command("nsenter", "--net="+path, "--", "/bin/busybox", "nslookup", "-type=a", name, s.dnsIP)
	dieWithTest(cmd)
	out, err := cmd.CombinedOutput()
	msg := fmt.Sprintf("%s: %v\n%s", strings.Join(cmd.Args, " "), err, out)
	if err != nil {
		return nil, msg
	}
	return nslookupAddrs(string(out)), msg
}

// nslookupAddrs returns the addresses busybox nslookup printed for the
// name asked (those after its "Name:" line), sorted.
func nslookupAddrs(out string) []string {
	var addrs []string
	named := false
	for l := range strings.SplitSeq(out, "\n") {
		switch f := strings.Fields(l); {
		case len(f) >= 2 && f[0] == "Name:":
			named = true
		case named && len(f) == 2 && f[0] == "Address:":
			addrs = append(addrs, f[1])
		}
	}
	slices.Sort(addrs)
	return addrs
}

// requestsIn makes n HTTP requests for /id to addr from the network
// namespace ns, one after the other.
func requestsIn(ns netns.NsHandle, addr string, n int) *answers {
	got := newAnswers()
	for range n {
		got.add(getIDIn(ns, addr))
	}
	return got
}

// getIDIn fetches /id from addr over a connection made in ns.
func getIDIn(ns netns.NsHandle, addr string) (string, error) {
	c, err := dialIn(ns, addr, 2*time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(3 * time.Second))
	if _, err := io.WriteString(c, "GET /id HTTP/1.0\r\n\r\n"); err != nil {
		return "", err
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("%s", resp.Status)
	}
	return strings.TrimSpace(string(b)), err
}

// dialIn dials TCP addr from the network namespace ns: the socket is
// made on a thread moved there, which goes back, or dies if it cannot.
func dialIn(ns netns.NsHandle, addr string, timeout time.Duration) (net.Conn, error) {
	type result struct {
		c   net.Conn
		err error
	}
	ch := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			ch <- result{nil, err}
			return
		}
		defer orig.Close()
		if err := netns.Set(ns); err != nil {
			ch <- result{nil, err}
			return
		}
		c, err := net.DialTimeout("tcp", addr, timeout)
		if netns.Set(orig) == nil {
			runtime.UnlockOSThread()
		}
		ch <- result{c, err}
	}()
	r := <-ch
	return r.c, r.err
}

// newLAN makes the node's LAN: a veth from the test's network namespace,
// at lanNodeAddr, to a namespace of its own, the LAN client's, at
// lanClientAddr. It is made before the node starts, so that the node's
// InternalIP is its address there. Both go when the test ends.
func newLAN(t *testing.T) netns.NsHandle {
	t.Helper()
	ch := make(chan netns.NsHandle, 1)
	errc := make(chan error, 1)
	go func() {
		// The thread moves to the new namespace and dies with this
		// goroutine, never given back.
		runtime.LockOSThread()
		ns, err := netns.New()
		if err != nil {
			errc <- err
			return
		}
		ch <- ns
	}()
	var ns netns.NsHandle
	select {
	case err := <-errc:
		t.Fatalf("the LAN client's network namespace: %v", err)
	case ns = <-ch:
	}
	t.Cleanup(func() { ns.Close() })
	veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "lan0"}, PeerName: "lan1", PeerNamespace: netlink.NsFd(ns)}
	if err := netlink.LinkAdd(veth); err != nil {
		t.Fatalf("the LAN's veth: %v", err)
	}
	t.Cleanup(func() {
		if err := netlink.LinkDel(veth); err != nil {
			t.Errorf("remove the LAN's veth: %v", err)
		}
	})
	up := func(h *netlink.Handle, name, addr string) {
		l, err := h.LinkByName(name)
		if err != nil {
			t.Fatal(err)
		}
		if addr != "" {
			a, err := netlink.ParseAddr(addr)
			if err != nil {
				t.Fatal(err)
			}
			if err := h.AddrAdd(l, a); err != nil {
				t.Fatalf("address %s on %s: %v", addr, name, err)
			}
		}
		if err := h.LinkSetUp(l); err != nil {
			t.Fatalf("set %s up: %v", name, err)
		}
	}
	here, err := netlink.NewHandle()
	if err != nil {
		t.Fatal(err)
	}
	defer here.Close()
	up(here, "lan0", lanNodeAddr)
	there, err := netlink.NewHandleAt(ns)
	if err != nil {
		t.Fatal(err)
	}
	defer there.Close()
	up(there, "lo", "")
	up(there, "lan1", lanClientAddr)
	return ns
}

// echoConn is a connection to web's echo port from the client pod's
// network namespace; backend is the pod that answered it.
type echoConn struct {
	net.Conn
	r       *bufio.Reader
	backend string
}

// echoConn connects to the ClusterIP's echo port from the client pod's
// network namespace and checks a round trip.
func (s *svcNode) echoConn(t *testing.T) *echoConn {
	t.Helper()
	addr := net.JoinHostPort(s.clusterIP, "9000")
	var c *echoConn
	s.f.eventually(30*time.Second, "a connection to "+addr+" from the client's namespace", func() (bool, string) {
		nc, err := dialIn(s.clientNS, addr, 2*time.Second)
		if err != nil {
			return false, err.Error()
		}
		r := bufio.NewReader(nc)
		nc.SetReadDeadline(time.Now().Add(3 * time.Second))
		id, err := r.ReadString('\n')
		pod, _, _ := strings.Cut(id, " ")
		if err != nil || !strings.HasPrefix(pod, "web-") {
			nc.Close()
			return false, fmt.Sprintf("first line %q, %v", id, err)
		}
		c = &echoConn{Conn: nc, r: r, backend: pod}
		return true, ""
	})
	c.roundTrip(t, "first")
	return c
}

// roundTrip sends a line and wants it back.
func (c *echoConn) roundTrip(t *testing.T, line string) {
	t.Helper()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, line+"\n"); err != nil {
		t.Fatalf("echo connection to %s: write %q: %v", c.backend, line, err)
	}
	got, err := c.r.ReadString('\n')
	if err != nil || got != line+"\n" {
		t.Fatalf("echo connection to %s: read %q, %v; want %q back", c.backend, got, err, line)
	}
}

// load makes requests from a network namespace, one every 100ms, until
// stopped.
type load struct {
	done chan struct{}
	wg   sync.WaitGroup
	mu   sync.Mutex
	got  *answers
}

func startLoad(ns netns.NsHandle, addr string) *load {
	l := &load{done: make(chan struct{}), got: newAnswers()}
	l.wg.Go(func() {
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			id, err := getIDIn(ns, addr)
			if err != nil {
				err = fmt.Errorf("%s: %w", time.Now().Format("15:04:05.000"), err)
			}
			l.mu.Lock()
			l.got.add(id, err)
			l.mu.Unlock()
			select {
			case <-l.done:
				return
			case <-tick.C:
			}
		}
	})
	return l
}

func (l *load) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.got.n
}

// stop stops the requests, once, and returns what they got.
func (l *load) stop() *answers {
	select {
	case <-l.done:
	default:
		close(l.done)
	}
	l.wg.Wait()
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.got
}

// killPodProcesses kills, with SIGKILL, the processes of the pod of uid on
// node, found through their cgroups, and returns their command lines.
func killPodProcesses(t *testing.T, node, uid string) []string {
	t.Helper()
	ents, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var killed []string
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
		if err != nil || !strings.Contains(string(b), "/outpost-"+node+"/") || !strings.Contains(string(b), "pod"+uid) {
			continue
		}
		cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err := syscall.Kill(pid, syscall.SIGKILL); err == nil {
			killed = append(killed, fmt.Sprintf("%d %s", pid, strings.ReplaceAll(strings.TrimRight(string(cmdline), "\x00"), "\x00", " ")))
		}
	}
	if len(killed) == 0 {
		t.Fatalf("no process of pod %s found in the cgroups of node %s", uid, node)
	}
	return killed
}

// bpfPins are the kernel objects a node pinned: its links, their
// programs and its maps, by ID.
type bpfPins struct {
	mu    sync.Mutex
	links []link.ID
	progs []ebpf.ProgramID
	maps  []ebpf.MapID
}

// read records what is pinned under dir (nothing if it does not exist),
// the links sorted.
func (p *bpfPins) read(t *testing.T, dir string) {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		if l, err := link.LoadPinnedLink(path, nil); err == nil {
			info, ierr := l.Info()
			l.Close()
			if ierr != nil {
				return fmt.Errorf("link %s: %w", path, ierr)
			}
			p.links = append(p.links, info.ID)
			p.progs = append(p.progs, info.Program)
			return nil
		}
		m, err := ebpf.LoadPinnedMap(path, nil)
		if err != nil {
			return fmt.Errorf("pin %s: neither a link nor a map: %w", path, err)
		}
		defer m.Close()
		info, err := m.Info()
		if err != nil {
			return fmt.Errorf("map %s: %w", path, err)
		}
		if id, ok := info.ID(); ok {
			p.maps = append(p.maps, id)
		}
		return nil
	})
	if err != nil && !os.IsNotExist(err) {
		t.Fatalf("read the pins under %s: %v", dir, err)
	}
	slices.Sort(p.links)
}

// add records q's objects too.
func (p *bpfPins) add(q *bpfPins) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.links = append(p.links, q.links...)
	p.progs = append(p.progs, q.progs...)
	p.maps = append(p.maps, q.maps...)
}

// checkGone fails t unless every recorded object is gone from the kernel
// soon: the kernel frees them once the last reference (the bpffs the
// node's cleanup unmounted) is dropped, a little later.
func (p *bpfPins) checkGone(t *testing.T) {
	p.mu.Lock()
	defer p.mu.Unlock()
	wait.ForEvery(t, pollInterval, 20*time.Second, "the node's eBPF objects gone from the kernel once it was removed", func() (bool, string) {
		var left []string
		for _, id := range p.links {
			if l, err := link.NewFromID(id); err == nil {
				l.Close()
				left = append(left, fmt.Sprintf("link %d", id))
			}
		}
		for _, id := range p.progs {
			if pr, err := ebpf.NewProgramFromID(id); err == nil {
				pr.Close()
				left = append(left, fmt.Sprintf("program %d", id))
			}
		}
		for _, id := range p.maps {
			if m, err := ebpf.NewMapFromID(id); err == nil {
				m.Close()
				left = append(left, fmt.Sprintf("map %d", id))
			}
		}
		return len(left) == 0, fmt.Sprintf("still there: %v", left)
	})
}
