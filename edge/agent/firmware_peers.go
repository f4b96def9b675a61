package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	digest "github.com/opencontainers/go-digest"

	"github.com/outpost-mesh/outpost/edge/imageshare"
	fwv1 "github.com/outpost-mesh/outpost/firmware/apis/v1"
	"github.com/outpost-mesh/outpost/firmware/manifest"
	"github.com/outpost-mesh/outpost/firmware/transfer"
	"github.com/outpost-mesh/outpost/firmware/updater"
)

// This file has the nodes of a site pull each over-the-air artifact over
// their uplinks once: a node serves the artifacts it holds to its site
// peers through its image share Server (as blobs, by sha256), and fetches
// an artifact from its peers before the hub, with the image share's
// rules of who fetches from outside and who waits (imageshare.FetchBlob).
// A peer's bytes are checked chunk by chunk against the signed manifest,
// as the hub's are (transfer.FetchCopy).

// artifactOpener is what FirmwareSlots may also do: open an artifact it
// keeps by sha256, as firmware/updater's OpenArtifact does.
type artifactOpener interface {
	OpenArtifact(sha string) (*os.File, error)
}

var _ artifactOpener = updaterSlots{}

// OpenArtifact opens an artifact the updater keeps.
func (s updaterSlots) OpenArtifact(sha string) (*os.File, error) { return s.u.OpenArtifact(sha) }

var _ artifactOpener = (*updater.Updater)(nil)

// firmwareFiles are the node's artifacts as its image share Server serves
// them (imageshare.Files): the downloads complete in the staging
// directory, which Fetch renames there only once verified whole, then
// what the slots keep once installed.
type firmwareFiles struct {
	staging string
	slots   FirmwareSlots // may be an artifactOpener
}

var _ imageshare.Files = firmwareFiles{}

func (f firmwareFiles) OpenBlob(d digest.Digest) (io.ReadSeekCloser, error) {
	if d.Validate() != nil || d.Algorithm() != digest.SHA256 {
		return nil, fmt.Errorf("artifact %s: %w", d, fs.ErrNotExist)
	}
	sha := d.Encoded() // 64 lowercase hex digits: a plain file name
	file, err := os.Open(filepath.Join(f.staging, sha))
	if errors.Is(err, fs.ErrNotExist) {
		o, ok := f.slots.(artifactOpener)
		if !ok {
			return nil, fmt.Errorf("artifact %s: %w", d, fs.ErrNotExist)
		}
		file, err = o.OpenArtifact(sha)
	}
	if err != nil {
		return nil, err // no typed nil in the interface
	}
	return file, nil
}

// firmwareFiles returns the node's artifacts for its image share Server;
// nil when it takes no updates.
func (a *Agent) firmwareFiles() imageshare.Files {
	if a.fw == nil {
		return nil
	}
	return firmwareFiles{staging: filepath.Join(a.fw.cfg.Dir, firmwareStaging), slots: a.fw.cfg.Slots}
}

// siteBlobs is what peerSource needs of the image share's Fetcher.
type siteBlobs interface {
	FetchBlob(ctx context.Context, d digest.Digest, get func(ctx context.Context, b imageshare.Blob) error) bool
	LowerPulling(d digest.Digest) bool
	Done(d digest.Digest)
}

var _ siteBlobs = (*imageshare.Fetcher)(nil)

// peerSource fetches artifacts from the node's site peers first and from
// hub when none serves them; manifests always from hub, which the node
// verifies against its trusted keys anyway.
type peerSource struct {
	hub  FirmwareSource
	site siteBlobs
	// noProgress ends a peer's transfer that brought nothing for this
	// long; the rest comes from another peer or the hub.
	noProgress time.Duration
	// maxWait bounds how long the node waits for a peer of a lower name
	// that fetches an artifact from the hub, before it fetches it from
	// the hub itself.
	maxWait time.Duration
	log     *slog.Logger
	now     func() time.Time
}

var _ FirmwareSource = peerSource{}

// Defaults of peerSource.
const (
	peerNoProgress = 10 * time.Second
	peerMaxWait    = time.Hour
)

// sitePeersFirst returns hub with the node's site peers before it, or hub
// itself for a node that shares nothing with a site.
func (a *Agent) sitePeersFirst(hub FirmwareSource) FirmwareSource {
	if a.share == nil {
		return hub
	}
	return peerSource{hub: hub, site: a.share.fetcher, noProgress: peerNoProgress, maxWait: peerMaxWait,
		log: a.log.With("component", "firmware"), now: a.now}
}

func (s peerSource) Manifest(ctx context.Context, release string) ([]byte, error) {
	return s.hub.Manifest(ctx, release)
}

// Fetch takes the artifact of c from a site peer that holds it, or is
// fetching it from the hub and serves it once it has it; else from the
// hub, resuming after the chunks the peers brought, while the node says
// it pulls the artifact so that its peers wait for it and take it from
// it. A peer that serves a chunk that does not match the manifest is
// skipped for a while. The rate caps the hub's transfer only.
func (s peerSource) Fetch(ctx context.Context, release string, c manifest.Component, dst, base string, rate int64, received *atomic.Int64) (fwv1.TransferStats, error) {
	d := digest.NewDigestFromEncoded(digest.SHA256, c.SHA256)
	if d.Validate() != nil {
		return s.hub.Fetch(ctx, release, c, dst, base, rate, received)
	}
	// Until the artifact is in dst, where the Server finds it, or the
	// fetch gave up: a peer's request for it waits until then.
	defer s.site.Done(d)
	var fromPeers int64
	get := func(ctx context.Context, b imageshare.Blob) error {
		open := func(ctx context.Context, off int64) (io.ReadCloser, int64, error) {
			body, size, err := b.Open(ctx, off)
			if err != nil {
				return nil, 0, err
			}
			return countingBody{body, received, &fromPeers}, size, nil
		}
		_, err := transfer.FetchCopy(ctx, open, s.noProgress, dst, c)
		if errors.Is(err, transfer.ErrBadCopy) {
			return fmt.Errorf("%w: %w", imageshare.ErrBadContent, err)
		}
		if err != nil {
			s.log.Info("firmware: a site peer's transfer ended; the rest comes from another or the hub", "peer", b.Peer(), "component", c.Name, "err", err)
		}
		return err
	}
	until := s.now().Add(s.maxWait)
	for {
		if s.site.FetchBlob(ctx, d, get) {
			s.log.Info("firmware: artifact fetched from the site's peers", "component", c.Name, "bytes", fromPeers)
			return fwv1.TransferStats{Received: fromPeers, Full: c.Size, FromPeers: fromPeers}, nil
		}
		if err := ctx.Err(); err != nil {
			return fwv1.TransferStats{Received: fromPeers, Full: c.Size, FromPeers: fromPeers}, err
		}
		// A peer of a lower name still fetches it from the hub: its
		// transfer outlasted the peers' wait for it.
		if !s.site.LowerPulling(d) || s.now().After(until) {
			break
		}
	}
	st, err := s.hub.Fetch(ctx, release, c, dst, base, rate, received)
	st.Received += fromPeers
	st.FromPeers = fromPeers
	return st, err
}

// countingBody counts the bytes a peer's body brings, for the node's
// progress and its transfer stats.
type countingBody struct {
	io.ReadCloser
	progress *atomic.Int64
	n        *int64 // read by the fetch's goroutine only
}

func (b countingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.progress.Add(int64(n))
	*b.n += int64(n)
	return n, err
}
