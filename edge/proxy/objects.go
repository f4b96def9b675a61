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
// objects' size. Entries are updated in place, and those the view no
// longer holds dropped after each update: a rebuild of a large cluster
// does not make its maps again.
type objectCache struct {
	svcs   map[wire.Key]*cachedService
	slices map[wire.Key]*cachedSlice
	pass   uint64 // counts updates; an entry's seen is the last that saw it
}

type cachedService struct {
	rev  int64
	seen uint64
	svc  *services.Service // nil: it did not decode
	err  string
}

type cachedSlice struct {
	rev   int64
	seen  uint64
	slice *services.Slice
	err   string
}

// update reads the view's Services and EndpointSlices and returns them
// decoded, in the view's order, with the problems of those that do not
// decode. Only objects whose revision changed since the last update are
// decoded; the view's bytes are not copied.
func (c *objectCache) update(v View) (svcs []*services.Service, eps []*services.Slice, problems []services.Problem, err error) {
	if c.svcs == nil {
		c.svcs, c.slices = map[wire.Key]*cachedService{}, map[wire.Key]*cachedSlice{}
	}
	c.pass++
	svcs = make([]*services.Service, 0, len(c.svcs))
	err = v.Scan(wire.ResourceServices, func(o checkpoint.Object) {
		cs := c.svcs[o.Key]
		if cs == nil || cs.rev != o.Revision {
			cs = &cachedService{rev: o.Revision}
			var s corev1.Service
			if err := objects.Decode(o.Raw, o.Revision, &s); err != nil {
				cs.err = err.Error()
			} else {
				cs.svc = services.FromService(&s)
			}
			c.svcs[o.Key] = cs
		}
		cs.seen = c.pass
		if cs.svc == nil {
			problems = append(problems, services.Problem{Service: o.Key.String(), Reason: "undecodable: " + cs.err})
			return
		}
		svcs = append(svcs, cs.svc)
	})
	if err != nil {
		return nil, nil, nil, err
	}
	eps = make([]*services.Slice, 0, len(c.slices))
	err = v.Scan(wire.ResourceEndpointSlices, func(o checkpoint.Object) {
		ce := c.slices[o.Key]
		if ce == nil || ce.rev != o.Revision {
			ce = &cachedSlice{rev: o.Revision}
			var e discoveryv1.EndpointSlice
			if err := objects.Decode(o.Raw, o.Revision, &e); err != nil {
				ce.err = err.Error()
			} else {
				ce.slice = services.FromSlice(&e)
			}
			c.slices[o.Key] = ce
		}
		ce.seen = c.pass
		if ce.slice == nil {
			problems = append(problems, services.Problem{Service: o.Key.String(), Reason: "undecodable endpoint slice: " + ce.err})
			return
		}
		eps = append(eps, ce.slice)
	})
	if err != nil {
		return nil, nil, nil, err
	}
	for k, cs := range c.svcs {
		if cs.seen != c.pass {
			delete(c.svcs, k)
		}
	}
	for k, ce := range c.slices {
		if ce.seen != c.pass {
			delete(c.slices, k)
		}
	}
	return svcs, eps, problems, nil
}
