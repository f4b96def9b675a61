package logs

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestTail: the last lines of a log, whole lines joined from their
// partial entries, cut to the byte bound from the front; a malformed line
// is skipped.
func TestTail(t *testing.T) {
	path := filepath.Join(t.TempDir(), "0.log")
	cfg := DefaultConfig()
	cfg.LineSize = 8
	c := &clock{t: t0}
	cfg.Clock = c.Now
	l, err := Open(path, cfg)
	if err != nil {
		t.Fatal(err)
	}
	out, errw := l.Stream(Stdout), l.Stream(Stderr)
	for i := range 100 {
		fmt.Fprintf(out, "line %d\n", i)
	}
	errw.Write([]byte("panic: a message longer than one entry\n"))
	out.Write([]byte("last, without its newline")) // ended by Close
	out.Close()
	errw.Close()
	l.Close()
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString("not a CRI line\n")
	f.Close()

	for _, tc := range []struct {
		lines, bytes int
		want         string
	}{
		{3, 2048, "line 99\npanic: a message longer than one entry\nlast, without its newline\n"},
		{1, 2048, "last, without its newline\n"},
		{3, 10, "s newline\n"},
		{2, 2048, "panic: a message longer than one entry\nlast, without its newline\n"},
	} {
		got, err := Tail(path, tc.lines, tc.bytes)
		if err != nil || got != tc.want {
			t.Errorf("Tail(%d lines, %d bytes) = %q, %v; want %q", tc.lines, tc.bytes, got, err, tc.want)
		}
	}
	got, err := Tail(path, 80, 1<<20)
	if err != nil || !strings.HasPrefix(got, "line 22\n") || strings.Count(got, "\n") != 80 {
		t.Errorf("Tail(80 lines) = %q, %v; want lines 22 to the last", got, err)
	}
	if _, err := Tail(filepath.Join(t.TempDir(), "none.log"), 80, 2048); err == nil {
		t.Error("Tail of a missing file: no error")
	}
}
