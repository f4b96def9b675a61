package images

import (
	"slices"
	"strings"
	"testing"
	"time"
)

func TestPlanGC(t *testing.T) {
	now := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	ago := func(d time.Duration) time.Time { return now.Add(-d) }
	const gib = 1 << 30
	// 100 GiB, 90 GiB used: 10 GiB to free to reach 80%.
	full := FSUsage{Capacity: 100 * gib, Available: 10 * gib}
	img := func(digest string, size int64, created, used time.Duration, names ...string) Candidate {
		c := Candidate{Digest: "sha256:" + digest, ConfigDigest: "sha256:cfg-" + digest, Names: names, Size: size * gib, Created: ago(created)}
		if used > 0 {
			c.LastUsed = ago(used)
		}
		return c
	}
	pinned := func(c Candidate) Candidate { c.Pinned = true; return c }
	a := img("a", 4, 48*time.Hour, 30*time.Hour, "r.io/a:1")
	b := img("b", 4, 48*time.Hour, 20*time.Hour, "r.io/b:1", "r.io/b:latest")
	c := img("c", 4, 48*time.Hour, 10*time.Hour, "r.io/c:1")
	d := img("d", 4, 40*time.Hour, 0, "r.io/d:1") // never used: counts as used when created
	young := img("y", 50, time.Minute, 0, "r.io/young:1")
	justUsed := img("u", 50, 48*time.Hour, time.Minute, "r.io/used:1")
	hub := img("h", 4, 48*time.Hour, 40*time.Hour, "docker.io/library/busybox:latest")
	policy := DefaultGCPolicy()

	for _, tc := range []struct {
		name   string
		fs     FSUsage
		imgs   []Candidate
		inUse  []string
		want   []string // digests removed, in order
		free   int64
		short  bool
		policy *GCPolicy
	}{
		{name: "under the high threshold", fs: FSUsage{Capacity: 100 * gib, Available: 16 * gib}, imgs: []Candidate{a, b}, free: 0},
		{name: "at the high threshold", fs: FSUsage{Capacity: 100 * gib, Available: 15 * gib}, imgs: []Candidate{a, b}, want: []string{"a", "b"}, free: 5 * gib},
		{name: "least recently used first, stops when enough", fs: full, imgs: []Candidate{c, b, a}, want: []string{"a", "b", "c"}, free: 10 * gib},
		{name: "enough after two", fs: FSUsage{Capacity: 100 * gib, Available: 12 * gib}, imgs: []Candidate{c, b, a}, want: []string{"a", "b"}, free: 8 * gib},
		{name: "never used counts its creation", fs: full, imgs: []Candidate{c, d, a}, want: []string{"d", "a", "c"}, free: 10 * gib},
		{name: "in use by name", fs: full, imgs: []Candidate{a, b, c, d}, inUse: []string{"r.io/a:1"}, want: []string{"d", "b", "c"}, free: 10 * gib},
		{name: "in use by one of its names", fs: full, imgs: []Candidate{a, b, c, d}, inUse: []string{"r.io/b:latest"}, want: []string{"d", "a", "c"}, free: 10 * gib},
		{name: "in use by digest", fs: full, imgs: []Candidate{a, b, c, d}, inUse: []string{"sha256:a"}, want: []string{"d", "b", "c"}, free: 10 * gib},
		{name: "in use by config digest", fs: full, imgs: []Candidate{a, b, c, d}, inUse: []string{"sha256:cfg-a"}, want: []string{"d", "b", "c"}, free: 10 * gib},
		{name: "in use by name@digest", fs: full, imgs: []Candidate{a, b, c, d}, inUse: []string{"r.io/x@sha256:a"}, want: []string{"d", "b", "c"}, free: 10 * gib},
		{name: "in use as the pod gave it", fs: full, imgs: []Candidate{hub, a, b, c}, inUse: []string{"busybox"}, want: []string{"a", "b", "c"}, free: 10 * gib},
		{name: "not in use under another tag", fs: full, imgs: []Candidate{hub, a, b}, inUse: []string{"busybox:1"}, want: []string{"h", "a", "b"}, free: 10 * gib},
		{name: "pinned spared", fs: full, imgs: []Candidate{pinned(a), b, c, d}, want: []string{"d", "b", "c"}, free: 10 * gib},
		{name: "younger than MinAge spared", fs: full, imgs: []Candidate{young, a}, want: []string{"a"}, free: 10 * gib, short: true},
		{name: "used within MinAge spared", fs: full, imgs: []Candidate{justUsed, a}, want: []string{"a"}, free: 10 * gib, short: true},
		{name: "MinAge 0 spares nothing by age", fs: full, imgs: []Candidate{young, a}, want: []string{"a", "y"}, free: 10 * gib, policy: &GCPolicy{HighThresholdPercent: 85, LowThresholdPercent: 80, Period: time.Minute}},
		{name: "everything in use: short", fs: full, imgs: []Candidate{a, b}, inUse: []string{"r.io/a:1", "r.io/b:1"}, free: 10 * gib, short: true},
		{name: "nothing to remove: short", fs: full, free: 10 * gib, short: true},
		{name: "zero capacity", fs: FSUsage{}, imgs: []Candidate{a}},
		{name: "available above capacity", fs: FSUsage{Capacity: 10, Available: 20}, imgs: []Candidate{a}},
		{name: "ties broken by creation then digest", fs: full,
			imgs: []Candidate{img("z", 4, 30*time.Hour, 0, "r.io/z"), img("x", 4, 30*time.Hour, 0, "r.io/x"), img("w", 4, 31*time.Hour, 0, "r.io/w")},
			want: []string{"w", "x", "z"}, free: 10 * gib},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := policy
			if tc.policy != nil {
				p = *tc.policy
			}
			plan := PlanGC(p, tc.fs, tc.imgs, tc.inUse, now)
			var got []string
			var freed int64
			for _, c := range plan.Remove {
				got = append(got, strings.TrimPrefix(c.Digest, "sha256:"))
				freed += c.Size
			}
			if !slices.Equal(got, tc.want) || plan.BytesToFree != tc.free || plan.Short() != tc.short || plan.Freed != freed {
				t.Errorf("PlanGC(%+v, inUse %v) = remove %v, to free %d, freed %d, short %v; want remove %v, to free %d, short %v",
					tc.fs, tc.inUse, got, plan.BytesToFree, plan.Freed, plan.Short(), tc.want, tc.free, tc.short)
			}
		})
	}
}

