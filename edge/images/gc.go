package images

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/containerd/containerd/v2/core/images"
	"github.com/containerd/errdefs"
	"golang.org/x/sys/unix"
)

// GCPolicy says when GC removes images and which it spares, as kubelet's
// image GC policy does.
type GCPolicy struct {
	// HighThresholdPercent is the usage of the image file system at or
	// above which GC removes images: 85.
	HighThresholdPercent int
	// LowThresholdPercent is the usage GC frees down to: 80.
	LowThresholdPercent int
	// MinAge is how long an image is spared after it was created or
	// last used: 2m, so that an image pulled for a container about to
	// start is not removed under it.
	MinAge time.Duration
	// Period is how often RunGC looks: 5m, kubelet's.
	Period time.Duration
}

// DefaultGCPolicy returns the defaults above.
func DefaultGCPolicy() GCPolicy {
	return GCPolicy{HighThresholdPercent: 85, LowThresholdPercent: 80, MinAge: 2 * time.Minute, Period: 5 * time.Minute}
}

// Validate reports the first invalid field.
func (p GCPolicy) Validate() error {
	switch {
	case p.HighThresholdPercent < 1 || p.HighThresholdPercent > 100:
		return fmt.Errorf("images: GC high threshold %d%% is outside 1..100", p.HighThresholdPercent)
	case p.LowThresholdPercent < 0 || p.LowThresholdPercent > p.HighThresholdPercent:
		return fmt.Errorf("images: GC low threshold %d%% is outside 0..high threshold (%d%%)", p.LowThresholdPercent, p.HighThresholdPercent)
	case p.MinAge < 0:
		return fmt.Errorf("images: GC minimum age %v is negative", p.MinAge)
	case p.Period <= 0:
		return fmt.Errorf("images: GC period %v is not positive", p.Period)
	}
	return nil
}

// FSUsage is a file system's size and free space, in bytes.
type FSUsage struct {
	Capacity  uint64
	Available uint64 // to unprivileged users, as df shows it
}

// Candidate is one image as GC weighs it: every name of one target.
type Candidate struct {
	Digest       string   // the target's
	ConfigDigest string   // the image ID as the CRI shows it; may be ""
	Names        []string // normalized
	Size         int64
	Created      time.Time // of its oldest name
	LastUsed     time.Time // latest of its names'; zero if never used
	Pinned       bool      // any of its names pinned
}

// GCPlan is what PlanGC decided.
type GCPlan struct {
	Usage       int   // percent of the image file system in use
	BytesToFree int64 // to reach the low threshold; 0 below the high one
	// Remove are the images to remove, least recently used first; their
	// sizes add up to Freed.
	Remove []Candidate
	Freed  int64
}

// Short reports whether removing Remove does not free BytesToFree.
func (p GCPlan) Short() bool { return p.Freed < p.BytesToFree }

// PlanGC returns which of imgs to remove to bring fs to the policy's low
// threshold once its usage has reached the high one, as kubelet's image
// GC manager chooses: least recently used first (an image never used
// counts as used when created), never a pinned one, one that inUse names
// (by name as a pod gives it, normalized name, "name@digest", target or
// config digest), or one created or used less than MinAge before now. It
// stops as soon as enough is freed. No I/O.
func PlanGC(p GCPolicy, fs FSUsage, imgs []Candidate, inUse []string, now time.Time) GCPlan {
	if fs.Capacity == 0 {
		return GCPlan{}
	}
	avail := min(fs.Available, fs.Capacity)
	plan := GCPlan{Usage: 100 - int(avail*100/fs.Capacity)}
	if plan.Usage < p.HighThresholdPercent {
		return plan
	}
	target := fs.Capacity * uint64(100-p.LowThresholdPercent) / 100
	if target <= avail {
		return plan
	}
	plan.BytesToFree = int64(target - avail)
	used := inUseSet(inUse)
	var eligible []Candidate
	for _, c := range imgs {
		if c.Pinned || used[c.Digest] || c.ConfigDigest != "" && used[c.ConfigDigest] ||
			slices.ContainsFunc(c.Names, func(n string) bool { return used[n] }) {
			continue
		}
		if now.Sub(c.Created) < p.MinAge || !c.LastUsed.IsZero() && now.Sub(c.LastUsed) < p.MinAge {
			continue
		}
		eligible = append(eligible, c)
	}
	slices.SortFunc(eligible, func(a, b Candidate) int {
		return cmp.Or(lastUse(a).Compare(lastUse(b)), a.Created.Compare(b.Created), strings.Compare(a.Digest, b.Digest))
	})
	for _, c := range eligible {
		if plan.Freed >= plan.BytesToFree {
			break
		}
		plan.Remove = append(plan.Remove, c)
		plan.Freed += c.Size
	}
	return plan
}

func lastUse(c Candidate) time.Time {
	if c.LastUsed.IsZero() {
		return c.Created
	}
	return c.LastUsed
}

// inUseSet returns the keys refs name images by: each ref as given,
// normalized, and its digest if it has one. A "sha256:..." ref is a
// digest.
func inUseSet(refs []string) map[string]bool {
	set := make(map[string]bool, 2*len(refs))
	for _, r := range refs {
		if r == "" {
			continue
		}
		set[r] = true
		if strings.HasPrefix(r, "sha256:") {
			continue
		}
		if _, d, ok := strings.Cut(r, "@"); ok {
			set[d] = true
		}
		if n, err := Normalize(r); err == nil {
			set[n] = true
		}
	}
	return set
}

