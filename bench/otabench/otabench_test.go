package otabench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/outpost-mesh/outpost/firmware/manifest"
)

func TestMain(m *testing.M) {
	code := m.Run()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "leaked goroutines: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

// buildOutpost builds the outpost binary into a temporary directory.
func buildOutpost(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		t.Fatalf("go env GOMOD: %v", err)
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == os.DevNull {
		t.Fatal("go env GOMOD: not inside the module")
	}
	bin := filepath.Join(t.TempDir(), "outpost")
	cmd := exec.Command("go", "build", "-tags=grpcnotrace", "-o", bin, "./cmd/outpost")
	cmd.Dir = filepath.Dir(gomod)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/outpost: %v\n%s", err, out)
	}
	return bin
}

// run runs cfg, with two minutes for each rollout, and fails the test if
// Run does.
func run(t *testing.T, cfg Config) *Report {
	t.Helper()
	cfg.RolloutTimeout = 2 * time.Minute
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
	defer cancel()
	var progress bytes.Buffer
	rep, err := Run(ctx, cfg, &progress)
	if err != nil {
		t.Fatalf("Run: %v\nprogress:\n%s", err, progress.String())
	}
	return rep
}

// TestRunQuick rolls out a full and a delta release to five nodes of a
// real hub, one of them cut mid-transfer, and checks that the result adds
// up.
func TestRunQuick(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the outpost binary and runs a hub")
	}
	cfg := QuickConfig()
	cfg.Binary = buildOutpost(t)
	cfg.Dir = t.TempDir()
	cfg.Nodes = 5
	cfg.CutNodes = 1
	rep := run(t, cfg)
	res := rep.Result
	for _, ro := range []RolloutResult{res.Full, res.Delta} {
		if ro.Updated != cfg.Nodes || ro.Failed != 0 {
			t.Errorf("%s: %d updated, %d failed, want %d and 0: %q", ro.Version, ro.Updated, ro.Failed, cfg.Nodes, ro.Errors)
		}
		if ro.ArtifactSize != int64(cfg.ArtifactSize) {
			t.Errorf("%s: artifact size %d, want %d", ro.Version, ro.ArtifactSize, cfg.ArtifactSize)
		}
		if ro.Seconds <= 0 || len(ro.Waves) != 3 {
			t.Errorf("%s: %.1fs, %d waves, want > 0 and 3", ro.Version, ro.Seconds, len(ro.Waves))
		}
		if ro.HubRSSMax == 0 {
			t.Errorf("%s: no hub RSS sampled", ro.Version)
		}
	}
	if res.Full.BytesPerNode < float64(cfg.ArtifactSize) || res.Full.DeltaNodes != 0 {
		t.Errorf("full: %.0f bytes per node, %d delta transfers; want at least the artifact, none", res.Full.BytesPerNode, res.Full.DeltaNodes)
	}
	if res.Delta.DeltaNodes != cfg.Nodes || res.DeltaPercent <= 0 || res.DeltaPercent >= 25 {
		t.Errorf("delta: %d delta transfers, %.2f%% of full; want %d, under 25%%", res.Delta.DeltaNodes, res.DeltaPercent, cfg.Nodes)
	}
	if len(res.Full.Cuts) != 1 {
		t.Fatalf("cuts %+v, want 1", res.Full.Cuts)
	}
	if c := res.Full.Cuts[0]; c.At == 0 || c.Resumes < 1 || !c.Updated || c.Cost < 1 {
		t.Errorf("cut %+v: want cut, resumed, updated, at least the artifact received", c)
	}
	var out bytes.Buffer
	if err := rep.Render(&out); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"wave 3", "bytes per node (mean)", "links cut", "machine"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, out.String())
		}
	}
	if _, err := json.Marshal(rep); err != nil {
		t.Fatal(err)
	}
}

