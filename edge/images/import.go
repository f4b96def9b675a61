package images

import (
	"archive/tar"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path"
	"strings"
	"time"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/content"
	"github.com/containerd/containerd/v2/core/images"
	"github.com/containerd/containerd/v2/core/images/archive"
	"github.com/containerd/containerd/v2/core/leases"
	"github.com/containerd/containerd/v2/pkg/archive/compression"
	"github.com/containerd/errdefs"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// MaxArchiveMetadataSize bounds each of an archive's metadata files
// (index.json, oci-layout, docker's manifest.json and repositories).
const MaxArchiveMetadataSize = 4 << 20

// ErrBadArchive is returned, wrapped, by Import for a stream that is not
// a whole image archive it can import.
var ErrBadArchive = errors.New("invalid image archive")

// Import reads an image archive from r — a tar of an OCI image layout, or
// of `docker save` (either possibly gzip or zstd compressed) — and stores
// its images in containerd under the names the archive gives them
// (normalized: "busybox:1" is "docker.io/library/busybox:1"), unpacked
// into the snapshotter and pinned (LabelPinned), so that GC never removes
// them. An image already under one of those names is replaced. It
// returns the names.
//
// It is all or nothing: an archive that is truncated, corrupt (a blob
// whose bytes do not match its digest, a layer that does not match the
// config's diff IDs), or names no image for this platform is an error
// wrapping ErrBadArchive, and leaves no image record and none of its
// content behind.
func (s *Service) Import(ctx context.Context, r io.Reader) (names []string, err error) {
	ctx = s.ctx(ctx)
	ls := s.c.LeasesService()
	// The lease holds what the archive brings until the images reference
	// it; deleted at once, it has containerd collect all of it when the
	// import fails.
	l, err := ls.Create(ctx, leases.WithRandomID(), leases.WithExpiration(24*time.Hour))
	if err != nil {
		return nil, fmt.Errorf("import: create lease: %w", err)
	}
	defer func() {
		var opts []leases.DeleteOpt
		if err != nil {
			opts = append(opts, leases.SynchronousDelete)
		}
		if derr := ls.Delete(context.WithoutCancel(ctx), l, opts...); derr != nil {
			s.log.Warn("import: delete lease", "lease", l.ID, "err", derr)
		}
	}()
	ctx = leases.WithLease(ctx, l.ID)

	idxDesc, err := importIndex(ctx, s.c.ContentStore(), r)
	if err != nil {
		return nil, err
	}
	recs, err := s.namedImages(ctx, idxDesc)
	if err != nil {
		return nil, err
	}
	for _, rec := range recs {
		img := client.NewImageWithPlatform(s.c, rec, s.platform)
		if err := img.Unpack(ctx, s.cfg.Snapshotter); err != nil {
			return nil, fmt.Errorf("import %s: %w: unpack: %v", rec.Name, ErrBadArchive, err)
		}
	}
	if err := s.storeImages(ctx, recs); err != nil {
		return nil, err
	}
	for _, rec := range recs {
		names = append(names, rec.Name)
		s.log.Info("imported image", "image", rec.Name, "digest", rec.Target.Digest)
	}
	return names, nil
}

// importIndex stores the archive's blobs with containerd's importer and
// returns the descriptor of its index, after checking that the tar is
// whole and its metadata files within MaxArchiveMetadataSize.
func importIndex(ctx context.Context, cs content.Store, r io.Reader) (ocispec.Descriptor, error) {
	ds, err := compression.DecompressStream(r)
	if err != nil {
		return ocispec.Descriptor{}, fmt.Errorf("import: %w: %v", ErrBadArchive, err)
	}
	defer ds.Close()
	pr, pw := io.Pipe()
	checked := make(chan error, 1)
	go func() {
		err := checkTar(ds, pw)
		pw.CloseWithError(err)
		checked <- err
	}()
	desc, err := archive.ImportIndex(ctx, cs, pr)
	// Stop the checker if the importer stopped reading first.
	pr.CloseWithError(errImporterStopped)
	if cerr := <-checked; cerr != nil && !errors.Is(cerr, errImporterStopped) {
		// The checker's error is the cause of the importer's.
		return ocispec.Descriptor{}, fmt.Errorf("import: %w: %v", ErrBadArchive, cerr)
	}
	if err != nil {
		return ocispec.Descriptor{}, fmt.Errorf("import: %w: %v", ErrBadArchive, err)
	}
	return desc, nil
}

var errImporterStopped = errors.New("importer stopped reading")

// checkTar copies the tar from r to w, entry by entry, failing on a tar
// that is not whole or has metadata files larger than
// MaxArchiveMetadataSize.
func checkTar(r io.Reader, w io.Writer) error {
	tr := tar.NewReader(r)
	tw := tar.NewWriter(w)
	entries := 0
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			if errors.Is(err, io.ErrUnexpectedEOF) {
				return errors.New("archive is truncated")
			}
			return fmt.Errorf("not a tar archive: %v", err)
		}
		entries++
		switch path.Clean(h.Name) {
		case ocispec.ImageIndexFile, ocispec.ImageLayoutFile, "manifest.json", "repositories":
			if h.Size > MaxArchiveMetadataSize {
				return fmt.Errorf("%s is %d bytes, more than %d", h.Name, h.Size, MaxArchiveMetadataSize)
			}
		}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if _, err := io.Copy(tw, tr); err != nil {
			if errors.Is(err, io.ErrUnexpectedEOF) {
				return errors.New("archive is truncated")
			}
			return err
		}
	}
	if entries == 0 {
		return errors.New("archive is empty")
	}
	return tw.Close()
}

