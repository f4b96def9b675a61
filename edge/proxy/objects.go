package proxy

import (
	"unique"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/outpost-mesh/outpost/edge/checkpoint"
	"github.com/outpost-mesh/outpost/edge/objects"
	"github.com/outpost-mesh/outpost/netd/services"
	"github.com/outpost-mesh/outpost/sync/wire"
)

// objectCache keeps the view's Services and EndpointSlices decoded, each
// slimmed to what routing and DNS read, so that a rebuild decodes only
// what changed and the node holds a fraction of the objects' size.
type objectCache struct {
	svcs   map[wire.Key]cachedService
	slices map[wire.Key]cachedSlice
}

type cachedService struct {
	rev int64
	svc *corev1.Service // nil: it did not decode
	err string
}

type cachedSlice struct {
	rev   int64
	slice *discoveryv1.EndpointSlice
	err   string
}

// update reads the view's Services and EndpointSlices and returns them
// decoded, in the view's order, with the problems of those that do not
// decode. Only objects whose revision changed since the last update are
// decoded; the view's bytes are not copied.
func (c *objectCache) update(v View) (svcs []*corev1.Service, eps []*discoveryv1.EndpointSlice, problems []services.Problem, err error) {
	nextS := make(map[wire.Key]cachedService, len(c.svcs))
	svcs = make([]*corev1.Service, 0, len(c.svcs))
	err = v.Scan(wire.ResourceServices, func(o checkpoint.Object) {
		cs, ok := c.svcs[o.Key]
		if !ok || cs.rev != o.Revision {
			cs = cachedService{rev: o.Revision}
			var s corev1.Service
			if err := objects.Decode(o.Raw, o.Revision, &s); err != nil {
				cs.err = err.Error()
			} else {
				cs.svc = slimService(&s)
			}
		}
		nextS[o.Key] = cs
		if cs.svc == nil {
			problems = append(problems, services.Problem{Service: o.Key.String(), Reason: "undecodable: " + cs.err})
			return
		}
		svcs = append(svcs, cs.svc)
	})
	if err != nil {
		return nil, nil, nil, err
	}
	nextE := make(map[wire.Key]cachedSlice, len(c.slices))
	eps = make([]*discoveryv1.EndpointSlice, 0, len(c.slices))
	err = v.Scan(wire.ResourceEndpointSlices, func(o checkpoint.Object) {
		ce, ok := c.slices[o.Key]
		if !ok || ce.rev != o.Revision {
			ce = cachedSlice{rev: o.Revision}
			var e discoveryv1.EndpointSlice
			if err := objects.Decode(o.Raw, o.Revision, &e); err != nil {
				ce.err = err.Error()
			} else {
				ce.slice = slimSlice(&e)
			}
		}
		nextE[o.Key] = ce
		if ce.slice == nil {
			problems = append(problems, services.Problem{Service: o.Key.String(), Reason: "undecodable endpoint slice: " + ce.err})
			return
		}
		eps = append(eps, ce.slice)
	})
	if err != nil {
		return nil, nil, nil, err
	}
	c.svcs, c.slices = nextS, nextE
	return svcs, eps, problems, nil
}

