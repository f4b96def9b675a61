package report

import "fmt"

// MaxErrors bounds the distinct error messages an ErrorSet keeps.
const MaxErrors = 10

// ErrorSet keeps up to MaxErrors distinct error messages of a run, and
// counts the others; the zero value is empty. It is not safe for
// concurrent use: give each worker its own and Merge them.
type ErrorSet struct {
	msgs    []string
	dropped int
}

// Add keeps msg unless it is kept already or the set is full.
func (s *ErrorSet) Add(msg string) {
	for _, m := range s.msgs {
		if m == msg {
			return
		}
	}
	if len(s.msgs) == MaxErrors {
		s.dropped++
		return
	}
	s.msgs = append(s.msgs, msg)
}

// Merge adds what o kept and counted.
func (s *ErrorSet) Merge(o ErrorSet) {
	for _, m := range o.msgs {
		s.Add(m)
	}
	s.dropped += o.dropped
}

// List returns the messages, with a last line counting those dropped, or
// nil. The caller owns the slice.
func (s *ErrorSet) List() []string {
	out := append([]string(nil), s.msgs...)
	if s.dropped > 0 {
		out = append(out, fmt.Sprintf("(%d more errors, not all distinct)", s.dropped))
	}
	return out
}
