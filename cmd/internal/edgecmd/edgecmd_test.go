package edgecmd

import (
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
)

func TestEvictionFlags(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("pods on containerd need root, and so does their configuration")
	}
	parse := func(args ...string) (*Flags, error) {
		f := DefaultFlags()
		fs := pflag.NewFlagSet("edge", pflag.ContinueOnError)
		f.Register(fs)
		return &f, fs.Parse(append([]string{"--hub", "hub:7443", "--node-name", "gw-1"}, args...))
	}
	f, err := parse()
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := f.Config(slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, th := range cfg.Eviction.Thresholds {
		got = append(got, th.String())
	}
	if want := "memory.available<100Mi,nodefs.available<10%,nodefs.inodesFree<5%,imagefs.available<15%"; strings.Join(got, ",") != want || cfg.Eviction.PressureTransitionPeriod != 5*time.Minute {
		t.Errorf("default eviction: %v, %v; want kubelet's %s, 5m", got, cfg.Eviction.PressureTransitionPeriod, want)
	}

	f, err = parse("--eviction-hard", "memory.available<200Mi,nodefs.available<5%", "--eviction-pressure-transition-period", "30s")
	if err != nil {
		t.Fatal(err)
	}
	if cfg, err = f.Config(slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}
	if th := cfg.Eviction.Thresholds; len(th) != 2 || th[0].String() != "memory.available<200Mi" || cfg.Eviction.PressureTransitionPeriod != 30*time.Second {
		t.Errorf("eviction from flags: %v, %v", th, cfg.Eviction.PressureTransitionPeriod)
	}

	for _, args := range [][]string{
		{"--eviction-hard", "memory.available>1Gi"},
		{"--eviction-hard", "cpu.available<1"},
		{"--eviction-pressure-transition-period", "-1s"},
	} {
		f, err := parse(args...)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.Config(slog.New(slog.DiscardHandler)); err == nil || !strings.Contains(err.Error(), "--eviction") {
			t.Errorf("Config(%v) = %v, want an error naming the flag", args, err)
		}
	}
}

func TestGCPercent(t *testing.T) {
	for _, c := range []struct {
		env      map[string]string
		want     int
		wantFrom string
	}{
		{nil, DefaultGCPercent, "default"},
		{map[string]string{"GOGC": "200"}, 200, "GOGC"},
		{map[string]string{"GOGC": "off"}, -1, "GOGC"},
		{map[string]string{"GOGC": "OFF"}, 100, "GOGC"}, // as the runtime reads it
		{map[string]string{"GOGC": ""}, 100, "GOGC"},
		{map[string]string{"GOMEMLIMIT": "1GiB"}, DefaultGCPercent, "default"},
	} {
		got, from := GCPercent(func(k string) (string, bool) { v, ok := c.env[k]; return v, ok })
		if got != c.want || from != c.wantFrom {
			t.Errorf("GCPercent(%v) = %d, %q; want %d, %q", c.env, got, from, c.want, c.wantFrom)
		}
	}
}

func TestParseMeshAddr(t *testing.T) {
	for in, want := range map[string]string{
		"192.168.1.10":      "192.168.1.10:7946",
		"192.168.1.10:8000": "192.168.1.10:8000",
		"127.0.0.11:0":      "127.0.0.11:0",
		"fd00::1":           "[fd00::1]:7946",
		"[fd00::1]:7000":    "[fd00::1]:7000",
	} {
		got, err := ParseMeshAddr(in)
		if err != nil || got.String() != want {
			t.Errorf("ParseMeshAddr(%q) = %v, %v; want %s", in, got, err, want)
		}
	}
	for _, in := range []string{"", "gateway.local", "0.0.0.0", "[::]:7946", "192.168.1.10:x", "fe80::1%eth0"} {
		if got, err := ParseMeshAddr(in); err == nil {
			t.Errorf("ParseMeshAddr(%q) = %v, want an error", in, got)
		}
	}
}
