package agent

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"path/filepath"

	corev1 "k8s.io/api/core/v1"

	"github.com/outpost-mesh/outpost/edge/objects"
	"github.com/outpost-mesh/outpost/edge/runtime"
	"github.com/outpost-mesh/outpost/edge/streams"
	"github.com/outpost-mesh/outpost/sync/client"
	"github.com/outpost-mesh/outpost/sync/wire"
)

// buildTunnels builds the handlers of the tunnels the hub opens to the
// node: edge/streams on what this node's runtime supports, then
// Config.Tunnels over them.
func (a *Agent) buildTunnels() error {
	cfg := streams.DefaultConfig()
	cfg.Pods = streamPods{a}
	if a.real != nil {
		cfg.Logs = logPaths{a.real}
	}
	cfg.Exec, _ = a.rt.(runtime.Execer)
	cfg.Attach, _ = a.rt.(runtime.Attacher)
	cfg.Logger, cfg.Clock = a.log.With("component", "streams"), a.now
	srv, err := streams.New(cfg)
	if err != nil {
		return err
	}
	a.tunnels = map[string]client.TunnelHandler{}
	maps.Copy(a.tunnels, srv.Handlers())
	maps.Copy(a.tunnels, a.cfg.Tunnels)
	return nil
}

// streamPods is the agent as edge/streams' Pods: the pods of the view
// bound to this node, with what the runtime runs of them.
type streamPods struct{ a *Agent }

func (p streamPods) Pod(ctx context.Context, namespace, name string) (*streams.Pod, error) {
	a := p.a
	cp := a.open.Load()
	if cp == nil {
		return nil, errors.New("agent not running")
	}
	o, ok, err := cp.Get(wire.Key{Resource: wire.ResourcePods, Namespace: namespace, Name: name})
	if err != nil || !ok {
		return nil, err
	}
	var pod corev1.Pod
	if err := objects.Decode(o.Raw, o.Revision, &pod); err != nil {
		return nil, fmt.Errorf("decode pod %s/%s: %w", namespace, name, err)
	}
	if pod.Spec.NodeName != a.cfg.NodeName || pod.UID == "" {
		return nil, nil
	}
	if pod.Annotations[wire.AnnotationMirror] != "" {
		// The hub's mirror of a static pod: what runs is the static
		// pod of the manifest, by the UID the mirror's annotation
		// carries.
		static := a.staticPod(namespace, name)
		if static == nil {
			return nil, nil
		}
		pod = *static
	}
	list, err := a.rt.List(ctx)
	if err != nil {
		return nil, err
	}
	sp := &streams.Pod{Spec: &pod}
	for i := range list {
		if list[i].Pod.UID == string(pod.UID) {
			sp.Status, sp.IP = &list[i], list[i].IP
		}
	}
	if a.real != nil {
		if ip := a.real.sandbox.IP(string(pod.UID)); ip != "" {
			sp.IP = ip
		}
	}
	return sp, nil
}

// logPaths names the log files the sandbox gives containers.
type logPaths struct{ rp *realPods }

func (l logPaths) LogPath(pod runtime.PodRef, container string, attempt int) string {
	return l.rp.sandbox.LogPath(pod.Namespace, pod.Name, pod.UID, container, attempt)
}

// staticPod returns the static pod namespace/name of the node's manifests,
// or nil.
func (a *Agent) staticPod(namespace, name string) *corev1.Pod {
	ms, _ := readManifests(filepath.Join(a.cfg.DataDir, ManifestsDir), a.cfg.NodeName)
	for _, m := range ms {
		if m.err == nil && m.pod.Namespace == namespace && m.pod.Name == name {
			return m.pod
		}
	}
	return nil
}