func TestCandidates(t *testing.T) {
	t0 := time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC)
	got := candidates([]Image{
		{Name: "r.io/a:1", Digest: "sha256:a", Size: 10, Created: t0.Add(time.Hour), LastUsed: t0.Add(3 * time.Hour)},
		{Name: "r.io/b:1", Digest: "sha256:b", Size: 20, Created: t0},
		{Name: "r.io/a:latest", Digest: "sha256:a", Size: 10, Created: t0, LastUsed: t0.Add(2 * time.Hour), Pinned: true},
	})
	if len(got) != 2 {
		t.Fatalf("candidates = %+v, want 2", got)
	}
	a := got[0]
	if a.Digest != "sha256:a" || !slices.Equal(a.Names, []string{"r.io/a:1", "r.io/a:latest"}) || a.Size != 10 ||
		!a.Created.Equal(t0) || !a.LastUsed.Equal(t0.Add(3*time.Hour)) || !a.Pinned {
		t.Errorf("candidate a = %+v", a)
	}
	if b := got[1]; b.Digest != "sha256:b" || b.Pinned || !b.LastUsed.IsZero() {
		t.Errorf("candidate b = %+v", b)
	}
}

func TestGCPolicyValidate(t *testing.T) {
	if err := DefaultGCPolicy().Validate(); err != nil {
		t.Errorf("default policy: %v", err)
	}
	for _, p := range []GCPolicy{
		{HighThresholdPercent: 0, LowThresholdPercent: 0, Period: time.Minute},
		{HighThresholdPercent: 101, LowThresholdPercent: 80, Period: time.Minute},
		{HighThresholdPercent: 80, LowThresholdPercent: 85, Period: time.Minute},
		{HighThresholdPercent: 85, LowThresholdPercent: 80, MinAge: -1, Period: time.Minute},
		{HighThresholdPercent: 85, LowThresholdPercent: 80},
	} {
		if err := p.Validate(); err == nil {
			t.Errorf("%+v.Validate() = nil, want an error", p)
		}
	}
}
