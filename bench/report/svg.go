package report

import (
	"encoding/xml"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/outpost-mesh/outpost/internal/atomicfile"
)

// BarChart is a bar chart of one or more series over the same categories,
// with horizontal reference lines (targets, a baseline), rendered as a
// self-contained SVG image by SVG. The zero value renders an empty chart.
type BarChart struct {
	Title string
	// YLabel names what the values measure and their unit, along the y
	// axis.
	YLabel string
	// Categories label the groups of bars along the x axis, one bar per
	// series in each.
	Categories []string
	Series     []Series
	Lines      []RefLine
	// Format formats values on the y axis and above the bars; nil prints
	// them with %g.
	Format func(float64) string
}

// Series is one bar in each category: Values[i] is its value in
// Categories[i]. A missing, negative or NaN value draws no bar.
type Series struct {
	Name   string
	Values []float64
}

// RefLine is a horizontal line across the chart at Value, named in the
// legend.
type RefLine struct {
	Name  string
	Value float64
}

// Chart geometry, in SVG user units (pixels).
const (
	chartLeft     = 80  // room for the y axis' tick labels
	chartRight    = 24  //
	chartTop      = 40  // the title
	chartPlotH    = 300 // the plot area's height
	chartBottom   = 110 // room for slanted category labels
	legendRowH    = 18
	barWidth      = 36
	barGap        = 4  // between the bars of one category
	categoryGap   = 24 // between categories
	minChartWidth = 480
)

var (
	seriesColors = []string{"#4e79a7", "#f28e2b", "#59a14f", "#76b7b2", "#edc948"}
	lineColors   = []string{"#e15759", "#b07aa1", "#555555", "#9c755f", "#ff9da7"}
)

// SVG renders the chart.
func (c *BarChart) SVG() string {
	format := c.Format
	if format == nil {
		format = func(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }
	}
	groupW := max(len(c.Series), 1)*(barWidth+barGap) - barGap + categoryGap
	plotW := max(len(c.Categories)*groupW, minChartWidth-chartLeft-chartRight)
	width := chartLeft + plotW + chartRight
	legendRows := len(c.Series) + len(c.Lines)
	legendTop := chartTop + chartPlotH + chartBottom
	height := legendTop + legendRows*legendRowH + 10

	top := 0.0
	for _, s := range c.Series {
		for _, v := range s.Values {
			if drawn(v) {
				top = math.Max(top, v)
			}
		}
	}
	for _, l := range c.Lines {
		if drawn(l.Value) {
			top = math.Max(top, l.Value)
		}
	}
	step, ticks := axisTicks(top)
	yMax := step * float64(ticks)
	y := func(v float64) float64 { return chartTop + chartPlotH - v/yMax*chartPlotH }

	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n",
		width, height, width, height)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`+"\n", width, height)
	fmt.Fprintf(&b, `<text x="%d" y="24" font-size="15" font-weight="bold">%s</text>`+"\n", chartLeft, esc(c.Title))

	// The y axis: grid lines and tick labels, then its label.
	for i := 0; i <= ticks; i++ {
		v := step * float64(i)
		fmt.Fprintf(&b, `<line class="grid" x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#ddd"/>`+"\n", chartLeft, chartLeft+plotW, y(v), y(v))
		fmt.Fprintf(&b, `<text x="%d" y="%.1f" text-anchor="end" dominant-baseline="middle">%s</text>`+"\n", chartLeft-6, y(v), esc(format(v)))
	}
	fmt.Fprintf(&b, `<text transform="translate(16 %d) rotate(-90)" text-anchor="middle">%s</text>`+"\n", chartTop+chartPlotH/2, esc(c.YLabel))

	// The bars, each with its value above it, and the category labels.
	for ci, cat := range c.Categories {
		x0 := chartLeft + ci*groupW + categoryGap/2
		for si, s := range c.Series {
			if ci >= len(s.Values) || !drawn(s.Values[ci]) {
				continue
			}
			v := s.Values[ci]
			x := x0 + si*(barWidth+barGap)
			fmt.Fprintf(&b, `<rect class="bar" x="%d" y="%.1f" width="%d" height="%.1f" fill="%s"><title>%s, %s: %s</title></rect>`+"\n",
				x, y(v), barWidth, y(0)-y(v), seriesColors[si%len(seriesColors)], esc(cat), esc(s.Name), esc(format(v)))
			fmt.Fprintf(&b, `<text x="%d" y="%.1f" text-anchor="middle" font-size="9">%s</text>`+"\n", x+barWidth/2, y(v)-3, esc(format(v)))
		}
		cx := x0 + (groupW-categoryGap)/2
		fmt.Fprintf(&b, `<text transform="translate(%d %d) rotate(-35)" text-anchor="end">%s</text>`+"\n", cx, chartTop+chartPlotH+16, esc(cat))
	}
	fmt.Fprintf(&b, `<line x1="%d" x2="%d" y1="%d" y2="%d" stroke="black"/>`+"\n", chartLeft, chartLeft+plotW, chartTop+chartPlotH, chartTop+chartPlotH)

	// Reference lines, over the bars.
	for li, l := range c.Lines {
		if !drawn(l.Value) {
			continue
		}
		fmt.Fprintf(&b, `<line class="ref" x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="%s" stroke-width="2" stroke-dasharray="6 4"/>`+"\n",
			chartLeft, chartLeft+plotW, y(l.Value), y(l.Value), lineColors[li%len(lineColors)])
	}

	// The legend: series, then lines with their values.
	row := 0
	for si, s := range c.Series {
		ly := legendTop + row*legendRowH
		fmt.Fprintf(&b, `<rect x="%d" y="%d" width="14" height="12" fill="%s"/><text x="%d" y="%d">%s</text>`+"\n",
			chartLeft, ly, seriesColors[si%len(seriesColors)], chartLeft+20, ly+10, esc(s.Name))
		row++
	}
	for li, l := range c.Lines {
		ly := legendTop + row*legendRowH
		fmt.Fprintf(&b, `<line x1="%d" x2="%d" y1="%d" y2="%d" stroke="%s" stroke-width="2" stroke-dasharray="6 4"/><text x="%d" y="%d">%s: %s</text>`+"\n",
			chartLeft, chartLeft+14, ly+6, ly+6, lineColors[li%len(lineColors)], chartLeft+20, ly+10, esc(l.Name), esc(format(l.Value)))
		row++
	}
	b.WriteString("</svg>\n")
	return b.String()
}

// WriteSVG writes the chart to path, creating its directory; the file is
// replaced atomically.
func WriteSVG(path string, c *BarChart) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("create plot dir: %w", err)
	}
	return atomicfile.WriteFile(path, []byte(c.SVG()), 0o644)
}

// drawn reports whether v is a value a bar or line is drawn for.
func drawn(v float64) bool { return v >= 0 && !math.IsInf(v, 1) }

// axisTicks returns a round step (1, 2 or 5 times a power of ten) and the
// number of steps from 0 that reach top, at most about 8 of them; a chart
// with nothing above 0 gets one step of 1.
func axisTicks(top float64) (step float64, ticks int) {
	if !(top > 0) || math.IsInf(top, 0) {
		return 1, 1
	}
	raw := top / 5
	pow := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 5, 10} {
		if step = m * pow; step >= raw {
			break
		}
	}
	return step, int(math.Ceil(top/step - 1e-9))
}

// esc escapes s for SVG text and attribute values.
func esc(s string) string {
	var b strings.Builder
	xml.EscapeText(&b, []byte(s))
	return b.String()
}
