package containerd

import (
	"context"
	"errors"
	"fmt"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/errdefs"
	"github.com/distribution/reference"

	"github.com/outpost-mesh/outpost/edge/runtime"
)

// Puller gets the image a container runs, as its pull policy says:
// edge/images implements it with registry credentials, insecure
// registries and image GC. An image it cannot get is an error wrapping
// runtime.ErrImagePull with the registry's reason. The Runtime unpacks
// the image into its snapshotter itself.
type Puller interface {
	Pull(ctx context.Context, c *client.Client, ref string, policy runtime.PullPolicy, creds []runtime.Credential) (client.Image, error)
}

// NormalizeRef returns ref as containerd names images: "busybox" is
// "docker.io/library/busybox:latest".
func NormalizeRef(ref string) (string, error) {
	n, err := reference.ParseDockerRef(ref)
	if err != nil {
		return "", fmt.Errorf("image %q: %w: %v", ref, runtime.ErrImagePull, err)
	}
	return n.String(), nil
}

// DefaultPuller is the Puller of a Runtime whose Config has none: the
// image present in containerd under its normalized name, unless the
// policy is Always; else a pull with containerd's default resolver, which
// reaches registries over HTTPS without credentials.
type DefaultPuller struct{}

// Pull implements Puller. ctx carries the namespace.
func (DefaultPuller) Pull(ctx context.Context, c *client.Client, ref string, policy runtime.PullPolicy, _ []runtime.Credential) (client.Image, error) {
	name, err := NormalizeRef(ref)
	if err != nil {
		return nil, err
	}
	if policy != runtime.PullAlways {
		img, err := c.GetImage(ctx, name)
		if err == nil {
			return img, nil
		}
		if !errdefs.IsNotFound(err) {
			return nil, fmt.Errorf("image %q: %w", ref, err)
		}
		if policy == runtime.PullNever {
			return nil, fmt.Errorf("%w: Container image %q is not present with pull policy of Never", runtime.ErrImagePull, ref)
		}
	}
	img, err := c.Pull(ctx, name)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("pull image %q: %w: %v", ref, runtime.ErrImagePull, err)
	}
	return img, nil
}

// imageID returns the image's "name@sha256:..." by its manifest digest,
// as a pod's status shows it.
func imageID(img client.Image) string {
	name := img.Name()
	if n, err := reference.ParseNormalizedNamed(name); err == nil {
		name = n.Name()
	}
	return name + "@" + img.Target().Digest.String()
}

// unpack makes sure img is unpacked into snapshotter sn.
func unpack(ctx context.Context, img client.Image, sn string) error {
	ok, err := img.IsUnpacked(ctx, sn)
	if err != nil && !errors.Is(err, errdefs.ErrNotFound) {
		return fmt.Errorf("unpack image %s: %w", img.Name(), err)
	}
	if ok {
		return nil
	}
	if err := img.Unpack(ctx, sn); err != nil {
		return fmt.Errorf("unpack image %s: %w", img.Name(), err)
	}
	return nil
}
