package proxy

import (
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/outpost-mesh/outpost/edge/checkpoint"
	"github.com/outpost-mesh/outpost/edge/objects"
	"github.com/outpost-mesh/outpost/netd/services"
	"github.com/outpost-mesh/outpost/sync/wire"
)

// objectCache keeps what routing and DNS read of the view's Services and
// EndpointSlices (services.FromService and FromSlice), so that a rebuild
// decodes only what changed and the node holds a fraction of the
// objects' size.
type objectCache struct {
	svcs   map[wire.Key]cachedService
	slices map[wire.Key]cachedSlice
}

type cachedService struct {
	rev int64
	svc *services.Service // nil: it did not decode
	err string
}

type cachedSlice struct {
	rev   int64
	slice *services.Slice
	err   string
}

// update reads the view's Services and EndpointSlices and returns them
// decoded, in the view's order, with the problems of those that do not
// decode. Only objects whose revision changed since the last update are
// decoded; the view's bytes are not copied.
func (c *objectCache) update(v View) (svcs []*services.Service, eps []*services.Slice, problems []services.Problem, err error) {
	nextS := make(map[wire.Key]cachedService, len(c.svcs))
	svcs = make([]*services.Service, 0, len(c.svcs))
	err = v.Scan(wire.ResourceServices, func(o checkpoint.Object) {
		cs, ok := c.svcs[o.Key]
		if !ok || cs.rev != o.Revision {
			cs = cachedService{rev: o.Revision}
			var s corev1.Service
			if err := objects.Decode(o.Raw, o.Revision, &s); err != nil {
				cs.err = err.Error()
			} else {
				cs.svc = services.FromService(&s)
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
	eps = make([]*services.Slice, 0, len(c.slices))
	err = v.Scan(wire.ResourceEndpointSlices, func(o checkpoint.Object) {
		ce, ok := c.slices[o.Key]
		if !ok || ce.rev != o.Revision {
			ce = cachedSlice{rev: o.Revision}
			var e discoveryv1.EndpointSlice
			if err := objects.Decode(o.Raw, o.Revision, &e); err != nil {
				ce.err = err.Error()
			} else {
				ce.slice = services.FromSlice(&e)
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