// candidates groups images by target.
func candidates(imgs []Image) []Candidate {
	byDigest := map[string]*Candidate{}
	var out []*Candidate
	for _, im := range imgs {
		c := byDigest[im.Digest]
		if c == nil {
			c = &Candidate{Digest: im.Digest, ConfigDigest: im.ConfigDigest, Size: im.Size, Created: im.Created}
			byDigest[im.Digest] = c
			out = append(out, c)
		}
		c.Names = append(c.Names, im.Name)
		if im.Created.Before(c.Created) {
			c.Created = im.Created
		}
		if im.LastUsed.After(c.LastUsed) {
			c.LastUsed = im.LastUsed
		}
		c.Pinned = c.Pinned || im.Pinned
	}
	res := make([]Candidate, len(out))
	for i, c := range out {
		res[i] = *c
	}
	return res
}

// ErrGCShort is returned, wrapped, by GC when removing every image it
// may remove does not bring the image file system down to the low
// threshold (kubelet's FreeDiskSpaceFailed).
var ErrGCShort = errors.New("not enough unused images to free")

// GCResult is what one GC pass did.
type GCResult struct {
	Usage       int      // percent in use before
	BytesToFree int64    // 0 when under the high threshold
	Removed     []string // names removed
	Freed       int64    // bytes of the images removed
}

// GC removes images as PlanGC decides, with the image file system
// measured at Config.Root and inUse the images the node's pods use. It
// first marks the images in use as used now, so that an image a pod ran
// for a month is not the least recently used the day it stops. It
// returns what it removed and an error wrapping ErrGCShort when that was
// not enough.
func (s *Service) GC(ctx context.Context, inUse []string) (GCResult, error) {
	return s.gc(ctx, inUse, s.cfg.GC)
}

// DeleteUnused removes every image GC may remove, whatever the usage of
// the image file system: those no pod uses (inUse), not pinned, older
// than the policy's MinAge, as kubelet's DeleteUnusedImages, which its
// eviction manager calls under disk pressure before it evicts a pod.
func (s *Service) DeleteUnused(ctx context.Context, inUse []string) (GCResult, error) {
	p := s.cfg.GC
	p.HighThresholdPercent, p.LowThresholdPercent = 0, 0 // free all there is to free
	res, err := s.gc(ctx, inUse, p)
	if errors.Is(err, ErrGCShort) {
		err = nil // short of an empty disk, as it always is
	}
	return res, err
}

func (s *Service) gc(ctx context.Context, inUse []string, policy GCPolicy) (GCResult, error) {
	if s.cfg.Root == "" {
		return GCResult{}, errors.New("image GC: no image file system (Config.Root) to measure")
	}
	ctx = s.ctx(ctx)
	fs, err := s.cfg.StatFS(s.cfg.Root)
	if err != nil {
		return GCResult{}, fmt.Errorf("image GC: measure %s: %w", s.cfg.Root, err)
	}
	imgs, err := s.List(ctx)
	if err != nil {
		return GCResult{}, fmt.Errorf("image GC: %w", err)
	}
	now := s.now()
	used := inUseSet(inUse)
	for i, im := range imgs {
		if (used[im.Name] || used[im.Digest] || im.ConfigDigest != "" && used[im.ConfigDigest]) && now.Sub(im.LastUsed) >= time.Minute {
			if err := s.touch(ctx, im.Name, now); err == nil {
				imgs[i].LastUsed = now
			}
		}
	}
	plan := PlanGC(policy, fs, candidates(imgs), inUse, now)
	res := GCResult{Usage: plan.Usage, BytesToFree: plan.BytesToFree}
	is := s.c.ImageService()
	var names []string
	for _, c := range plan.Remove {
		names = append(names, c.Names...)
	}
	for i, n := range names {
		var opts []images.DeleteOpt
		if i == len(names)-1 {
			// Have containerd collect the content and snapshots now,
			// so the space is free when GC returns.
			opts = append(opts, images.SynchronousDelete())
		}
		if err := is.Delete(ctx, n, opts...); err != nil && !errdefs.IsNotFound(err) {
			return res, fmt.Errorf("image GC: remove %s: %w", n, err)
		}
		res.Removed = append(res.Removed, n)
	}
	res.Freed = plan.Freed
	if plan.BytesToFree > 0 {
		s.log.Info("image GC", "usage_percent", plan.Usage, "bytes_to_free", plan.BytesToFree, "freed", plan.Freed, "removed", res.Removed)
	}
	if plan.Short() {
		return res, fmt.Errorf("image GC: %w: attempted to free %d bytes, found %d bytes eligible", ErrGCShort, plan.BytesToFree, plan.Freed)
	}
	return res, nil
}

// RunGC calls GC every GC.Period, with the images inUse returns then,
// until ctx is done; it returns nil then. A failed pass is logged and
// retried the next period.
func (s *Service) RunGC(ctx context.Context, inUse func(context.Context) ([]string, error)) error {
	t := time.NewTicker(s.cfg.GC.Period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		refs, err := inUse(ctx)
		if err != nil {
			// Without knowing what pods use, nothing may go.
			s.log.Warn("image GC skipped: images in use unknown", "err", err)
			continue
		}
		if _, err := s.GC(ctx, refs); err != nil && ctx.Err() == nil {
			s.log.Warn("image GC", "err", err)
		}
	}
}

// statFS measures the file system holding path with statfs(2).
func statFS(path string) (FSUsage, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return FSUsage{}, err
	}
	bs := uint64(st.Bsize)
	return FSUsage{Capacity: uint64(st.Blocks) * bs, Available: uint64(st.Bavail) * bs}, nil
}
