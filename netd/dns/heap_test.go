package dns

import (
	"fmt"
	"runtime"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
)

// agentCluster returns n Services in 100 namespaces, one in ten
// headless, each with a slice of eps ready endpoints and two named
// ports: the edge agent's sizing case is n 10,000 and eps 4.
func agentCluster(n, eps int) ([]*corev1.Service, []*discoveryv1.EndpointSlice) {
	svcs := make([]*corev1.Service, 0, n)
	slices := make([]*discoveryv1.EndpointSlice, 0, n)
	tcp := corev1.ProtocolTCP
	ports := []port{{"http", 80, tcp}, {"metrics", 9090, tcp}}
	for i := range n {
		ns := fmt.Sprintf("ns-%d", i%100)
		name := fmt.Sprintf("svc-%d", i)
		if i%10 == 0 {
			svcs = append(svcs, headless(ns, name, ports...))
		} else {
			svcs = append(svcs, service(ns, name, []string{fmt.Sprintf("10.43.%d.%d", i/256, i%256)}, ports...))
		}
		var e []endpoint
		for j := range eps {
			k := eps*i + j
			e = append(e, endpoint{addr: fmt.Sprintf("10.42.%d.%d", k/256%256, k%256)})
		}
		slices = append(slices, slice(ns, name, name+"-a", discoveryv1.AddressTypeIPv4, ports, e...))
	}
	return svcs, slices
}

// retainedHeap returns the live heap that build's result holds.
func retainedHeap(build func() any) (uint64, any) {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&before)
	v := build()
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&after)
	return after.HeapAlloc - min(after.HeapAlloc, before.HeapAlloc), v
}

// maxZoneHeap bounds the live heap of the zone of agentCluster(10_000,
// 4), about 1.5 times the 2.05 MiB it measured (the map-of-names zone
// before it held 19.8 MiB).
const maxZoneHeap = 3 << 20

// TestZoneRetainedHeap keeps the zone of 10,000 Services of 4 endpoints
// each under maxZoneHeap, the share of the edge agent's memory it is
// given.
func TestZoneRetainedHeap(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a 10,000-service zone")
	}
	svcs, slices := agentCluster(10_000, 4)
	heap, z := retainedHeap(func() any { return newZone("cluster.local", svcs, slices) })
	t.Logf("zone of %d services: %d names, %.2f MB live heap", len(svcs), z.(*Zone).Len(), float64(heap)/(1<<20))
	if heap > maxZoneHeap {
		t.Errorf("zone holds %d bytes of live heap, want at most %d", heap, maxZoneHeap)
	}
	runtime.KeepAlive(z)
	runtime.KeepAlive(svcs) // live while measured, so not counted
	runtime.KeepAlive(slices)
}

// TestRefZoneRetainedHeap logs the live heap of the map-of-names zone
// for the same cluster, to compare.
func TestRefZoneRetainedHeap(t *testing.T) {
	if testing.Short() || !testing.Verbose() {
		t.Skip("only logs a figure; run with -v")
	}
	svcs, slices := agentCluster(10_000, 4)
	heap, z := retainedHeap(func() any { return newRefZone("cluster.local", svcs, slices) })
	t.Logf("map-of-names zone of %d services: %.2f MB live heap", len(svcs), float64(heap)/(1<<20))
	runtime.KeepAlive(z)
	runtime.KeepAlive(svcs) // live while measured, so not counted
	runtime.KeepAlive(slices)
}
