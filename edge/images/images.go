// Package images is the edge agent's image manager on containerd: it
// pulls images as a container's pull policy and its pod's credentials
// say, imports image archives for sites that reach no registry, lists the
// node's images for its status, and removes unused ones when the image
// file system fills up, as kubelet's image manager and image GC manager do.
// It also keeps the file that tells `outpost image` where the agent's
// containerd is.
package images

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/content"
	"github.com/containerd/containerd/v2/core/images"
	"github.com/containerd/containerd/v2/core/remotes/docker"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/errdefs"
	"github.com/containerd/log"
	"github.com/containerd/platforms"
	digest "github.com/opencontainers/go-digest"
)

// Labels the Service keeps on containerd's image records.
const (
	// LabelLastUsed is when a container last needed the image (a pull,
	// or a start that found it present) or GC last saw a pod use it, in
	// RFC 3339: GC removes the least recently used images first.
	LabelLastUsed = "outpost.dev/image.last-used"
	// LabelPinned, "true", keeps the image from GC whether pods use it
	// or not. Import pins what it imports: a site that reaches no
	// registry cannot have it back.
	LabelPinned = "outpost.dev/image.pinned"
)

// DefaultNamespace is the containerd namespace of the agent's images and
// containers.
const DefaultNamespace = "outpost"

// Config configures a Service.
type Config struct {
	// Client is a client of containerd: non-nil. The Service does not
	// close it.
	Client *client.Client
	// Namespace is the containerd namespace images are kept in:
	// DefaultNamespace.
	Namespace string
	// Snapshotter is what images are unpacked into: "overlayfs".
	Snapshotter string
	// InsecureRegistries are the registries, host[:port] as in image
	// references, that may be reached over plain HTTP, and over HTTPS
	// without verifying their certificate: none. Every other registry
	// is reached over HTTPS, verified.
	InsecureRegistries []string
	// Root is containerd's root directory, whose file system GC keeps
	// from filling; "" leaves GC without one (GC fails).
	Root string
	// GC says when GC removes images, and what it spares.
	GC GCPolicy
	// Site, if not nil, is where pulls fetch content by digest before
	// the image's registry: the node's site peers (edge/imageshare).
	// Tags are resolved at the registry only.
	Site Site
	// Logger receives what the Service does and containerd client's
	// warnings; nil discards them.
	Logger *slog.Logger
	// Now is the clock; nil for the wall clock.
	Now func() time.Time
	// StatFS measures a file system; nil for statfs(2).
	StatFS func(path string) (FSUsage, error)
}

// Site is content by digest that the node's site shares, as a pull sees
// it. Its methods must be safe for concurrent use.
type Site interface {
	// Host is tried before the registry for every blob and manifest by
	// digest, with the pull capability only; it answers 404 for what
	// the site does not serve, so that containerd's fetcher goes on to
	// the registry, and it verifies what it serves.
	Host() docker.RegistryHost
	// Origin wraps the transport to the image's registry, to see the
	// site's content fetched from there.
	Origin(http.RoundTripper) http.RoundTripper
	// Done is told, for each piece of content a pull fetched or found,
	// that the pull is done with it: containerd has committed it, or
	// the pull failed to have it. Until then the site counts the node
	// as fetching it, and has a peer that asks for it wait.
	Done(digest.Digest)
}

// DefaultConfig returns the defaults above; Client is left nil.
func DefaultConfig() Config {
	return Config{
		Namespace:   DefaultNamespace,
		Snapshotter: "overlayfs",
		GC:          DefaultGCPolicy(),
	}
}

// Validate reports the first invalid field.
func (c *Config) Validate() error {
	switch {
	case c.Client == nil:
		return errors.New("images: no containerd client")
	case c.Namespace == "":
		return errors.New("images: no namespace")
	case c.Snapshotter == "":
		return errors.New("images: no snapshotter")
	}
	for _, r := range c.InsecureRegistries {
		if r == "" || strings.ContainsAny(r, "/ ") {
			return fmt.Errorf("images: insecure registry %q is not host[:port]", r)
		}
	}
	return c.GC.Validate()
}

// Service manages the images of one containerd namespace. Its methods
// are safe for concurrent use.
type Service struct {
	cfg      Config
	c        *client.Client
	log      *slog.Logger
	now      func() time.Time
	platform platforms.MatchComparer
	insecure map[string]bool
	// secure and insecure transports, shared by pulls so that
	// connections to a registry are reused.
	secureRT, insecureRT http.RoundTripper

	clientLog *log.Entry

	mu      sync.Mutex
	flights map[string]*flight // pulls under way, by key
}

