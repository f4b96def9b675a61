package logs

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
)

// DefaultMaxLine is the longest line a Reader accepts by default: a
// LineSize entry of the default Config with its header, and room to spare.
const DefaultMaxLine = 64 << 10

// Reader reads the entries of a log in the CRI format. It never holds
// more than its limit of one line in memory.
type Reader struct {
	r    *bufio.Reader
	max  int
	line []byte
}

// NewReader returns a Reader of r that refuses lines longer than maxLine
// bytes (DefaultMaxLine if maxLine <= 0).
func NewReader(r io.Reader, maxLine int) *Reader {
	if maxLine <= 0 {
		maxLine = DefaultMaxLine
	}
	return &Reader{r: bufio.NewReaderSize(r, min(maxLine+1, 64<<10)), max: maxLine}
}

// Next returns the next entry. Its Msg is valid until the next call. At
// the end it returns io.EOF; a last line without its newline is returned
// first (a file being written may end so). A line over the limit gives
// ErrLineTooLong, a line not in the format an error wrapping
// ErrMalformed; either way the line is skipped and Next may be called
// again.
func (r *Reader) Next() (Entry, error) {
	r.line = r.line[:0]
	tooLong := false
	for {
		frag, err := r.r.ReadSlice('\n')
		if !tooLong {
			if len(r.line)+len(frag) > r.max+1 {
				tooLong = true
				r.line = r.line[:0]
			} else {
				r.line = append(r.line, frag...)
			}
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if err != nil && !errors.Is(err, io.EOF) {
			return Entry{}, fmt.Errorf("read log: %w", err)
		}
		if tooLong {
			return Entry{}, ErrLineTooLong
		}
		if errors.Is(err, io.EOF) && len(r.line) == 0 {
			return Entry{}, io.EOF
		}
		line := bytes.TrimSuffix(r.line, []byte{'\n'})
		if len(line) > r.max {
			return Entry{}, ErrLineTooLong
		}
		return ParseLine(line)
	}
}
