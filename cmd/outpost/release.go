package main

import (
	"crypto/ed25519"
	"debug/buildinfo"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/outpost-mesh/outpost/firmware/manifest"
)

// defaultReleaseLifetime is how long a release's manifest stays valid
// when --expires does not say: long enough for a slow rollout across a
// fleet, short enough that a leaked old release cannot be replayed for
// ever.
const defaultReleaseLifetime = 90 * 24 * time.Hour

// newReleaseCmd returns `outpost release`, which makes signing keys and
// signed releases of the agent and of device files.
func newReleaseCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "release",
		Short: "Make signing keys and signed over-the-air releases",
		Long: `Make the ed25519 keys releases are signed with, and signed release
manifests of the edge agent and of device files. Signing keys stay off the hub:
the hub and the nodes hold only the public keys, and every node verifies each
signature and digest itself before it installs anything.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	cmd.AddCommand(newReleaseKeygenCmd(), newReleaseCreateCmd())
	return cmd
}

// newReleaseKeygenCmd returns `outpost release keygen`.
func newReleaseKeygenCmd() *cobra.Command {
	var out string
	cmd := &cobra.Command{
		Use:   "keygen --out NAME",
		Short: "Make a release signing key: NAME.key (private, mode 0600) and NAME.pub",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if out == "" {
				return errors.New("--out NAME is required: the key is written to NAME.key and NAME.pub")
			}
			if err := manifest.WriteKeyPair(out); err != nil {
				return err
			}
			pub, err := readPublicKey(out + ".pub")
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "wrote %s.key (keep it off the hub) and %s.pub; key id %s\n", out, out, manifest.KeyID(pub))
			return nil
		},
	}
	cmd.Flags().StringVar(&out, "out", "", "path and name of the key files, without extension")
	return cmd
}

// releaseCreate is what `outpost release create` is asked to make.
type releaseCreate struct {
	version, allowDowngradeFrom, out string
	components, keys                 []string
	expires                          time.Duration
	chunkSize                        int64
}

// newReleaseCreateCmd returns `outpost release create`.
func newReleaseCreateCmd() *cobra.Command {
	var o releaseCreate
	cmd := &cobra.Command{
		Use:   "create NAME --version VERSION --component agent=FILE [--component NAME=FILE ...] --key KEY",
		Short: "Write a signed release manifest of the agent and device files",
		Long: `Write a signed release manifest: per component its name, kind, target
platform, size, sha256 and the digests of its chunks, which nodes check one by
one as the artifact arrives; the release's version (semver; nodes never go
below the highest version they committed unless --allow-downgrade-from covers
it) and its expiry.

A component named agent is the edge agent (kind agent); any other name is a
device file handed to the node's install hook (kind file). The platform of a
Go binary is read from it (GOOS, GOARCH, GOARM), of another ELF file from its
header; say it yourself with NAME@OS/ARCH[/VARIANT]=FILE, or NAME@any=FILE for
a file every platform takes. --key may be given several times when the nodes
require several signatures.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return o.run(cmd.OutOrStdout(), args[0], time.Now())
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.version, "version", "", "the release's version, semver such as 1.4.0 (required)")
	f.StringArrayVar(&o.components, "component", nil, "a component, NAME[@OS/ARCH[/VARIANT]|@any]=FILE (repeatable; agent is the edge agent)")
	f.StringArrayVar(&o.keys, "key", nil, "a private signing key made by `outpost release keygen` (repeatable)")
	f.DurationVar(&o.expires, "expires", defaultReleaseLifetime, "how long the release stays installable")
	f.StringVar(&o.allowDowngradeFrom, "allow-downgrade-from", "", "let nodes that committed up to this version install this lower one")
	f.Int64Var(&o.chunkSize, "chunk-size", manifest.DefaultChunkSize, "bytes per verified chunk")
	f.StringVarP(&o.out, "out", "o", "", "where to write the signed manifest (default NAME-VERSION.release.json)")
	return cmd
}

