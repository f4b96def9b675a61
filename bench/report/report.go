// Package report is what every harness under bench/ shares for its output: a
// description of the machine a run was made on, result tables rendered as
// aligned text, bar charts rendered as SVG, value formatting (and parsing
// of sizes given on the command line), latency summaries and JSON result
// files.
package report

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/outpost-mesh/outpost/internal/atomicfile"
)

// WriteJSON writes v as indented JSON to path, creating its directory. The
// file is replaced atomically, so a reader never sees half a result.
func WriteJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("encode %s: %w", path, err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("create result dir: %w", err)
	}
	return atomicfile.WriteFile(path, append(b, '\n'), 0o644)
}
