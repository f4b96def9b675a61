package densitybench

import (
	"context"
	"fmt"
	"sync"
	"time"

	apievents "github.com/containerd/containerd/api/events"
	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/typeurl/v2"

	"github.com/outpost-mesh/outpost/edge/runtime/containerd"
)

// taskStarts records when the node's containerd reported each
// container's first task start, from its event stream: the moment a pod
// runs on the node, before the agent reports it to the hub. Its methods
// are safe for concurrent use.
type taskStarts struct {
	c  *client.Client
	ns string

	mu      sync.Mutex
	started map[string]time.Time // by container ID
	pods    map[string]string    // container ID -> pod name, as resolved
}

// watchTaskStarts connects to the node's containerd and records task
// starts until ctx ends; the caller must call close.
func watchTaskStarts(ctx context.Context, sock, ns string) (*taskStarts, error) {
	c, err := client.New(sock, client.WithDefaultNamespace(ns))
	if err != nil {
		return nil, fmt.Errorf("connect to containerd: %w", err)
	}
	ts := &taskStarts{c: c, ns: ns, started: map[string]time.Time{}, pods: map[string]string{}}
	ch, errs := c.Subscribe(ctx, fmt.Sprintf(`namespace==%q,topic=="/tasks/start"`, ns))
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-errs:
				return
			case env := <-ch:
				if env == nil {
					continue
				}
				now := time.Now()
				v, err := typeurl.UnmarshalAny(env.Event)
				if e, ok := v.(*apievents.TaskStart); ok && err == nil {
					ts.mu.Lock()
					if _, seen := ts.started[e.ContainerID]; !seen {
						ts.started[e.ContainerID] = now
					}
					ts.mu.Unlock()
				}
			}
		}
	}()
	return ts, nil
}

func (ts *taskStarts) close() { ts.c.Close() }

// byPod returns, for each pod of names, when its first container's task
// started, resolving container IDs to pods by their labels. Pods with no
// start recorded are missing from the result.
func (ts *taskStarts) byPod(ctx context.Context, names []string) (map[string]time.Time, error) {
	ctx = namespaces.WithNamespace(ctx, ts.ns)
	ts.mu.Lock()
	unresolved := false
	for id := range ts.started {
		if _, ok := ts.pods[id]; !ok {
			unresolved = true
		}
	}
	ts.mu.Unlock()
	if unresolved {
		cs, err := ts.c.ContainerService().List(ctx)
		if err != nil {
			return nil, fmt.Errorf("list containers: %w", err)
		}
		ts.mu.Lock()
		for _, c := range cs {
			ts.pods[c.ID] = c.Labels[containerd.LabelPodName]
		}
		ts.mu.Unlock()
	}
	want := map[string]bool{}
	for _, n := range names {
		want[n] = true
	}
	ts.mu.Lock()
	defer ts.mu.Unlock()
	out := map[string]time.Time{}
	for id, at := range ts.started {
		pod := ts.pods[id]
		if !want[pod] {
			continue
		}
		if prev, ok := out[pod]; !ok || at.Before(prev) {
			out[pod] = at
		}
	}
	return out, nil
}
