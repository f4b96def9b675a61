package logs

import (
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

var t0 = time.Date(2016, 10, 6, 0, 17, 9, 669794202, time.UTC)

// clock steps one second on every call.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := c.t
	c.t = c.t.Add(time.Second)
	return t
}

func readAll(t *testing.T, path string) []Entry {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	r := NewReader(bytes.NewReader(b), 0)
	var out []Entry
	for {
		e, err := r.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatalf("Next() = %v", err)
		}
		e.Msg = bytes.Clone(e.Msg)
		out = append(out, e)
	}
}

func TestFormat(t *testing.T) {
	got := string(appendLine(nil, t0, Stdout, false, []byte("text")))
	if want := "2016-10-06T00:17:09.669794202Z stdout F text\n"; got != want {
		t.Errorf("appendLine = %q, want %q", got, want)
	}
	got = string(appendLine(nil, time.Date(2016, 1, 1, 0, 0, 0, 0, time.FixedZone("x", 3600)), Stderr, true, nil))
	if want := "2015-12-31T23:00:00.000000000Z stderr P \n"; got != want {
		t.Errorf("appendLine = %q, want %q", got, want)
	}
}

func TestParseLine(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want string // "stream partial msg" or "error"
	}{
		{"2016-10-06T00:17:09.669794202Z stdout F text", "stdout false text"},
		{"2016-10-06T00:17:09.669794202Z stderr P part of it", "stderr true part of it"},
		{"2016-10-06T00:17:09Z stdout F ", "stdout false "},
		{"2016-10-06T00:17:09Z stdout F", "stdout false "},
		{"2016-10-06T00:17:09.5+02:00 stdout F x", "stdout false x"},
		{"2016-10-06T00:17:09Z stdin F x", "error"},
		{"2016-10-06T00:17:09Z stdout X x", "error"},
		{"2016-10-06 stdout F x", "error"},
		{"garbage", "error"},
		{"", "error"},
	} {
		e, err := ParseLine([]byte(tc.in))
		got := "error"
		if err == nil {
			got = fmt.Sprintf("%s %v %s", e.Stream, e.Partial, e.Msg)
		} else if !errors.Is(err, ErrMalformed) {
			t.Errorf("ParseLine(%q) = %v, not ErrMalformed", tc.in, err)
		}
		if got != tc.want {
			t.Errorf("ParseLine(%q) = %q (%v), want %q", tc.in, got, err, tc.want)
		}
	}
}

func TestStreamSplitsLines(t *testing.T) {
	path := filepath.Join(t.TempDir(), "0.log")
	cfg := DefaultConfig()
	cfg.LineSize = 8
	c := &clock{t: t0}
	cfg.Clock = c.Now
	l, err := Open(path, cfg)
	if err != nil {
		t.Fatal(err)
	}
	w := l.Stream(Stdout)
	for _, s := range []string{"abcdefgh\nok\n", "he", "llo\nworld", "\n\n", "0123456789abcdefXY\n0123456", "7", "xyz"} {
		w.Write([]byte(s))
	}
	w.Close()
	l.Close()
	var got []string
	for _, e := range readAll(t, path) {
		tag := "F"
		if e.Partial {
			tag = "P"
		}
		got = append(got, tag+":"+string(e.Msg))
	}
	want := []string{"F:abcdefgh", "F:ok", "F:hello", "F:world", "F:", "P:01234567", "P:89abcdef", "F:XY", "P:01234567", "F:xyz"}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("entries = %q, want %q", got, want)
	}
}

