package report

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestLineChartSVG(t *testing.T) {
	c := &LineChart{
		Title:  "memory <by pods> & mode",
		XLabel: "pods",
		YLabel: "PSS",
		Series: []LineSeries{
			{Name: "agent", Points: []Point{{0, 20e6}, {100, 40e6}, {200, 60e6}}},
			{Name: "agent, per node", Points: []Point{{0, 20e6}, {200, math.NaN()}}, Dashed: true, Color: "#123456"},
			{Name: "empty", Points: []Point{{-1, 5}}}, // nothing drawable: no line
		},
		Lines:  []RefLine{{Name: "target", Value: 35e6}, {Name: "off the chart", Value: math.Inf(1)}},
		Format: func(v float64) string { return Bytes(uint64(v)) },
	}
	s := c.SVG()
	got := svgElements(t, s)
	if got["polyline.series"] != 2 || got["circle.point"] != 4 || got["line.ref"] != 1 {
		t.Errorf("%d lines, %d points, %d reference lines; want 2, 4, 1:\n%s", got["polyline.series"], got["circle.point"], got["line.ref"], s)
	}
	// y: 0 to 60 MB in steps of 20 MB, four lines; x: 0 to 200 in steps
	// of 50, five.
	if got["line.grid"] != 4+5 {
		t.Errorf("%d grid lines, want 9:\n%s", got["line.grid"], s)
	}
	for _, want := range []string{"memory &lt;by pods&gt; &amp; mode", "60.0 MB", "target: 35.0 MB", `stroke="#123456"`, "stroke-dasharray=\"8 4\"", ">200<", "agent at 100: 40.0 MB"} {
		if !strings.Contains(s, want) {
			t.Errorf("SVG lacks %q:\n%s", want, s)
		}
	}
	if got := svgElements(t, (&LineChart{}).SVG()); got["svg"] != 1 || got["polyline.series"] != 0 {
		t.Errorf("empty chart: %v", got)
	}
	path := filepath.Join(t.TempDir(), "sub", "l.svg")
	if err := WriteLineSVG(path, c); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(path); err != nil || string(b) != s {
		t.Errorf("WriteLineSVG wrote %d bytes (%v), want the SVG", len(b), err)
	}
}
