package containerd

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestMeasure prints containerd's and the shims' memory and the start
// latency, for runc and crun; set OUTPOST_MEASURE=1 to run it. The
// density benchmark reuses Shims and Memory.
func TestMeasure(t *testing.T) {
	if os.Getenv("OUTPOST_MEASURE") == "" {
		t.Skip("set OUTPOST_MEASURE=1 to measure")
	}
	need(t)
	rss, pss, err := Memory(sup.PID())
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("containerd (shared by the tests): RSS %.1f MiB, PSS %.1f MiB", mib(rss), mib(pss))
	for _, oci := range []string{"runc", "crun"} {
		t.Run(oci, func(t *testing.T) {
			addr, dir := sup.Address(), supDir
			if oci == "crun" {
				addr, dir = crunSupervisor(t)
				if rss, pss, err := Memory(pidOfContainerd(dir)); err == nil {
					t.Logf("idle containerd: RSS %.1f MiB, PSS %.1f MiB", mib(rss), mib(pss))
				}
			}
			r := newRuntime(t, func(c *Config) {
				c.OCIRuntime = oci
				c.Address, c.RuncRoot, c.StateDir = addr, RuncRoot(dir), filepath.Join(dir, "fifo", c.Namespace)
			})
			p := pod("density")
			var warm []time.Duration
			for i := range 10 {
				start := time.Now()
				if err := r.StartContainer(bg, p, sh(fmt.Sprintf("c%d", i), "sleep 1000"), 0); err != nil {
					t.Fatal(err)
				}
				if i > 0 {
					warm = append(warm, time.Since(start))
				}
				if i == 0 || i == 9 {
					s := waitShims(t, r, func(s []Shim) bool { return len(s) == 1 && s[0].Children == i+1 }, "one shim")
					t.Logf("shim with %d containers: RSS %.1f MiB, PSS %.1f MiB", i+1, mib(s[0].RSS), mib(s[0].PSS))
				}
			}
			var cold []time.Duration
			for i := range 20 {
				start := time.Now()
				if err := r.StartContainer(bg, pod(fmt.Sprintf("p%d", i)), sh("main", "sleep 1000"), 0); err != nil {
					t.Fatal(err)
				}
				cold = append(cold, time.Since(start))
			}
			t.Logf("start latency p50: %v into a pod's running shim (9 starts), %v with a new shim (20 starts)", p50(warm), p50(cold))
		})
	}
}

func pidOfContainerd(dir string) int {
	b, _ := os.ReadFile(filepath.Join(dir, "containerd.pid"))
	var pid int
	fmt.Sscan(string(b), &pid)
	// The wrapper execs unshare, which forks: containerd is its child.
	if c := children(pid); len(c) == 1 {
		if k := children(c[0]); len(k) == 1 {
			return k[0]
		}
		return c[0]
	}
	return pid
}

func p50(d []time.Duration) time.Duration {
	d = slices.Clone(d)
	slices.Sort(d)
	return d[len(d)/2].Round(time.Millisecond)
}

func mib(b uint64) float64 { return float64(b) / (1 << 20) }

func TestShimSockets(t *testing.T) {
	state := t.TempDir()
	for bundle, files := range map[string]map[string]string{
		"ns1/a": {"address": "unix:///run/containerd/s/ab12\n"},                                                   // containerd 1.6
		"ns1/b": {"bootstrap.json": `{"version":3,"address":"unix:///run/containerd/s/cd34","protocol":"ttrpc"}`}, // 2.x
		"ns1/c": {"bootstrap.json": `{"address":"unix:///run/containerd/s/cd34"}`},                                // the same shim
		"ns2/d": {"address": "/run/containerd/s/no-scheme"},
		"ns2/e": {"address": "unix://relative/path"},
		"ns2/f": {"bootstrap.json": `{"address":`},
		"ns2/g": {"address": "unix:///" + strings.Repeat("a", 5000)},
		"ns2/h": {},
	} {
		dir := filepath.Join(state, "io.containerd.runtime.v2.task", bundle)
		if err := os.MkdirAll(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		for name, content := range files {
			if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
	got := ShimSockets(state)
	slices.Sort(got)
	if want := []string{"/run/containerd/s/ab12", "/run/containerd/s/cd34"}; !slices.Equal(got, want) {
		t.Errorf("ShimSockets = %q, want %q", got, want)
	}
}
