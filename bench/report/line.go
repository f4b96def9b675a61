package report

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/outpost-mesh/outpost/internal/atomicfile"
)

// LineChart plots one or more series of (x, y) points as lines over a
// numeric x axis, with horizontal reference lines, rendered as a
// self-contained SVG image by SVG. The zero value renders an empty chart.
type LineChart struct {
	Title  string
	XLabel string // what x measures, under the x axis
	YLabel string // what y measures and its unit, along the y axis
	Series []LineSeries
	Lines  []RefLine
	// Format formats y values on the axis and in the points' tooltips; nil
	// prints them with %g. X values are printed with %g.
	Format func(float64) string
}

// LineSeries is one line of a LineChart. Points are drawn in the order
// given; a point whose X or Y is negative or NaN is left out.
type LineSeries struct {
	Name   string
	Points []Point
	// Color is an SVG color; "" picks one by the series' index.
	Color string
	// Dashed draws the line dashed, to tell apart two groups of series
	// sharing colors.
	Dashed bool
}

// Point is one point of a LineSeries.
type Point struct{ X, Y float64 }

// Line chart geometry, in SVG user units (pixels).
const (
	lineLeft   = 80
	lineRight  = 24
	lineTop    = 40
	linePlotW  = 560
	linePlotH  = 300
	lineBottom = 50 // the x axis' tick labels and its label
)

// SVG renders the chart.
func (c *LineChart) SVG() string {
	format := c.Format
	if format == nil {
		format = func(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }
	}
	var xTop, yTop float64
	for _, s := range c.Series {
		for _, p := range s.Points {
			if drawn(p.X) && drawn(p.Y) {
				xTop, yTop = math.Max(xTop, p.X), math.Max(yTop, p.Y)
			}
		}
	}
	for _, l := range c.Lines {
		if drawn(l.Value) {
			yTop = math.Max(yTop, l.Value)
		}
	}
	xStep, xTicks := axisTicks(xTop)
	yStep, yTicks := axisTicks(yTop)
	xMax, yMax := xStep*float64(xTicks), yStep*float64(yTicks)
	x := func(v float64) float64 { return lineLeft + v/xMax*linePlotW }
	y := func(v float64) float64 { return lineTop + linePlotH - v/yMax*linePlotH }

	width := lineLeft + linePlotW + lineRight
	legendTop := lineTop + linePlotH + lineBottom
	height := legendTop + (len(c.Series)+len(c.Lines))*legendRowH + 10

	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n",
		width, height, width, height)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`+"\n", width, height)
	fmt.Fprintf(&b, `<text x="%d" y="24" font-size="15" font-weight="bold">%s</text>`+"\n", lineLeft, esc(c.Title))

	// The axes: grid lines and tick labels, then their labels.
	for i := 0; i <= yTicks; i++ {
		v := yStep * float64(i)
		fmt.Fprintf(&b, `<line class="grid" x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#ddd"/>`+"\n", lineLeft, lineLeft+linePlotW, y(v), y(v))
		fmt.Fprintf(&b, `<text x="%d" y="%.1f" text-anchor="end" dominant-baseline="middle">%s</text>`+"\n", lineLeft-6, y(v), esc(format(v)))
	}
	for i := 0; i <= xTicks; i++ {
		v := xStep * float64(i)
		fmt.Fprintf(&b, `<line class="grid" x1="%.1f" x2="%.1f" y1="%d" y2="%d" stroke="#eee"/>`+"\n", x(v), x(v), lineTop, lineTop+linePlotH)
		fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle">%s</text>`+"\n", x(v), lineTop+linePlotH+16, esc(strconv.FormatFloat(v, 'g', -1, 64)))
	}
	fmt.Fprintf(&b, `<line x1="%d" x2="%d" y1="%d" y2="%d" stroke="black"/>`+"\n", lineLeft, lineLeft+linePlotW, lineTop+linePlotH, lineTop+linePlotH)
	fmt.Fprintf(&b, `<line x1="%d" x2="%d" y1="%d" y2="%d" stroke="black"/>`+"\n", lineLeft, lineLeft, lineTop, lineTop+linePlotH)
	fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="middle">%s</text>`+"\n", lineLeft+linePlotW/2, lineTop+linePlotH+38, esc(c.XLabel))
	fmt.Fprintf(&b, `<text transform="translate(16 %d) rotate(-90)" text-anchor="middle">%s</text>`+"\n", lineTop+linePlotH/2, esc(c.YLabel))

	// Reference lines, under the series.
	for li, l := range c.Lines {
		if !drawn(l.Value) {
			continue
		}
		fmt.Fprintf(&b, `<line class="ref" x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="%s" stroke-width="1.5" stroke-dasharray="2 3"/>`+"\n",
			lineLeft, lineLeft+linePlotW, y(l.Value), y(l.Value), lineColors[li%len(lineColors)])
	}

	// The series: a polyline, and a dot per point with its value.
	for si, s := range c.Series {
		color := s.color(si)
		dash := ""
		if s.Dashed {
			dash = ` stroke-dasharray="8 4"`
		}
		var pts []string
		for _, p := range s.Points {
			if drawn(p.X) && drawn(p.Y) {
				pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(p.X), y(p.Y)))
			}
		}
		if len(pts) == 0 {
			continue
		}
		fmt.Fprintf(&b, `<polyline class="series" points="%s" fill="none" stroke="%s" stroke-width="2"%s/>`+"\n", strings.Join(pts, " "), color, dash)
		for _, p := range s.Points {
			if drawn(p.X) && drawn(p.Y) {
				fmt.Fprintf(&b, `<circle class="point" cx="%.1f" cy="%.1f" r="3" fill="%s"><title>%s at %g: %s</title></circle>`+"\n",
					x(p.X), y(p.Y), color, esc(s.Name), p.X, esc(format(p.Y)))
			}
		}
	}

	// The legend: series, then reference lines with their values.
	row := 0
	for si, s := range c.Series {
		ly := legendTop + row*legendRowH
		dash := ""
		if s.Dashed {
			dash = ` stroke-dasharray="8 4"`
		}
		fmt.Fprintf(&b, `<line x1="%d" x2="%d" y1="%d" y2="%d" stroke="%s" stroke-width="2"%s/><text x="%d" y="%d">%s</text>`+"\n",
			lineLeft, lineLeft+24, ly+6, ly+6, s.color(si), dash, lineLeft+30, ly+10, esc(s.Name))
		row++
	}
	for li, l := range c.Lines {
		ly := legendTop + row*legendRowH
		fmt.Fprintf(&b, `<line x1="%d" x2="%d" y1="%d" y2="%d" stroke="%s" stroke-width="1.5" stroke-dasharray="2 3"/><text x="%d" y="%d">%s: %s</text>`+"\n",
			lineLeft, lineLeft+24, ly+6, ly+6, lineColors[li%len(lineColors)], lineLeft+30, ly+10, esc(l.Name), esc(format(l.Value)))
		row++
	}
	b.WriteString("</svg>\n")
	return b.String()
}

func (s LineSeries) color(i int) string {
	if s.Color != "" {
		return s.Color
	}
	return seriesColors[i%len(seriesColors)]
}

// SeriesColor returns the color a series at index i is drawn in when it
// names none, so that callers can give related series the same one.
func SeriesColor(i int) string { return seriesColors[i%len(seriesColors)] }

// WriteLineSVG writes the chart to path, creating its directory; the file
// is replaced atomically.
func WriteLineSVG(path string, c *LineChart) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("create plot dir: %w", err)
	}
	return atomicfile.WriteFile(path, []byte(c.SVG()), 0o644)
}
