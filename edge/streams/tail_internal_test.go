package streams

import (
	"io"
	"os"
	"path/filepath"
	"testing"
)

// TestTailUpToWhatItCounted: the lines a tail without follow prints are
// the last ones when it counted, however the file grows meanwhile, and a
// line still being written is not among them.
func TestTailUpToWhatItCounted(t *testing.T) {
	path := filepath.Join(t.TempDir(), "0.log")
	line := func(n string) string { return "2026-12-07T00:00:00.000000000Z stdout F line " + n + "\n" }
	if err := os.WriteFile(path, []byte(line("1")+line("2")+line("3")+"2026-12-07T00:00:00.0"), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, tc := range []struct {
		n    int64
		want string
	}{
		{1, line("3")},
		{2, line("2") + line("3")},
		{9, line("1") + line("2") + line("3")},
		{0, ""},
	} {
		if _, err := f.Seek(0, io.SeekStart); err != nil { // as just opened
			t.Fatal(err)
		}
		end, err := seekTail(f, tc.n)
		if err != nil {
			t.Fatal(err)
		}
		// The container writes on: the rest of its line, and another.
		w, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.WriteString("00000000Z stdout F line 4\n" + line("5") + "2026-12-07T00:00:00.0"); err != nil {
			t.Fatal(err)
		}
		w.Close()
		r, err := upTo(f, end)
		if err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(r)
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != tc.want {
			t.Errorf("tail %d = %q, want %q", tc.n, got, tc.want)
		}
		// Next case: the file as the first one found it.
		if err := os.Truncate(path, int64(len(line("1")+line("2")+line("3")+"2026-12-07T00:00:00.0"))); err != nil {
			t.Fatal(err)
		}
	}
}
