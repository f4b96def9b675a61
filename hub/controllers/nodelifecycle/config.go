package nodelifecycle

import (
	"errors"
	"time"
)

// AnnotationOfflineTolerance on a Node turns on taint-based eviction for
// it: once the node has been unreachable for the annotation's duration
// (a Go duration, such as "10m"), it is tainted
// node.kubernetes.io/unreachable:NoExecute and its pods are evicted as
// upstream's taint manager evicts them. Without it, the pods of an
// unreachable node are left alone: an edge node runs them on its own.
const AnnotationOfflineTolerance = "outpost.dev/offline-tolerance"

// Config configures the Controller.
type Config struct {
	// GracePeriod is how long a node's Lease may go unrenewed before the
	// node is taken as unreachable: 40 s, upstream's
	// --node-monitor-grace-period.
	GracePeriod time.Duration
	// StartupGracePeriod is how long a node that has no Lease yet is
	// given from its creation: 60 s, upstream's
	// --node-startup-grace-period.
	StartupGracePeriod time.Duration
	// MarkPodsNotReady sets the Ready condition of an unreachable node's
	// pods False, as upstream does, which takes them out of the
	// EndpointSlices: true. The node reports them Ready again when it is
	// back only if it reconciles its reports with the hub's copy, as
	// kubelet's status manager does.
	MarkPodsNotReady bool
	// Workers is how many nodes are worked on at once: 4.
	Workers int
}

// DefaultConfig returns upstream's defaults.
func DefaultConfig() Config {
	return Config{
		GracePeriod:        40 * time.Second,
		StartupGracePeriod: 60 * time.Second,
		MarkPodsNotReady:   true,
		Workers:            4,
	}
}

// Validate reports the first field of c out of range.
func (c Config) Validate() error {
	switch {
	case c.GracePeriod <= 0:
		return errors.New("nodelifecycle: GracePeriod must be positive")
	case c.StartupGracePeriod <= 0:
		return errors.New("nodelifecycle: StartupGracePeriod must be positive")
	case c.Workers <= 0:
		return errors.New("nodelifecycle: Workers must be positive")
	}
	return nil
}