// New returns a Service as cfg says. It starts nothing.
func New(cfg Config) (*Service, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s := &Service{
		cfg:        cfg,
		c:          cfg.Client,
		log:        cfg.Logger,
		now:        cfg.Now,
		platform:   platforms.Default(),
		insecure:   map[string]bool{},
		secureRT:   docker.DefaultHTTPTransport(nil),
		insecureRT: insecureTransport(),
		flights:    map[string]*flight{},
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	s.clientLog = newClientLog(s.log)
	if s.now == nil {
		s.now = time.Now
	}
	if s.cfg.StatFS == nil {
		s.cfg.StatFS = statFS
	}
	for _, r := range cfg.InsecureRegistries {
		s.insecure[strings.ToLower(r)] = true
	}
	return s, nil
}

// ctx returns ctx in the Service's namespace, with containerd's client
// logging to the Service's logger.
func (s *Service) ctx(ctx context.Context) context.Context {
	return withClientLog(namespaces.WithNamespace(ctx, s.cfg.Namespace), s.clientLog)
}

// Image is one image record: a name and what it points to.
type Image struct {
	Name   string // normalized, such as "docker.io/library/busybox:1"
	Digest string // of the manifest (or index) the name points to
	// ConfigDigest is the image's ID as the CRI reports it: the
	// digest of its config for this node's platform; "" when that
	// content is missing.
	ConfigDigest string
	// Size is the bytes of the image's content for this node's
	// platform (index, manifest, config, compressed layers), as kubelet
	// reports an image's sizeBytes; 0 when content is missing.
	Size     int64
	Created  time.Time
	LastUsed time.Time // zero if no container ever used it
	Pinned   bool      // imported, or labelled LabelPinned: GC leaves it
}

// List returns the images of the Service's namespace, sorted by name.
// The caller owns the result. Images sharing one Digest are one image
// under several names (kubelet's repoTags).
func (s *Service) List(ctx context.Context) ([]Image, error) {
	ctx = s.ctx(ctx)
	recs, err := s.c.ImageService().List(ctx)
	if err != nil {
		return nil, fmt.Errorf("list images: %w", err)
	}
	out := make([]Image, 0, len(recs))
	cs := s.c.ContentStore()
	for _, r := range recs {
		out = append(out, s.describe(ctx, cs, r))
	}
	sortImages(out)
	return out, nil
}

// describe returns rec as an Image, its size and config read from cs.
func (s *Service) describe(ctx context.Context, cs content.Store, rec images.Image) Image {
	im := Image{
		Name:     rec.Name,
		Digest:   rec.Target.Digest.String(),
		Created:  rec.CreatedAt,
		LastUsed: lastUsed(rec.Labels),
		Pinned:   rec.Labels[LabelPinned] == "true",
	}
	size, cfg, err := imageSize(ctx, cs, rec, s.platform)
	if err != nil {
		s.log.Debug("image content missing", "image", rec.Name, "err", err)
		return im
	}
	im.Size, im.ConfigDigest = size, cfg
	return im
}

// imageSize returns the bytes of rec's content for platform, walked as
// Pull fetches it, and its config's digest.
func imageSize(ctx context.Context, cs content.Store, rec images.Image, platform platforms.MatchComparer) (int64, string, error) {
	size, err := rec.Size(ctx, cs, platform)
	if err != nil {
		return 0, "", err
	}
	cfg, err := rec.Config(ctx, cs, platform)
	if err != nil {
		return 0, "", err
	}
	return size, cfg.Digest.String(), nil
}

func lastUsed(labels map[string]string) time.Time {
	t, err := time.Parse(time.RFC3339Nano, labels[LabelLastUsed])
	if err != nil {
		return time.Time{}
	}
	return t
}

// touch records that the image name was used at now. It fails only when
// the record is gone; other errors are logged.
func (s *Service) touch(ctx context.Context, name string, now time.Time) error {
	_, err := s.c.ImageService().Update(ctx, images.Image{
		Name:   name,
		Labels: map[string]string{LabelLastUsed: now.UTC().Format(time.RFC3339Nano)},
	}, "labels."+LabelLastUsed)
	if err != nil && !errdefs.IsNotFound(err) {
		s.log.Warn("record image use", "image", name, "err", err)
		return nil
	}
	return err
}

func sortImages(imgs []Image) {
	slices.SortFunc(imgs, func(a, b Image) int { return strings.Compare(a.Name, b.Name) })
}
