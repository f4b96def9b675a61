package session

import (
	"strconv"
	"time"
)

// Verdict is what Liveness makes of the link at one look.
type Verdict int

const (
	Alive   Verdict = iota // something came, or the silence is not yet long
	Probe                  // send one liveness probe now
	Suspect                // a probe went unanswered: move the session if it can
	Dead                   // nothing came for the idle timeout: end the connection
)

func (v Verdict) String() string {
	switch v {
	case Alive:
		return "alive"
	case Probe:
		return "probe"
	case Suspect:
		return "suspect"
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
// A node with another way to the hub (a site peer's relay) watches closer,
// with Heartbeat set: it probes once the link has been silent for
// Heartbeat, and a probe unanswered for AnswerWithin makes the link
// suspect, which Look says again after each further AnswerWithin of
// silence. A live hub answers a probe within a round trip, so an idle
// session costs a probe and its acknowledgement every Heartbeat, and a
// cut link is suspect within Heartbeat+AnswerWithin and a Tick.
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
	// Heartbeat and AnswerWithin, if Heartbeat is set (and CanProbe),
	// watch the link closer, as above. They may change between looks.
	Heartbeat, AnswerWithin time.Duration

	last      uint64    // packets counted at the last look that saw any new
	heard     time.Time // when that was
	probed    time.Time // the first probe of this silence, zero if none
	lastProbe time.Time // the last probe of this silence
	suspected time.Time // when Look last said Suspect in this silence
}

// Start records the first look, at now, with packets counted so far.
func (l *Liveness) Start(now time.Time, packets uint64) {
	l.last, l.heard = packets, now
	l.probed, l.lastProbe, l.suspected = time.Time{}, time.Time{}, time.Time{}
}

// Look returns the verdict at now, when packets have been counted from
// the hub, and how long the link has been silent.
func (l *Liveness) Look(now time.Time, packets uint64) (Verdict, time.Duration) {
	if packets != l.last {
		l.Start(now, packets)
		return Alive, 0
	}
	silent := now.Sub(l.heard)
	closely := l.CanProbe && l.Heartbeat > 0
	switch {
	case silent >= l.IdleTimeout:
		return Dead, silent
	case closely && !l.probed.IsZero() && now.Sub(l.probed) >= l.AnswerWithin &&
		(l.suspected.IsZero() || now.Sub(l.suspected) >= l.AnswerWithin):
		l.suspected = now
		return Suspect, silent
	case l.CanProbe && now.Sub(l.lastProbe) >= l.ProbeEvery &&
		(silent > l.KeepAlive+l.Tick || closely && silent >= l.Heartbeat):
		if l.probed.IsZero() {
			l.probed = now
		}
		l.lastProbe = now
		return Probe, silent
	}
	return Alive, silent
}
