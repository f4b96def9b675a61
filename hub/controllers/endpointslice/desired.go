package endpointslice

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// Labels and values of the slices this controller manages.
const (
	// ManagedBy is the endpointslice.kubernetes.io/managed-by value of
	// the slices this controller manages, upstream's.
	ManagedBy = "endpointslice-controller.k8s.io"
	// LabelSite is the label of a Node naming its site.
	LabelSite = "topology.outpost.dev/site"
	// labelHeadless marks the slices of headless services, as upstream.
	labelHeadless = corev1.IsHeadlessService
	// MaxEndpointsPerSlice is upstream's default
	// --max-endpoints-per-slice.
	MaxEndpointsPerSlice = 100
)

// Group is the endpoints of one address type that share one set of
// ports: the contents of one or more slices.
type Group struct {
	AddressType discoveryv1.AddressType
	// Ports are the resolved ports, sorted by name.
	Ports []discoveryv1.EndpointPort
	// Endpoints are sorted by key (the pod's name).
	Endpoints []discoveryv1.Endpoint
}

// key identifies the group among a service's.
func (g Group) key() string { return groupKey(g.AddressType, g.Ports) }

func groupKey(at discoveryv1.AddressType, ports []discoveryv1.EndpointPort) string {
	var b strings.Builder
	b.WriteString(string(at))
	for _, p := range sortedPorts(ports) {
		fmt.Fprintf(&b, "|%s/%s/%d/%s", deref(p.Name), derefProto(p.Protocol), deref(p.Port), deref(p.AppProtocol))
	}
	return b.String()
}

func sortedPorts(ports []discoveryv1.EndpointPort) []discoveryv1.EndpointPort {
	out := slices.Clone(ports)
	slices.SortFunc(out, func(a, b discoveryv1.EndpointPort) int {
		if c := strings.Compare(deref(a.Name), deref(b.Name)); c != 0 {
			return c
		}
		return strings.Compare(string(derefProto(a.Protocol)), string(derefProto(b.Protocol)))
	})
	return out
}

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}

func derefProto(p *corev1.Protocol) corev1.Protocol { return deref(p) }

// endpointKey identifies an endpoint across reconciles: its pod, or its
// first address.
func endpointKey(ep *discoveryv1.Endpoint) string {
	if ep.TargetRef != nil {
		return ep.TargetRef.Namespace + "/" + ep.TargetRef.Name
	}
	if len(ep.Addresses) > 0 {
		return "addr/" + ep.Addresses[0]
	}
	return ""
}

// AddressTypes returns the address types of a service's slices, from its
// IP families (IPv4 when it has none).
func AddressTypes(svc *corev1.Service) []discoveryv1.AddressType {
	var out []discoveryv1.AddressType
	for _, f := range svc.Spec.IPFamilies {
		switch f {
		case corev1.IPv4Protocol:
			out = append(out, discoveryv1.AddressTypeIPv4)
		case corev1.IPv6Protocol:
			out = append(out, discoveryv1.AddressTypeIPv6)
		}
	}
	if len(out) == 0 {
		out = append(out, discoveryv1.AddressTypeIPv4)
	}
	return out
}

// PodInEndpoints reports whether pod belongs among a service's
// endpoints, as upstream decides: it has an IP, it is not done for good
// (a pod that will not restart and has terminated), and it is not being
// deleted unless includeTerminating.
func PodInEndpoints(pod *corev1.Pod, includeTerminating bool) bool {
	if pod.Status.PodIP == "" && len(pod.Status.PodIPs) == 0 {
		return false
	}
	if !includeTerminating && pod.DeletionTimestamp != nil {
		return false
	}
	switch pod.Spec.RestartPolicy {
	case corev1.RestartPolicyNever:
		return pod.Status.Phase != corev1.PodFailed && pod.Status.Phase != corev1.PodSucceeded
	case corev1.RestartPolicyOnFailure:
		return pod.Status.Phase != corev1.PodSucceeded
	}
	return true
}

// PodReady reports whether pod's Ready condition is True.
func PodReady(pod *corev1.Pod) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// FindPort resolves a service port's targetPort on pod: a number is
// itself; a name is that of a container port of pod with the service
// port's protocol. ok is false when pod has no such named port.
func FindPort(pod *corev1.Pod, sp *corev1.ServicePort) (port int32, ok bool) {
	switch sp.TargetPort.Type {
	case intstr.String:
		name := sp.TargetPort.StrVal
		for _, c := range pod.Spec.Containers {
			for _, p := range c.Ports {
				proto := p.Protocol
				if proto == "" {
					proto = corev1.ProtocolTCP
				}
				if p.Name == name && proto == sp.Protocol {
					return p.ContainerPort, true
				}
			}
		}
		return 0, false
	default:
		if sp.TargetPort.IntVal == 0 {
			return sp.Port, true
		}
		return sp.TargetPort.IntVal, true
	}
}

// PodAddresses returns pod's IPs of the address type, in status order.
func PodAddresses(pod *corev1.Pod, at discoveryv1.AddressType) []string {
	ips := make([]string, 0, len(pod.Status.PodIPs)+1)
	for _, ip := range pod.Status.PodIPs {
		ips = append(ips, ip.IP)
	}
	if len(ips) == 0 && pod.Status.PodIP != "" {
		ips = append(ips, pod.Status.PodIP)
	}
	var out []string
	for _, s := range ips {
		a, err := netip.ParseAddr(s)
		if err != nil {
			continue
		}
		if (at == discoveryv1.AddressTypeIPv6) == (a.Is6() && !a.Is4In6()) {
			out = append(out, a.Unmap().String())
		}
	}
	return out
}

