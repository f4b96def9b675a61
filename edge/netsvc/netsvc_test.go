package netsvc

import (
	"bufio"
	"context"
	"errors"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	miekg "github.com/miekg/dns"
	"github.com/vishvananda/netlink"
	"go.uber.org/goleak"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/outpost-mesh/outpost/edge/checkpoint/checkpointtest"
	"github.com/outpost-mesh/outpost/internal/netnstest"
	"github.com/outpost-mesh/outpost/internal/testlog"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// network is a pod network already up.
type network struct {
	gw     netip.Addr
	cidr   netip.Prefix
	bridge string
}

func (n network) Ready(context.Context) (netip.Addr, netip.Prefix, error) { return n.gw, n.cidr, nil }

// RouteServicesToBridge routes 10.43.0.0/16 into the test's bridge, as
// netd does.
func (n network) RouteServicesToBridge() error {
	br, err := netlink.LinkByName(n.bridge)
	if err != nil {
		return err
	}
	return netlink.RouteReplace(&netlink.Route{Dst: mustIPNet("10.43.0.0/16"), LinkIndex: br.Attrs().Index, Scope: netlink.SCOPE_LINK})
}

// events keeps the Events recorded.
type events struct {
	mu  sync.Mutex
	got []string
}

func (e *events) record(typ, reason, msg string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.got = append(e.got, reason+": "+msg)
}

func (e *events) String() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return strings.Join(e.got, "; ")
}

// TestServicesRun: in a node namespace of its own, with a bridge and a
// backend on it, the node's network services route a ClusterIP to the
// backend and answer the Service's name at the cluster DNS address, in
// both routing modes, saying which in an Event.
func TestServicesRun(t *testing.T) {
	if !netnstest.Enter(t) {
		return
	}
	gw, backend := netip.MustParseAddr("10.42.7.1"), netip.MustParseAddr("10.42.7.10")
	br := &netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: "br-svc"}}
	if err := netlink.LinkAdd(br); err != nil {
		t.Fatal(err)
	}
	for _, a := range []string{"10.42.7.1/24", "10.42.7.10/32"} {
		if err := netlink.AddrAdd(br, &netlink.Addr{IPNet: mustIPNet(a)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := netlink.LinkSetUp(br); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", netip.AddrPortFrom(backend, 8080).String())
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Write([]byte("backend\n"))
			c.Close()
		}
	}()

	for _, mode := range []string{RoutingEBPF, RoutingNftables} {
		t.Run(mode, func(t *testing.T) {
			v := checkpointtest.New(t)
			node := "n1"
			ready := true
			port, name, proto := int32(8080), "http", corev1.ProtocolTCP
			v.Set(t,
				&corev1.Service{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Service"},
					ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web"},
					Spec: corev1.ServiceSpec{ClusterIP: "10.43.5.5", ClusterIPs: []string{"10.43.5.5"},
						Ports: []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP}}}},
				&discoveryv1.EndpointSlice{TypeMeta: metav1.TypeMeta{APIVersion: "discovery.k8s.io/v1", Kind: "EndpointSlice"},
					ObjectMeta:  metav1.ObjectMeta{Namespace: "default", Name: "web-1", Labels: map[string]string{discoveryv1.LabelServiceName: "web"}},
					AddressType: discoveryv1.AddressTypeIPv4,
					Ports:       []discoveryv1.EndpointPort{{Name: &name, Port: &port, Protocol: &proto}},
					Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{backend.String()}, NodeName: &node, Conditions: discoveryv1.EndpointConditions{Ready: &ready}}}},
			)
			ev := &events{}
			bpffs := filepath.Join(t.TempDir(), "bpf")
			t.Cleanup(func() {
				if err := syscall.Unmount(bpffs, syscall.MNT_DETACH); err != nil && !errors.Is(err, syscall.EINVAL) && !errors.Is(err, syscall.ENOENT) {
					t.Errorf("unmount the bpffs: %v", err)
				}
			})
			s, err := New(Config{
				NodeName: node, NetNSDir: filepath.Join(t.TempDir(), "netns"), Bridge: "br-svc",
				Network: network{gw: gw, cidr: netip.MustParsePrefix("10.42.7.0/24"), bridge: "br-svc"}, View: v,
				NodeAddrs: func() []netip.Addr { return []netip.Addr{gw} },
				Routing:   mode, PinDir: filepath.Join(bpffs, "outpost-n1"), Cgroup: "/sys/fs/cgroup/unified",
				NftTable:    "svc-" + mode,
				ClusterCIDR: netip.MustParsePrefix("10.42.0.0/16"), ServiceCIDR: netip.MustParsePrefix("10.43.0.0/16"),
				ClusterDNS: netip.MustParseAddr("10.43.0.10"), Domain: "cluster.local",
				Event: ev.record, Logger: testlog.New(t, slog.LevelDebug),
			})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(t.Context())
			done := make(chan struct{})
			go func() {
				defer close(done)
				_ = s.Run(ctx)
			}()
			defer func() {
				cancel()
				<-done
			}()

			deadline := time.Now().Add(20 * time.Second)
			var last string
			for {
				got, err := fetch("10.43.5.5:80")
				if err == nil && got == "backend" {
					break
				}
				last = got
				if err != nil {
					last = err.Error()
				}
				if time.Now().After(deadline) {
					t.Fatalf("10.43.5.5:80 not routed to the backend within 20s: %s; events: %s", last, ev)
				}
				time.Sleep(50 * time.Millisecond)
			}
			if got := s.Mode(); got != mode {
				t.Errorf("Mode() = %q, want %q", got, mode)
			}
			if !strings.Contains(ev.String(), "ServiceRouting:") {
				t.Errorf("events %q, want one saying how Services are routed", ev)
			}
			// The node's only address is the bridge's: no LAN interface
			// for tc programs, so nftables rules take traffic from outside.
			if mode == RoutingEBPF && !strings.Contains(ev.String(), "reached from outside with nftables rules") {
				t.Errorf("events %q, want one saying nftables rules take NodePorts from outside", ev)
			}

			// The Service's name, at the cluster DNS address over UDP.
			var ans string
			for {
				m := new(miekg.Msg)
				m.SetQuestion("web.default.svc.cluster.local.", miekg.TypeA)
				c := &miekg.Client{Net: "udp", Timeout: time.Second}
				r, _, err := c.Exchange(m, "10.43.0.10:53")
				if err == nil && len(r.Answer) == 1 {
					ans = r.Answer[0].(*miekg.A).A.String()
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("web.default.svc.cluster.local not answered at 10.43.0.10:53: %v %v", r, err)
				}
				time.Sleep(50 * time.Millisecond)
			}
			if ans != "10.43.5.5" {
				t.Errorf("web.default.svc.cluster.local = %s, want 10.43.5.5", ans)
			}
		})
	}
	if ents, _ := os.ReadDir("/sys/fs/bpf"); len(ents) > 0 {
		for _, e := range ents {
			if strings.HasPrefix(e.Name(), "outpost-n1") {
				t.Errorf("pinned on the machine's bpffs: %s", e.Name())
			}
		}
	}
}

// fetch reads the first line the server at addr sends.
func fetch(addr string) (string, error) {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(2 * time.Second))
	line, err := bufio.NewReader(c).ReadString('\n')
	return strings.TrimSpace(line), err
}

func mustIPNet(s string) *net.IPNet {
	ip, n, err := net.ParseCIDR(s)
	if err != nil {
		panic(err)
	}
	n.IP = ip
	return n
}
