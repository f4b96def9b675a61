package storebench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"time"
)

// Runner measures one phase of one backend.
type Runner func(ctx context.Context, b Backend, p Phase) (*Result, error)

// Compare measures every phase of every backend through run, phase by
// phase with the backends interleaved (badger writes, etcd writes, badger
// watch, ...), so that a change in the machine's load during the run hits
// both alike. Progress lines go to progress unless it is nil.
func Compare(ctx context.Context, cfg Config, run Runner, progress io.Writer) (*Report, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("invalid config: %w", err)
	}
	if progress == nil {
		progress = io.Discard
	}
	var results []*Result
	for _, b := range Backends {
		results = append(results, &Result{Backend: b, Setup: setup(b)})
	}
	for _, p := range Phases {
		for i, b := range Backends {
			fmt.Fprintf(progress, "%s %s ... ", b, p)
			start := time.Now()
			r, err := run(ctx, b, p)
			if err != nil {
				fmt.Fprintln(progress, "failed")
				return nil, fmt.Errorf("%s %s: %w", b, p, err)
			}
			fmt.Fprintf(progress, "%.1fs\n", time.Since(start).Seconds())
			results[i].Merge(r)
		}
	}
	return NewReport(cfg, results...), nil
}

// ExecRunner returns a Runner that runs each phase in a child process, so
// that one backend's memory never counts against another's. argv returns
// the command line of a worker that measures the phase and prints its
// Result as JSON on stdout (`outpost bench store worker --json`). When ctx
// ends, the worker is interrupted, so that it removes its data dir, and
// killed if it has not exited 10 seconds later.
func ExecRunner(argv func(Backend, Phase) []string) Runner {
	return func(ctx context.Context, b Backend, p Phase) (*Result, error) {
		args := argv(b, p)
		cmd := exec.CommandContext(ctx, args[0], args[1:]...)
		cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
		cmd.WaitDelay = 10 * time.Second
		var stdout bytes.Buffer
		stderr := &tailBuffer{max: 8 << 10}
		cmd.Stdout = &stdout
		cmd.Stderr = stderr
		if err := cmd.Run(); err != nil {
			return nil, fmt.Errorf("worker: %w%s", err, stderr.indented())
		}
		var r Result
		if err := json.Unmarshal(stdout.Bytes(), &r); err != nil {
			return nil, fmt.Errorf("decode worker result: %w%s", err, stderr.indented())
		}
		if r.Backend != b {
			return nil, fmt.Errorf("worker measured backend %q, want %q", r.Backend, b)
		}
		return &r, nil
	}
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	max int
	buf []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.buf = append(t.buf, p...)
	if over := len(t.buf) - t.max; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	return len(p), nil
}

// indented returns the kept output as indented lines after a newline, or "".
func (t *tailBuffer) indented() string {
	s := strings.TrimSpace(string(t.buf))
	if s == "" {
		return ""
	}
	return "\n    " + strings.ReplaceAll(s, "\n", "\n    ")
}
