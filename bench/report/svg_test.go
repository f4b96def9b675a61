package report

import (
	"encoding/xml"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// svgElements parses s as XML and counts its elements by name and class.
func svgElements(t *testing.T, s string) map[string]int {
	t.Helper()
	counts := map[string]int{}
	d := xml.NewDecoder(strings.NewReader(s))
	for {
		tok, err := d.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("SVG is not well-formed XML: %v\n%s", err, s)
		}
		if e, ok := tok.(xml.StartElement); ok {
			counts[e.Name.Local]++
			for _, a := range e.Attr {
				if a.Name.Local == "class" {
					counts[e.Name.Local+"."+a.Value]++
				}
			}
		}
	}
	return counts
}

func TestBarChartSVG(t *testing.T) {
	c := &BarChart{
		Title:      "RSS <by phase> & peak",
		YLabel:     "bytes",
		Categories: []string{"ready", "create", "list a<b"},
		Series: []Series{
			{Name: "peak", Values: []float64{100e6, 700e6, 1.7e9}},
			{Name: "end", Values: []float64{90e6, math.NaN()}}, // one missing, one NaN
		},
		Lines:  []RefLine{{Name: "target", Value: 550e6}, {Name: "off the chart", Value: math.Inf(1)}},
		Format: func(v float64) string { return Bytes(uint64(v)) },
	}
	s := c.SVG()
	got := svgElements(t, s)
	if got["rect.bar"] != 4 || got["line.ref"] != 1 {
		t.Errorf("%d bars and %d reference lines, want 4 and 1:\n%s", got["rect.bar"], got["line.ref"], s)
	}
	// 0 to 2 GB in steps of 500 MB: five grid lines.
	if got["line.grid"] != 5 {
		t.Errorf("%d grid lines, want 5", got["line.grid"])
	}
	for _, want := range []string{"RSS &lt;by phase&gt; &amp; peak", "list a&lt;b", "2.00 GB", "1.70 GB", "target: 550 MB"} {
		if !strings.Contains(s, want) {
			t.Errorf("SVG lacks %q:\n%s", want, s)
		}
	}

	// An empty chart is still an image.
	if got := svgElements(t, (&BarChart{}).SVG()); got["svg"] != 1 || got["rect.bar"] != 0 {
		t.Errorf("empty chart: %v", got)
	}

	path := filepath.Join(t.TempDir(), "sub", "c.svg")
	if err := WriteSVG(path, c); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(path); err != nil || string(b) != s {
		t.Errorf("WriteSVG wrote %d bytes (%v), want the SVG", len(b), err)
	}
}

func TestAxisTicks(t *testing.T) {
	for _, tc := range []struct {
		top   float64
		step  float64
		ticks int
	}{
		{0, 1, 1},
		{math.NaN(), 1, 1},
		{1, 0.2, 5},
		{7, 2, 4},
		{743e6, 200e6, 4},
		{1.7e9, 500e6, 4},
		{1000, 200, 5},
	} {
		step, ticks := axisTicks(tc.top)
		if math.Abs(step-tc.step) > 1e-9*tc.step || ticks != tc.ticks {
			t.Errorf("axisTicks(%v) = %v, %d; want %v, %d", tc.top, step, ticks, tc.step, tc.ticks)
		}
	}
}
