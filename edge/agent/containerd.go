package agent

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"time"

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
	// Puller gets images; nil for containerd's DefaultPuller.
	Puller containerd.Puller
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
	}
	rcfg.Address = addr
	rcfg.Namespace = cc.Namespace
	if rcfg.Namespace == "" {
		rcfg.Namespace = "outpost-" + a.cfg.NodeName
	}
	if cc.OCIRuntime != "" {
		rcfg.OCIRuntime = cc.OCIRuntime
	}
	rcfg.ShimPerNode, rcfg.Puller = cc.ShimPerNode, cc.Puller
	rcfg.StateDir = filepath.Join(a.cfg.DataDir, FIFODir)
	rcfg.Logger = a.log.With("component", "runtime")
	rt, err := containerd.New(rcfg)
	if err != nil {
		return fmt.Errorf("containerd runtime: %w", err)
	}
	vctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	v, err := rt.Version(vctx)
	if err != nil {
		rt.Close()
		return fmt.Errorf("containerd at %s: %w", addr, err)
	}
	a.rt, a.closeRuntime = rt, rt.Close
	a.cfg.RuntimeVersion = v
	a.log.Info("pods run on containerd", "address", addr, "namespace", rcfg.Namespace, "version", v, "oci_runtime", rcfg.OCIRuntime, "shim_per_node", rcfg.ShimPerNode)
	return nil
}