// run makes and writes the signed manifest of release name.
func (o *releaseCreate) run(w io.Writer, name string, now time.Time) error {
	switch {
	case o.version == "":
		return errors.New("--version is required")
	case len(o.components) == 0:
		return errors.New("at least one --component NAME=FILE is required")
	case len(o.keys) == 0:
		return errors.New("--key is required: a private key made by `outpost release keygen`")
	case o.expires <= 0:
		return fmt.Errorf("--expires %v: a release must stay installable for some time", o.expires)
	}
	keys := make([]ed25519.PrivateKey, 0, len(o.keys))
	for _, path := range o.keys {
		data, err := os.ReadFile(path)
		if err != nil {
			return fmt.Errorf("read signing key: %w", err)
		}
		key, err := manifest.ParsePrivateKey(data)
		if err != nil {
			return fmt.Errorf("signing key %s: %w", path, err)
		}
		keys = append(keys, key)
	}
	m := &manifest.Manifest{
		Name: name, Version: o.version, AllowDowngradeFrom: o.allowDowngradeFrom,
		Created: now.UTC().Truncate(time.Second), Expires: now.Add(o.expires).UTC().Truncate(time.Second),
	}
	for _, arg := range o.components {
		c, err := componentArg(arg, o.chunkSize)
		if err != nil {
			return err
		}
		m.Components = append(m.Components, c)
	}
	envelope, err := manifest.Sign(m, keys...)
	if err != nil {
		return fmt.Errorf("sign release %s %s: %w", name, o.version, err)
	}
	out := o.out
	if out == "" {
		out = name + "-" + o.version + ".release.json"
	}
	if err := os.WriteFile(out, envelope, 0o644); err != nil {
		return fmt.Errorf("write the signed manifest: %w", err)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "COMPONENT\tKIND\tPLATFORM\tSIZE\tCHUNKS\tSHA256")
	for _, c := range m.Components {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%s\n", c.Name, c.Kind, platformString(c), c.Size, len(c.Chunks), c.SHA256[:16])
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	ids := make([]string, len(keys))
	for i, k := range keys {
		ids[i] = manifest.KeyID(k.Public().(ed25519.PublicKey))
	}
	fmt.Fprintf(w, "wrote %s: release %s %s, signed by %s, expires %s\n", out, name, o.version, strings.Join(ids, ", "), m.Expires.Format(time.RFC3339))
	return nil
}

// componentArg reads a --component NAME[@PLATFORM]=FILE argument and
// builds the component from its file.
func componentArg(arg string, chunkSize int64) (manifest.Component, error) {
	spec, path, ok := strings.Cut(arg, "=")
	if !ok || spec == "" || path == "" {
		return manifest.Component{}, fmt.Errorf("--component %q: want NAME=FILE or NAME@OS/ARCH[/VARIANT]=FILE", arg)
	}
	name, platform, explicit := strings.Cut(spec, "@")
	kind := manifest.KindFile
	if name == "agent" {
		kind = manifest.KindAgent
	}
	var goos, arch, variant string
	switch {
	case explicit && platform == "any":
		if kind == manifest.KindAgent {
			return manifest.Component{}, fmt.Errorf("--component %q: the agent is built for one platform", arg)
		}
	case explicit:
		parts := strings.Split(platform, "/")
		if len(parts) < 2 || len(parts) > 3 {
			return manifest.Component{}, fmt.Errorf("--component %q: platform %q is not OS/ARCH[/VARIANT]", arg, platform)
		}
		goos, arch = parts[0], parts[1]
		if len(parts) == 3 {
			variant = strings.TrimPrefix(parts[2], "v")
		}
	default:
		var err error
		if goos, arch, variant, err = filePlatform(path); err != nil {
			if kind == manifest.KindAgent {
				return manifest.Component{}, fmt.Errorf("--component %q: %w; say it with agent@OS/ARCH=FILE", arg, err)
			}
			goos, arch, variant = "", "", "" // a platform-free file
		}
	}
	c, err := manifest.ComponentFromFile(name, kind, goos, arch, variant, path, chunkSize)
	if err != nil {
		return manifest.Component{}, fmt.Errorf("--component %q: %w", arg, err)
	}
	return c, nil
}

// elfArch maps ELF machines to GOARCH names.
var elfArch = map[elf.Machine]string{
	elf.EM_X86_64: "amd64", elf.EM_AARCH64: "arm64", elf.EM_ARM: "arm", elf.EM_386: "386", elf.EM_RISCV: "riscv64",
}

// filePlatform returns the platform a binary is built for: a Go binary's
// GOOS, GOARCH and GOARM from its build information, another Linux ELF
// file's architecture from its header.
func filePlatform(path string) (goos, arch, variant string, err error) {
	if info, err := buildinfo.ReadFile(path); err == nil {
		for _, s := range info.Settings {
			switch s.Key {
			case "GOOS":
				goos = s.Value
			case "GOARCH":
				arch = s.Value
			case "GOARM":
				variant = strings.TrimSuffix(strings.TrimSuffix(s.Value, ",softfloat"), ",hardfloat")
			}
		}
		if goos != "" && arch != "" {
			return goos, arch, variant, nil
		}
	}
	f, err := elf.Open(path)
	if err != nil {
		return "", "", "", fmt.Errorf("%s is neither a Go binary nor an ELF file, so its platform is unknown", path)
	}
	defer f.Close()
	arch, ok := elfArch[f.Machine]
	if !ok {
		return "", "", "", fmt.Errorf("%s is an ELF file for %v, which Outpost does not run on", path, f.Machine)
	}
	return "linux", arch, "", nil
}

// platformString is how a component's platform prints.
func platformString(c manifest.Component) string {
	switch {
	case c.OS == "" && c.Arch == "":
		return "any"
	case c.Variant != "":
		return c.OS + "/" + c.Arch + "/v" + c.Variant
	}
	return c.OS + "/" + c.Arch
}

// readPublicKey reads a public key file made by keygen.
func readPublicKey(path string) (ed25519.PublicKey, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return manifest.ParsePublicKey(data)
}
