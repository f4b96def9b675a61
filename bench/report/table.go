package report

import (
	"io"
	"strings"
	"unicode/utf8"
)

// Align places a cell's text within its column.
type Align int

const (
	// AlignLeft pads on the right; used for labels.
	AlignLeft Align = iota
	// AlignRight pads on the left; used for numbers.
	AlignRight
)

// Column is one column of a Table.
type Column struct {
	Name  string
	Align Align
}

// Table is a titled grid of text cells rendered with aligned columns. The
// zero value is an empty table; a Table is not safe for concurrent use.
type Table struct {
	// Title is printed above the table; empty prints none.
	Title   string
	Columns []Column
	Rows    [][]string
}

// NewTable returns a table whose first column is left-aligned (row labels)
// and whose others are right-aligned (values).
func NewTable(title string, columns ...string) *Table {
	t := &Table{Title: title}
	for i, name := range columns {
		align := AlignRight
		if i == 0 {
			align = AlignLeft
		}
		t.Columns = append(t.Columns, Column{Name: name, Align: align})
	}
	return t
}

// AddRow appends a row. Missing trailing cells render empty; cells beyond
// the last column are dropped.
func (t *Table) AddRow(cells ...string) {
	t.Rows = append(t.Rows, cells)
}

// String renders the table as Render does.
func (t *Table) String() string {
	var b strings.Builder
	t.Render(&b)
	return b.String()
}

// Render writes the table to w: the title, the header, a rule, then one
// line per row, columns separated by two spaces and trailing spaces trimmed.
// Widths count runes, so cells may hold non-ASCII text such as "µs" or "≥".
func (t *Table) Render(w io.Writer) error {
	widths := make([]int, len(t.Columns))
	for i, c := range t.Columns {
		widths[i] = utf8.RuneCountInString(c.Name)
	}
	for _, row := range t.Rows {
		for i := range widths {
			if i < len(row) {
				widths[i] = max(widths[i], utf8.RuneCountInString(row[i]))
			}
		}
	}
	var b strings.Builder
	if t.Title != "" {
		b.WriteString(t.Title)
		b.WriteByte('\n')
	}
	header := make([]string, len(t.Columns))
	rule := make([]string, len(t.Columns))
	for i, c := range t.Columns {
		header[i] = c.Name
		rule[i] = strings.Repeat("-", widths[i])
	}
	t.line(&b, widths, header)
	b.WriteString(strings.Join(rule, "  "))
	b.WriteByte('\n')
	for _, row := range t.Rows {
		t.line(&b, widths, row)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func (t *Table) line(b *strings.Builder, widths []int, cells []string) {
	var l strings.Builder
	for i, width := range widths {
		cell := ""
		if i < len(cells) {
			cell = cells[i]
		}
		if i > 0 {
			l.WriteString("  ")
		}
		pad := strings.Repeat(" ", width-utf8.RuneCountInString(cell))
		if t.Columns[i].Align == AlignRight {
			l.WriteString(pad)
			l.WriteString(cell)
		} else {
			l.WriteString(cell)
			l.WriteString(pad)
		}
	}
	b.WriteString(strings.TrimRight(l.String(), " "))
	b.WriteByte('\n')
}
