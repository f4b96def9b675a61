// Package cli holds the command-line pieces both binaries share: the
// --log-level and --log-format flags with the slog logger they build, and
// the version line. Only cmd/... imports it. It imports no cobra, which
// outpost-edge must not link (see cmd/internal/edgecmd).
package cli

import (
	"fmt"
	"io"
	"log/slog"
	"strings"

	"github.com/spf13/pflag"

	"github.com/outpost-mesh/outpost/internal/version"
)

// LogFlags are the logging flags of a command line.
type LogFlags struct {
	Level  string // debug, info, warn or error
	Format string // text or json
}

// Register adds --log-level and --log-format to fs with their defaults.
func (f *LogFlags) Register(fs *pflag.FlagSet) {
	fs.StringVar(&f.Level, "log-level", "info", "log level: debug, info, warn or error")
	fs.StringVar(&f.Format, "log-format", "text", "log format: text or json")
}

// Logger returns a logger writing to w as the flags say, or an error naming
// the bad flag value.
func (f *LogFlags) Logger(w io.Writer) (*slog.Logger, error) {
	var level slog.Level
	switch strings.ToLower(f.Level) {
	case "debug":
		level = slog.LevelDebug
	case "info":
		level = slog.LevelInfo
	case "warn", "warning":
		level = slog.LevelWarn
	case "error":
		level = slog.LevelError
	default:
		return nil, fmt.Errorf("invalid --log-level %q: use debug, info, warn or error", f.Level)
	}
	opts := &slog.HandlerOptions{Level: level}
	switch strings.ToLower(f.Format) {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("invalid --log-format %q: use text or json", f.Format)
}

// VersionShort is the one-line help of a binary's `version` command.
const VersionShort = "Print the version, git commit and Go version of this binary"

// PrintVersion writes what binary's `version` command prints: the build's
// version, commit, Go version and platform, on one line.
func PrintVersion(w io.Writer, binary string) error {
	_, err := fmt.Fprintln(w, version.String(binary))
	return err
}
