package cli

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

func TestLogFlags(t *testing.T) {
	for _, tc := range []struct {
		level, format string
		debugShown    bool
		json          bool
		ok            bool
	}{
		{"info", "text", false, false, true},
		{"debug", "text", true, false, true},
		{"DEBUG", "json", true, true, true},
		{"warn", "json", false, true, true},
		{"error", "text", false, false, true},
		{"verbose", "text", false, false, false},
		{"info", "yaml", false, false, false},
	} {
		f := LogFlags{Level: tc.level, Format: tc.format}
		var buf bytes.Buffer
		log, err := f.Logger(&buf)
		if (err == nil) != tc.ok {
			t.Errorf("Logger(%q, %q) error = %v, want ok=%v", tc.level, tc.format, err, tc.ok)
			continue
		}
		if !tc.ok {
			continue
		}
		log.Debug("debug-line")
		log.Error("e", "k", "v")
		out := buf.String()
		if got := strings.Contains(out, "debug-line"); got != tc.debugShown {
			t.Errorf("Logger(%q, %q): debug shown = %v, want %v; output %q", tc.level, tc.format, got, tc.debugShown, out)
		}
		lines := strings.Split(strings.TrimSpace(out), "\n")
		last := lines[len(lines)-1]
		var m map[string]any
		isJSON := json.Unmarshal([]byte(last), &m) == nil
		if isJSON != tc.json {
			t.Errorf("Logger(%q, %q): JSON output = %v, want %v; output %q", tc.level, tc.format, isJSON, tc.json, last)
		}
	}
}

func TestLogFlagsDefaults(t *testing.T) {
	var f LogFlags
	fs := newFlagSet()
	f.Register(fs)
	if err := fs.Parse(nil); err != nil {
		t.Fatal(err)
	}
	if f.Level != "info" || f.Format != "text" {
		t.Errorf("defaults = %q, %q; want info, text", f.Level, f.Format)
	}
	log, err := f.Logger(&bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if !log.Enabled(t.Context(), slog.LevelInfo) || log.Enabled(t.Context(), slog.LevelDebug) {
		t.Errorf("default logger does not log at info")
	}
}

func TestPrintVersion(t *testing.T) {
	var out bytes.Buffer
	if err := PrintVersion(&out, "outpost"); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"outpost dev", "commit dev", "go1."} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("version output %q lacks %q", out.String(), want)
		}
	}
	if s := out.String(); strings.Count(s, "\n") != 1 || !strings.HasSuffix(s, "\n") {
		t.Errorf("version output %q is not one line", s)
	}
}

func newFlagSet() *pflag.FlagSet { return pflag.NewFlagSet("test", pflag.ContinueOnError) }
