package endpointslice

import (
	"maps"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Plan is what Reconcile decided: slices to create (with GenerateName),
// to update (copies of existing ones, changed) and to delete.
type Plan struct {
	Create, Update, Delete []*discoveryv1.EndpointSlice
}

// Empty reports whether p changes nothing.
func (p Plan) Empty() bool { return len(p.Create)+len(p.Update)+len(p.Delete) == 0 }

// Reconcile returns the plan that moves existing (the slices this
// controller manages for svc) to the desired groups, with at most max
// endpoints per slice (MaxEndpointsPerSlice when 0) and trigger as the
// last-change-trigger-time of the slices it writes (none when zero).
// Reconcile does no I/O and does not modify its arguments.
//
// As upstream's reconciler it limits churn: an endpoint that stays stays
// in its slice, a slice whose endpoints are all gone is deleted, and new
// endpoints go first into slices that are being updated anyway, then into
// the one other slice of their group closest to full, and only then into
// new slices. A service without endpoints keeps one empty placeholder
// slice, as upstream.
func Reconcile(svc *corev1.Service, groups []Group, existing []*discoveryv1.EndpointSlice, max int, trigger time.Time) Plan {
	if max <= 0 {
		max = MaxEndpointsPerSlice
	}
	meta := sliceMeta(svc, trigger)
	byGroup := map[string][]*discoveryv1.EndpointSlice{}
	for _, s := range existing {
		k := groupKey(s.AddressType, s.Ports)
		byGroup[k] = append(byGroup[k], s)
	}
	var p Plan
	for _, g := range groups {
		p.add(reconcileGroup(g, byGroup[g.key()], max, meta))
		delete(byGroup, g.key())
	}
	for _, k := range slices.Sorted(maps.Keys(byGroup)) {
		p.Delete = append(p.Delete, byGroup[k]...)
	}

	// Without any endpoint a service keeps one empty slice.
	if len(p.Create) == 0 && len(p.Delete) == len(existing) {
		placeholder := newSlice(meta, AddressTypes(svc)[0], []discoveryv1.EndpointPort{})
		if len(p.Delete) == 1 && isPlaceholder(p.Delete[0], placeholder) {
			keep := p.Delete[0]
			p.Delete = nil
			if !sameMeta(keep, meta) {
				p.Update = append(p.Update, withMeta(keep, meta))
			}
		} else {
			p.Create = append(p.Create, placeholder)
		}
	}

	// As upstream's reconciler: a slice to create takes the place of one
	// to delete of its address type, as an update, so that a service's
	// slices are not replaced when their ports change (its placeholder
	// when the first endpoint comes) and never seen two at once.
	for i := 0; i < len(p.Create); i++ {
		j := slices.IndexFunc(p.Delete, func(d *discoveryv1.EndpointSlice) bool { return d.AddressType == p.Create[i].AddressType })
		if j < 0 {
			continue
		}
		c, d := p.Create[i], p.Delete[j]
		u := withMeta(d, c.ObjectMeta)
		u.Ports, u.Endpoints = c.Ports, c.Endpoints
		p.Update = append(p.Update, u)
		p.Create = slices.Delete(p.Create, i, i+1)
		p.Delete = slices.Delete(p.Delete, j, j+1)
		i--
	}
	return p
}

func (p *Plan) add(q Plan) {
	p.Create = append(p.Create, q.Create...)
	p.Update = append(p.Update, q.Update...)
	p.Delete = append(p.Delete, q.Delete...)
}

// reconcileGroup plans the slices of one group.
func reconcileGroup(g Group, existing []*discoveryv1.EndpointSlice, max int, meta metav1.ObjectMeta) Plan {
	want := make(map[string]discoveryv1.Endpoint, len(g.Endpoints))
	for _, ep := range g.Endpoints {
		want[endpointKey(&ep)] = ep
	}
	var p Plan
	var updating, unchanged []*discoveryv1.EndpointSlice
	for _, s := range sortedByName(existing) {
		var eps []discoveryv1.Endpoint
		changed := false
		for _, ep := range s.Endpoints {
			k := endpointKey(&ep)
			w, ok := want[k]
			if !ok || len(eps) >= max {
				changed = true // gone, or over the cap (max was lowered)
				continue
			}
			delete(want, k)
			if !equality.Semantic.DeepEqual(ep, w) {
				changed = true
			}
			eps = append(eps, w)
		}
		switch {
		case len(eps) == 0:
			p.Delete = append(p.Delete, s)
		case changed || !sameMeta(s, meta) || !equality.Semantic.DeepEqual(s.Ports, g.Ports):
			u := withMeta(s, meta)
			u.Ports = g.Ports
			u.Endpoints = eps
			updating = append(updating, u)
		default:
			unchanged = append(unchanged, s)
		}
	}
	// What is left to place, in key order.
	var rest []discoveryv1.Endpoint
	for _, ep := range g.Endpoints {
		if _, ok := want[endpointKey(&ep)]; ok {
			rest = append(rest, ep)
		}
	}
	for _, u := range updating {
		n := min(max-len(u.Endpoints), len(rest))
		u.Endpoints = append(u.Endpoints, rest[:n]...)
		rest = rest[n:]
	}
	if len(rest) > 0 {
		// The one unchanged slice closest to full that has room for all
		// of the rest, so that a single write places them.
		var best *discoveryv1.EndpointSlice
		for _, s := range unchanged {
			if room := max - len(s.Endpoints); room >= len(rest) && (best == nil || len(s.Endpoints) > len(best.Endpoints)) {
				best = s
			}
		}
		if best != nil {
			u := withMeta(best, meta)
			u.Endpoints = append(slices.Clone(best.Endpoints), rest...)
			updating = append(updating, u)
			rest = nil
		}
	}
	for len(rest) > 0 {
		n := min(max, len(rest))
		s := newSlice(meta, g.AddressType, g.Ports)
		s.Endpoints = slices.Clone(rest[:n])
		p.Create = append(p.Create, s)
		rest = rest[n:]
	}
	p.Update = updating
	return p
}

func sortedByName(ss []*discoveryv1.EndpointSlice) []*discoveryv1.EndpointSlice {
	out := slices.Clone(ss)
	slices.SortFunc(out, func(a, b *discoveryv1.EndpointSlice) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// sliceMeta is the metadata every slice of svc carries: labels, owner,
// and the trigger time annotation.
func sliceMeta(svc *corev1.Service, trigger time.Time) metav1.ObjectMeta {
	labels := map[string]string{}
	for k, v := range svc.Labels {
		if k != discoveryv1.LabelServiceName && k != discoveryv1.LabelManagedBy && k != labelHeadless {
			labels[k] = v
		}
	}
	if svc.Spec.ClusterIP == corev1.ClusterIPNone {
		labels[labelHeadless] = ""
	}
	labels[discoveryv1.LabelServiceName] = svc.Name
	labels[discoveryv1.LabelManagedBy] = ManagedBy
	m := metav1.ObjectMeta{
		Namespace:       svc.Namespace,
		GenerateName:    generateName(svc.Name),
		Labels:          labels,
		OwnerReferences: []metav1.OwnerReference{ownerRef(svc)},
	}
	if !trigger.IsZero() {
		m.Annotations = map[string]string{corev1.EndpointsLastChangeTriggerTime: trigger.UTC().Format(time.RFC3339Nano)}
	}
	return m
}

// generateName is upstream's: the service's name and a dash, cut so that
// the generated name is a valid label.
func generateName(svc string) string {
	const maxPrefix = 63 - 5 - 1
	if len(svc) > maxPrefix {
		svc = svc[:maxPrefix]
	}
	return svc + "-"
}

func ownerRef(svc *corev1.Service) metav1.OwnerReference {
	return metav1.OwnerReference{
		APIVersion: "v1", Kind: "Service", Name: svc.Name, UID: svc.UID,
		Controller: ptr(true), BlockOwnerDeletion: ptr(true),
	}
}

func newSlice(meta metav1.ObjectMeta, at discoveryv1.AddressType, ports []discoveryv1.EndpointPort) *discoveryv1.EndpointSlice {
	return &discoveryv1.EndpointSlice{
		ObjectMeta:  *meta.DeepCopy(),
		AddressType: at,
		Ports:       ports,
		Endpoints:   []discoveryv1.Endpoint{},
	}
}

// sameMeta reports whether s carries meta's labels and owner; the
// trigger time alone does not call for a write.
func sameMeta(s *discoveryv1.EndpointSlice, meta metav1.ObjectMeta) bool {
	return maps.Equal(s.Labels, meta.Labels) && equality.Semantic.DeepEqual(s.OwnerReferences, meta.OwnerReferences)
}

// withMeta returns a copy of s with meta's labels, owner and annotation.
func withMeta(s *discoveryv1.EndpointSlice, meta metav1.ObjectMeta) *discoveryv1.EndpointSlice {
	u := s.DeepCopy()
	u.Labels = maps.Clone(meta.Labels)
	u.OwnerReferences = slices.Clone(meta.OwnerReferences)
	if v, ok := meta.Annotations[corev1.EndpointsLastChangeTriggerTime]; ok {
		if u.Annotations == nil {
			u.Annotations = map[string]string{}
		}
		u.Annotations[corev1.EndpointsLastChangeTriggerTime] = v
	}
	return u
}

// isPlaceholder reports whether s is an empty slice of the placeholder's
// address type.
func isPlaceholder(s, placeholder *discoveryv1.EndpointSlice) bool {
	return len(s.Endpoints) == 0 && len(s.Ports) == 0 && s.AddressType == placeholder.AddressType
}
