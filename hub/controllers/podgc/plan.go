package podgc

import (
	"errors"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// Config configures the pod garbage collector.
type Config struct {
	// TerminatedPodThreshold is how many terminated pods (Succeeded or
	// Failed) may exist before the oldest are deleted; 0 or less keeps
	// them all. Upstream's --terminated-pod-gc-threshold.
	TerminatedPodThreshold int
	// Period is how often the collector looks.
	Period time.Duration
	// Quarantine is how long a node must stay missing before its pods
	// are deleted, so that a node being re-registered, or a cache that
	// lags, does not lose them.
	Quarantine time.Duration
}

// DefaultConfig returns upstream's settings.
func DefaultConfig() Config {
	return Config{
		TerminatedPodThreshold: 12500,            // --terminated-pod-gc-threshold
		Period:                 20 * time.Second, // gcCheckPeriod
		Quarantine:             40 * time.Second, // quarantineTime
	}
}

// Validate reports the first setting that cannot work.
func (c Config) Validate() error {
	switch {
	case c.Period <= 0:
		return errors.New("podgc: Period must be positive")
	case c.Quarantine < 0:
		return errors.New("podgc: Quarantine must not be negative")
	}
	return nil
}

// Reason says why a pod is collected.
type Reason int

const (
	// Terminated: one of the oldest terminated pods above the threshold.
	Terminated Reason = iota
	// Orphaned: bound to a node that no longer exists.
	Orphaned
	// UnscheduledTerminating: being deleted and never bound, so no
	// kubelet will confirm its deletion.
	UnscheduledTerminating
	// OutOfService: being deleted on a node that is not ready and is
	// tainted node.kubernetes.io/out-of-service.
	OutOfService
)

func (r Reason) String() string {
	return [...]string{"terminated", "orphaned", "unscheduled-terminating", "out-of-service"}[r]
}

// Deletion is one pod to collect.
type Deletion struct {
	Pod    *corev1.Pod
	Reason Reason
}

// terminated reports whether pod has finished (neither Pending, Running
// nor Unknown).
func terminated(p *corev1.Pod) bool {
	switch p.Status.Phase {
	case corev1.PodPending, corev1.PodRunning, corev1.PodUnknown:
		return false
	}
	return true
}

func evicted(p *corev1.Pod) bool {
	return p.Status.Phase == corev1.PodFailed && p.Status.Reason == "Evicted"
}

// TerminatedOverThreshold returns the terminated pods to delete so that
// threshold remain: evicted pods first (they count against quotas), then
// the oldest, by creation then name, as upstream. No I/O.
func TerminatedOverThreshold(pods []*corev1.Pod, threshold int) []*corev1.Pod {
	if threshold <= 0 {
		return nil
	}
	var done []*corev1.Pod
	for _, p := range pods {
		if terminated(p) {
			done = append(done, p)
		}
	}
	n := len(done) - threshold
	if n <= 0 {
		return nil
	}
	slices.SortFunc(done, func(a, b *corev1.Pod) int {
		if ea, eb := evicted(a), evicted(b); ea != eb {
			if ea {
				return -1
			}
			return 1
		}
		if c := a.CreationTimestamp.Compare(b.CreationTimestamp.Time); c != 0 {
			return c
		}
		return strings.Compare(a.Name, b.Name)
	})
	return done[:n]
}

// MissingNodes returns the names of nodes pods are bound to that are not
// in nodes: candidates for quarantine. No I/O.
func MissingNodes(pods []*corev1.Pod, nodes map[string]*corev1.Node) []string {
	var out []string
	for _, p := range pods {
		if n := p.Spec.NodeName; n != "" && nodes[n] == nil && !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out
}

// Plan returns the pods to collect: the terminated ones over
// cfg.TerminatedPodThreshold, those bound to a node in gone (nodes
// confirmed missing after quarantine), terminating pods that were never
// bound, and terminating pods on out-of-service nodes. A pod appears once,
// with the first reason in that order. No I/O.
func Plan(pods []*corev1.Pod, nodes map[string]*corev1.Node, gone map[string]bool, cfg Config) []Deletion {
	var out []Deletion
	seen := map[*corev1.Pod]bool{}
	add := func(p *corev1.Pod, r Reason) {
		if !seen[p] {
			seen[p] = true
			out = append(out, Deletion{Pod: p, Reason: r})
		}
	}
	for _, p := range TerminatedOverThreshold(pods, cfg.TerminatedPodThreshold) {
		add(p, Terminated)
	}
	for _, p := range pods {
		switch {
		case p.Spec.NodeName != "" && gone[p.Spec.NodeName] && nodes[p.Spec.NodeName] == nil:
			add(p, Orphaned)
		case p.DeletionTimestamp != nil && p.Spec.NodeName == "":
			add(p, UnscheduledTerminating)
		case p.DeletionTimestamp != nil && outOfService(nodes[p.Spec.NodeName]):
			add(p, OutOfService)
		}
	}
	return out
}

// outOfService reports whether node is not ready and tainted
// node.kubernetes.io/out-of-service, as an administrator marks a node
// that is shut down for good.
func outOfService(n *corev1.Node) bool {
	if n == nil {
		return false
	}
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
			return false
		}
	}
	for _, t := range n.Spec.Taints {
		if t.Key == corev1.TaintNodeOutOfService {
			return true
		}
	}
	return false
}
