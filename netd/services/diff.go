package services

import "slices"

// Equal reports whether f and g route the same way.
func (f *Frontend) Equal(g *Frontend) bool {
	if f == nil || g == nil {
		return f == g
	}
	return f.Key == g.Key && f.Kind == g.Kind && f.Service == g.Service && f.PortName == g.PortName &&
		f.ExternalLocal == g.ExternalLocal && f.Affinity == g.Affinity &&
		slices.Equal(f.Backends, g.Backends) && slices.Equal(f.ExternalBackends, g.ExternalBackends)
}

// Diff returns the frontends of next that are new or differ from prev's,
// and the keys of prev's frontends that next lacks: what a dataplane
// holding prev must change to hold next.
func Diff(prev, next Table) (changed []*Frontend, removed []Key) {
	for k, f := range next {
		if !f.Equal(prev[k]) {
			changed = append(changed, f)
		}
	}
	for k := range prev {
		if _, ok := next[k]; !ok {
			removed = append(removed, k)
		}
	}
	return changed, removed
}
