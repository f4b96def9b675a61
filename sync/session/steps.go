package session

import (
	"fmt"

	"github.com/outpost-mesh/outpost/sync/wire"
)

// Resume is what the node does on the hub's Welcome, before the first
// batch: speak Version, set its checkpoint's revision back to 0 if
// Rewind, and send its inventory if SendInventory.
type Resume struct {
	Version       uint32
	HubRevision   int64 // the hub's revision as it welcomed the node
	Rewind        bool  // the hub's revision went back below the node's
	SendInventory bool
}

// Welcome returns how a node whose view is complete through revision last
// resumes on the hub's Welcome w, or an error if the hub speaks no
// version this build does.
//
// The hub asks for the inventory when it cannot send a diff from last: it
// compacted past it, or its own revision is behind it because it was
// restored from a backup. In the second case the node's revision means
// nothing to this hub; the node rewinds, keeping its objects, so that it
// takes the hub's answer to its inventory as the whole truth.
func Welcome(last int64, w *wire.Welcome) (Resume, error) {
	v, ok := wire.Negotiate(w.CapabilityVersion)
	if !ok {
		return Resume{}, fmt.Errorf("hub speaks capability version %d, this agent %d..%d", w.CapabilityVersion, wire.MinCapabilityVersion, wire.CapabilityVersion)
	}
	return Resume{Version: v, HubRevision: w.HubRevision, Rewind: w.SendInventory && w.HubRevision < last, SendInventory: w.SendInventory}, nil
}

// Apply is what the node does with one batch from the hub: make its
// changes durable at Revision, then send an Ack of Revision if Ack.
type Apply struct {
	Revision int64
	Ack      bool
	// Resumed is set on the batch that ends the resume step, with the
	// frame bytes it took (ResumeBytes), for the node's counters.
	Resumed     bool
	ResumeBytes int64
}

// Receiver follows the batches of one session: the hub first brings the
// node up to date (the resume step, in as many batches as it needs, the
// last one carrying the revision), then sends each change as it happens.
// The zero value is a session that has not resumed yet.
type Receiver struct {
	resumed     bool
	resumeBytes int64
}

// Batch returns what to do with b, received in a frame of n bytes when
// the node's view was complete through revision last. A batch without a
// revision is part of a step that more batches finish: its changes are
// recorded at last, so that a node cut off half-way resumes from where it
// was, and it is not acknowledged.
func (r *Receiver) Batch(last int64, b *wire.Batch, n int64) Apply {
	if !r.resumed {
		r.resumeBytes += n
	}
	if b.Revision == 0 {
		return Apply{Revision: last}
	}
	a := Apply{Revision: b.Revision, Ack: true}
	if !r.resumed {
		r.resumed = true
		a.Resumed, a.ResumeBytes = true, r.resumeBytes
	}
	return a
}