func TestTwoStreams(t *testing.T) {
	path := filepath.Join(t.TempDir(), "0.log")
	l, err := Open(path, DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for _, s := range []string{Stdout, Stderr} {
		wg.Go(func() {
			w := l.Stream(s)
			for i := range 500 {
				fmt.Fprintf(w, "%s line %d\n", s, i)
			}
		})
	}
	wg.Wait()
	l.Close()
	next := map[string]int{}
	for _, e := range readAll(t, path) {
		if want := fmt.Sprintf("%s line %d", e.Stream, next[e.Stream]); string(e.Msg) != want || e.Partial {
			t.Fatalf("entry %+v, want %q", e, want)
		}
		next[e.Stream]++
	}
	if next[Stdout] != 500 || next[Stderr] != 500 {
		t.Errorf("lines read = %v, want 500 of each", next)
	}
}

func TestRotation(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "0.log")
	c := &clock{t: t0}
	cfg := Config{MaxSize: 1024, MaxFiles: 3, LineSize: 100, Clock: c.Now}
	l, err := Open(path, cfg)
	if err != nil {
		t.Fatal(err)
	}
	w := l.Stream(Stdout)
	line := strings.Repeat("x", 60) + "\n" // 100-byte entries: 10 per file
	for i := range 45 {
		fmt.Fprintf(w, "%02d%s", i, line[2:])
	}
	if err := l.Err(); err != nil {
		t.Fatal(err)
	}
	l.Close()
	rotated, err := Rotated(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(rotated) != 2 {
		t.Fatalf("Rotated = %q, want 2 files", rotated)
	}
	if !strings.HasSuffix(rotated[0], ".gz") || strings.HasSuffix(rotated[1], ".gz") {
		t.Errorf("Rotated = %q, want the older compressed, the newer not", rotated)
	}
	for _, r := range rotated {
		ts := strings.TrimSuffix(strings.TrimPrefix(filepath.Base(r), "0.log."), ".gz")
		if _, err := time.Parse(RotatedTimeFormat, ts); err != nil {
			t.Errorf("rotated file %s: timestamp %q: %v", r, ts, err)
		}
	}
	// The newest 5 lines are in the current file, the 10 before in the
	// newest rotated one, the 10 before those compressed.
	cur := readAll(t, path)
	if len(cur) != 5 || string(cur[0].Msg[:2]) != "40" {
		t.Errorf("current file holds %d entries from %q, want 5 from 40", len(cur), cur[0].Msg[:2])
	}
	prev := readAll(t, rotated[1])
	if len(prev) != 10 || string(prev[0].Msg[:2]) != "30" {
		t.Errorf("newest rotated file holds %d entries from %q, want 10 from 30", len(prev), prev[0].Msg[:2])
	}
	f, err := os.Open(rotated[0])
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(bytes.SplitN(b, []byte(" "), 4)[3], []byte("20")) {
		t.Errorf("oldest kept file starts %q, want line 20", b[:60])
	}
	if err := Remove(path); err != nil {
		t.Fatal(err)
	}
	if left, _ := os.ReadDir(dir); len(left) != 0 {
		t.Errorf("Remove left %v", left)
	}
}

func TestReaderLimit(t *testing.T) {
	in := "2016-10-06T00:17:09Z stdout F short\n" +
		"2016-10-06T00:17:09Z stdout F " + strings.Repeat("y", 200) + "\n" +
		"not a line\n" +
		"2016-10-06T00:17:09Z stderr F after"
	r := NewReader(strings.NewReader(in), 64)
	var got []string
	for {
		e, err := r.Next()
		if err == io.EOF {
			break
		}
		switch {
		case errors.Is(err, ErrLineTooLong):
			got = append(got, "too long")
		case errors.Is(err, ErrMalformed):
			got = append(got, "malformed")
		case err != nil:
			t.Fatal(err)
		default:
			got = append(got, e.Stream+":"+string(e.Msg))
		}
	}
	want := "stdout:short,too long,malformed,stderr:after"
	if strings.Join(got, ",") != want {
		t.Errorf("Next() gave %q, want %q", got, want)
	}
}

func FuzzParseLine(f *testing.F) {
	f.Add([]byte("2016-10-06T00:17:09.669794202Z stdout F text"))
	f.Add([]byte("2016-10-06T00:17:09Z stderr P "))
	f.Add([]byte("x y z"))
	f.Fuzz(func(t *testing.T, line []byte) {
		e, err := ParseLine(line)
		if err != nil {
			return
		}
		b := appendLine(nil, e.Time, e.Stream, e.Partial, e.Msg)
		back, err := ParseLine(b[:len(b)-1])
		if err != nil {
			t.Fatalf("ParseLine(appendLine(%+v)) = %v", e, err)
		}
		if !back.Time.Equal(e.Time) || back.Stream != e.Stream || back.Partial != e.Partial || !bytes.Equal(back.Msg, e.Msg) {
			t.Fatalf("round trip %+v -> %+v", e, back)
		}
	})
}

func FuzzReader(f *testing.F) {
	f.Add([]byte("2016-10-06T00:17:09Z stdout F a\n2016-10-06T00:17:09Z stderr P b"), 16)
	f.Add([]byte("\n\n\n"), 1)
	f.Fuzz(func(t *testing.T, in []byte, max int) {
		max = int(uint(max)%256) + 1
		r := NewReader(bytes.NewReader(in), max)
		for i := 0; ; i++ {
			if i > len(in)+1 {
				t.Fatalf("Next called %d times on %d bytes without EOF", i, len(in))
			}
			e, err := r.Next()
			if err == io.EOF {
				return
			}
			if err == nil && len(e.Msg) > max {
				t.Fatalf("entry of %d bytes past limit %d", len(e.Msg), max)
			}
		}
	})
}
