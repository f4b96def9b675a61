package logs

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
)

// tailWindow bounds how much of a log's end Tail reads: enough for the
// lines a termination message takes from it.
const tailWindow = 256 << 10

// Tail returns the messages of the last lines entries of the log at path,
// joined as the container wrote them (a partial entry continues in the
// next of its stream), cut to their last maxBytes bytes: a container's termination
// message when its policy is FallbackToLogsOnError (kubelet's 80 lines,
// 2048 bytes). It reads at most the last 256 KiB of the file, and skips
// lines not in the format.
func Tail(path string, lines, maxBytes int) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("tail log: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return "", fmt.Errorf("tail log: %w", err)
	}
	from := max(st.Size()-tailWindow, 0)
	window := make([]byte, st.Size()-from)
	if _, err := f.ReadAt(window, from); err != nil && !errors.Is(err, io.EOF) {
		return "", fmt.Errorf("tail log: %w", err)
	}
	if from > 0 { // the first line is cut: skip it
		if i := bytes.IndexByte(window, '\n'); i >= 0 {
			window = window[i+1:]
		} else {
			window = nil
		}
	}
	var out [][]byte           // whole lines, each ending in its newline
	cur := map[string][]byte{} // each stream's line so far
	r := NewReader(bytes.NewReader(window), 0)
	for {
		e, err := r.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			continue // too long or malformed: skipped
		}
		line := append(cur[e.Stream], e.Msg...)
		if e.Partial {
			cur[e.Stream] = line
			continue
		}
		out = append(out, append(line, '\n'))
		delete(cur, e.Stream)
	}
	for _, s := range []string{Stdout, Stderr} {
		if len(cur[s]) > 0 {
			out = append(out, cur[s])
		}
	}
	out = out[max(len(out)-lines, 0):]
	msg := bytes.Join(out, nil)
	return string(msg[max(len(msg)-maxBytes, 0):]), nil
}