// namedImages returns the images idx names, after checking that their
// content for this platform is all there and labelling it for
// containerd's GC as references of the images.
func (s *Service) namedImages(ctx context.Context, idx ocispec.Descriptor) ([]images.Image, error) {
	cs := s.c.ContentStore()
	if idx.Size > MaxArchiveMetadataSize {
		return nil, fmt.Errorf("import: %w: index is %d bytes", ErrBadArchive, idx.Size)
	}
	b, err := content.ReadBlob(ctx, cs, idx)
	if err != nil {
		return nil, fmt.Errorf("import: read index: %w", err)
	}
	var index ocispec.Index
	if err := json.Unmarshal(b, &index); err != nil {
		return nil, fmt.Errorf("import: %w: index: %v", ErrBadArchive, err)
	}
	var recs []images.Image
	seen := map[string]bool{}
	for _, m := range index.Manifests {
		if _, ok := m.Annotations[images.AnnotationManifestSubject]; ok {
			continue // a referrer (signature, attestation), not an image
		}
		name, err := archiveName(m.Annotations)
		if err != nil {
			return nil, fmt.Errorf("import: %w: %v", ErrBadArchive, err)
		}
		if name == "" || seen[name] {
			continue
		}
		seen[name] = true
		m.Annotations = nil
		recs = append(recs, images.Image{Name: name, Target: m})
	}
	if len(recs) == 0 {
		return nil, fmt.Errorf("import: %w: the archive names no image (tag it when saving: docker save NAME:TAG, or an OCI layout with org.opencontainers.image.ref.name)", ErrBadArchive)
	}
	handler := images.SetChildrenLabels(cs, images.FilterPlatforms(images.ChildrenHandler(cs), s.platform))
	for _, rec := range recs {
		if err := images.WalkNotEmpty(ctx, handler, rec.Target); err != nil {
			if errdefs.IsNotFound(err) {
				return nil, fmt.Errorf("import %s: %w: content missing or not matching its digest: %v", rec.Name, ErrBadArchive, err)
			}
			return nil, fmt.Errorf("import %s: %w: %v", rec.Name, ErrBadArchive, err)
		}
		// The walk reads manifests and configs; the layers it only names.
		_, _, _, missing, err := images.Check(ctx, cs, rec.Target, s.platform)
		if err != nil {
			return nil, fmt.Errorf("import %s: %w: %v", rec.Name, ErrBadArchive, err)
		}
		if len(missing) > 0 {
			return nil, fmt.Errorf("import %s: %w: content missing or not matching its digest: %s", rec.Name, ErrBadArchive, missing[0].Digest)
		}
	}
	return recs, nil
}

// archiveName returns the normalized name an index entry gives its
// image: containerd's io.containerd.image.name, else the OCI ref name
// when it is a whole reference; "" for none.
func archiveName(ann map[string]string) (string, error) {
	name := ann[images.AnnotationImageName]
	if name == "" {
		name = ann[ocispec.AnnotationRefName]
		if name == "" {
			return "", nil
		}
		if !strings.ContainsAny(name, "/:@") {
			return "", fmt.Errorf("image named only %q, a tag without a repository: name it in full when saving, such as registry.example.com/app:%s", name, name)
		}
	}
	n, err := Normalize(name)
	if err != nil {
		return "", err
	}
	return n, nil
}

// storeImages creates or replaces the records of recs, pinned and marked
// used now; if one fails, those already written are put back as they
// were.
func (s *Service) storeImages(ctx context.Context, recs []images.Image) error {
	is := s.c.ImageService()
	now := s.now().UTC().Format(time.RFC3339Nano)
	type undo struct {
		name string
		old  *images.Image // nil: created
	}
	var done []undo
	rollback := func() {
		ctx := context.WithoutCancel(ctx)
		for _, u := range done {
			var err error
			if u.old == nil {
				err = is.Delete(ctx, u.name)
			} else {
				_, err = is.Update(ctx, *u.old)
			}
			if err != nil {
				s.log.Warn("import: put image record back", "image", u.name, "err", err)
			}
		}
	}
	for _, rec := range recs {
		rec.Labels = map[string]string{LabelPinned: "true", LabelLastUsed: now}
		old, err := is.Get(ctx, rec.Name)
		switch {
		case err == nil:
			if _, err := is.Update(ctx, rec, "target", "labels."+LabelPinned, "labels."+LabelLastUsed); err != nil {
				rollback()
				return fmt.Errorf("import %s: %w", rec.Name, err)
			}
			done = append(done, undo{rec.Name, &old})
		case errdefs.IsNotFound(err):
			if _, err := is.Create(ctx, rec); err != nil {
				rollback()
				return fmt.Errorf("import %s: %w", rec.Name, err)
			}
			done = append(done, undo{rec.Name, nil})
		default:
			rollback()
			return fmt.Errorf("import %s: %w", rec.Name, err)
		}
	}
	return nil
}
