package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/outpost-mesh/outpost/cmd/internal/edgecmd"
	"github.com/outpost-mesh/outpost/edge/agent"
	"github.com/outpost-mesh/outpost/hub/hubd"
)

// upConfig is what `outpost up` runs.
type upConfig struct {
	dir      string
	nodes    int
	apiAddr  string
	syncAddr string
	site     string
	memLimit string
	// controllers runs the hub's controllers and scheduler.
	controllers bool
	// runtime is the nodes' runtime: containerd, fake, or auto for
	// containerd as root and fake otherwise.
	runtime string
	// evictionHard is the nodes' hard eviction thresholds.
	evictionHard string
}

// upEvictionHard is the nodes' default hard eviction thresholds: kubelet's
// memory one alone. The nodes of `outpost up` share the developer's
// disk, which kubelet's disk thresholds (10% and 15% free) would often
// find under pressure and refuse every pod on; kind turns them off for
// the same reason.
const upEvictionHard = "memory.available<100Mi"

func newUpCmd() *cobra.Command {
	c := upConfig{dir: ".outpost", nodes: 2, apiAddr: "127.0.0.1:6443", syncAddr: "127.0.0.1:7443", site: "local", memLimit: "auto", controllers: true, runtime: "auto", evictionHard: upEvictionHard}
	cmd := &cobra.Command{
		Use:   "up",
		Short: "Run a hub and edge nodes on this machine, ready for kubectl",
		Long: `Run a hub and --nodes edge agents in one process, with their state under
--dir (the hub in DIR/hub, node N in DIR/edge-N). Run as root, the agents
run real containers, each on a containerd of its own under its directory,
with a pod network on a bridge of its own (outpost1, outpost2, ...); run
otherwise, or with --runtime fake, on the fake runtime: pods go through
their whole lifecycle, but no container runs. The first start joins the nodes with a bootstrap token; later
starts reuse their certificates. Once the nodes are up it prints the
export line for KUBECONFIG on stdout. Ctrl-C stops everything.`,
		Example: `  outpost up
  outpost up --nodes 5 --dir /tmp/fleet`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if c.nodes < 0 || c.nodes > 100 {
				return fmt.Errorf("--nodes %d: from 0 to 100", c.nodes)
			}
			if err := applyMemoryLimit(c.memLimit, slog.Default()); err != nil {
				return err
			}
			return runUp(cmd.Context(), c, cmd.OutOrStdout(), slog.Default())
		},
	}
	f := cmd.Flags()
	f.StringVar(&c.dir, "dir", c.dir, "directory for the state of the hub and the nodes")
	f.IntVar(&c.nodes, "nodes", c.nodes, "edge nodes to run")
	f.StringVar(&c.apiAddr, "api-addr", c.apiAddr, "host:port of the Kubernetes API")
	f.StringVar(&c.syncAddr, "sync-addr", c.syncAddr, "host:port (UDP) of the hub's sync endpoint")
	f.StringVar(&c.site, "site", c.site, "site label of the nodes")
	f.StringVar(&c.memLimit, "memory-limit", c.memLimit, memoryLimitUsage)
	f.BoolVar(&c.controllers, "controllers", c.controllers, controllersUsage)
	f.StringVar(&c.runtime, "runtime", c.runtime, "the nodes' runtime: containerd, fake, or auto (containerd when run as root, fake otherwise)")
	f.StringVar(&c.evictionHard, "eviction-hard", c.evictionHard, "the nodes' hard eviction thresholds, as outpost-edge's --eviction-hard; kubelet's memory one alone by default, since the nodes share this machine's disk")
	return cmd
}

