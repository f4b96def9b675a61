package services

import (
	"time"
	"unique"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
)

// Service is what routing and DNS read of a corev1.Service, kept in a
// fraction of the object's size: a node holds one per Service of its
// view, tens of thousands of them. FromService makes one. Fields keep the
// API's values unparsed, so that Build says what is wrong with them as it
// would of the object.
type Service struct {
	Namespace, Name string
	Created         time.Time // creationTimestamp: the older Service keeps a contested port
	Type            corev1.ServiceType
	// ClusterIP and ClusterIPs are spec's; ClusterIPs shares the string
	// of ClusterIP when they hold one address.
	ClusterIP  string
	ClusterIPs []string
	Ports      []ServicePort
	// ExternalIPs are spec.externalIPs; IngressIPs the load-balancer
	// ingress IPs that are in VIP mode (the default), as kube-proxy
	// captures only those.
	ExternalIPs, IngressIPs []string
	ExternalName            string // an ExternalName Service's target
	// ExternalLocal and InternalLocal say the external and internal
	// traffic policies are Local.
	ExternalLocal, InternalLocal bool
	// ClientIPAffinity is sessionAffinity ClientIP; AffinitySeconds its
	// timeout, nil when the Service sets none.
	ClientIPAffinity bool
	AffinitySeconds  *int32
	// PublishNotReady is spec.publishNotReadyAddresses.
	PublishNotReady bool
	// Topology says the Service asks for topology aware routing, by
	// spec.trafficDistribution or by its topology annotation.
	Topology bool
}

// ServicePort is one of a Service's ports.
type ServicePort struct {
	Name     string
	Protocol corev1.Protocol
	Port     int32
	NodePort int32
}

// Slice is what routing and DNS read of an EndpointSlice; FromSlice
// makes one.
type Slice struct {
	Namespace, Name string
	// Service is the slice's kubernetes.io/service-name label: "" for
	// none, and such a slice belongs to no Service.
	Service     string
	AddressType discoveryv1.AddressType
	Ports       []SlicePort
	Endpoints   []Endpoint
}

// SlicePort is one of an EndpointSlice's ports: Name "" and Protocol TCP
// where the API leaves them out, Port 0 where it does (a port for all
// ports, which kube-proxy does not support).
type SlicePort struct {
	Name     string
	Protocol corev1.Protocol
	Port     int32
}

// Endpoint is one endpoint of an EndpointSlice, its conditions read as
// the API defines a missing one: ready and serving unless said not,
// terminating only if said.
type Endpoint struct {
	Addresses                   []string
	Ready, Serving, Terminating bool
	// PodUID is the UID of the Pod its targetRef names, zero for none or
	// one that is not a UUID: the site mesh says pods' readiness by UID.
	// Sixteen bytes in the struct, where the UID's text would be a string
	// and a 48-byte allocation, for each of a large cluster's tens of
	// thousands of endpoints.
	PodUID   [16]byte
	Hostname string // "" for none
	NodeName string // "" for none
	// Zones are the zones its hints are for; none without hints.
	Zones []string
}

// FromService returns what routing and DNS read of s; nil for nil. Node
// names, port names and protocols, which repeat across objects, are
// interned; s is not kept.
func FromService(s *corev1.Service) *Service {
	if s == nil {
		return nil
	}
	sp := &s.Spec
	out := &Service{
		Namespace:        intern(s.Namespace),
		Name:             s.Name,
		Created:          s.CreationTimestamp.Time,
		Type:             corev1.ServiceType(intern(string(sp.Type))),
		ClusterIP:        sp.ClusterIP,
		ClusterIPs:       sp.ClusterIPs,
		ExternalIPs:      sp.ExternalIPs,
		ExternalName:     sp.ExternalName,
		ExternalLocal:    sp.ExternalTrafficPolicy == corev1.ServiceExternalTrafficPolicyLocal,
		InternalLocal:    sp.InternalTrafficPolicy != nil && *sp.InternalTrafficPolicy == corev1.ServiceInternalTrafficPolicyLocal,
		ClientIPAffinity: sp.SessionAffinity == corev1.ServiceAffinityClientIP,
		PublishNotReady:  sp.PublishNotReadyAddresses,
		Topology:         wantsTopology(s),
	}
	if len(sp.ClusterIPs) == 1 && sp.ClusterIPs[0] == sp.ClusterIP {
		out.ClusterIPs = []string{out.ClusterIP}
	}
	if c := sp.SessionAffinityConfig; c != nil && c.ClientIP != nil && c.ClientIP.TimeoutSeconds != nil {
		sec := *c.ClientIP.TimeoutSeconds
		out.AffinitySeconds = &sec
	}
	if len(sp.Ports) > 0 {
		out.Ports = make([]ServicePort, len(sp.Ports))
		for i, p := range sp.Ports {
			out.Ports[i] = ServicePort{Name: intern(p.Name), Protocol: corev1.Protocol(intern(string(p.Protocol))), Port: p.Port, NodePort: p.NodePort}
		}
	}
	for _, ing := range s.Status.LoadBalancer.Ingress {
		// Proxy-mode load balancers deliver to the node's own addresses:
		// kube-proxy captures only VIP-mode ingress IPs.
		if ing.IP != "" && (ing.IPMode == nil || *ing.IPMode == corev1.LoadBalancerIPModeVIP) {
			out.IngressIPs = append(out.IngressIPs, ing.IP)
		}
	}
	return out
}

