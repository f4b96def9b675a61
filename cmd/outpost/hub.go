package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"

	"github.com/spf13/cobra"

	"github.com/outpost-mesh/outpost/hub/hubd"
	"github.com/outpost-mesh/outpost/hub/registry/core"
	"github.com/outpost-mesh/outpost/internal/memlimit"
)

func newHubCmd() *cobra.Command {
	cfg := hubd.DefaultConfig("")
	store := string(cfg.Store)
	memLimit := "auto"
	serviceCIDR, nodePorts := cfg.Services.CIDR.String(), cfg.Services.NodePorts.String()
	clusterCIDR := cfg.ClusterCIDR.String()
	cmd := &cobra.Command{
		Use:   "hub",
		Short: "Run the hub: the Kubernetes API server of an Outpost fleet",
		Long: `Run the hub. On first start it creates a CA, the API server's certificate
and an admin kubeconfig in the data directory, and reuses them after that.
Once the API server is up it prints an export line for KUBECONFIG on stdout.`,
		Example: `  outpost hub --data-dir /var/lib/outpost
  outpost hub --data-dir ./hub --api-addr 0.0.0.0:6443 --tls-san hub.example.com
  outpost hub --data-dir ./hub --store etcd --etcd-endpoints http://10.0.0.5:2379`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg.Store = hubd.StoreKind(store)
			if err := parseServiceRanges(&cfg, serviceCIDR, nodePorts); err != nil {
				return err
			}
			if err := parseClusterCIDR(&cfg, clusterCIDR); err != nil {
				return err
			}
			cfg.Logger = slog.Default()
			if err := applyMemoryLimit(memLimit, cfg.Logger); err != nil {
				return err
			}
			h, err := hubd.New(cfg)
			if err != nil {
				return err
			}
			return runHub(cmd.Context(), h, cmd.OutOrStdout())
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.DataDir, "data-dir", "", "directory for the hub's certificates, kubeconfig and store (required)")
	f.StringVar(&cfg.APIAddr, "api-addr", cfg.APIAddr, "host:port the Kubernetes API listens on")
	f.StringVar(&store, "store", store, "storage backend: badger (embedded) or etcd")
	f.StringSliceVar(&cfg.EtcdEndpoints, "etcd-endpoints", nil, "comma-separated etcd client URLs, with --store etcd")
	f.StringVar(&cfg.SyncAddr, "sync-addr", "127.0.0.1:7443", "host:port (UDP) of the QUIC endpoint edge nodes join and sync through; empty for none")
	f.DurationVar(&cfg.NodeCertLifetime, "node-cert-lifetime", cfg.NodeCertLifetime, "lifetime of the node certificates the hub signs")
	f.DurationVar(&cfg.EventTTL, "event-ttl", cfg.EventTTL, "how long events are kept after their last update, as kube-apiserver's --event-ttl")
	f.StringSliceVar(&cfg.TLSSANs, "tls-san", nil, "extra DNS name or IP address for the API server's certificate (repeatable)")
	f.StringVar(&memLimit, "memory-limit", memLimit, memoryLimitUsage)
	f.BoolVar(&cfg.Controllers, "controllers", cfg.Controllers, controllersUsage)
	f.StringVar(&serviceCIDR, "service-cidr", serviceCIDR, "range of the services' cluster IPs, as kube-apiserver's --service-cluster-ip-range; its first address is the kubernetes service's")
	f.StringVar(&nodePorts, "service-node-port-range", nodePorts, "range of the services' node ports, as kube-apiserver's --service-node-port-range")
	f.BoolVar(&cfg.AllocateNodeCIDRs, "allocate-node-cidrs", cfg.AllocateNodeCIDRs, "give each node a pod CIDR (spec.podCIDR) of --cluster-cidr, as kube-controller-manager's --allocate-node-cidrs; with --controllers")
	f.StringVar(&clusterCIDR, "cluster-cidr", clusterCIDR, "range of the pods' addresses, cut into a block per node; it may not overlap --service-cidr")
	f.IntVar(&cfg.NodeCIDRMaskSize, "node-cidr-mask-size", cfg.NodeCIDRMaskSize, "prefix length of each node's block of --cluster-cidr: longer than the cluster CIDR's by at most 16, and at most 30 for IPv4")
	f.DurationVar(&cfg.NodeMonitorGracePeriod, "node-monitor-grace-period", cfg.NodeMonitorGracePeriod, "how long a node may go without renewing its Lease before it is marked Ready=Unknown and tainted unreachable; its pods keep running unless its Node has the annotation outpost.dev/offline-tolerance")
	f.DurationVar(&cfg.IdleMemoryReturn, "idle-memory-return", cfg.IdleMemoryReturn, "after this long without API requests, give the memory a spell of work left behind back to the OS; 0 never")
	f.DurationVar(&cfg.Streams.IdleTimeout, "streaming-connection-idle-timeout", cfg.Streams.IdleTimeout, "how long a kubectl logs, exec, attach or port-forward stream may pass no byte either way before it is cut, as kubelet's flag of that name")
	f.IntVar(&cfg.Streams.MaxPerNode, "max-streams-per-node", cfg.Streams.MaxPerNode, "the most streams open at once to one node (kubectl logs, exec, attach, and each port-forwarded connection); more are answered 429")
	cmd.MarkFlagRequired("data-dir")
	return cmd
}

