package eviction

import (
	"strings"
	"testing"
	"time"
)

func TestParseThreshold(t *testing.T) {
	for _, tc := range []struct {
		in, want, err string
		of            int64 // Value.Of(1000)
	}{
		{in: "memory.available<100Mi", want: "memory.available<100Mi", of: 100 << 20},
		{in: "nodefs.available<10%", want: "nodefs.available<10%", of: 100},
		{in: "nodefs.inodesFree<5%", want: "nodefs.inodesFree<5%", of: 50},
		{in: "imagefs.available<15%", want: "imagefs.available<15%", of: 150},
		{in: "pid.available<1000", want: "pid.available<1k", of: 1000},
		{in: "imagefs.inodesFree < 2.5%", want: "imagefs.inodesFree<2.5%", of: 25},
		{in: "memory.available>100Mi", err: "want SIGNAL<VALUE"},
		{in: "cpu.available<1", err: "unsupported eviction signal cpu.available"},
		{in: "memory.available<0", err: "want more than 0"},
		{in: "memory.available<-1Mi", err: "want more than 0"},
		{in: "nodefs.available<0%", err: "want more than 0%"},
		{in: "nodefs.available<101%", err: "at most 100%"},
		{in: "nodefs.available<x%", err: "invalid syntax"},
		{in: "memory.available<lots", err: "quantities must match"},
	} {
		th, err := ParseThreshold(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("ParseThreshold(%q) error = %v, want one with %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil || th.String() != tc.want {
			t.Errorf("ParseThreshold(%q) = %v, %v, want %s", tc.in, th, err, tc.want)
			continue
		}
		if got := th.Value.Of(1000).Value(); got != tc.of {
			t.Errorf("ParseThreshold(%q).Value.Of(1000) = %d, want %d", tc.in, got, tc.of)
		}
	}
	var got []string
	for _, th := range DefaultThresholds() {
		got = append(got, th.String())
		if th.GracePeriod != 0 {
			t.Errorf("default %v is soft", th)
		}
	}
	if want := "memory.available<100Mi nodefs.available<10% nodefs.inodesFree<5% imagefs.available<15%"; strings.Join(got, " ") != want {
		t.Errorf("DefaultThresholds = %v, want %s", got, want)
	}
	soft := Threshold{Signal: SignalMemoryAvailable, Value: DefaultThresholds()[0].Value, GracePeriod: time.Minute}
	if soft.String() != "memory.available<100Mi for 1m0s" {
		t.Errorf("soft threshold String = %q", soft.String())
	}
}

func TestConfigValidate(t *testing.T) {
	c := DefaultConfig()
	if err := c.Validate(); err != nil {
		t.Fatalf("DefaultConfig().Validate() = %v", err)
	}
	for name, mod := range map[string]func(*Config){
		"no proc": func(c *Config) { c.ProcDir = "" },
		"bad signal": func(c *Config) {
			c.Thresholds = append(c.Thresholds, Threshold{Signal: "x", Value: c.Thresholds[0].Value})
		},
		"no value":       func(c *Config) { c.Thresholds = append(c.Thresholds, Threshold{Signal: SignalPIDAvailable}) },
		"no pods":        func(c *Config) { c.MaxPods = 0 },
		"no housekeep":   func(c *Config) { c.Housekeeping = 0 },
		"negative":       func(c *Config) { c.PressureTransitionPeriod = -1 },
		"negative grace": func(c *Config) { c.Thresholds[0].GracePeriod = -time.Second },
		"negative resv":  func(c *Config) { c.SystemReserved = rl("memory=-1Mi") },
	} {
		c := DefaultConfig()
		mod(&c)
		if c.Validate() == nil {
			t.Errorf("%s: Validate() = nil, want an error", name)
		}
	}
}

func TestParseThresholds(t *testing.T) {
	got, err := ParseThresholds("memory.available<100Mi, nodefs.available<10%")
	if err != nil || len(got) != 2 || got[0].String() != "memory.available<100Mi" || got[1].String() != "nodefs.available<10%" {
		t.Errorf("ParseThresholds = %v, %v", got, err)
	}
	if got, err := ParseThresholds(""); err != nil || got != nil {
		t.Errorf("ParseThresholds(\"\") = %v, %v; want none", got, err)
	}
	for _, in := range []string{"memory.available<100Mi,memory.available<1Gi", "memory.available<100Mi,", "cpu<1"} {
		if _, err := ParseThresholds(in); err == nil {
			t.Errorf("ParseThresholds(%q) = nil error", in)
		}
	}
}
