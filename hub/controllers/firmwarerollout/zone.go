package firmwarerollout

import (
	"sync"
	"time"
	// The hub's zone database is its own: a node's time zone resolves
	// the same on any hub machine, with or without /usr/share/zoneinfo.
	_ "time/tzdata"

	corev1 "k8s.io/api/core/v1"

	"github.com/outpost-mesh/outpost/sync/wire"
)

// zones caches the locations of the zone names nodes reported. Only names
// that load are kept, so it holds at most the zone database's few hundred.
var zones sync.Map // string → *time.Location

// nodeLocation returns the time zone node n reported
// (wire.AnnotationTimeZone), in which its rollouts' maintenance windows
// open: UTC when it reported none, and with a message saying so when what
// it reported is no zone.
func nodeLocation(n *corev1.Node) (loc *time.Location, problem string) {
	name, ok := n.Annotations[wire.AnnotationTimeZone]
	if !ok {
		return time.UTC, ""
	}
	if l, ok := zones.Load(name); ok {
		return l.(*time.Location), ""
	}
	if err := wire.ValidTimeZone(name); err != nil {
		return time.UTC, err.Error() + "; maintenance windows in UTC"
	}
	l, err := time.LoadLocation(name)
	if err != nil {
		return time.UTC, "time zone " + name + " is not known; maintenance windows in UTC"
	}
	zones.Store(name, l)
	return l, ""
}
