package densitybench

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"time"

	tasksapi "github.com/containerd/containerd/api/services/tasks/v1"
	"github.com/containerd/containerd/api/types/task"
	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/outpost-mesh/outpost/bench/edgenode"
	"github.com/outpost-mesh/outpost/edge/agent"
	"github.com/outpost-mesh/outpost/edge/runtime/containerd"
)

// Reboot is what the offline reboot measured.
type Reboot struct {
	Mode string `json:"mode"`
	Pods int    `json:"pods"`
	// Recovered says whether every pod ran again, with the IP it had,
	// within the timeout; RecoverySeconds is the time from the agent's
	// start to that.
	Recovered       bool    `json:"recovered"`
	RecoverySeconds float64 `json:"recovery_seconds"`
	// ContainerdSeconds is when, from the agent's start, its containerd
	// first listed tasks; FirstPodSeconds when the first pod ran again.
	ContainerdSeconds float64 `json:"containerd_seconds"`
	FirstPodSeconds   float64 `json:"first_pod_seconds"`
	// Running and SameIP are what the last look saw: pods with a running
	// task, and of those, pods whose network namespace has its old IP.
	Running int `json:"running"`
	SameIP  int `json:"same_ip"`
	// Mismatch names a pod whose IP changed or could not be read, if any.
	Mismatch string `json:"mismatch,omitempty"`
}

// recovery is the pure judgement of one look at the node after the
// reboot: which pods (by UID, of want) have a running task.
func runningPods(want map[string]string, containerPod map[string]string, tasks []*task.Process) map[string]bool {
	out := map[string]bool{}
	for _, t := range tasks {
		if t.GetStatus() != task.Status_RUNNING {
			continue
		}
		id := t.GetContainerID()
		if id == "" {
			id = t.GetID()
		}
		uid := containerPod[id]
		if _, ok := want[uid]; ok {
			out[uid] = true
		}
	}
	return out
}

// watchRecovery polls the node's containerd, from start (the agent's
// start) until every pod of ips (pod IP by UID, as the hub last saw them)
// has a running task and its network namespace holds its IP, or until
// timeout.
func watchRecovery(ctx context.Context, n *edgenode.Node, ips map[string]string, start time.Time, timeout time.Duration) (Reboot, error) {
	r := Reboot{Pods: len(ips)}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	ctx = namespaces.WithNamespace(ctx, n.Namespace())
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	var c *client.Client
	defer func() {
		if c != nil {
			c.Close()
		}
	}()
	for {
		if err := n.Running(); err != nil {
			return r, err
		}
		if c == nil {
			if _, err := os.Stat(n.Sock()); err == nil {
				c, _ = client.New(n.Sock(), client.WithTimeout(time.Second))
			}
		}
		if c != nil {
			done, err := r.look(ctx, c, n, ips, start)
			if err == nil && done {
				r.Recovered = true
				r.RecoverySeconds = time.Since(start).Seconds()
				return r, nil
			}
		}
		select {
		case <-ctx.Done():
			if r.Mismatch == "" && r.Running < r.Pods {
				r.Mismatch = fmt.Sprintf("%d of %d pods running", r.Running, r.Pods)
			}
			return r, nil
		case <-tick.C:
		}
	}
}

// look takes one look at the node's tasks, and, once every pod runs, at
// the pods' IPs.
func (r *Reboot) look(ctx context.Context, c *client.Client, n *edgenode.Node, ips map[string]string, start time.Time) (bool, error) {
	cs, err := c.ContainerService().List(ctx)
	if err != nil {
		return false, err
	}
	ts, err := c.TaskService().List(ctx, &tasksapi.ListTasksRequest{})
	if err != nil {
		return false, err
	}
	if r.ContainerdSeconds == 0 {
		r.ContainerdSeconds = time.Since(start).Seconds()
	}
	containerPod := make(map[string]string, len(cs))
	for _, ci := range cs {
		containerPod[ci.ID] = ci.Labels[containerd.LabelPodUID]
	}
	running := runningPods(ips, containerPod, ts.Tasks)
	if len(running) > 0 && r.FirstPodSeconds == 0 {
		r.FirstPodSeconds = time.Since(start).Seconds()
	}
	r.Running = len(running)
	if len(running) < len(ips) {
		return false, nil
	}
	r.SameIP, r.Mismatch = 0, ""
	for uid, want := range ips {
		got, err := netnsIP(filepath.Join(n.Dir, agent.NetNSDir, uid))
		switch {
		case err != nil:
			r.Mismatch = fmt.Sprintf("pod %s: %v", uid, err)
		case got.String() != want:
			r.Mismatch = fmt.Sprintf("pod %s has IP %s, had %s", uid, got, want)
		default:
			r.SameIP++
		}
	}
	return r.SameIP == len(ips), nil
}

// netnsIP returns the IPv4 address of eth0 in the network namespace
// bind-mounted at path.
func netnsIP(path string) (netip.Addr, error) {
	ns, err := netns.GetFromPath(path)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("open netns: %w", err)
	}
	defer ns.Close()
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("netlink in netns: %w", err)
	}
	defer h.Close()
	l, err := h.LinkByName("eth0")
	if err != nil {
		return netip.Addr{}, fmt.Errorf("find eth0: %w", err)
	}
	addrs, err := h.AddrList(l, netlink.FAMILY_V4)
	if err != nil || len(addrs) == 0 {
		return netip.Addr{}, fmt.Errorf("eth0 has no IPv4 address (%v)", err)
	}
	a, ok := netip.AddrFromSlice(addrs[0].IP.To4())
	if !ok {
		return netip.Addr{}, fmt.Errorf("eth0 address %v", addrs[0].IP)
	}
	return a, nil
}
