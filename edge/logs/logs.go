// Package logs writes and reads container logs in the CRI log format that
// kubelet and containerd's CRI plugin use ("2016-10-06T00:17:09.669794202Z
// stdout F text"): a File that two streams write at once, rotated by size
// with kubelet's file names, and a Reader that parses the lines back for
// `kubectl logs`.
package logs

import (
	"errors"
	"fmt"
	"time"
)

// Stream names, as written in a line's second field.
const (
	Stdout = "stdout"
	Stderr = "stderr"
)

// Tags of a line's third field: F ends a line of the container's output, P
// is a piece of a line longer than the writer's buffer that goes on in the
// next line.
const (
	tagFull    = 'F'
	tagPartial = 'P'
)

// TimeFormat is the layout of a line's timestamp: RFC 3339 with
// nanoseconds, always in UTC with all nine digits, as containerd writes it.
const TimeFormat = "2006-01-02T15:04:05.000000000Z07:00"

// ErrLineTooLong is returned by Reader.Next for a line longer than the
// reader's limit; the line was skipped and the next call goes on after it.
var ErrLineTooLong = errors.New("log line too long")

// ErrMalformed is returned, wrapped, by ParseLine and Reader.Next for a
// line that is not in the CRI log format.
var ErrMalformed = errors.New("malformed log line")

// Entry is one line of a log.
type Entry struct {
	Time    time.Time
	Stream  string // Stdout or Stderr
	Partial bool   // the message goes on in the next entry of the stream
	Msg     []byte // without the newline; a full line's newline is implied
}

// appendLine appends e in the CRI log format, with its newline.
func appendLine(b []byte, t time.Time, stream string, partial bool, msg []byte) []byte {
	b = t.UTC().AppendFormat(b, TimeFormat)
	b = append(b, ' ')
	b = append(b, stream...)
	b = append(b, ' ')
	if partial {
		b = append(b, tagPartial)
	} else {
		b = append(b, tagFull)
	}
	b = append(b, ' ')
	b = append(b, msg...)
	return append(b, '\n')
}

// ParseLine parses one line without its trailing newline. Msg points into
// line.
func ParseLine(line []byte) (Entry, error) {
	var e Entry
	ts, rest, ok := cut(line)
	if !ok {
		return e, fmt.Errorf("%w: no timestamp", ErrMalformed)
	}
	t, err := time.Parse(time.RFC3339Nano, string(ts))
	if err != nil {
		return e, fmt.Errorf("%w: timestamp: %v", ErrMalformed, err)
	}
	stream, rest, ok := cut(rest)
	if !ok {
		return e, fmt.Errorf("%w: no stream", ErrMalformed)
	}
	switch string(stream) {
	case Stdout, Stderr:
		e.Stream = string(stream)
	default:
		return e, fmt.Errorf("%w: stream %q", ErrMalformed, stream)
	}
	// The tag may be followed by nothing at all for an empty full line
	// written by some runtimes ("... stdout F").
	tag, msg, _ := cut(rest)
	switch {
	case len(tag) == 1 && tag[0] == tagFull:
	case len(tag) == 1 && tag[0] == tagPartial:
		e.Partial = true
	default:
		return e, fmt.Errorf("%w: tag %q", ErrMalformed, tag)
	}
	e.Time, e.Msg = t, msg
	return e, nil
}

// cut splits b at its first space.
func cut(b []byte) (before, after []byte, found bool) {
	for i, c := range b {
		if c == ' ' {
			return b[:i], b[i+1:], true
		}
	}
	return b, nil, false
}
