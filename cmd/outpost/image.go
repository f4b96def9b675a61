package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/containerd/containerd/v2/client"
	"github.com/spf13/cobra"

	"github.com/outpost-mesh/outpost/edge/images"
	"github.com/outpost-mesh/outpost/internal/ociimage"
)

// defaultEdgeDataDir is `outpost edge`'s default --data-dir.
const defaultEdgeDataDir = "/var/lib/outpost-edge"

// DemoImage is the image `outpost image demo` imports.
const DemoImage = "outpost.dev/demo/busybox:1"

// newImageCmd returns `outpost image`, which imports and lists the images
// of an edge node's containerd, for sites that reach no registry.
func newImageCmd() *cobra.Command {
	var dataDir string
	cmd := &cobra.Command{
		Use:   "image",
		Short: "Import and list the container images of an edge node",
		Long: `Manage the images of the containerd an edge agent runs pods with, on the
node itself. An image imported from an archive (docker save, or a tar of an OCI
image layout) serves pods with any pull policy but Always, with no registry in
reach, and is never garbage collected.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	cmd.PersistentFlags().StringVar(&dataDir, "data-dir", defaultEdgeDataDir, "data directory of the edge agent whose containerd to use")
	cmd.AddCommand(newImageImportCmd(&dataDir), newImageListCmd(&dataDir), newImageDemoCmd(&dataDir))
	return cmd
}

func newImageImportCmd(dataDir *string) *cobra.Command {
	return &cobra.Command{
		Use:   "import FILE...",
		Short: "Import image archives (docker save, OCI layout tars; - for stdin) and print the names imported",
		Example: `  docker save -o app.tar registry.example.com/app:1.4 && outpost image import app.tar
  outpost image import --data-dir /var/lib/outpost-edge app.tar.gz`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withImages(cmd.Context(), *dataDir, func(s *images.Service) error {
				for _, file := range args {
					names, err := importFile(cmd.Context(), s, file, cmd.InOrStdin())
					if err != nil {
						return err
					}
					for _, n := range names {
						fmt.Fprintln(cmd.OutOrStdout(), n)
					}
				}
				return nil
			})
		},
	}
}

func importFile(ctx context.Context, s *images.Service, file string, stdin io.Reader) ([]string, error) {
	r := stdin
	if file != "-" {
		f, err := os.Open(file)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		r = f
	}
	names, err := s.Import(ctx, r)
	if errors.Is(err, images.ErrBadArchive) {
		return nil, fmt.Errorf("%s: %w; nothing was imported: give a whole archive written by docker save (or podman save, ctr images export) or a tar of an OCI image layout", file, err)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	return names, nil
}

func newImageListCmd(dataDir *string) *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "List the node's images: name, digest and size",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return withImages(cmd.Context(), *dataDir, func(s *images.Service) error {
				imgs, err := s.List(cmd.Context())
				if err != nil {
					return err
				}
				return printImages(cmd.OutOrStdout(), imgs)
			})
		},
	}
}

// printImages prints imgs as `crictl images` does: a table with the
// digest shortened to 12 hex digits and sizes in decimal units.
func printImages(w io.Writer, imgs []images.Image) error {
	tw := tabwriter.NewWriter(w, 0, 8, 3, ' ', 0)
	fmt.Fprintln(tw, "NAME\tDIGEST\tSIZE\tPINNED")
	for _, im := range imgs {
		d := strings.TrimPrefix(im.Digest, "sha256:")
		if len(d) > 12 {
			d = d[:12]
		}
		pinned := ""
		if im.Pinned {
			pinned = "yes"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", im.Name, d, humanSize(im.Size), pinned)
	}
	return tw.Flush()
}

// humanSize prints n bytes with three significant digits in decimal
// units, as crictl does: "1.15MB".
func humanSize(n int64) string {
	units := []string{"B", "kB", "MB", "GB", "TB", "PB"}
	f, i := float64(n), 0
	for f >= 999.5 && i < len(units)-1 { // what %.3g would print as 1e+03

		f /= 1000
		i++
	}
	return fmt.Sprintf("%.3g%s", f, units[i])
}

func newImageDemoCmd(dataDir *string) *cobra.Command {
	return &cobra.Command{
		Use:   "demo",
		Short: "Import " + DemoImage + ", a small busybox image made from this machine's, to run a first pod without a registry",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			im, err := ociimage.Busybox(DemoImage)
			if err != nil {
				return fmt.Errorf("build the demo image: %w", err)
			}
			var b bytes.Buffer
			if err := im.WriteOCI(&b); err != nil {
				return fmt.Errorf("build the demo image: %w", err)
			}
			return withImages(cmd.Context(), *dataDir, func(s *images.Service) error {
				names, err := s.Import(cmd.Context(), &b)
				if err != nil {
					return fmt.Errorf("import the demo image: %w", err)
				}
				for _, n := range names {
					fmt.Fprintln(cmd.OutOrStdout(), n)
				}
				return nil
			})
		},
	}
}

// withImages runs fn with the images of the containerd of the agent
// whose data directory is dataDir.
func withImages(ctx context.Context, dataDir string, fn func(*images.Service) error) error {
	ep, err := images.ReadEndpoint(dataDir)
	if err != nil {
		return err
	}
	c, err := client.New(ep.Address, client.WithDefaultNamespace(ep.Namespace))
	if err != nil {
		return fmt.Errorf("connect to containerd at %s: %w", ep.Address, err)
	}
	defer c.Close()
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	ok, err := c.IsServing(pctx)
	cancel()
	if !ok || err != nil {
		return fmt.Errorf("containerd at %s (named in %s) does not answer: is the edge agent running? (%v)", ep.Address, images.EndpointPath(dataDir), err)
	}
	cfg := images.DefaultConfig()
	cfg.Client, cfg.Namespace = c, ep.Namespace
	if ep.Snapshotter != "" {
		cfg.Snapshotter = ep.Snapshotter
	}
	s, err := images.New(cfg)
	if err != nil {
		return err
	}
	return fn(s)
}