// wantsTopology reports whether svc asks for topology aware routing: by
// spec.trafficDistribution, else by its topology annotation (the
// deprecated one first, as kube-proxy reads them).
func wantsTopology(svc *corev1.Service) bool {
	if td := svc.Spec.TrafficDistribution; td != nil {
		switch *td {
		case corev1.ServiceTrafficDistributionPreferClose, corev1.ServiceTrafficDistributionPreferSameZone,
			corev1.ServiceTrafficDistributionPreferSameNode:
			return true
		}
	}
	v, ok := svc.Annotations[corev1.DeprecatedAnnotationTopologyAwareHints]
	if !ok {
		v = svc.Annotations[corev1.AnnotationTopologyMode]
	}
	return v == "Auto" || v == "auto"
}

// FromSlice returns what routing and DNS read of e; nil for nil. Node
// names, port names and protocols are interned; e is not kept.
func FromSlice(e *discoveryv1.EndpointSlice) *Slice {
	if e == nil {
		return nil
	}
	out := &Slice{
		Namespace:   intern(e.Namespace),
		Name:        e.Name,
		Service:     e.Labels[discoveryv1.LabelServiceName],
		AddressType: discoveryv1.AddressType(intern(string(e.AddressType))),
	}
	if len(e.Ports) > 0 {
		out.Ports = make([]SlicePort, len(e.Ports))
		for i, p := range e.Ports {
			sp := SlicePort{Protocol: corev1.ProtocolTCP}
			if p.Name != nil {
				sp.Name = intern(*p.Name)
			}
			if p.Protocol != nil {
				sp.Protocol = corev1.Protocol(intern(string(*p.Protocol)))
			}
			if p.Port != nil {
				sp.Port = *p.Port
			}
			out.Ports[i] = sp
		}
	}
	if len(e.Endpoints) > 0 {
		out.Endpoints = make([]Endpoint, len(e.Endpoints))
		for i := range e.Endpoints {
			ep := &e.Endpoints[i]
			c := &ep.Conditions
			o := Endpoint{
				Addresses:   ep.Addresses,
				Ready:       c.Ready == nil || *c.Ready,
				Serving:     c.Serving == nil || *c.Serving,
				Terminating: c.Terminating != nil && *c.Terminating,
			}
			if r := ep.TargetRef; r != nil && r.Kind == "Pod" {
				o.PodUID, _ = ParseUID(string(r.UID))
			}
			if ep.Hostname != nil {
				o.Hostname = *ep.Hostname
			}
			if ep.NodeName != nil {
				o.NodeName = intern(*ep.NodeName)
			}
			if h := ep.Hints; h != nil && len(h.ForZones) > 0 {
				o.Zones = make([]string, len(h.ForZones))
				for j, z := range h.ForZones {
					o.Zones[j] = intern(z.Name)
				}
			}
			out.Endpoints[i] = o
		}
	}
	return out
}

// ParseUID returns the 16 bytes of the UID s, an object's metadata.uid
// as Kubernetes writes it: a UUID's 36-character text (8-4-4-4-12
// hexadecimal digits of either case). ok is false for anything else, and
// for the nil UUID, which no object has. It does not allocate.
func ParseUID(s string) (uid [16]byte, ok bool) {
	if len(s) != 36 || s[8] != '-' || s[13] != '-' || s[18] != '-' || s[23] != '-' {
		return [16]byte{}, false
	}
	var or byte
	for j, i := range uidDigits {
		hi, ok1 := unhex(s[i])
		lo, ok2 := unhex(s[i+1])
		if !ok1 || !ok2 {
			return [16]byte{}, false
		}
		uid[j] = hi<<4 | lo
		or |= uid[j]
	}
	if or == 0 {
		return [16]byte{}, false
	}
	return uid, true
}

// uidDigits are where each byte's two digits start in a UID's text.
var uidDigits = [16]int{0, 2, 4, 6, 9, 11, 14, 16, 19, 21, 24, 26, 28, 30, 32, 34}

// unhex returns the value of the hexadecimal digit c.
func unhex(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

// FromServices returns FromService of each of svcs, in their order.
func FromServices(svcs []*corev1.Service) []*Service {
	out := make([]*Service, len(svcs))
	for i, s := range svcs {
		out[i] = FromService(s)
	}
	return out
}

// FromSlices returns FromSlice of each of slices, in their order.
func FromSlices(slices []*discoveryv1.EndpointSlice) []*Slice {
	out := make([]*Slice, len(slices))
	for i, e := range slices {
		out[i] = FromSlice(e)
	}
	return out
}

// intern returns s, one copy of it for all its uses.
func intern(s string) string {
	if s == "" {
		return ""
	}
	return unique.Make(s).Value()
}
