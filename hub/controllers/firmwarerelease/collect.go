package firmwarerelease

import (
	"context"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"

	firmwarev1 "github.com/outpost-mesh/outpost/firmware/apis/v1"
	"github.com/outpost-mesh/outpost/firmware/artifacts"
)

// Collector lists and removes the artifacts of the store, as
// *artifacts.Store does.
type Collector interface {
	List() ([]artifacts.Entry, error)
	Remove(sha256hex string) error
}

// Unreferenced returns the artifacts of held that no Release refers to
// (referenced holds the digests every Release's manifest names) and that
// were stored more than grace before now: an upload whose Release is not
// created yet is kept for grace.
func Unreferenced(held []artifacts.Entry, referenced map[string]bool, now time.Time, grace time.Duration) []artifacts.Entry {
	var out []artifacts.Entry
	for _, e := range held {
		if !referenced[e.SHA256] && now.Sub(e.ModTime) > grace {
			out = append(out, e)
		}
	}
	return out
}

// referenced returns the digests of the artifacts the Releases name. An
// error for a Release whose manifest cannot be read: what it refers to is
// unknown, and nothing may be removed.
func referenced(objs []runtime.Object) (map[string]bool, error) {
	refs := map[string]bool{}
	for _, obj := range objs {
		u, ok := obj.(*unstructured.Unstructured)
		if !ok {
			return nil, fmt.Errorf("a %T in the Release cache", obj)
		}
		var rel firmwarev1.Release
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &rel); err != nil {
			return nil, fmt.Errorf("release %s: decode: %w", u.GetName(), err)
		}
		m, err := unverifiedManifest(rel.Spec.Envelope)
		if err != nil {
			return nil, fmt.Errorf("release %s: %w", rel.Name, err)
		}
		for _, c := range m.Components {
			refs[c.SHA256] = true
		}
	}
	return refs, nil
}

// collect removes the artifacts no Release refers to any more, once they
// are older than the grace, and returns how many it removed.
func (ctl *Controller) collect() (int, error) {
	objs, err := ctl.releases.List(labels.Everything())
	if err != nil {
		return 0, err
	}
	refs, err := referenced(objs)
	if err != nil {
		return 0, fmt.Errorf("not collecting artifacts: %w", err)
	}
	held, err := ctl.cfg.Collect.List()
	if err != nil {
		return 0, err
	}
	n := 0
	for _, e := range Unreferenced(held, refs, ctl.clock.Now(), ctl.cfg.CollectGrace) {
		if err := ctl.cfg.Collect.Remove(e.SHA256); err != nil {
			return n, err
		}
		n++
		ctl.log.Info("removed an artifact no release refers to", "sha256", e.SHA256, "bytes", e.Size)
	}
	return n, nil
}

// runCollector collects artifacts every CollectInterval, and soon after a
// Release is deleted, until ctx ends. The Release cache must have synced.
func (ctl *Controller) runCollector(ctx context.Context) {
	t := ctl.clock.NewTicker(ctl.cfg.CollectInterval)
	defer t.Stop()
	for {
		if _, err := ctl.collect(); err != nil {
			ctl.log.Warn("firmware artifact collection", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		case <-ctl.deleted:
		}
	}
}
