package agent

import (
	"log/slog"

	corev1 "k8s.io/api/core/v1"

	"github.com/outpost-mesh/outpost/edge/checkpoint"
	"github.com/outpost-mesh/outpost/edge/objects"
	"github.com/outpost-mesh/outpost/sync/wire"
)

// viewPods keeps the pods of the checkpoint's view decoded, so that a
// reconcile round decodes only what the hub changed since the last one.
// It is not safe for concurrent use.
type viewPods struct {
	read  bool
	gen   uint64        // the checkpoint's view generation of pods
	pods  []*corev1.Pod // bound to the node, in the view's order
	byKey map[wire.Key]viewPod
}

// viewPod is one pod of the view decoded, nil if it did not decode.
type viewPod struct {
	rev int64
	pod *corev1.Pod
}

// bound returns the view's pods bound to node, in the checkpoint's order
// (namespace, then name). The pods are shared with later calls: nobody
// may modify them. Pods that do not decode are logged, once per
// revision, and left out.
func (v *viewPods) bound(cp *checkpoint.Store, node string, log *slog.Logger) ([]*corev1.Pod, error) {
	gen := cp.ViewGeneration()
	if v.read && gen == v.gen {
		return v.pods, nil
	}
	objs, err := cp.List(wire.ResourcePods)
	if err != nil {
		return nil, err
	}
	byKey := make(map[wire.Key]viewPod, len(objs))
	var bound []*corev1.Pod
	for _, o := range objs {
		vp, ok := v.byKey[o.Key]
		if !ok || vp.rev != o.Revision {
			vp = viewPod{rev: o.Revision}
			var p corev1.Pod
			if err := objects.Decode(o.Raw, o.Revision, &p); err != nil {
				log.Warn("undecodable pod in the view", "key", o.Key.String(), "err", err)
			} else {
				vp.pod = &p
			}
		}
		byKey[o.Key] = vp
		if p := vp.pod; p != nil && p.Spec.NodeName == node && p.UID != "" {
			bound = append(bound, p)
		}
	}
	v.read, v.gen, v.pods, v.byKey = true, gen, bound, byKey
	return bound, nil
}