// slimService returns what routing and DNS read of s: its name,
// namespace, creation time (older Services keep contested ports), the
// annotations that ask for topology-aware routing, the fields of its spec
// that netd/services and netd/dns read, and its load-balancer ingress
// IPs with their modes. The selector, which is often the larger part, is left behind.
func slimService(s *corev1.Service) *corev1.Service {
	sp := &s.Spec
	out := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: intern(s.Namespace), Name: s.Name, CreationTimestamp: s.CreationTimestamp},
		Spec: corev1.ServiceSpec{
			Type:                     corev1.ServiceType(intern(string(sp.Type))),
			ClusterIP:                sp.ClusterIP,
			ClusterIPs:               sp.ClusterIPs,
			ExternalIPs:              sp.ExternalIPs,
			ExternalName:             sp.ExternalName,
			ExternalTrafficPolicy:    corev1.ServiceExternalTrafficPolicy(intern(string(sp.ExternalTrafficPolicy))),
			InternalTrafficPolicy:    sp.InternalTrafficPolicy,
			SessionAffinity:          corev1.ServiceAffinity(intern(string(sp.SessionAffinity))),
			SessionAffinityConfig:    sp.SessionAffinityConfig,
			PublishNotReadyAddresses: sp.PublishNotReadyAddresses,
			TrafficDistribution:      sp.TrafficDistribution,
		},
	}
	if len(sp.ClusterIPs) == 1 && sp.ClusterIPs[0] == sp.ClusterIP {
		out.Spec.ClusterIPs = []string{out.Spec.ClusterIP} // one string, not two
	}
	if len(sp.Ports) > 0 {
		out.Spec.Ports = make([]corev1.ServicePort, len(sp.Ports))
		for i, p := range sp.Ports {
			out.Spec.Ports[i] = corev1.ServicePort{
				Name:     intern(p.Name),
				Protocol: corev1.Protocol(intern(string(p.Protocol))),
				Port:     p.Port,
				NodePort: p.NodePort,
			}
		}
	}
	for _, in := range s.Status.LoadBalancer.Ingress {
		if in.IP != "" {
			out.Status.LoadBalancer.Ingress = append(out.Status.LoadBalancer.Ingress, corev1.LoadBalancerIngress{IP: in.IP, IPMode: in.IPMode})
		}
	}
	for _, k := range []string{corev1.AnnotationTopologyMode, corev1.DeprecatedAnnotationTopologyAwareHints} {
		if v, ok := s.Annotations[k]; ok {
			if out.Annotations == nil {
				out.Annotations = map[string]string{}
			}
			out.Annotations[k] = v
		}
	}
	return out
}

// slimSlice returns what routing and DNS read of e: its name, namespace
// and Service, address type, ports, and of each endpoint its addresses,
// conditions, hostname, node and zone hints. The endpoints' references to
// their pods are left behind; node names, port names and protocols, which
// repeat across the slices, are interned, and the conditions point at
// shared values.
func slimSlice(e *discoveryv1.EndpointSlice) *discoveryv1.EndpointSlice {
	out := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: intern(e.Namespace), Name: e.Name, CreationTimestamp: e.CreationTimestamp},
		AddressType: discoveryv1.AddressType(intern(string(e.AddressType))),
	}
	if v, ok := e.Labels[discoveryv1.LabelServiceName]; ok {
		out.Labels = map[string]string{discoveryv1.LabelServiceName: v}
	}
	if len(e.Ports) > 0 {
		out.Ports = make([]discoveryv1.EndpointPort, len(e.Ports))
		for i, p := range e.Ports {
			out.Ports[i] = discoveryv1.EndpointPort{Name: internPtr(p.Name), Port: p.Port}
			if p.Protocol != nil {
				proto := corev1.Protocol(intern(string(*p.Protocol)))
				out.Ports[i].Protocol = &proto
			}
		}
	}
	if len(e.Endpoints) > 0 {
		out.Endpoints = make([]discoveryv1.Endpoint, len(e.Endpoints))
		for i, ep := range e.Endpoints {
			out.Endpoints[i] = discoveryv1.Endpoint{
				Addresses: ep.Addresses,
				Conditions: discoveryv1.EndpointConditions{
					Ready:       shared(ep.Conditions.Ready),
					Serving:     shared(ep.Conditions.Serving),
					Terminating: shared(ep.Conditions.Terminating),
				},
				Hostname: ep.Hostname,
				NodeName: internPtr(ep.NodeName),
				Hints:    ep.Hints,
			}
		}
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

func internPtr(s *string) *string {
	if s == nil {
		return nil
	}
	v := intern(*s)
	return &v
}

var yes, no = true, false

// shared returns a pointer to a shared true or false for b's value: the
// cached objects are never modified (narrow copies what it changes).
func shared(b *bool) *bool {
	switch {
	case b == nil:
		return nil
	case *b:
		return &yes
	default:
		return &no
	}
}
