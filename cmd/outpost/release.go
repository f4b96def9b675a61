package main

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"debug/buildinfo"
	"debug/elf"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	firmwarev1 "github.com/outpost-mesh/outpost/firmware/apis/v1"
	"github.com/outpost-mesh/outpost/firmware/manifest"
	"github.com/outpost-mesh/outpost/hub/controllers/firmwarerelease"
	"github.com/outpost-mesh/outpost/hub/hubd"
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
	var kubeconfig string
	cmd.PersistentFlags().StringVar(&kubeconfig, "kubeconfig", "",
		"admin kubeconfig of the hub (default $KUBECONFIG, else "+defaultKubeconfig+")")
	cmd.AddCommand(newReleaseKeygenCmd(), newReleaseCreateCmd(&kubeconfig), newReleaseTrustCmd(&kubeconfig))
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
	healthChecks                     []string
	expires                          time.Duration
	chunkSize                        int64
	// noUpload keeps the release local: the envelope is written, nothing
	// is sent to the hub.
	noUpload bool
	// kubeconfig is the hub's admin kubeconfig, as adminClient reads it.
	kubeconfig *string
}

// newReleaseCreateCmd returns `outpost release create`.
func newReleaseCreateCmd(kubeconfig *string) *cobra.Command {
	o := releaseCreate{kubeconfig: kubeconfig}
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
require several signatures.

Then, unless --no-upload, the artifacts the hub lacks are uploaded to its
artifact store and the Release NAME (firmware.outpost.dev/v1) is created on
the hub. Releases are immutable: a Release NAME that exists with another
envelope is left alone and the command fails; pick a new name.

--health-check adds a signed check that each node runs in its trial of the
release, besides its own health (connected to the hub, every pod that ran
before running again); a node commits only while every check passes, and
reverts naming the check that failed when its health window ends first:

  NAME:NAMESPACE/POD[/CONTAINER][:timeout=DURATION]:exec=COMMAND [ARG...]
  NAME:NAMESPACE/POD[:timeout=DURATION]:http=PORT[/PATH]

exec runs the command in the pod's CONTAINER (default its first) and passes
when it exits with 0; the command is split on spaces and run without a shell
(give exec=["sh","-c","a b"], a JSON list, for arguments with spaces). http
GETs the pod's IP (127.0.0.1 for a pod on the host's network) and passes with
a status from 200 to 399. POD is the pod's name or the name of its controller
(a DaemonSet's pods have a name per node); a node that runs no such pod skips
the check. The timeout defaults to 5s, at most 60s; at most 16 checks.`,
		Example: `  outpost release create gateway-1-4-0 --version 1.4.0 --component agent=./outpost-edge --key ops.key
  outpost release create cfg-7 --version 1.4.1 --component config@any=./config.tar --key ops.key --key sec.key
  outpost release create test --version 0.1.0 --component agent@linux/arm64=./edge --key ops.key --no-upload -o test.json
  outpost release create gateway-1-5-0 --version 1.5.0 --component agent=./outpost-edge --key ops.key \
    --health-check 'app:default/gateway-app:http=8080/healthz' \
    --health-check 'db:default/db/postgres:timeout=10s:exec=pg_isready -q'`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return o.run(cmd.Context(), cmd.OutOrStdout(), args[0], time.Now())
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.version, "version", "", "the release's version, semver such as 1.4.0 (required)")
	f.StringArrayVar(&o.components, "component", nil, "a component, NAME[@OS/ARCH[/VARIANT]|@any]=FILE (repeatable; agent is the edge agent)")
	f.StringArrayVar(&o.healthChecks, "health-check", nil, "a check nodes run in their trial, NAME:NAMESPACE/POD[/CONTAINER][:timeout=DURATION]:exec=COMMAND [ARG...] or NAME:NAMESPACE/POD:http=PORT[/PATH] (repeatable)")
	f.StringArrayVar(&o.keys, "key", nil, "a private signing key made by `outpost release keygen` (repeatable)")
	f.DurationVar(&o.expires, "expires", defaultReleaseLifetime, "how long the release stays installable")
	f.StringVar(&o.allowDowngradeFrom, "allow-downgrade-from", "", "let nodes that committed up to this version install this lower one")
	f.Int64Var(&o.chunkSize, "chunk-size", manifest.DefaultChunkSize, "bytes per verified chunk")
	f.StringVarP(&o.out, "out", "o", "", "where to write the signed manifest (default NAME-VERSION.release.json)")
	f.BoolVar(&o.noUpload, "no-upload", false, "only write the signed manifest; upload nothing to the hub")
	return cmd
}

// run makes and writes the signed manifest of release name, and uploads
// it with its artifacts unless o.noUpload.
func (o *releaseCreate) run(ctx context.Context, w io.Writer, name string, now time.Time) error {
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
	for _, arg := range o.healthChecks {
		h, err := healthCheckArg(arg)
		if err != nil {
			return err
		}
		m.HealthChecks = append(m.HealthChecks, h)
	}
	if err := manifest.ValidateHealthChecks(m.HealthChecks); err != nil {
		return fmt.Errorf("--health-check: %w", err)
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
	if len(m.HealthChecks) > 0 {
		fmt.Fprintln(tw, "\nHEALTH CHECK\tPOD\tACTION\tTIMEOUT")
		for _, h := range m.HealthChecks {
			target, action := healthCheckString(h)
			fmt.Fprintf(tw, "%s\t%s\t%s\t%v\n", h.Name, target, action, h.Timeout())
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	ids := make([]string, len(keys))
	for i, k := range keys {
		ids[i] = manifest.KeyID(k.Public().(ed25519.PublicKey))
	}
	fmt.Fprintf(w, "wrote %s: release %s %s, signed by %s, expires %s\n", out, name, o.version, strings.Join(ids, ", "), m.Expires.Format(time.RFC3339))
	if o.noUpload {
		return nil
	}
	up, err := newUploader(*o.kubeconfig)
	if err != nil {
		return fmt.Errorf("%w (or keep the release local with --no-upload)", err)
	}
	files := make(map[string]string, len(o.components)) // component name -> file
	for _, arg := range o.components {
		spec, path, _ := strings.Cut(arg, "=")
		cname, _, _ := strings.Cut(spec, "@")
		files[cname] = path
	}
	return up.upload(ctx, w, m, envelope, files)
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

// uploader sends releases to a hub: artifacts to its store, the Release
// through its API.
type uploader struct {
	http     *http.Client // authenticated as the kubeconfig's user
	base     string       // the hub's URL, without a trailing slash
	releases dynamic.ResourceInterface
}

// newUploader returns an uploader to the hub of the kubeconfig at path
// (as adminClient finds it).
func newUploader(kubeconfig string) (*uploader, error) {
	_, cfg, err := adminClient(kubeconfig)
	if err != nil {
		return nil, err
	}
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("hub client: %w", err)
	}
	dc, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("hub client: %w", err)
	}
	return &uploader{http: hc, base: strings.TrimSuffix(cfg.Host, "/"), releases: dc.Resource(firmwarerelease.ReleasesResource)}, nil
}

// errReleaseExists is returned when a Release of the name exists with
// another envelope.
var errReleaseExists = errors.New("exists with another envelope")

// upload sends m's artifacts that the hub lacks, read from files (by
// component name), and then creates the Release m.Name with envelope,
// leaving one that exists with the same envelope.
func (u *uploader) upload(ctx context.Context, w io.Writer, m *manifest.Manifest, envelope []byte, files map[string]string) error {
	existing, err := u.release(ctx, m.Name)
	if err != nil {
		return err
	}
	if existing != nil && !bytes.Equal(existing.Spec.Envelope, envelope) {
		return fmt.Errorf("release %s %w (version %s) on the hub: releases are immutable, pick a new name", m.Name, errReleaseExists, existing.Spec.Version)
	}
	var sent, held int64
	for _, c := range m.Components {
		ok, err := u.has(ctx, c.SHA256, c.Size)
		if err != nil {
			return err
		}
		if ok {
			held += c.Size
			continue
		}
		if err := u.put(ctx, c, files[c.Name]); err != nil {
			return err
		}
		sent += c.Size
	}
	fmt.Fprintf(w, "artifacts: %d bytes uploaded, %d bytes the hub held already\n", sent, held)
	if existing != nil {
		fmt.Fprintf(w, "release %s unchanged on the hub\n", m.Name)
		return nil
	}
	rel := &firmwarev1.Release{
		TypeMeta:   metav1.TypeMeta{APIVersion: firmwarev1.SchemeGroupVersion.String(), Kind: "Release"},
		ObjectMeta: metav1.ObjectMeta{Name: m.Name},
		Spec:       firmwarev1.ReleaseSpec{Version: m.Version, Envelope: envelope, Components: firmwarerelease.SpecComponents(m)},
	}
	obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(rel)
	if err != nil {
		return fmt.Errorf("encode release %s: %w", m.Name, err)
	}
	err = u.create(ctx, &unstructured.Unstructured{Object: obj})
	if apierrors.IsAlreadyExists(err) {
		// Made meanwhile: the same release is fine.
		existing, gerr := u.release(ctx, m.Name)
		if gerr == nil && existing != nil && bytes.Equal(existing.Spec.Envelope, envelope) {
			fmt.Fprintf(w, "release %s unchanged on the hub\n", m.Name)
			return nil
		}
		return fmt.Errorf("release %s %w on the hub: releases are immutable, pick a new name", m.Name, errReleaseExists)
	}
	if err != nil {
		return fmt.Errorf("create release %s: %w", m.Name, err)
	}
	fmt.Fprintf(w, "release %s %s created on the hub\n", m.Name, m.Version)
	return nil
}

// serveWait bounds how long create waits for a hub that does not serve
// Releases yet: one that has just started installs their definition
// and serves it a moment later.
const serveWait = 30 * time.Second

// create creates the Release obj, trying again for up to serveWait while
// the hub answers that it does not serve Releases (a NotFound without a
// name: the resource, not the object).
func (u *uploader) create(ctx context.Context, obj *unstructured.Unstructured) error {
	var err error
	poll := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, serveWait, true, func(ctx context.Context) (bool, error) {
		_, err = u.releases.Create(ctx, obj, metav1.CreateOptions{})
		return !apierrors.IsNotFound(err), nil
	})
	if poll != nil && apierrors.IsNotFound(err) {
		return fmt.Errorf("the hub does not serve firmware.outpost.dev/v1 releases: %w", err)
	}
	return err
}

// release returns the Release name, nil if there is none.
func (u *uploader) release(ctx context.Context, name string) (*firmwarev1.Release, error) {
	obj, err := u.releases.Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("get release %s: %w", name, err)
	}
	var rel firmwarev1.Release
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, &rel); err != nil {
		return nil, fmt.Errorf("decode release %s: %w", name, err)
	}
	return &rel, nil
}

// has reports whether the hub's store holds the artifact of digest with
// size bytes.
func (u *uploader) has(ctx context.Context, digest string, size int64) (bool, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodHead, u.base+hubd.ArtifactsPath+digest, nil)
	if err != nil {
		return false, err
	}
	resp, err := u.http.Do(req)
	if err != nil {
		return false, fmt.Errorf("look up artifact %s: %w", digest[:12], err)
	}
	resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusOK:
		return resp.ContentLength == size, nil
	case http.StatusNotFound:
		return false, nil
	}
	return false, fmt.Errorf("look up artifact %s: the hub answered %s", digest[:12], resp.Status)
}

// put uploads the artifact of c from the file at path.
func (u *uploader) put(ctx context.Context, c manifest.Component, path string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("upload %s: %w", c.Name, err)
	}
	defer f.Close()
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, u.base+hubd.ArtifactsPath+c.SHA256, io.LimitReader(f, c.Size))
	if err != nil {
		return err
	}
	req.ContentLength = c.Size
	req.Header.Set("Content-Type", "application/octet-stream")
	resp, err := u.http.Do(req)
	if err != nil {
		return fmt.Errorf("upload %s: %w", c.Name, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusOK || resp.StatusCode == http.StatusCreated {
		return nil
	}
	var st metav1.Status
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if json.Unmarshal(body, &st) == nil && st.Message != "" {
		return fmt.Errorf("upload %s: the hub answered %s: %s", c.Name, resp.Status, st.Message)
	}
	return fmt.Errorf("upload %s: the hub answered %s", c.Name, resp.Status)
}
