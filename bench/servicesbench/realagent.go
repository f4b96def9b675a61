package servicesbench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	miekg "github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/outpost-mesh/outpost/bench/edgenode"
	"github.com/outpost-mesh/outpost/bench/internal/childhub"
	"github.com/outpost-mesh/outpost/netd/ipam"
	"github.com/outpost-mesh/outpost/sync/wire"
)

// RealAgentResult is what a real edge agent, joined to a real hub, spent
// while Services were created through the hub's API: it receives them
// over its sync session, keeps them in its checkpoint, builds the table
// and the DNS zone, and programs eBPF (and nftables for NodePorts from
// outside) as it does on a node.
type RealAgentResult struct {
	Services int `json:"services"`
	// Routing is how the node said it routes Services (its
	// outpost.dev/service-routing annotation).
	Routing string `json:"routing"`
	// Create is how long the Services and their EndpointSlices took to
	// create through the API; Programmed from the first create until the
	// agent's DNS server answered for the last one, created after all
	// the others (its routing table is synced before its zone is set).
	Create     time.Duration `json:"create_ns"`
	Programmed time.Duration `json:"programmed_ns"`
	// CPU is the agent's user and system time over Programmed.
	CPU time.Duration `json:"cpu_ns"`
	// IdleRSS is the agent's RSS before the creates; PeakRSS its
	// high-water mark from then until programmed; RSS its RSS then.
	IdleRSS uint64 `json:"idle_rss_bytes"`
	PeakRSS uint64 `json:"peak_rss_bytes"`
	RSS     uint64 `json:"rss_bytes"`
}

// realNamespace holds the real agent's Services.
const realNamespace = "svcbench"

// measureRealAgent starts a hub and an agent (this process must be in a
// network namespace of its own, holding only its loopback), creates n
// Services of 4 endpoints each through the hub and a last one, and
// measures the agent until its DNS server answers for that last one.
func measureRealAgent(ctx context.Context, cfg Config, n int, dir string, logf func(string, ...any)) (res RealAgentResult, err error) {
	if err := edgenode.CheckIsolated(); err != nil {
		return res, err
	}
	syncAddr, err := childhub.FreeUDPAddr()
	if err != nil {
		return res, err
	}
	logf("  starting a hub and an agent")
	hub, err := childhub.Start(cfg.Binary, filepath.Join(dir, "hub"), "127.0.0.1:0", syncAddr,
		"--controllers", "--allocate-node-cidrs", "--cluster-cidr", edgenode.ClusterCIDR)
	if err != nil {
		return res, err
	}
	defer hub.Stop(cfg.StopTimeout)
	kubeconfig, err := hub.Kubeconfig(ctx, cfg.JoinTimeout)
	if err != nil {
		return res, err
	}
	rc, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return res, fmt.Errorf("load kubeconfig: %w", err)
	}
	rc.QPS, rc.Burst, rc.UserAgent = -1, 1<<20, "outpost-bench-services"
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return res, err
	}
	token, err := edgenode.Prepare(ctx, client, realNamespace, "outpost bench services")
	if err != nil {
		return res, err
	}
	hash, err := edgenode.CAHash(rc)
	if err != nil {
		return res, err
	}
	suffix := make([]byte, 2)
	rand.Read(suffix)
	node := edgenode.New(edgenode.Options{
		Binary: cfg.EdgeBinary, ContainerdBinary: cfg.ContainerdBinary,
		Name: "svc-" + hex.EncodeToString(suffix), Dir: filepath.Join(dir, "node"), Bridge: "svcbench0",
		LogPath: filepath.Join(dir, "agent.log"), Hub: syncAddr, Token: token, CAHash: hash,
	})
	if err := node.Start(); err != nil {
		return res, err
	}
	defer func() {
		if rerr := node.Remove(cfg.StopTimeout); rerr != nil {
			logf("clean up the node: %v", rerr)
		}
	}()
	if err := edgenode.WaitReady(ctx, client, node, cfg.JoinTimeout); err != nil {
		return res, err
	}
	nd, err := client.CoreV1().Nodes().Get(ctx, node.Name, metav1.GetOptions{})
	if err != nil {
		return res, err
	}
	cidr, err := netip.ParsePrefix(nd.Spec.PodCIDR)
	if err != nil {
		return res, fmt.Errorf("node pod CIDR: %w", err)
	}
	server := netip.AddrPortFrom(ipam.Gateway(cidr), 53).String()
	// The agent's services are up once its DNS server answers for the
	// cluster at all (NXDOMAIN will do).
	deadline := time.Now().Add(cfg.JoinTimeout)
	for {
		if rcode, _, err := ask(server, realName("none")); err == nil && rcode != miekg.RcodeServerFailure {
			break
		}
		if time.Now().After(deadline) {
			return res, fmt.Errorf("the agent's DNS server at %s did not answer within %v%s", server, cfg.JoinTimeout, node.LogTail())
		}
		if err := sleepCtx(ctx, 100*time.Millisecond); err != nil {
			return res, err
		}
	}
	pid := strconv.Itoa(node.PID())
	// Let the agent's start settle before it is measured.
	if err := sleepCtx(ctx, 3*time.Second); err != nil {
		return res, err
	}
	if err := childhub.ResetPeak(pid); err != nil {
		return res, err
	}
	idle, err := childhub.ReadProc(pid)
	if err != nil {
		return res, err
	}
	res.IdleRSS, res.Services = idle.RSS, n

	logf("  creating %d Services and their EndpointSlices through the hub", n)
	start := time.Now()
	if err := createReal(ctx, client, n); err != nil {
		return res, err
	}
	last := "svc-last"
	if err := createRealOne(ctx, client, last, n); err != nil {
		return res, err
	}
	res.Create = time.Since(start)
	deadline = time.Now().Add(cfg.OpTimeout)
	for {
		if rcode, answers, err := ask(server, realName(last)); err == nil && rcode == miekg.RcodeSuccess && answers > 0 {
			break
		}
		if err := node.Running(); err != nil {
			return res, err
		}
		if time.Now().After(deadline) {
			return res, fmt.Errorf("the agent did not answer for %s within %v of the creates%s", realName(last), cfg.OpTimeout, node.LogTail())
		}
		if err := sleepCtx(ctx, 5*time.Millisecond); err != nil {
			return res, err
		}
	}
	res.Programmed = time.Since(start)
	after, err := childhub.ReadProc(pid)
	if err != nil {
		return res, err
	}
	res.CPU = time.Duration((after.CPUSeconds - idle.CPUSeconds) * float64(time.Second))
	res.PeakRSS, res.RSS = after.HWM, after.RSS
	if nd, err := client.CoreV1().Nodes().Get(ctx, node.Name, metav1.GetOptions{}); err == nil {
		res.Routing = nd.Annotations[wire.AnnotationServiceRouting]
	}
	// Every Service is there: a sample of names resolves.
	for i := 0; i < n; i += max(1, n/50) {
		if rcode, answers, err := ask(server, realName(fmt.Sprintf("svc-%d", i))); err != nil || rcode != miekg.RcodeSuccess || answers == 0 {
			return res, fmt.Errorf("the agent does not answer for svc-%d: %s, %d answers, %v", i, miekg.RcodeToString[rcode], answers, err)
		}
	}
	return res, nil
}

