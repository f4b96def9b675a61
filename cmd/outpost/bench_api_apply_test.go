package main

import (
	"slices"
	"testing"
	"time"
)

func TestParseStatCPUSeconds(t *testing.T) {
	// A command name with spaces and parentheses; utime 250, stime 50.
	stat := []byte("4242 (out post) (x) S 1 4242 4242 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 12 0 100 1000 200")
	if cpu, err := parseStatCPUSeconds(stat); err != nil || cpu != 3 {
		t.Errorf("parseStatCPUSeconds = %v, %v; want 3", cpu, err)
	}
	for _, bad := range []string{"4242 (x) S 1", "no parenthesis", "1 (x) S 1 2 3 4 5 6 7 8 9 10 x 50 0"} {
		if _, err := parseStatCPUSeconds([]byte(bad)); err == nil {
			t.Errorf("parseStatCPUSeconds(%q) = nil error", bad)
		}
	}
}

// TestRoundOrder checks that over as many rounds as ways, each way runs
// once in each position.
func TestRoundOrder(t *testing.T) {
	for pos := range writeWays {
		var seen []string
		for r := range writeWays {
			seen = append(seen, roundOrder(r)[pos])
		}
		slices.Sort(seen)
		want := slices.Sorted(slices.Values(writeWays))
		if !slices.Equal(seen, want) {
			t.Errorf("position %d over %d rounds holds %v, want each way once", pos, len(writeWays), seen)
		}
	}
}

func TestMarkMedians(t *testing.T) {
	rs := []writeResult{
		{Kind: kindConfigMap, Way: writeApply, Round: 1, PerSec: 30},
		{Kind: kindConfigMap, Way: writeApply, Round: 2, PerSec: 10},
		{Kind: kindConfigMap, Way: writeApply, Round: 3, PerSec: 20},
		{Kind: kindConfigMap, Way: writeUpdate, Round: 1, PerSec: 5},
		{Kind: kindConfigMap, Way: writeUpdate, Round: 2, PerSec: 7},
	}
	markMedians(rs)
	var got []int
	for i, r := range rs {
		if r.Median {
			got = append(got, i)
		}
	}
	// apply: 20/s, the middle of three; update: 5/s, the lower of two.
	if want := []int{2, 3}; !slices.Equal(got, want) {
		t.Errorf("medians marked at %v, want %v", got, want)
	}
}

// TestWriterNext checks that writes change cfg.Changed fields each, in
// turn round the object, and give them values never written before.
func TestWriterNext(t *testing.T) {
	w := &writer{values: make([]string, 5)}
	seen := map[string]bool{}
	var order []int
	for range 4 {
		idx := w.next(2)
		order = append(order, idx...)
		for _, i := range idx {
			if seen[w.values[i]] {
				t.Errorf("value %q written twice", w.values[i])
			}
			seen[w.values[i]] = true
		}
	}
	if want := []int{0, 1, 2, 3, 4, 0, 1, 2}; !slices.Equal(order, want) {
		t.Errorf("fields changed in order %v, want %v", order, want)
	}
}

func TestApplyConfigValidate(t *testing.T) {
	ok := defaultApplyConfig()
	ok.Binary = "/bin/outpost"
	if err := ok.validate(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	for name, mutate := range map[string]func(*applyConfig){
		"no binary":         func(c *applyConfig) { c.Binary = "" },
		"no clients":        func(c *applyConfig) { c.Clients = 0 },
		"short duration":    func(c *applyConfig) { c.Duration = time.Millisecond },
		"too many fields":   func(c *applyConfig) { c.Fields = maxApplyFields + 1 },
		"changed > fields":  func(c *applyConfig) { c.Changed = c.Fields + 1 },
		"no rounds":         func(c *applyConfig) { c.Rounds = 0 },
		"no ready timeout":  func(c *applyConfig) { c.ReadyTimeout = 0 },
		"no namespace":      func(c *applyConfig) { c.Namespace = "" },
		"no changed fields": func(c *applyConfig) { c.Changed = 0 },
	} {
		c := ok
		mutate(&c)
		if err := c.validate(); err == nil {
			t.Errorf("%s: validate = nil", name)
		}
	}
}
