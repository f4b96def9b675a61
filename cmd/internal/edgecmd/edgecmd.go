// Package edgecmd is the `edge` command that both binaries carry: `outpost
// edge` and `outpost-edge` run the same agent with the same flags. It links
// no hub code.
package edgecmd

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/spf13/cobra"

	"github.com/outpost-mesh/outpost/edge/agent"
	"github.com/outpost-mesh/outpost/edge/runtime"
	"github.com/outpost-mesh/outpost/edge/runtime/fake"
)

// Flags are the edge agent's command-line flags.
type Flags struct {
	Hub      string
	Token    string
	CAHash   string
	NodeName string
	Site     string
	DataDir  string
	Runtime  string
}

// Register adds the flags to cmd.
func (f *Flags) Register(cmd *cobra.Command) {
	fs := cmd.Flags()
	fs.StringVar(&f.Hub, "hub", "", "host:port of the hub's sync endpoint (required)")
	fs.StringVar(&f.Token, "token", "", "bootstrap token <6 characters [a-z0-9]>.<16 characters [a-z0-9]> from outpost token create, to join the first time")
	fs.StringVar(&f.CAHash, "ca-cert-hash", "", "sha256:<64 hex digits> hash of the hub CA, printed by outpost token create")
	fs.StringVar(&f.NodeName, "node-name", "", "name of this node (required)")
	fs.StringVar(&f.Site, "site", "", "site the node belongs to (label topology.outpost.dev/site)")
	fs.StringVar(&f.DataDir, "data-dir", "/var/lib/outpost-edge", "directory for the node's certificate, checkpoint and static pod manifests")
	fs.StringVar(&f.Runtime, "runtime", "fake", "container runtime: fake (pods are simulated in memory; for tests and fleet simulation)")
	cmd.MarkFlagRequired("hub")
	cmd.MarkFlagRequired("node-name")
}

// Config returns the agent configuration of the flags, with the runtime
// they name.
func (f *Flags) Config(log *slog.Logger) (agent.Config, error) {
	cfg := agent.DefaultConfig()
	cfg.NodeName, cfg.Site, cfg.DataDir = f.NodeName, f.Site, f.DataDir
	cfg.HubAddr, cfg.Token, cfg.CAHash = f.Hub, f.Token, f.CAHash
	cfg.Logger = log
	rt, version, err := NewRuntime(f.Runtime, log)
	if err != nil {
		return agent.Config{}, err
	}
	cfg.Runtime, cfg.RuntimeVersion = rt, version
	return cfg, nil
}

// NewRuntime returns the runtime of a --runtime value and its version for
// the node's info.
func NewRuntime(name string, log *slog.Logger) (runtime.Runtime, string, error) {
	switch name {
	case "fake":
		log.Warn("pods run on the fake runtime: they are simulated in memory, no container runs")
		return fake.New(fake.Config{Behavior: fake.ByImage}), "fake://0.1", nil
	case "containerd":
		return nil, "", errors.New("the containerd runtime is not in this build yet: use --runtime fake")
	}
	return nil, "", fmt.Errorf("unknown runtime %q: use fake", name)
}

// NewCmd returns the edge command, named use.
func NewCmd(use string) *cobra.Command {
	var f Flags
	cmd := &cobra.Command{
		Use:   use,
		Short: "Run the edge agent of one node: its pods, online or not",
		Long: `Run the edge agent of one node. The first start joins the hub with a
bootstrap token, verifying the hub by the hash of its CA; later starts use
the node certificate kept in --data-dir. Pods keep running, and restart,
while the hub cannot be reached, and come back from the checkpoint after a
restart without it. Static pods in DATA-DIR/manifests run even if the hub
was never reached.`,
		Example: `  outpost-edge --hub hub.example.com:7443 --token abcdef.0123456789abcdef \
    --ca-cert-hash sha256:... --node-name gw-17 --site store-17`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := f.Config(slog.Default())
			if err != nil {
				return err
			}
			a, err := agent.New(cfg)
			if err != nil {
				return err
			}
			slog.Info("edge agent starting", "node", f.NodeName, "hub", f.Hub, "data_dir", f.DataDir)
			start := time.Now()
			err = a.Run(cmd.Context())
			slog.Info("edge agent stopped", "after", time.Since(start).Round(time.Second), "err", err)
			return err
		},
	}
	f.Register(cmd)
	return cmd
}