func realName(svc string) string { return svc + "." + realNamespace + ".svc." + domain + "." }

// createReal creates Services svc-0 to svc-<n-1> and their slices, a few
// at once.
func createReal(ctx context.Context, client kubernetes.Interface, n int) error {
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for range 16 {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= n || ctx.Err() != nil {
					return
				}
				if err := createRealOne(ctx, client, fmt.Sprintf("svc-%d", i), i); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return err
	}
	return ctx.Err()
}

// createRealOne creates a Service of one port, its ClusterIP given by the
// hub and no selector, and its EndpointSlice of 4 ready endpoints.
func createRealOne(ctx context.Context, client kubernetes.Interface, name string, i int) error {
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{
			Name: "http", Protocol: corev1.ProtocolTCP, Port: servicePort, TargetPort: intstr.FromInt32(backendPort)}}},
	}
	if _, err := client.CoreV1().Services(realNamespace).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create Service %s: %w", name, err)
	}
	ready, proto, port := true, corev1.ProtocolTCP, int32(backendPort)
	s := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: name + "-bench", Labels: map[string]string{
			discoveryv1.LabelServiceName: name, discoveryv1.LabelManagedBy: "outpost-bench"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr("http"), Protocol: &proto, Port: &port}},
	}
	for j := range backends {
		s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{
			Addresses:  []string{backend(i, j).String()},
			Conditions: discoveryv1.EndpointConditions{Ready: &ready},
		})
	}
	if _, err := client.DiscoveryV1().EndpointSlices(realNamespace).Create(ctx, s, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create EndpointSlice of %s: %w", name, err)
	}
	return nil
}

// ask queries server for name's A record over UDP and returns the answer's
// rcode and number of answers.
func ask(server, name string) (int, int, error) {
	c, err := net.Dial("udp", server)
	if err != nil {
		return 0, 0, err
	}
	defer c.Close()
	m := new(miekg.Msg)
	m.SetQuestion(name, miekg.TypeA)
	raw, err := m.Pack()
	if err != nil {
		return 0, 0, err
	}
	c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write(raw); err != nil {
		return 0, 0, err
	}
	buf := make([]byte, 1500)
	for {
		k, err := c.Read(buf)
		if err != nil {
			return 0, 0, err
		}
		var a miekg.Msg
		if a.Unpack(buf[:k]) == nil && a.Id == m.Id {
			return a.Rcode, len(a.Answer), nil
		}
	}
}

// sleepCtx waits d or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// checkRealAgent reports what the real agent's measurement lacks.
func checkRealAgent(cfg Config) error {
	for _, bin := range []string{cfg.EdgeBinary, cfg.ContainerdBinary} {
		if _, err := os.Stat(bin); err != nil {
			return fmt.Errorf("need %s: %w", bin, err)
		}
	}
	return nil
}