// TestRunRebuilt measures the delta on two given "builds": after the full
// rollout to three nodes, the base build goes to two of them whole, then
// the rebuild as a delta; the third takes neither.
func TestRunRebuilt(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the outpost binary and runs a hub")
	}
	dir := t.TempDir()
	rng := rand.New(rand.NewPCG(3, 4))
	base := make([]byte, 1<<20)
	for i := range base {
		base[i] = byte(rng.Uint32())
	}
	next := slices.Clone(base)
	for _, off := range []int{300_000, 300_001, 900_000} {
		next[off] ^= 0xff
	}
	cfg := QuickConfig()
	cfg.Binary = buildOutpost(t)
	cfg.Dir = dir
	cfg.Nodes, cfg.RebuiltNodes, cfg.CutNodes = 3, 2, 0
	cfg.ArtifactSize = 1 << 16
	cfg.Waves, cfg.HealthWindow = "1,100%", time.Second
	cfg.BaseArtifact, cfg.Artifact = filepath.Join(dir, "edge-2.1.0"), filepath.Join(dir, "edge-2.1.1")
	if err := os.WriteFile(cfg.BaseArtifact, base, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cfg.Artifact, next, 0o600); err != nil {
		t.Fatal(err)
	}
	rep := run(t, cfg)
	res := rep.Result
	if res.DeltaOf != DeltaOfRebuilt || res.RebuiltBase == nil {
		t.Fatalf("delta of %q, rebuilt base %v; want rebuilt, measured", res.DeltaOf, res.RebuiltBase)
	}
	if f := res.Full; f.Updated != 3 || f.Nodes != 3 || f.ArtifactSize != 1<<16 {
		t.Errorf("full: %d of %d updated, artifact %d; want 3 of 3, %d", f.Updated, f.Nodes, f.ArtifactSize, 1<<16)
	}
	if b := res.RebuiltBase; b.Updated != 2 || b.Nodes != 2 || b.DeltaNodes != 0 || b.ArtifactSize != int64(len(base)) || b.BytesPerNode < float64(len(base)) {
		t.Errorf("base build: %d of %d updated, %d deltas, artifact %d, %.0f bytes per node; want 2 of 2, none, the whole %d",
			b.Updated, b.Nodes, b.DeltaNodes, b.ArtifactSize, b.BytesPerNode, len(base))
	}
	if d := res.Delta; d.Updated != 2 || d.DeltaNodes != 2 || d.Version != rebuiltVersion {
		t.Errorf("rebuild: %d updated, %d deltas, version %s; want 2, 2, %s", d.Updated, d.DeltaNodes, d.Version, rebuiltVersion)
	}
	if res.DeltaPercent <= 0 || res.DeltaPercent >= 5 {
		t.Errorf("delta %.2f%% of the rebuild, want a few percent at most", res.DeltaPercent)
	}
	if res.ChangedBytes != 3 || res.Artifacts[1].File != "edge-2.1.1" || res.Artifacts[0].Size != int64(len(base)) {
		t.Errorf("changed %d bytes, artifacts %+v; want 3, edge-2.1.1, and a base of %d", res.ChangedBytes, res.Artifacts, len(base))
	}
	var out bytes.Buffer
	if err := rep.Render(&out); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"agent build 2.1.0", "delta 2.1.1", "a rebuilt agent", "edge-2.1.0"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, out.String())
		}
	}
}

func TestValidate(t *testing.T) {
	ok := DefaultConfig()
	ok.Binary = "outpost"
	if err := ok.Validate(); err != nil {
		t.Fatalf("default: %v", err)
	}
	for name, edit := range map[string]func(*Config){
		"no binary":     func(c *Config) { c.Binary = "" },
		"no nodes":      func(c *Config) { c.Nodes = 0 },
		"tiny artifact": func(c *Config) { c.ArtifactSize = 10 },
		"big change":    func(c *Config) { c.ChangedRegions, c.ChangedBytes = 100, c.ArtifactSize },
		"no waves":      func(c *Config) { c.Waves = "" },
		"too many cuts": func(c *Config) { c.CutNodes = c.Nodes + 1 },
		"no cut length": func(c *Config) { c.CutFor = 0 },
		"short window":  func(c *Config) { c.HealthWindow = time.Millisecond },
		"no timeout":    func(c *Config) { c.RolloutTimeout = 0 },
		"no resync":     func(c *Config) { c.AgentResync = 0 },
		"one build":     func(c *Config) { c.Artifact = "edge-2.1.1" },
		"no base build": func(c *Config) { c.BaseArtifact = "edge-2.1.0" },
		"no rebuilt nodes": func(c *Config) {
			c.BaseArtifact, c.Artifact, c.RebuiltNodes = "a", "b", 0
		},
		"rebuilt nodes past the fleet": func(c *Config) {
			c.BaseArtifact, c.Artifact, c.RebuiltNodes = "a", "b", c.Nodes+1
		},
	} {
		c := ok
		edit(&c)
		if err := c.Validate(); err == nil {
			t.Errorf("%s: valid", name)
		}
	}
}

