package eviction

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// Signal names what a threshold watches, as kubelet's eviction signals.
type Signal string

// Signals.
const (
	SignalMemoryAvailable   Signal = "memory.available"
	SignalNodeFsAvailable   Signal = "nodefs.available"
	SignalNodeFsInodesFree  Signal = "nodefs.inodesFree"
	SignalImageFsAvailable  Signal = "imagefs.available"
	SignalImageFsInodesFree Signal = "imagefs.inodesFree"
	SignalPIDAvailable      Signal = "pid.available"
)

// Resources reclaimed for the signals that are not a node resource.
const (
	ResourceInodes corev1.ResourceName = "inodes"
	ResourcePids   corev1.ResourceName = "pids"
)

// signalResource maps each signal to the resource it starves and the
// node condition it raises.
var signalResource = map[Signal]struct {
	resource  corev1.ResourceName
	condition corev1.NodeConditionType
}{
	SignalMemoryAvailable:   {corev1.ResourceMemory, corev1.NodeMemoryPressure},
	SignalNodeFsAvailable:   {corev1.ResourceEphemeralStorage, corev1.NodeDiskPressure},
	SignalNodeFsInodesFree:  {ResourceInodes, corev1.NodeDiskPressure},
	SignalImageFsAvailable:  {corev1.ResourceEphemeralStorage, corev1.NodeDiskPressure},
	SignalImageFsInodesFree: {ResourceInodes, corev1.NodeDiskPressure},
	SignalPIDAvailable:      {ResourcePids, corev1.NodePIDPressure},
}

// Threshold is met when its signal's available amount is below Value.
type Threshold struct {
	Signal Signal
	Value  Value
	// GracePeriod is how long the threshold must be met before pods are
	// evicted for it; 0 for a hard threshold, which evicts at once with
	// no termination grace.
	GracePeriod time.Duration
	// MinReclaim is how far past Value eviction goes on once started; the
	// zero Value for none.
	MinReclaim Value
}

// Value is an amount, absolute or a share of the signal's capacity.
type Value struct {
	Quantity   *resource.Quantity // nil for a percentage
	Percentage float32            // 0.1 for 10%
}

// IsZero reports whether v is no amount.
func (v Value) IsZero() bool { return v.Quantity == nil && v.Percentage == 0 }

// Of returns v against capacity, as kubelet prints it in messages.
func (v Value) Of(capacity int64) *resource.Quantity {
	if v.Quantity != nil {
		return v.Quantity
	}
	return resource.NewQuantity(int64(float64(capacity)*float64(v.Percentage)), resource.BinarySI)
}

func (v Value) String() string {
	if v.Quantity != nil {
		return v.Quantity.String()
	}
	return strconv.FormatFloat(math.Round(float64(v.Percentage)*1e6)/1e4, 'f', -1, 64) + "%"
}

func (t Threshold) String() string {
	s := string(t.Signal) + "<" + t.Value.String()
	if t.GracePeriod > 0 {
		s += " for " + t.GracePeriod.String()
	}
	return s
}

// key identifies t for the core's bookkeeping.
func (t Threshold) key() string {
	return t.String() + "|" + t.MinReclaim.String()
}

// ParseThreshold parses a threshold as kubelet's --eviction-hard flag
// takes one, such as "memory.available<100Mi" or "nodefs.available<10%".
func ParseThreshold(s string) (Threshold, error) {
	sig, val, ok := strings.Cut(s, "<")
	if !ok {
		return Threshold{}, fmt.Errorf("eviction threshold %q: want SIGNAL<VALUE", s)
	}
	t := Threshold{Signal: Signal(strings.TrimSpace(sig))}
	if _, ok := signalResource[t.Signal]; !ok {
		return Threshold{}, fmt.Errorf("unsupported eviction signal %v", t.Signal)
	}
	v, err := ParseValue(strings.TrimSpace(val))
	if err != nil {
		return Threshold{}, fmt.Errorf("eviction threshold %v: %w", t.Signal, err)
	}
	t.Value = v
	return t, nil
}

// ParseThresholds parses a comma-separated list of thresholds, as
// kubelet's --eviction-hard flag takes them, such as
// "memory.available<100Mi,nodefs.available<10%". A signal given twice
// is an error; "" is no threshold.
func ParseThresholds(s string) ([]Threshold, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	var out []Threshold
	seen := map[Signal]bool{}
	for _, part := range strings.Split(s, ",") {
		t, err := ParseThreshold(strings.TrimSpace(part))
		if err != nil {
			return nil, err
		}
		if seen[t.Signal] {
			return nil, fmt.Errorf("eviction threshold %v given twice", t.Signal)
		}
		seen[t.Signal] = true
		out = append(out, t)
	}
	return out, nil
}

// ParseValue parses "100Mi" or "10%".
func ParseValue(s string) (Value, error) {
	if p, ok := strings.CutSuffix(s, "%"); ok {
		f, err := strconv.ParseFloat(p, 32)
		if err != nil {
			return Value{}, err
		}
		if f <= 0 || f > 100 {
			return Value{}, fmt.Errorf("percentage %s: want more than 0%% and at most 100%%", s)
		}
		return Value{Percentage: float32(f) / 100}, nil
	}
	q, err := resource.ParseQuantity(s)
	if err != nil {
		return Value{}, err
	}
	if q.Sign() <= 0 {
		return Value{}, fmt.Errorf("quantity %s: want more than 0", s)
	}
	return Value{Quantity: &q}, nil
}

// DefaultThresholds returns kubelet's default hard thresholds on Linux:
// memory.available<100Mi, nodefs.available<10%, nodefs.inodesFree<5%,
// imagefs.available<15%.
func DefaultThresholds() []Threshold {
	var out []Threshold
	for _, s := range []string{"memory.available<100Mi", "nodefs.available<10%", "nodefs.inodesFree<5%", "imagefs.available<15%"} {
		t, err := ParseThreshold(s)
		if err != nil {
			panic(err)
		}
		out = append(out, t)
	}
	return out
}

// Observation is a signal's reading: what is available of capacity.
type Observation struct {
	Available int64
	Capacity  int64
}

// met reports whether t is met by o, counting MinReclaim when
// withReclaim.
func (t Threshold) met(o Observation, withReclaim bool) bool {
	q := t.Value.Of(o.Capacity).Value()
	if withReclaim && !t.MinReclaim.IsZero() {
		q += t.MinReclaim.Of(o.Capacity).Value()
	}
	return q > o.Available
}
