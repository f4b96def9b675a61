package eviction

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// Config configures the readings, the thresholds and the Monitor.
type Config struct {
	// ProcDir is where procfs is mounted.
	ProcDir string
	// DataDir is a directory on nodefs, the agent's data directory; ""
	// for no nodefs signals.
	DataDir string
	// ImageFsDir is a directory on imagefs, such as containerd's root;
	// "" for no imagefs signals.
	ImageFsDir string
	// Memory is where memory.available's working set comes from; nil for
	// the machine's (/proc/meminfo), as kubelet's root cgroup.
	Memory MemorySource

	// Thresholds are the eviction thresholds, hard and soft.
	Thresholds []Threshold
	// PressureTransitionPeriod is how long a pressure condition stays
	// true after its threshold was last met, so that it does not flap.
	PressureTransitionPeriod time.Duration
	// MaxPodGracePeriod caps the termination grace of a pod evicted for a
	// soft threshold; 0 for the pod's own. Hard thresholds evict at once.
	MaxPodGracePeriod time.Duration

	// MaxPods is the node's pod capacity.
	MaxPods int64
	// SystemReserved and KubeReserved are held back from pods, as
	// kubelet's --system-reserved and --kube-reserved; nil for none.
	SystemReserved, KubeReserved corev1.ResourceList

	// Housekeeping is how often Monitor takes readings.
	Housekeeping time.Duration
	// ImageGC, when set, is asked to delete unused images when a
	// threshold of the file system holding images is met, before a pod
	// is evicted for it.
	ImageGC ImageGC
	// Evictor, when set, carries out the rounds' evictions; nil leaves
	// them to whoever reads the snapshots.
	Evictor Evictor
	// OnRound, when set, is called from Run's goroutine with each round's
	// snapshot, before its eviction is carried out. It must not block.
	OnRound func(Snapshot)
	Logger  *slog.Logger // or nil for slog.Default()
}

// ImageGC deletes images no container uses.
type ImageGC interface {
	DeleteUnusedImages(ctx context.Context) error
}

// DefaultConfig returns kubelet's defaults, reading nodefs and imagefs
// from nowhere until DataDir and ImageFsDir are set.
func DefaultConfig() Config {
	return Config{
		ProcDir:                  "/proc",
		Thresholds:               DefaultThresholds(), // kubelet's evictionHard on Linux
		PressureTransitionPeriod: 5 * time.Minute,     // evictionPressureTransitionPeriod
		MaxPodGracePeriod:        0,                   // evictionMaxPodGracePeriod: the pod's own
		MaxPods:                  110,                 // maxPods
		Housekeeping:             10 * time.Second,    // kubelet's housekeeping interval
	}
}

// Validate reports what is wrong with c.
func (c *Config) Validate() error {
	var errs []error
	if c.ProcDir == "" {
		errs = append(errs, errors.New("proc dir: want a directory, such as /proc"))
	}
	for _, t := range c.Thresholds {
		if _, ok := signalResource[t.Signal]; !ok {
			errs = append(errs, fmt.Errorf("unsupported eviction signal %v", t.Signal))
		}
		if t.Value.IsZero() {
			errs = append(errs, fmt.Errorf("eviction threshold %v: no value", t.Signal))
		}
		if t.Value.Percentage < 0 || t.Value.Percentage > 1 || t.GracePeriod < 0 {
			errs = append(errs, fmt.Errorf("eviction threshold %v: out of range", t))
		}
	}
	if c.PressureTransitionPeriod < 0 || c.MaxPodGracePeriod < 0 {
		errs = append(errs, errors.New("pressure transition and max pod grace periods: want 0 or more"))
	}
	if c.MaxPods <= 0 {
		errs = append(errs, fmt.Errorf("max pods %d: want 1 or more", c.MaxPods))
	}
	if c.Housekeeping <= 0 {
		errs = append(errs, fmt.Errorf("housekeeping interval %v: want more than 0", c.Housekeeping))
	}
	for _, rl := range []corev1.ResourceList{c.SystemReserved, c.KubeReserved} {
		for name, q := range rl {
			if q.Sign() < 0 {
				errs = append(errs, fmt.Errorf("reserved %s %s: want 0 or more", name, q.String()))
			}
		}
	}
	return errors.Join(errs...)
}
