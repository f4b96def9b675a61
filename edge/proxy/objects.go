package proxy

import (
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
// annotations that ask for topology-aware routing, its spec and its
// load-balancer status.
func slimService(s *corev1.Service) *corev1.Service {
	out := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: s.Namespace, Name: s.Name, UID: s.UID, CreationTimestamp: s.CreationTimestamp},
		Spec:       s.Spec,
		Status:     corev1.ServiceStatus{LoadBalancer: s.Status.LoadBalancer},
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
// and Service, address type, ports and endpoints.
func slimSlice(e *discoveryv1.EndpointSlice) *discoveryv1.EndpointSlice {
	out := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: e.Namespace, Name: e.Name, CreationTimestamp: e.CreationTimestamp},
		AddressType: e.AddressType,
		Ports:       e.Ports,
		Endpoints:   e.Endpoints,
	}
	if v, ok := e.Labels[discoveryv1.LabelServiceName]; ok {
		out.Labels = map[string]string{discoveryv1.LabelServiceName: v}
	}
	return out
}