// ShouldSetHostname reports whether pod's endpoint carries its hostname:
// a pod whose subdomain is the service's name.
func ShouldSetHostname(pod *corev1.Pod, svc *corev1.Service) bool {
	return pod.Spec.Hostname != "" && pod.Spec.Subdomain == svc.Name && pod.Namespace == svc.Namespace
}

// Desired returns the groups of endpoints svc should have from pods (the
// pods its selector matches; others are ignored), sorted by key. node
// returns the Node of a name, or nil when it is unknown. Desired does no
// I/O.
func Desired(svc *corev1.Service, pods []*corev1.Pod, node func(name string) *corev1.Node) []Group {
	groups := map[string]*Group{}
	for _, at := range AddressTypes(svc) {
		for _, pod := range pods {
			if pod.Namespace != svc.Namespace || !PodInEndpoints(pod, true) {
				continue
			}
			addrs := PodAddresses(pod, at)
			if len(addrs) == 0 {
				continue
			}
			ports := endpointPorts(svc, pod)
			g := groups[groupKey(at, ports)]
			if g == nil {
				g = &Group{AddressType: at, Ports: ports}
				groups[g.key()] = g
			}
			g.Endpoints = append(g.Endpoints, podEndpoint(svc, pod, addrs, node))
		}
	}
	out := make([]Group, 0, len(groups))
	for _, g := range groups {
		slices.SortFunc(g.Endpoints, func(a, b discoveryv1.Endpoint) int { return strings.Compare(endpointKey(&a), endpointKey(&b)) })
		out = append(out, *g)
	}
	slices.SortFunc(out, func(a, b Group) int { return strings.Compare(a.key(), b.key()) })
	return out
}

// endpointPorts resolves svc's ports on pod, leaving out those it cannot.
func endpointPorts(svc *corev1.Service, pod *corev1.Pod) []discoveryv1.EndpointPort {
	var out []discoveryv1.EndpointPort
	for i := range svc.Spec.Ports {
		sp := &svc.Spec.Ports[i]
		port, ok := FindPort(pod, sp)
		if !ok {
			continue
		}
		out = append(out, discoveryv1.EndpointPort{
			Name:        ptr(sp.Name),
			Port:        ptr(port),
			Protocol:    ptr(sp.Protocol),
			AppProtocol: sp.AppProtocol,
		})
	}
	return sortedPorts(out)
}

func ptr[T any](v T) *T { return &v }

// podEndpoint is pod's endpoint in svc's slices.
func podEndpoint(svc *corev1.Service, pod *corev1.Pod, addrs []string, node func(string) *corev1.Node) discoveryv1.Endpoint {
	pnr := svc.Spec.PublishNotReadyAddresses
	ready := PodReady(pod)
	terminating := pod.DeletionTimestamp != nil
	ep := discoveryv1.Endpoint{
		Addresses: addrs,
		Conditions: discoveryv1.EndpointConditions{
			Ready:       ptr(pnr || (ready && !terminating)),
			Serving:     ptr(pnr || ready),
			Terminating: ptr(terminating),
		},
		TargetRef: &corev1.ObjectReference{Kind: "Pod", Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID},
	}
	if ShouldSetHostname(pod, svc) {
		ep.Hostname = ptr(pod.Spec.Hostname)
	}
	if n := pod.Spec.NodeName; n != "" {
		ep.NodeName = ptr(n)
		if nd := node(n); nd != nil {
			zone, site := nd.Labels[corev1.LabelTopologyZone], nd.Labels[LabelSite]
			if zone != "" {
				ep.Zone = ptr(zone)
			}
			if hint := cmpOr(zone, site); hint != "" {
				ep.Hints = &discoveryv1.EndpointHints{ForZones: []discoveryv1.ForZone{{Name: hint}}}
			}
		}
	}
	return ep
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// TriggerTime is the time of the latest change among svc and pods that
// the endpoints reflect, for the endpoints.kubernetes.io/last-change-
// trigger-time annotation: a pod's creation, its last Ready transition or
// its deletion, or the service's creation. It is zero when none is known.
func TriggerTime(svc *corev1.Service, pods []*corev1.Pod) time.Time {
	t := svc.CreationTimestamp.Time
	for _, pod := range pods {
		for _, c := range []time.Time{pod.CreationTimestamp.Time, readyTransition(pod), deletionTime(pod)} {
			if c.After(t) {
				t = c
			}
		}
	}
	return t
}

func readyTransition(pod *corev1.Pod) time.Time {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.LastTransitionTime.Time
		}
	}
	return time.Time{}
}

func deletionTime(pod *corev1.Pod) time.Time {
	if pod.DeletionTimestamp == nil {
		return time.Time{}
	}
	// The grace period runs from the delete: its start is the change.
	if g := pod.DeletionGracePeriodSeconds; g != nil {
		return pod.DeletionTimestamp.Add(-time.Duration(*g) * time.Second)
	}
	return pod.DeletionTimestamp.Time
}
