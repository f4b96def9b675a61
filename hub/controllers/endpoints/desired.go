// Package endpoints is the hub's legacy Endpoints controller: for every
// Service with a selector it keeps the v1 Endpoints object of the same
// name listing the pods the selector matches, as upstream's endpoints
// controller does, for the clients that still read Endpoints rather than
// EndpointSlices. Services without a selector are the user's: their
// Endpoints are left alone.
//
// As upstream: ready pods are addresses, not ready ones notReadyAddresses
// (publishNotReadyAddresses makes them all ready, and keeps terminating
// pods, which are otherwise left out), subsets are repacked so that each
// lists the ports that share one set of addresses, the
// endpoints.kubernetes.io/last-change-trigger-time annotation says when
// the change the Endpoints reflect happened, and beyond 1000 addresses
// the Endpoints are truncated and annotated
// endpoints.kubernetes.io/over-capacity: truncated.
//
// The decisions are pure (Desired, Truncate, NeedsUpdate); Controller is
// the thin client-go shell.
package endpoints

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"

	"github.com/outpost-mesh/outpost/hub/controllers/endpointslice"
)

// MaxCapacity is the most addresses one Endpoints object lists, as
// upstream.
const MaxCapacity = 1000

// Annotation values, upstream's.
const (
	// OverCapacity is the annotation of Endpoints that were truncated.
	OverCapacity = corev1.EndpointsOverCapacity
	// truncated is its value.
	truncated = "truncated"
)

// Desired returns the subsets of svc's Endpoints from pods (those of its
// selector; pods of other namespaces are ignored), repacked and sorted,
// not yet truncated. Desired does no I/O.
func Desired(svc *corev1.Service, pods []*corev1.Pod) []corev1.EndpointSubset {
	pnr := svc.Spec.PublishNotReadyAddresses
	at := endpointslice.AddressTypes(svc)[0]
	type portAddrs struct {
		port            corev1.EndpointPort
		ready, notReady map[string]corev1.EndpointAddress
	}
	byPort := map[string]*portAddrs{}
	add := func(p corev1.EndpointPort, a corev1.EndpointAddress, ready bool) {
		k := portKey(p)
		pa := byPort[k]
		if pa == nil {
			pa = &portAddrs{port: p, ready: map[string]corev1.EndpointAddress{}, notReady: map[string]corev1.EndpointAddress{}}
			byPort[k] = pa
		}
		if ready {
			pa.ready[a.IP] = a
			delete(pa.notReady, a.IP)
		} else if _, ok := pa.ready[a.IP]; !ok {
			pa.notReady[a.IP] = a
		}
	}
	for _, pod := range pods {
		if pod.Namespace != svc.Namespace || !endpointslice.PodInEndpoints(pod, pnr) {
			continue
		}
		ips := endpointslice.PodAddresses(pod, at)
		if len(ips) == 0 {
			continue
		}
		a := corev1.EndpointAddress{
			IP:        ips[0],
			TargetRef: &corev1.ObjectReference{Kind: "Pod", Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID},
		}
		if n := pod.Spec.NodeName; n != "" {
			a.NodeName = &n
		}
		if endpointslice.ShouldSetHostname(pod, svc) {
			a.Hostname = pod.Spec.Hostname
		}
		ready := pnr || endpointslice.PodReady(pod)
		if len(svc.Spec.Ports) == 0 && svc.Spec.ClusterIP == corev1.ClusterIPNone {
			add(corev1.EndpointPort{}, a, ready) // a headless service without ports
			continue
		}
		for i := range svc.Spec.Ports {
			sp := &svc.Spec.Ports[i]
			port, ok := endpointslice.FindPort(pod, sp)
			if !ok {
				continue
			}
			add(corev1.EndpointPort{Name: sp.Name, Port: port, Protocol: sp.Protocol, AppProtocol: sp.AppProtocol}, a, ready)
		}
	}
	// Repack: ports that share one set of addresses share a subset.
	bySet := map[string]*corev1.EndpointSubset{}
	for _, pa := range byPort {
		ready, notReady := sortedAddrs(pa.ready), sortedAddrs(pa.notReady)
		k := addrKey(ready) + "|" + addrKey(notReady)
		ss := bySet[k]
		if ss == nil {
			ss = &corev1.EndpointSubset{Addresses: ready, NotReadyAddresses: notReady}
			bySet[k] = ss
		}
		if pa.port != (corev1.EndpointPort{}) {
			ss.Ports = append(ss.Ports, pa.port)
		}
	}
	out := make([]corev1.EndpointSubset, 0, len(bySet))
	for _, ss := range bySet {
		slices.SortFunc(ss.Ports, func(a, b corev1.EndpointPort) int { return strings.Compare(portKey(a), portKey(b)) })
		out = append(out, *ss)
	}
	slices.SortFunc(out, func(a, b corev1.EndpointSubset) int { return strings.Compare(subsetKey(a), subsetKey(b)) })
	return out
}

