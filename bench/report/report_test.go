package report

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/outpost-mesh/outpost/internal/bytesize"
)

func TestTableRender(t *testing.T) {
	tb := NewTable("title", "metric", "a", "b")
	tb.AddRow("writes/s", "12.3k/s", "1.00k/s")
	tb.AddRow("latency µs", "850µs")
	tb.AddRow("x", "1", "2", "dropped")
	want := strings.Join([]string{
		"title",
		"metric            a        b",
		"----------  -------  -------",
		"writes/s    12.3k/s  1.00k/s",
		"latency µs    850µs",
		"x                 1        2",
		"",
	}, "\n")
	if got := tb.String(); got != want {
		t.Errorf("Render() =\n%s\nwant\n%s", got, want)
	}
}

func TestFormat(t *testing.T) {
	for _, tc := range []struct{ got, want string }{
		{Rate(12345), "12.3k/s"},
		{Rate(999), "999/s"},
		{Rate(2.5e6), "2.50M/s"},
		{Duration(850 * time.Microsecond), "850µs"},
		{Duration(1234 * time.Microsecond), "1.23ms"},
		{Duration(2500 * time.Millisecond), "2.50s"},
		{Duration(12), "12ns"},
		{Bytes(149_500_000), "150 MB"},
		{Bytes(12_345_678), "12.3 MB"},
		{Bytes(512), "512 B"},
		{Ratio(3, 2), "1.50x"},
		{Ratio(3, 0), "-"},
		{Count(100000), "100,000"},
		{Count(-1234), "-1,234"},
		{Count(999), "999"},
	} {
		if tc.got != tc.want {
			t.Errorf("got %q, want %q", tc.got, tc.want)
		}
	}
}

// TestBytesParses: what Bytes prints, bytesize.Parse reads back.
func TestBytesParses(t *testing.T) {
	if got, err := bytesize.Parse(Bytes(12_300_000)); err != nil || got != 12_300_000 {
		t.Errorf("bytesize.Parse(Bytes(12.3 MB)) = %d, %v", got, err)
	}
}

func TestSummarize(t *testing.T) {
	var s []time.Duration
	for i := 100; i >= 1; i-- {
		s = append(s, time.Duration(i))
	}
	got := Summarize(s)
	want := Latency{Count: 100, Mean: 50, P50: 50, P90: 90, P99: 99, Max: 100}
	if got != want {
		t.Errorf("Summarize(1..100) = %+v, want %+v", got, want)
	}
	if got := Summarize(nil); got != (Latency{}) {
		t.Errorf("Summarize(nil) = %+v, want zero", got)
	}
}

func TestDescribeMachine(t *testing.T) {
	m := DescribeMachine()
	if m.CPUs < 1 || m.GoVersion == "" || m.GOOS == "" || m.Date.IsZero() {
		t.Errorf("DescribeMachine() = %+v, missing fields", m)
	}
	if !strings.Contains(m.String(), "cpus:") {
		t.Errorf("Machine.String() = %q", m.String())
	}
}

func TestWriteJSON(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sub", "r.json")
	if err := WriteJSON(path, map[string]int{"a": 1}); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]int
	if err := json.Unmarshal(b, &got); err != nil || got["a"] != 1 {
		t.Errorf("WriteJSON wrote %q (%v)", b, err)
	}
}

func TestErrorSet(t *testing.T) {
	var a, b ErrorSet
	a.Add("x")
	a.Add("x")
	for i := range MaxErrors + 2 {
		b.Add(fmt.Sprint("e", i))
	}
	a.Merge(b)
	got := a.List()
	if len(got) != MaxErrors+1 || got[0] != "x" || got[MaxErrors] != "(3 more errors, not all distinct)" {
		t.Errorf("List() = %q, want x, then %d of b's, then a count of 3 dropped", got, MaxErrors-1)
	}
	var empty ErrorSet
	if empty.List() != nil {
		t.Errorf("List() of an empty set = %q, want nil", empty.List())
	}
}

func TestTargetTable(t *testing.T) {
	got := TargetTable([]Target{
		{Goal: "under 1s", Detail: "0.4s", Status: TargetMet},
		{Goal: "under 60 MB", Detail: "88 MB", Status: TargetMissed},
	})
	for _, want := range []string{"targets\n", "goal", "measured", "status", "under 1s", "0.4s", "met", "under 60 MB", "88 MB", "MISSED"} {
		if !strings.Contains(got, want) {
			t.Errorf("TargetTable lacks %q:\n%s", want, got)
		}
	}
}
