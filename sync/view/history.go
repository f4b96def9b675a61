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
	// site is what a change of a Node did to sites, nil if the Node was
	// and is in none; nil for other resources.
	site *siteChange
}

// history is a ring of the latest records, oldest first, in revision order.
// It holds every record of a revision greater than start.
type history struct {
	buf   []record
	head  int // index in buf of the oldest record
	n     int
	limit int
	start int64
	// next is the sequence number of the next record pushed: records are
	// numbered from 0 in the order pushed, across resets, so that a
	// number names one record for as long as the ring holds it.
	next uint64
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

// oldest returns the sequence number of the oldest record (next if none).
func (h *history) oldest() uint64 { return h.next - uint64(h.n) }

// bySeq returns the record of sequence number seq, which the ring holds.
func (h *history) bySeq(seq uint64) *record { return h.at(int(seq - h.oldest())) }

// push appends r, dropping the oldest record when full, and returns r's
// sequence number.
func (h *history) push(r record) uint64 {
	h.next++
	if len(h.buf) < h.limit {
		h.buf = append(h.buf, r)
		h.n++
		return h.next - 1
	}
	old := &h.buf[h.head]
	h.start = max(h.start, old.rev)
	*old = r
	h.head++
	if h.head == len(h.buf) {
		h.head = 0
	}
	return h.next - 1
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

// seqs is an ascending list of the sequence numbers of some records of a
// history, those of one node (or of every node) that sessions replay.
type seqs []uint64

// add appends seq, which is greater than every seq in l, first dropping
// the numbers of records the ring no longer holds, older than oldest.
func (l *seqs) add(seq, oldest uint64) {
	s := *l
	if len(s) > 0 && s[0] < oldest {
		s = s[l.from(oldest):]
	}
	*l = append(s, seq)
}

// from returns the index in l of the first number at least seq.
func (l seqs) from(seq uint64) int {
	lo, hi := 0, len(l)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if l[m] < seq {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo
}

// merged walks two lists of sequence numbers as one ascending list.
type merged struct{ a, b seqs }

// newMerged returns the numbers of a and b from seq on.
func newMerged(a, b seqs, seq uint64) merged {
	return merged{a[a.from(seq):], b[b.from(seq):]}
}

// peek returns the next number, and false at the end.
func (m *merged) peek() (uint64, bool) {
	switch {
	case len(m.a) > 0 && (len(m.b) == 0 || m.a[0] < m.b[0]):
		return m.a[0], true
	case len(m.b) > 0:
		return m.b[0], true
	}
	return 0, false
}

// pop moves past the number peek returns.
func (m *merged) pop() {
	if len(m.a) > 0 && (len(m.b) == 0 || m.a[0] < m.b[0]) {
		m.a = m.a[1:]
	} else if len(m.b) > 0 {
		m.b = m.b[1:]
	}
}