// runUp runs the hub and the nodes until ctx ends.
func runUp(ctx context.Context, c upConfig, out io.Writer, log *slog.Logger) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	hcfg := hubd.DefaultConfig(filepath.Join(c.dir, "hub"))
	hcfg.APIAddr, hcfg.SyncAddr = c.apiAddr, c.syncAddr
	hcfg.Controllers = c.controllers
	hcfg.Logger = log.With("component", "hub")
	h, err := hubd.New(hcfg)
	if err != nil {
		return err
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	errc := make(chan error, c.nodes+1)
	wg.Go(func() { errc <- h.Run(ctx) })
	select {
	case <-h.Ready():
	case err := <-errc:
		return err
	}

	// Nodes that never joined need a token; one made here lasts an hour.
	token, hash := "", ""
	for i := 1; i <= c.nodes; i++ {
		if _, err := os.Stat(filepath.Join(c.dir, nodeName(i), "node.crt")); err == nil {
			continue
		}
		if token, hash, err = upToken(ctx, h.KubeconfigPath(), c.site); err != nil {
			cancel()
			return err
		}
		break
	}
	rt := c.runtime
	switch {
	case rt == "auto" && os.Geteuid() == 0:
		rt = "containerd"
	case rt == "auto":
		rt = "fake"
		log.Warn("not root: the nodes run pods on the fake runtime, which runs no container; run as root for real containers (network namespaces, cgroups and mounts need it)")
	case rt != "containerd" && rt != "fake":
		cancel()
		return fmt.Errorf("--runtime %q: want containerd, fake or auto", rt)
	}
	dir, err := filepath.Abs(c.dir)
	if err != nil {
		cancel()
		return err
	}
	agents := make([]*agent.Agent, 0, c.nodes)
	for i := 1; i <= c.nodes; i++ {
		name := nodeName(i)
		f := edgecmd.DefaultFlags()
		f.Hub, f.Token, f.CAHash, f.NodeName, f.Site = h.SyncAddr(), token, hash, name, c.site
		f.DataDir, f.Runtime = filepath.Join(dir, name), rt
		f.Bridge = fmt.Sprintf("outpost%d", i)
		f.EvictionHard = c.evictionHard
		// The nodes share this machine: each counts its own pods in
		// kubectl top nodes, not the machine's whole usage.
		f.NodeUsage = "agent-cgroup"
		// They share its addresses too: each node's mesh listens on a
		// port of its own on loopback, which it tells the others.
		f.MeshAddr = "127.0.0.1:0"
		acfg, err := f.Config(log.With("node", name))
		if err != nil {
			cancel()
			return err
		}
		a, err := agent.New(acfg)
		if err != nil {
			cancel()
			return err
		}
		agents = append(agents, a)
		wg.Go(func() {
			if err := a.Run(ctx); err != nil {
				errc <- fmt.Errorf("node %s: %w", name, err)
			}
		})
	}
	if err := waitConnected(ctx, agents, 30*time.Second, errc); err != nil {
		cancel()
		return err
	}
	fmt.Fprintf(out, "export KUBECONFIG=%s\n", h.KubeconfigPath())
	log.Info("outpost is up", "nodes", c.nodes, "api", h.Addr(), "sync", h.SyncAddr())
	select {
	case <-ctx.Done():
		return nil
	case err := <-errc:
		cancel()
		return err
	}
}

func nodeName(i int) string { return fmt.Sprintf("edge-%d", i) }

// upToken creates a bootstrap token with the admin kubeconfig and returns
// it with the CA hash.
func upToken(ctx context.Context, kubeconfig, site string) (token, hash string, err error) {
	rc, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return "", "", fmt.Errorf("load kubeconfig: %w", err)
	}
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return "", "", err
	}
	token, _, err = createToken(ctx, cs, site, "outpost up", time.Hour, time.Now())
	if err != nil {
		return "", "", err
	}
	hash, err = caHash(rc)
	return token, hash, err
}

// waitConnected waits until every agent has a session with the hub.
func waitConnected(ctx context.Context, agents []*agent.Agent, timeout time.Duration, errc <-chan error) error {
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		up := 0
		for _, a := range agents {
			if a.Connected() {
				up++
			}
		}
		if up == len(agents) {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case err := <-errc:
			return err
		case <-deadline.C:
			return fmt.Errorf("%d of %d nodes connected to the hub within %v", up, len(agents), timeout)
		case <-t.C:
		}
	}
}
