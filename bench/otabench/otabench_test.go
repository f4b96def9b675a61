package otabench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
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
	cfg.RolloutTimeout = 2 * time.Minute
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	var progress bytes.Buffer
	rep, err := Run(ctx, cfg, &progress)
	if err != nil {
		t.Fatalf("Run: %v\nprogress:\n%s", err, progress.String())
	}
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

// TestRelayCut checks that a relay forwards both ways, counts, and drops
// everything once its armed cut comes.
func TestRelayCut(t *testing.T) {
	hub, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer hub.Close()
	r, err := listenRelay(hub.LocalAddr().(*net.UDPAddr))
	if err != nil {
		t.Fatal(err)
	}
	defer r.close()
	c, err := net.Dial("udp", r.addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r.armCut(10, time.Hour)
	buf := make([]byte, 64)
	echo := func() bool {
		c.Write([]byte("ping"))
		hub.SetReadDeadline(time.Now().Add(2 * time.Second))
		n, from, err := hub.ReadFromUDP(buf)
		if err != nil {
			t.Fatalf("hub read: %v", err)
		}
		hub.WriteToUDP(buf[:n], from)
		hub.WriteToUDP([]byte("0123456789"), from)
		c.SetReadDeadline(time.Now().Add(2 * time.Second))
		_, err = c.Read(buf)
		return err == nil
	}
	if !echo() {
		t.Fatal("no reply through the relay")
	}
	// The second reply crossed the armed count: the link is cut now.
	c.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	c.Read(buf) // the second datagram, or nothing if it was dropped
	if r.cutDown() == 0 {
		t.Fatal("the armed cut did not come")
	}
	c.Write([]byte("lost"))
	hub.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	if _, _, err := hub.ReadFromUDP(buf); err == nil {
		t.Fatal("a datagram crossed a cut link")
	}
	up, down, packets := r.counts()
	if up != 4 || down != 14 || packets != 3 {
		t.Fatalf("counts up %d down %d packets %d, want 4, 14, 3", up, down, packets)
	}
}
