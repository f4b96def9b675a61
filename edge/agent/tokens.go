package agent

import (
	corev1 "k8s.io/api/core/v1"

	"github.com/outpost-mesh/outpost/sync/wire"
)

// The hub mints the service account tokens of the node's pods into its
// view (wire.PodTokens, one object per pod), and the checkpoint keeps them
// as any object of the view, so that a pod has its tokens offline and
// after a reboot. Nothing writes them into pods yet: the agent has no
// volume plumbing (ContainerSpec.Mounts stays empty until containerd
// lands); TokenFor is what that plumbing reads.

// TokenFor returns the token the hub minted for pod's volume and path
// (volume wire.AutomountVolume for the automounted service account token,
// whose path is "token"), and whether there is one that has not expired.
// It reads the checkpoint, and may be called from any goroutine: it finds
// none while Run has not opened the checkpoint.
func (a *Agent) TokenFor(pod *corev1.Pod, volume, path string) (wire.PodToken, bool) {
	cp := a.open.Load()
	if cp == nil || pod.UID == "" {
		return wire.PodToken{}, false
	}
	o, ok, err := cp.Get(wire.PodTokensKey(pod.Namespace, string(pod.UID)))
	if err != nil {
		a.log.Warn("read pod tokens", "pod", pod.Namespace+"/"+pod.Name, "err", err)
		return wire.PodToken{}, false
	}
	if !ok {
		return wire.PodToken{}, false
	}
	p, err := wire.UnmarshalPodTokens(o.Raw)
	if err != nil || p.Pod != pod.Name {
		a.log.Warn("undecodable pod tokens in the view", "pod", pod.Namespace+"/"+pod.Name, "err", err)
		return wire.PodToken{}, false
	}
	t, ok := p.Find(volume, path)
	if !ok || !a.now().Before(t.Expiry) {
		return wire.PodToken{}, false
	}
	return t, true
}

// heldTokens lists the pod tokens and the site's mesh keys of the
// checkpoint at their revisions, for the hub to send again only those due
// (wire.Hello's Tokens).
func (a *Agent) heldTokens() ([]wire.InventoryEntry, error) {
	var out []wire.InventoryEntry
	for _, resource := range []string{wire.ResourcePodTokens, wire.ResourceMeshKeys} {
		objs, err := a.cp.List(resource)
		if a.dropCorrupt(err) {
			objs, err = a.cp.List(resource)
		}
		if err != nil {
			return nil, err
		}
		for _, o := range objs {
			out = append(out, wire.InventoryEntry{Key: o.Key, Revision: o.Revision})
		}
	}
	return out, nil
}
