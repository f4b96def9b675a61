package agent

import (
	"errors"
	"fmt"
	"path/filepath"

	"github.com/outpost-mesh/outpost/edge/checkpoint"
	"github.com/outpost-mesh/outpost/sync/wire"
)

// A damaged checkpoint (a bit flipped on a gateway's flash, a write torn
// by a power cut the disk lied about) must not stop the node: the agent
// drops the records that do not decode, keeps the rest and its pods, and
// the hub sends again what was lost, since dropping a view object sets the
// revision to 0 and the next session resumes from the inventory.

// openCheckpoint opens the checkpoint, repairing it if Open finds it
// damaged. Damage elsewhere is dropped when a read meets it (dropCorrupt),
// rather than by reading everything at every start.
func (a *Agent) openCheckpoint() (*checkpoint.Store, error) {
	dir := filepath.Join(a.cfg.DataDir, CheckpointDir)
	cp, err := checkpoint.Open(dir, a.cfg.Checkpoint)
	if errors.Is(err, checkpoint.ErrCorrupt) {
		a.log.Warn("checkpoint damaged: dropping what does not decode; the hub will send it again", "err", err)
		n, rerr := checkpoint.Repair(dir, a.cfg.Checkpoint)
		if rerr != nil {
			return nil, fmt.Errorf("repair checkpoint: %w", rerr)
		}
		a.log.Warn("checkpoint repaired", "records_dropped", n)
		cp, err = checkpoint.Open(dir, a.cfg.Checkpoint)
	}
	if err != nil {
		return nil, fmt.Errorf("open checkpoint: %w", err)
	}
	return cp, nil
}

// listLocal is the checkpoint's ListLocal, read again after dropping
// damaged records if it met some.
func (a *Agent) listLocal(prefix string) (map[string][]byte, error) {
	recs, err := a.cp.ListLocal(prefix)
	if a.dropCorrupt(err) {
		recs, err = a.cp.ListLocal(prefix)
	}
	return recs, err
}

// dropCorrupt drops the checkpoint's undecodable records after err, from
// a read, said there are some; it reports whether it did.
func (a *Agent) dropCorrupt(err error) bool {
	if !errors.Is(err, checkpoint.ErrCorrupt) {
		return false
	}
	n, derr := a.cp.DropCorrupt()
	if derr != nil {
		a.log.Error("drop damaged checkpoint records", "err", derr)
		return false
	}
	a.log.Warn("checkpoint damaged: dropped the records that do not decode; the hub will send them again", "err", err, "records_dropped", n)
	return true
}

// repairing is the checkpoint as the sync client sees it: a read that
// finds damage drops it, so that the next session, which the failed read
// ends, gets past it.
type repairing struct {
	*checkpoint.Store
	a *Agent
}

func (r repairing) Inventory() ([]wire.InventoryEntry, error) {
	inv, err := r.Store.Inventory()
	r.a.dropCorrupt(err)
	return inv, err
}

func (r repairing) Pending(max int) ([]wire.StatusItem, error) {
	items, err := r.Store.Pending(max)
	r.a.dropCorrupt(err)
	return items, err
}