// parseServiceRanges sets cfg.Services from the --service-cidr and
// --service-node-port-range flags.
func parseServiceRanges(cfg *hubd.Config, cidr, ports string) error {
	p, err := netip.ParsePrefix(cidr)
	if err != nil {
		return fmt.Errorf("--service-cidr %q: want a CIDR such as 10.43.0.0/16", cidr)
	}
	r, err := core.ParsePortRange(ports)
	if err != nil {
		return fmt.Errorf("--service-node-port-range: %w", err)
	}
	cfg.Services = core.ServiceConfig{CIDR: p, NodePorts: r}
	return nil
}

// parseClusterCIDR sets cfg.ClusterCIDR from the --cluster-cidr flag.
func parseClusterCIDR(cfg *hubd.Config, cidr string) error {
	p, err := netip.ParsePrefix(cidr)
	if err != nil {
		return fmt.Errorf("--cluster-cidr %q: want a CIDR such as 10.42.0.0/16", cidr)
	}
	cfg.ClusterCIDR = p
	return nil
}

// controllersUsage documents --controllers of the commands that run a hub.
const controllersUsage = "run the controllers (Deployments, ReplicaSets, ...) and the scheduler in the hub, while it holds the leader Lease kube-system/kube-controller-manager"

// memoryLimitUsage documents --memory-limit of the commands that run a hub.
const memoryLimitUsage = "soft limit of the Go heap, such as 1GiB or 800MB: garbage is collected harder near it; auto is GOMEMLIMIT if set, else 3/4 of the cgroup's memory limit, else of the machine's memory; none for no limit"

// applyMemoryLimit sets the runtime's soft memory limit as flag says (see
// memlimit.Choose) and logs it.
func applyMemoryLimit(flag string, log *slog.Logger) error {
	c, err := memlimit.Choose(flag, os.Getenv("GOMEMLIMIT"), os.DirFS("/"))
	if err != nil {
		return err
	}
	limit := c.Apply()
	if limit == memlimit.Unlimited {
		log.Info("no memory limit", "from", c.From)
		return nil
	}
	log.Info("memory limit", "bytes", limit, "from", c.From)
	return nil
}

// runHub runs h until ctx ends, printing the KUBECONFIG export line on out
// once the hub is ready.
func runHub(ctx context.Context, h *hubd.Hub, out io.Writer) error {
	done := make(chan error, 1)
	go func() { done <- h.Run(ctx) }()
	select {
	case <-h.Ready():
		fmt.Fprintf(out, "export KUBECONFIG=%s\n", h.KubeconfigPath())
	case err := <-done:
		return err
	}
	return <-done
}
