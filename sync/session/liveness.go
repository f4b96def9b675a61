package session

import (
	"strconv"
	"time"
)

// Verdict is what Liveness makes of the link at one look.
type Verdict int

const (
	Alive Verdict = iota // something came, or the silence is not yet long
	Probe                // send one liveness probe now
	Dead                 // nothing came for the idle timeout: end the connection
)

func (v Verdict) String() string {
	switch v {
	case Alive:
		return "alive"
	case Probe:
		return "probe"
	case Dead:
		return "dead"
	}
	return "Verdict(" + strconv.Itoa(int(v)) + ")"
}

// Liveness judges the link to the hub from the number of packets received
// from it, looked at every Tick. A live hub answers every keep-alive, so
// silence past KeepAlive (and a Tick, the resolution of the looks) means a
// keep-alive went unanswered: the node probes then, and again every
// ProbeEvery, so that a hub back from a restart, which knows nothing of
// the connection, answers with a reset within that. Silence for
// IdleTimeout is a dead link.
//
// Start it with the first look; the zero value is not useful. It is not
// safe for concurrent use.
type Liveness struct {
	IdleTimeout, KeepAlive time.Duration
	Tick                   time.Duration
	ProbeEvery             time.Duration
	// CanProbe is whether the connection can carry a probe (the hub
	// accepts datagrams); without, a silent link is only declared dead.
	CanProbe bool

	last   uint64    // packets counted at the last look that saw any new
	heard  time.Time // when that was
	probed time.Time // the last probe of this silence, zero if none
}

// Start records the first look, at now, with packets counted so far.
func (l *Liveness) Start(now time.Time, packets uint64) {
	l.last, l.heard, l.probed = packets, now, time.Time{}
}

// Look returns the verdict at now, when packets have been counted from
// the hub, and how long the link has been silent.
func (l *Liveness) Look(now time.Time, packets uint64) (Verdict, time.Duration) {
	if packets != l.last {
		l.Start(now, packets)
		return Alive, 0
	}
	silent := now.Sub(l.heard)
	switch {
	case silent >= l.IdleTimeout:
		return Dead, silent
	case l.CanProbe && silent > l.KeepAlive+l.Tick && now.Sub(l.probed) >= l.ProbeEvery:
		l.probed = now
		return Probe, silent
	}
	return Alive, silent
}
