package agent

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"time"

	"github.com/containerd/containerd/v2/client"
	corev1 "k8s.io/api/core/v1"

	"github.com/outpost-mesh/outpost/edge/images"
	"github.com/outpost-mesh/outpost/edge/runtime"
	"github.com/outpost-mesh/outpost/edge/runtime/containerd"
)

// Paths under Config.DataDir of a node on containerd.
const (
	ContainerdDir = "containerd" // the agent's own containerd: config, root, state, sockets
	FIFODir       = "fifo"       // the containers' stdout and stderr pipes
)

// ContainerdConfig has the agent run its pods on containerd.
type ContainerdConfig struct {
	// Address is the socket of a containerd that runs already; "" has
	// the agent start its own, with its root, state and sockets under
	// DataDir/containerd, and restart it if it dies (as K3s does).
	Address string
	// Binary is the containerd the agent starts: /usr/bin/containerd.
	Binary string
	// Namespace is the containerd namespace of the node's pods: "" for
	// "outpost-" + the node's name, so that two agents sharing a
	// containerd never meet.
	Namespace string
	// OCIRuntime is the OCI runtime the runc shim runs: "runc" or "crun".
	OCIRuntime string
	// ShimPerNode runs every pod of the node in one shim instead of one
	// per pod: less memory, one process whose end takes every pod.
	ShimPerNode bool
	// InsecureRegistries may be reached over plain HTTP (and HTTPS
	// unverified), host[:port] as in image references: registries on
	// loopback or a site's address. Every other registry is reached over
	// verified HTTPS.
	InsecureRegistries []string
}

// DefaultContainerdConfig returns the defaults: the agent's own
// containerd from /usr/bin/containerd, runc, a shim per pod.
func DefaultContainerdConfig() ContainerdConfig {
	return ContainerdConfig{Binary: "/usr/bin/containerd", OCIRuntime: "runc"}
}

// readyTimeout bounds the wait for the agent's own containerd to answer
// at start: long enough for one with many containers to reload them.
const readyTimeout = 2 * time.Minute

// startContainerd starts the agent's own containerd, if it runs one, on
// wg until stop is done, and sets the agent's runtime to it. stop is
// distinct from the agent's context, so that containerd stops only once
// everything using it has.
func (a *Agent) startContainerd(ctx, stop context.Context, wg *sync.WaitGroup) error {
	cc := a.cfg.Containerd
	addr := cc.Address
	root := "" // containerd's root, for image GC; unknown for one not the agent's
	rcfg := containerd.DefaultConfig()
	if addr == "" {
		dir := filepath.Join(a.cfg.DataDir, ContainerdDir)
		scfg := containerd.DefaultSupervisorConfig(dir)
		if cc.Binary != "" {
			scfg.Binary = cc.Binary
		}
		scfg.Logger = a.log.With("component", "containerd")
		sup, err := containerd.NewSupervisor(scfg)
		if err != nil {
			return fmt.Errorf("containerd: %w", err)
		}
		errc := make(chan error, 1)
		wg.Go(func() { errc <- sup.Run(stop) })
		t := time.NewTimer(readyTimeout)
		defer t.Stop()
		select {
		case <-sup.Ready():
		case err := <-errc:
			return fmt.Errorf("start containerd: %w", err)
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
			return errors.New("containerd did not answer within 2m: see its log under the data directory's containerd/")
		}
		addr, rcfg.RuncRoot = sup.Address(), containerd.RuncRoot(dir)
		root = filepath.Join(dir, "root")
	}
	rcfg.Address = addr
	rcfg.Namespace = cc.Namespace
	if rcfg.Namespace == "" {
		rcfg.Namespace = "outpost-" + a.cfg.NodeName
	}
	if cc.OCIRuntime != "" {
		rcfg.OCIRuntime = cc.OCIRuntime
	}
	ic, err := client.New(addr, client.WithDefaultNamespace(rcfg.Namespace))
	if err != nil {
		return fmt.Errorf("containerd at %s: %w", addr, err)
	}
	icfg := images.DefaultConfig()
	icfg.Client, icfg.Namespace, icfg.InsecureRegistries, icfg.Root = ic, rcfg.Namespace, cc.InsecureRegistries, root
	icfg.Logger, icfg.Now = a.log.With("component", "images"), a.now
	share, err := a.buildImageShare(ic.ContentStore(), rcfg.Namespace)
	if err != nil {
		ic.Close()
		return fmt.Errorf("image share: %w", err)
	}
	if share != nil {
		icfg.Site = share.fetcher
	}
	isvc, err := images.New(icfg)
	if err != nil {
		ic.Close()
		return err
	}
	rcfg.ShimPerNode, rcfg.Puller = cc.ShimPerNode, puller{isvc}
	rcfg.StateDir = filepath.Join(a.cfg.DataDir, FIFODir)
	rcfg.Logger = a.log.With("component", "runtime")
	rt, err := containerd.New(rcfg)
	if err != nil {
		ic.Close()
		return fmt.Errorf("containerd runtime: %w", err)
	}
	vctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	v, err := rt.Version(vctx)
	if err == nil {
		// Where `outpost image` finds the node's images.
		err = images.WriteEndpoint(a.cfg.DataDir, images.Endpoint{Address: addr, Namespace: rcfg.Namespace, Snapshotter: rcfg.Snapshotter})
	}
	if err != nil {
		rt.Close()
		ic.Close()
		return fmt.Errorf("containerd at %s: %w", addr, err)
	}
	a.rt, a.images, a.imagesRoot, a.share = rt, isvc, root, share
	a.closeRuntime = func() error { return errors.Join(rt.Close(), ic.Close()) }
	a.cfg.RuntimeVersion = v
	a.log.Info("pods run on containerd", "address", addr, "namespace", rcfg.Namespace, "version", v, "oci_runtime", rcfg.OCIRuntime, "shim_per_node", rcfg.ShimPerNode)
	return nil
}

// puller is the images Service as the containerd runtime's Puller: it
// pulls with a client of its own, in the same namespace.
type puller struct{ s *images.Service }

func (p puller) Pull(ctx context.Context, _ *client.Client, ref string, policy runtime.PullPolicy, creds []runtime.Credential) (client.Image, error) {
	return p.s.Pull(ctx, ref, policy, creds)
}

// imagesInUse returns the images of the node's pods, which image GC must
// not remove: those the pods bound to the node name, and those of what
// the runtime holds.
func (a *Agent) imagesInUse(ctx context.Context) ([]string, error) {
	var out []string
	var v viewPods // the workers' is theirs alone
	d, err := v.bound(a.cp, a.cfg.NodeName, a.log)
	if err != nil {
		return nil, fmt.Errorf("read the node's pods, sparing every image: %w", err)
	}
	ms, err := readManifests(filepath.Join(a.cfg.DataDir, ManifestsDir), a.cfg.NodeName)
	if err != nil {
		return nil, fmt.Errorf("read static pod manifests, sparing every image: %w", err)
	}
	for _, m := range ms {
		if m.err == nil {
			d = append(d, m.pod)
		}
	}
	for _, p := range d {
		for _, l := range [][]corev1.Container{p.Spec.InitContainers, p.Spec.Containers} {
			for _, c := range l {
				out = append(out, c.Image)
			}
		}
	}
	actual, err := a.rt.List(ctx)
	if err != nil {
		return nil, err
	}
	for _, ps := range actual {
		for _, c := range ps.Containers {
			out = append(out, c.Image, c.ImageID)
		}
	}
	return out, nil
}