func portKey(p corev1.EndpointPort) string {
	app := ""
	if p.AppProtocol != nil {
		app = *p.AppProtocol
	}
	return fmt.Sprintf("%s/%s/%05d/%s", p.Name, p.Protocol, p.Port, app)
}

func sortedAddrs(m map[string]corev1.EndpointAddress) []corev1.EndpointAddress {
	if len(m) == 0 {
		return nil
	}
	out := make([]corev1.EndpointAddress, 0, len(m))
	for _, ip := range slices.Sorted(maps.Keys(m)) {
		out = append(out, m[ip])
	}
	return out
}

func addrKey(as []corev1.EndpointAddress) string {
	ips := make([]string, len(as))
	for i, a := range as {
		ips[i] = a.IP
	}
	return strings.Join(ips, ",")
}

func subsetKey(s corev1.EndpointSubset) string {
	var ports []string
	for _, p := range s.Ports {
		ports = append(ports, portKey(p))
	}
	return strings.Join(ports, ";") + "#" + addrKey(s.Addresses) + "|" + addrKey(s.NotReadyAddresses)
}

// Count returns the addresses, ready and not, of subsets.
func Count(subsets []corev1.EndpointSubset) int {
	n := 0
	for _, s := range subsets {
		n += len(s.Addresses) + len(s.NotReadyAddresses)
	}
	return n
}

// Truncate cuts subsets to MaxCapacity addresses as upstream does, and
// reports whether it cut any: when the ready addresses alone exceed it,
// the not ready ones go and the ready ones are cut; else the not ready
// ones are cut. Each subset keeps its share, rounded up, in order. It
// returns a copy; subsets is not modified.
func Truncate(subsets []corev1.EndpointSubset) ([]corev1.EndpointSubset, bool) {
	var ready, notReady int
	for _, s := range subsets {
		ready += len(s.Addresses)
		notReady += len(s.NotReadyAddresses)
	}
	if ready+notReady <= MaxCapacity {
		return subsets, false
	}
	cutReady := ready > MaxCapacity
	budget, total := MaxCapacity-ready, notReady
	if cutReady {
		budget, total = MaxCapacity, ready
	}
	left := budget
	out := make([]corev1.EndpointSubset, 0, len(subsets))
	for _, s := range subsets {
		s = *s.DeepCopy()
		n := len(s.NotReadyAddresses)
		if cutReady {
			n = len(s.Addresses)
		}
		allowed := min(int(math.Ceil(float64(n)*float64(budget)/float64(total))), left)
		left -= allowed
		if cutReady {
			s.NotReadyAddresses = nil
			s.Addresses = s.Addresses[:allowed]
		} else {
			s.NotReadyAddresses = s.NotReadyAddresses[:allowed]
		}
		if len(s.Addresses)+len(s.NotReadyAddresses) > 0 {
			out = append(out, s)
		}
	}
	return out, true
}

// Labels returns the labels of svc's Endpoints: the service's, with
// service.kubernetes.io/headless for a headless one.
func Labels(svc *corev1.Service) map[string]string {
	l := maps.Clone(svc.Labels)
	if l == nil {
		l = map[string]string{}
	}
	delete(l, corev1.IsHeadlessService)
	if svc.Spec.ClusterIP == corev1.ClusterIPNone {
		l[corev1.IsHeadlessService] = ""
	}
	return l
}

// NeedsUpdate reports whether cur differs from what it should be: its
// subsets, labels or over-capacity annotation. The trigger time alone
// calls for no write.
func NeedsUpdate(cur *corev1.Endpoints, subsets []corev1.EndpointSubset, labels map[string]string, truncated bool) bool {
	_, over := cur.Annotations[OverCapacity]
	return over != truncated || !maps.Equal(cur.Labels, labels) || !equality.Semantic.DeepEqual(normalize(cur.Subsets), normalize(subsets))
}

// normalize treats nil and empty lists alike.
func normalize(ss []corev1.EndpointSubset) []corev1.EndpointSubset {
	if len(ss) == 0 {
		return nil
	}
	out := make([]corev1.EndpointSubset, len(ss))
	for i, s := range ss {
		if len(s.Addresses) == 0 {
			s.Addresses = nil
		}
		if len(s.NotReadyAddresses) == 0 {
			s.NotReadyAddresses = nil
		}
		if len(s.Ports) == 0 {
			s.Ports = nil
		}
		out[i] = s
	}
	return out
}
