package core

import (
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// ErrPodNotFound is returned by ForgetPod for a pod the cache does not hold.
var ErrPodNotFound = errors.New("pod not in the scheduler cache")

// Cache is the scheduler's picture of the cluster: the nodes and the pods
// assigned to them, both those the API shows bound and those the
// scheduler has assumed while their binding is on its way, so that the
// next pod sees the previous one's place before the watch delivers it.
//
// A Cache does no I/O and is not safe for concurrent use: its owner
// serializes every call, and the Snapshot it hands out is valid only
// until the next change.
type Cache struct {
	nodes  map[string]*NodeInfo
	order  []*NodeInfo // the nodes that exist, in the order scheduling visits them
	pods   map[string]*cachedPod
	images map[string]int // image name -> how many nodes hold it
}

type cachedPod struct {
	info    *PodInfo
	node    string
	assumed bool // placed by the scheduler, not yet seen bound
}

// NewCache returns an empty cache.
func NewCache() *Cache {
	return &Cache{nodes: map[string]*NodeInfo{}, pods: map[string]*cachedPod{}, images: map[string]int{}}
}

// NumNodes returns how many nodes exist.
func (c *Cache) NumNodes() int { return len(c.order) }

// NumPods returns how many pods the cache holds, assumed ones included.
func (c *Cache) NumPods() int { return len(c.pods) }

// SetNode adds node or replaces the cache's copy of it. The cache keeps
// node, which the caller must not modify afterwards.
func (c *Cache) SetNode(node *corev1.Node) {
	n := c.nodes[node.Name]
	if n == nil {
		n = &NodeInfo{pos: -1}
		c.nodes[node.Name] = n
	}
	if n.node != nil {
		c.countImages(n, -1)
	}
	n.setNode(node)
	c.countImages(n, 1)
	if n.pos < 0 {
		n.pos = len(c.order)
		c.order = append(c.order, n)
	}
}

// RemoveNode forgets the node called name. Pods still assigned to it stay
// until they are removed, as upstream's cache keeps them.
func (c *Cache) RemoveNode(name string) {
	n := c.nodes[name]
	if n == nil || n.node == nil {
		return
	}
	c.countImages(n, -1)
	n.node = nil
	last := len(c.order) - 1
	c.order[n.pos] = c.order[last]
	c.order[n.pos].pos = n.pos
	c.order[last] = nil
	c.order = c.order[:last]
	n.pos = -1
	if len(n.pods) == 0 {
		delete(c.nodes, name)
	}
}

func (c *Cache) countImages(n *NodeInfo, sign int) {
	for name := range n.imageSizes {
		c.images[name] += sign
		if c.images[name] <= 0 {
			delete(c.images, name)
		}
	}
}

// SetPod adds or updates a pod that the API shows assigned
// (spec.nodeName set), confirming the assumption of a pod the scheduler
// placed. The cache keeps pod, which the caller must not modify.
func (c *Cache) SetPod(pod *corev1.Pod) {
	c.setPod(NewPodInfo(pod), pod.Spec.NodeName, false)
}

func (c *Cache) setPod(pi *PodInfo, node string, assumed bool) {
	uid := string(pi.Pod.UID)
	if old := c.pods[uid]; old != nil {
		c.detach(uid, old.node)
	}
	n := c.nodes[node]
	if n == nil {
		n = &NodeInfo{pos: -1}
		c.nodes[node] = n
	}
	n.addPod(pi)
	c.pods[uid] = &cachedPod{info: pi, node: node, assumed: assumed}
}

func (c *Cache) detach(uid, node string) {
	if n := c.nodes[node]; n != nil {
		n.removePod(uid)
		if n.node == nil && len(n.pods) == 0 {
			delete(c.nodes, node)
		}
	}
	delete(c.pods, uid)
}

// RemovePod forgets the pod with uid, bound or assumed.
func (c *Cache) RemovePod(uid string) {
	if old := c.pods[uid]; old != nil {
		c.detach(uid, old.node)
	}
}

// AssumePod places pi on node before its binding is confirmed. pi.Pod is
// the pod as it was scheduled; the cache reads pi only.
func (c *Cache) AssumePod(pi *PodInfo, node string) error {
	if old := c.pods[string(pi.Pod.UID)]; old != nil && !old.assumed {
		return fmt.Errorf("pod %s/%s is already on node %s", pi.Pod.Namespace, pi.Pod.Name, old.node)
	}
	c.setPod(pi, node, true)
	return nil
}

// ForgetPod drops an assumption whose binding failed. A pod the API has
// meanwhile shown bound is left in place.
func (c *Cache) ForgetPod(uid string) error {
	old := c.pods[uid]
	if old == nil {
		return ErrPodNotFound
	}
	if old.assumed {
		c.detach(uid, old.node)
	}
	return nil
}

// IsAssumed reports whether the pod with uid is placed by the scheduler
// but not yet seen bound.
func (c *Cache) IsAssumed(uid string) bool {
	p := c.pods[uid]
	return p != nil && p.assumed
}

// NodeOf returns the node the pod with uid is on, bound or assumed.
func (c *Cache) NodeOf(uid string) (string, bool) {
	p := c.pods[uid]
	if p == nil {
		return "", false
	}
	return p.node, true
}

// Snapshot returns the cache's current picture for one scheduling cycle.
// It shares the cache's memory: it is valid until the cache next changes.
// ns may be nil, for a cluster where no namespace has labels.
func (c *Cache) Snapshot(ns Namespaces) *Snapshot {
	return &Snapshot{nodes: c.order, byName: c.nodes, images: c.images, namespaces: ns}
}

// Namespaces is what inter-pod affinity needs of the namespaces, for
// terms with a namespaceSelector.
type Namespaces interface {
	// Labels returns the labels of the namespace called name; nil if it
	// is not known.
	Labels(name string) labels.Set
	// Select returns the names of the namespaces whose labels match sel.
	Select(sel labels.Selector) []string
}

// Snapshot is the cluster as one scheduling cycle sees it. It is read-only.
type Snapshot struct {
	nodes      []*NodeInfo
	byName     map[string]*NodeInfo
	images     map[string]int
	namespaces Namespaces
}

// Nodes returns the nodes, in the order scheduling visits them.
func (s *Snapshot) Nodes() []*NodeInfo { return s.nodes }

// Get returns the node called name; nil if it does not exist.
func (s *Snapshot) Get(name string) *NodeInfo {
	if n := s.byName[name]; n != nil && n.node != nil {
		return n
	}
	return nil
}

func (s *Snapshot) namespaceLabels(name string) labels.Set {
	if s.namespaces == nil {
		return nil
	}
	return s.namespaces.Labels(name)
}

// NewSnapshot builds a snapshot of nodes and the pods assigned to them by
// spec.nodeName, for tests and benchmarks.
func NewSnapshot(nodes []*corev1.Node, pods []*corev1.Pod, ns Namespaces) *Snapshot {
	c := NewCache()
	for _, n := range nodes {
		c.SetNode(n)
	}
	for _, p := range pods {
		c.SetPod(p)
	}
	return c.Snapshot(ns)
}
