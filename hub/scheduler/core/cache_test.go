package core

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
)

func requestedCPU(t *testing.T, c *Cache, node string) int64 {
	t.Helper()
	n := c.nodes[node]
	if n == nil {
		return -1
	}
	return n.requested.MilliCPU
}

func TestCacheAssumeConfirmForget(t *testing.T) {
	c := NewCache()
	c.SetNode(node("n1").obj())
	c.SetNode(node("n2").obj())

	p := pod("p").req("cpu", "1").obj()
	if err := c.AssumePod(NewPodInfo(p), "n1"); err != nil {
		t.Fatal(err)
	}
	if !c.IsAssumed(string(p.UID)) || requestedCPU(t, c, "n1") != 1000 {
		t.Fatalf("after assume: assumed %v, n1 cpu %d", c.IsAssumed(string(p.UID)), requestedCPU(t, c, "n1"))
	}
	// The next pod's snapshot sees it.
	if got := c.Snapshot(nil).Get("n1").Pods(); len(got) != 1 {
		t.Fatalf("snapshot of n1 has %d pods, want 1", len(got))
	}

	// The watch shows it bound: confirmed, counted once.
	bound := p.DeepCopy()
	bound.Spec.NodeName = "n1"
	c.SetPod(bound)
	if c.IsAssumed(string(p.UID)) || requestedCPU(t, c, "n1") != 1000 || c.NumPods() != 1 {
		t.Fatalf("after confirm: assumed %v, n1 cpu %d, pods %d", c.IsAssumed(string(p.UID)), requestedCPU(t, c, "n1"), c.NumPods())
	}
	// A confirmed pod is not forgotten.
	if err := c.ForgetPod(string(p.UID)); err != nil || c.NumPods() != 1 {
		t.Fatalf("ForgetPod(confirmed) = %v, pods %d; want it kept", err, c.NumPods())
	}
	if err := c.AssumePod(NewPodInfo(p), "n2"); err == nil {
		t.Fatalf("assuming a bound pod elsewhere succeeded")
	}

	q := pod("q").req("cpu", "2").obj()
	if err := c.AssumePod(NewPodInfo(q), "n2"); err != nil {
		t.Fatal(err)
	}
	if err := c.ForgetPod(string(q.UID)); err != nil {
		t.Fatal(err)
	}
	if requestedCPU(t, c, "n2") != 0 || c.NumPods() != 1 {
		t.Fatalf("after forget: n2 cpu %d, pods %d", requestedCPU(t, c, "n2"), c.NumPods())
	}
	if err := c.ForgetPod("nope"); err != ErrPodNotFound {
		t.Fatalf("ForgetPod(unknown) = %v, want %v", err, ErrPodNotFound)
	}

	c.RemovePod(string(p.UID))
	if requestedCPU(t, c, "n1") != 0 || c.NumPods() != 0 {
		t.Fatalf("after remove: n1 cpu %d, pods %d", requestedCPU(t, c, "n1"), c.NumPods())
	}
}

func TestCacheUpdatePod(t *testing.T) {
	c := NewCache()
	c.SetNode(node("n1").obj())
	p := pod("p").on("n1").req("cpu", "1").hostPort(80, "", "").obj()
	c.SetPod(p)
	p2 := p.DeepCopy()
	p2.Spec.Containers[0].Ports = nil
	p2.Spec.Containers[0].Resources.Requests[corev1.ResourceCPU] = resourceMust("500m")
	c.SetPod(p2)
	n := c.nodes["n1"]
	if n.requested.MilliCPU != 500 || len(n.pods) != 1 || len(n.usedPorts) != 0 {
		t.Fatalf("after update: cpu %d, pods %d, ports %v", n.requested.MilliCPU, len(n.pods), n.usedPorts)
	}
	if n.nonZeroMem != DefaultMemoryRequest {
		t.Fatalf("non-zero memory = %d, want the default %d", n.nonZeroMem, DefaultMemoryRequest)
	}
}

func TestCacheNodes(t *testing.T) {
	c := NewCache()
	c.SetNode(node("n1").image(100*mb, "app:v1").obj())
	c.SetNode(node("n2").image(100*mb, "app:v1", "app:latest").obj())
	c.SetNode(node("n3").obj())
	if c.images["app:v1"] != 2 || c.images["app:latest"] != 1 {
		t.Fatalf("image counts = %v", c.images)
	}
	// A pod on a node the cache does not know yet waits for it.
	c.SetPod(pod("early").on("n4").req("cpu", "1").obj())
	if c.Snapshot(nil).Get("n4") != nil || c.NumNodes() != 3 {
		t.Fatalf("a node known only from its pods is listed")
	}
	c.SetNode(node("n4").obj())
	if got := c.Snapshot(nil).Get("n4"); got == nil || got.requested.MilliCPU != 1000 {
		t.Fatalf("n4 after it joined: %+v", got)
	}

	// Removing a node with pods keeps the pods until they go.
	c.RemoveNode("n2")
	if c.NumNodes() != 3 || c.images["app:latest"] != 0 || c.images["app:v1"] != 1 {
		t.Fatalf("after removing n2: %d nodes, images %v", c.NumNodes(), c.images)
	}
	c.RemoveNode("n4")
	if _, ok := c.nodes["n4"]; !ok {
		t.Fatalf("n4, which still has a pod, was dropped")
	}
	c.RemovePod("early-uid")
	if _, ok := c.nodes["n4"]; ok {
		t.Fatalf("n4 kept after its last pod left")
	}
	// The remaining nodes are listed once each, positions consistent.
	seen := map[string]bool{}
	for i, n := range c.order {
		if n.pos != i || seen[n.node.Name] {
			t.Fatalf("order broken at %d: %+v", i, c.order)
		}
		seen[n.node.Name] = true
	}
	if len(seen) != 2 || !seen["n1"] || !seen["n3"] {
		t.Fatalf("nodes left = %v, want n1 and n3", seen)
	}
}
