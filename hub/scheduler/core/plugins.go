package core

import "strings"

// Plugin names one of the default profile's filter or score plugins, as
// a bit so that a set of them is a Plugins.
type Plugin uint16

// The filter plugins, in the order upstream's default profile runs them;
// a node is rejected by the first that fails.
const (
	NodeUnschedulable Plugin = 1 << iota
	NodeName
	TaintToleration
	NodeAffinity
	NodePorts
	NodeResourcesFit
	PodTopologySpread
	InterPodAffinity
)

var pluginNames = []struct {
	p    Plugin
	name string
}{
	{InterPodAffinity, "InterPodAffinity"},
	{NodeAffinity, "NodeAffinity"},
	{NodeName, "NodeName"},
	{NodePorts, "NodePorts"},
	{NodeResourcesFit, "NodeResourcesFit"},
	{NodeUnschedulable, "NodeUnschedulable"},
	{PodTopologySpread, "PodTopologySpread"},
	{TaintToleration, "TaintToleration"},
}

// Plugins is a set of plugins.
type Plugins uint16

// Has reports whether p is in the set.
func (s Plugins) Has(p Plugin) bool { return s&Plugins(p) != 0 }

// String lists the set's names sorted, as "[NodeAffinity TaintToleration]".
func (s Plugins) String() string {
	var names []string
	for _, pn := range pluginNames {
		if s.Has(pn.p) {
			names = append(names, pn.name)
		}
	}
	return "[" + strings.Join(names, " ") + "]"
}

// ClusterEvent is a kind of change in the cluster that may make a pod
// that failed schedulable, as a bit so that a set of them is one value.
type ClusterEvent uint32

const (
	// NodeAdd: a node was added.
	NodeAdd ClusterEvent = 1 << iota
	// NodeDelete: a node was removed (domains of topology spread change).
	NodeDelete
	// NodeAllocatableChange: a node's allocatable resources changed.
	NodeAllocatableChange
	// NodeLabelChange: a node's labels changed.
	NodeLabelChange
	// NodeTaintChange: a node's taints or spec.unschedulable changed.
	NodeTaintChange
	// AssignedPodAdd: a pod was bound or assumed.
	AssignedPodAdd
	// AssignedPodUpdate: an assigned pod's labels changed.
	AssignedPodUpdate
	// AssignedPodDelete: an assigned pod went away or ended, freeing
	// what it held.
	AssignedPodDelete
	// NamespaceChange: a namespace was added or relabelled.
	NamespaceChange

	// AnyEvent is every event.
	AnyEvent ClusterEvent = 1<<iota - 1
)

// WakingEvents returns the events that may make a pod rejected by the
// plugins of s schedulable, as upstream's plugins register them. A pod
// that no plugin rejected (no nodes at all, an error) waits for any event.
func (s Plugins) WakingEvents() ClusterEvent {
	if s == 0 {
		return AnyEvent
	}
	var ev ClusterEvent
	if s.Has(NodeUnschedulable) {
		ev |= NodeAdd | NodeTaintChange
	}
	if s.Has(NodeName) {
		ev |= NodeAdd
	}
	if s.Has(TaintToleration) {
		ev |= NodeAdd | NodeTaintChange
	}
	if s.Has(NodeAffinity) {
		ev |= NodeAdd | NodeLabelChange
	}
	if s.Has(NodePorts) {
		ev |= NodeAdd | AssignedPodDelete
	}
	if s.Has(NodeResourcesFit) {
		ev |= NodeAdd | NodeAllocatableChange | NodeLabelChange | NodeTaintChange | AssignedPodDelete
	}
	if s.Has(PodTopologySpread) {
		ev |= NodeAdd | NodeDelete | NodeLabelChange | NodeTaintChange | AssignedPodAdd | AssignedPodUpdate | AssignedPodDelete
	}
	if s.Has(InterPodAffinity) {
		ev |= NodeAdd | NodeLabelChange | AssignedPodAdd | AssignedPodUpdate | AssignedPodDelete | NamespaceChange
	}
	return ev
}

// Default score plugin weights of upstream's default profile.
const (
	weightTaintToleration   = 3
	weightNodeAffinity      = 2
	weightPodTopologySpread = 2
	weightInterPodAffinity  = 2
	weightFit               = 1
	weightBalanced          = 1
	weightImageLocality     = 1
)

// MaxNodeScore is the most a score plugin gives a node, after normalizing.
const MaxNodeScore int64 = 100
