package view

import (
	"github.com/outpost-mesh/outpost/sync/wire"
)

// record is one change of the index, kept for resumes and for sessions that
// have not caught up. It holds no object bytes: a put always sends the
// object as it is now, which the index has.
type record struct {
	rev     int64
	key     wire.Key
	kind    kind
	deleted bool
	// prevRev is the key's object revision before the change, 0 if it did
	// not exist.
	prevRev int64
	// prevPod and newPod are a pod's podInfo before and after the change,
	// nil where the pod does not exist; nil for other resources.
	prevPod, newPod *podInfo
}

// history is a ring of the latest records, oldest first, in revision order.
// It holds every record of a revision greater than start.
type history struct {
	buf   []record
	head  int // index in buf of the oldest record
	n     int
	limit int
	start int64
}

func newHistory(limit int, start int64) history {
	return history{limit: limit, start: start}
}

// reset drops every record; the history then starts at rev.
func (h *history) reset(rev int64) {
	clear(h.buf) // release the podInfos
	h.buf, h.head, h.n, h.start = h.buf[:0], 0, 0, rev
}

// at returns the i-th oldest record.
func (h *history) at(i int) *record {
	j := h.head + i
	if j >= len(h.buf) {
		j -= len(h.buf)
	}
	return &h.buf[j]
}

// push appends r, dropping the oldest record when full.
func (h *history) push(r record) {
	if len(h.buf) < h.limit {
		h.buf = append(h.buf, r)
		h.n++
		return
	}
	old := &h.buf[h.head]
	h.start = max(h.start, old.rev)
	*old = r
	h.head++
	if h.head == len(h.buf) {
		h.head = 0
	}
}

// after returns the index of the first record with a revision greater than
// rev (h.n if none).
func (h *history) after(rev int64) int {
	lo, hi := 0, h.n
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if h.at(m).rev <= rev {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo
}
