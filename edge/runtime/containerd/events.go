package containerd

import (
	"context"
	"fmt"
	"time"

	apievents "github.com/containerd/containerd/api/events"
	"github.com/containerd/containerd/v2/core/events"
	"github.com/containerd/typeurl/v2"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/outpost-mesh/outpost/edge/runtime"
)

// Watch implements runtime.Watcher from containerd's event stream of the
// namespace: a task's start and its init process's exit, and a
// container's deletion. An OOM kill is recorded on the container as it
// is reported, so that List says OOMKilled after any restart. The stream
// breaks when containerd restarts: Watch then returns an error.
//
// While Watch runs, List keeps the tasks from the events instead of
// listing them at each call (see taskCache); it first publishes a probe
// to itself, again until it comes back, to know the stream live.
func (r *Runtime) Watch(ctx context.Context, fn func(runtime.Event)) error {
	ctx = r.nsctx(ctx)
	sub, cancel := context.WithCancel(ctx)
	defer cancel()
	n := r.kept.subscribing()
	defer r.kept.ended(n)
	ns := r.cfg.Namespace
	ch, errs := r.c.Subscribe(sub,
		fmt.Sprintf(`namespace==%q,topic~="^/tasks/"`, ns),
		fmt.Sprintf(`namespace==%q,topic=="/containers/delete"`, ns),
		fmt.Sprintf(`namespace==%q,topic==%q`, ns, probeTopic))
	probe := time.NewTimer(0)
	defer probe.Stop()
	probeEvery, live := 50*time.Millisecond, false
	for {
		select {
		case <-ctx.Done():
			return nil
		case err := <-errs:
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("containerd events: %w", native(err))
		case <-probe.C:
			if live {
				continue
			}
			if err := r.c.EventService().Publish(ctx, probeTopic, &emptypb.Empty{}); err != nil {
				r.cfg.Logger.Debug("publish the event stream's probe", "err", native(err))
			}
			probe.Reset(probeEvery)
			probeEvery = min(2*probeEvery, 5*time.Second)
		case env := <-ch:
			if env == nil {
				continue
			}
			if env.Topic == probeTopic {
				if !live {
					live = true
					r.kept.live(n)
				}
				continue
			}
			r.handleEvent(ctx, env, fn)
		}
	}
}

func (r *Runtime) handleEvent(ctx context.Context, env *events.Envelope, fn func(runtime.Event)) {
	v, err := typeurl.UnmarshalAny(env.Event)
	if err != nil {
		return
	}
	// Kept before the workers hear of it: the round it prompts lists it.
	if e, ok := taskEventOf(v); ok {
		r.kept.record(e)
	}
	var (
		id  string
		typ runtime.EventType
	)
	switch e := v.(type) {
	case *apievents.TaskStart:
		id, typ = e.ContainerID, runtime.ContainerStarted
	case *apievents.TaskExit:
		if e.ID != e.ContainerID { // an exec'd process
			return
		}
		id, typ = e.ContainerID, runtime.ContainerExited
	case *apievents.TaskOOM:
		if err := r.setLabels(ctx, e.ContainerID, map[string]string{labelOOM: "true"}); err != nil {
			r.cfg.Logger.Warn("record OOM kill", "container", e.ContainerID, "err", err)
		}
		return
	case *apievents.ContainerDelete:
		id, typ = e.ID, runtime.ContainerRemoved
	default:
		return
	}
	n, ok := r.lookup(ctx, id)
	if !ok {
		return
	}
	if typ == runtime.ContainerRemoved {
		r.forget(id)
	}
	fn(runtime.Event{Pod: n.pod, Container: n.name, Type: typ})
}

// lookup returns the pod and name of container id, from memory or from
// containerd. Containers that are not a pod's are not found.
func (r *Runtime) lookup(ctx context.Context, id string) (containerName, bool) {
	r.mu.Lock()
	n, ok := r.names[id]
	if !ok {
		n, ok = r.gone[id]
	}
	r.mu.Unlock()
	if ok {
		return n, true
	}
	info, err := r.c.ContainerService().Get(ctx, id)
	if err != nil || info.Labels[LabelPodUID] == "" {
		return containerName{}, false
	}
	r.remember(info)
	return containerName{pod: podFromLabels(info.Labels), name: info.Labels[LabelContainerName]}, true
}
