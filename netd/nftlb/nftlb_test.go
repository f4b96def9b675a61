package nftlb

import (
	"fmt"
	"testing"
	"time"

	"github.com/outpost-mesh/outpost/netd/services"
)

const clusterIP = "10.43.0.10"

// serveAll runs a TCP and a UDP server on port 8080 of every pod, named
// pod0, pod1, ...
func (n *testNet) serveAll(t *testing.T) {
	for i, p := range n.pods {
		serve(t, p, "tcp", ":8080", fmt.Sprintf("pod%d", i))
		serve(t, p, "udp", ":8053", fmt.Sprintf("pod%d", i))
	}
}

func clusterIPFrontend(addr string, proto services.Proto, port uint16, bs []services.Backend) *services.Frontend {
	return &services.Frontend{Key: key(addr, proto), Kind: services.ClusterIP, Service: "default/web", Backends: bs}
}

// TestClusterIP: TCP to a cluster IP from a host process and from a pod
// reaches a backend pod; all backends are picked over many connections;
// UDP works through it; a frontend with no backend refuses at once.
func TestClusterIP(t *testing.T) {
	n := newTestNet(t, 3)
	n.serveAll(t)
	d := n.newDataplane(t, All)
	mustSync(t, d, table(
		clusterIPFrontend(clusterIP+":80", services.TCP, 80, backends(8080, true, n.podIP...)),
		clusterIPFrontend(clusterIP+":53", services.UDP, 53, backends(8053, true, n.podIP...)),
		clusterIPFrontend("10.43.0.11:80", services.TCP, 80, nil),
		clusterIPFrontend("10.43.0.11:53", services.UDP, 53, nil),
	))

	for _, from := range []struct{ name, ns string }{{"host", n.node}, {"pod", n.pods[0]}} {
		t.Run(from.name, func(t *testing.T) {
			seen := map[string]int{}
			for range 60 {
				name, _ := mustDial(t, from.ns, "tcp", clusterIP+":80")
				seen[name]++
			}
			if len(seen) != 3 {
				t.Errorf("60 connections reached %v, want all of pod0, pod1, pod2", seen)
			}
			name, _ := mustDial(t, from.ns, "udp", clusterIP+":53")
			if name == "" {
				t.Errorf("UDP reply from no one")
			}
			start := time.Now()
			_, _, err := dial(t, from.ns, "tcp", "10.43.0.11:80")
			if !isRefused(err) {
				t.Errorf("dial a frontend with no backends: %v, want connection refused", err)
			}
			if d := time.Since(start); d > time.Second {
				t.Errorf("refused after %v", d)
			}
		})
	}
}