func TestSimSlots(t *testing.T) {
	ctx := context.Background()
	s := NewSimSlots(map[string]string{"1.0.0": "/base-1"}, nil)
	if _, ok := s.Base("agent"); ok {
		t.Fatal("a base before anything is committed")
	}
	m := &manifest.Manifest{Version: "1.0.0"}
	if _, err := s.Install(ctx, "r1", m, nil, time.Minute, false); err == nil {
		t.Fatal("install of nothing succeeded")
	}
	restart, err := s.Install(ctx, "r1", m, map[string]string{"agent": "/x"}, time.Minute, false)
	if err != nil || restart {
		t.Fatalf("install: restart %v, %v", restart, err)
	}
	st := s.State()
	if st.Trial == nil || st.Trial.Version != "1.0.0" || st.Trial.Agent {
		t.Fatalf("trial %+v, want 1.0.0 of files only", st.Trial)
	}
	if _, err := s.Install(ctx, "r1", m, map[string]string{"agent": "/x"}, time.Minute, false); err == nil {
		t.Fatal("a second install during a trial succeeded")
	}
	if err := s.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	st = s.State()
	if st.Committed != "1.0.0" || st.Highest != "1.0.0" || st.Trial != nil || st.CanRevert {
		t.Fatalf("after commit %+v", st)
	}
	if p, ok := s.Base("agent"); !ok || p != "/base-1" {
		t.Fatalf("base %q %v, want /base-1", p, ok)
	}
	tm, ok := s.Times("1.0.0")
	if !ok || tm.Fetch.IsZero() || tm.Commit.Before(tm.Install) {
		t.Fatalf("times %+v %v", tm, ok)
	}
	m2 := &manifest.Manifest{Version: "1.1.0"}
	if _, err := s.Install(ctx, "r2", m2, map[string]string{"agent": "/y"}, time.Minute, false); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Revert(ctx, "X", "y"); err != nil {
		t.Fatal(err)
	}
	st = s.State()
	if st.Committed != "1.0.0" || len(st.Failed) != 1 || st.Failed[0] != "1.1.0" {
		t.Fatalf("after revert %+v", st)
	}
	if _, err := s.RevertCommitted(ctx, "X"); err == nil {
		t.Fatal("revert of the first committed version succeeded")
	}
}

func TestChanged(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	a := make([]byte, 1<<16)
	for i := range a {
		a[i] = byte(rng.Uint32())
	}
	b := changed(a, 4, 100, rng)
	diff := 0
	for i := range a {
		if a[i] != b[i] {
			diff++
		}
	}
	if diff != 400 {
		t.Fatalf("%d bytes differ, want 400", diff)
	}
}

func TestChangedBytes(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want int64
	}{
		{"", "", 0},
		{"2.1.0", "2.1.1", 1},
		{"abc", "abcde", 2},
		{"abcde", "abc", 0},
		{"abc", "xyz", 3},
	} {
		if got := changedBytes([]byte(tc.a), []byte(tc.b)); got != tc.want {
			t.Errorf("changedBytes(%q, %q) = %d, want %d", tc.a, tc.b, got, tc.want)
		}
	}
}

func TestReadArtifact(t *testing.T) {
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := readArtifact(empty); err == nil {
		t.Error("an empty build was read")
	}
	if _, err := readArtifact(filepath.Join(dir, "missing")); err == nil {
		t.Error("a missing build was read")
	}
	big := filepath.Join(dir, "big")
	if err := os.WriteFile(big, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(big, maxArtifact+1); err != nil {
		t.Fatal(err)
	}
	if _, err := readArtifact(big); err == nil {
		t.Error("a build over the limit was read")
	}
	ok := filepath.Join(dir, "edge")
	if err := os.WriteFile(ok, []byte("ELF"), 0o600); err != nil {
		t.Fatal(err)
	}
	if b, err := readArtifact(ok); err != nil || string(b) != "ELF" {
		t.Errorf("readArtifact = %q, %v; want ELF", b, err)
	}
}
