package view

import (
	"slices"
	"time"

	"github.com/outpost-mesh/outpost/sync/wire"
)

// The keys of a site's mesh travel in the view of each node of the site
// as one object of wire.ResourceMeshKeys (wire.MeshKeys), which the hub
// derives rather than reads from its store. Time is cut into epochs of
// MeshKeyPolicy.Period; each epoch has its key, and a node is sent the
// keys of the epoch before, the current one and Ahead after, so that a
// site cut off from the hub goes on rotating on schedule. A Session tells
// the node's site (Session.Site); MeshKeys, one per session, keeps what
// the node holds and decides what to send and when. The sync server
// derives the keys and sends the object.

// MeshKeyPolicy is the schedule of the sites' mesh keys.
type MeshKeyPolicy struct {
	// Period is how long each key is the primary one: epoch e runs
	// from e*Period to (e+1)*Period after the Unix epoch. Whole seconds.
	Period time.Duration
	// Ahead is how many keys after the current one a node holds: the
	// keys of Ahead periods it rotates through without the hub. At most
	// wire.MaxMeshKeys-2.
	Ahead int
}

// DefaultMeshKeyPolicy returns the defaults: a key a day, a week ahead,
// so that a site cut off for a week still rotates.
func DefaultMeshKeyPolicy() MeshKeyPolicy {
	return MeshKeyPolicy{Period: 24 * time.Hour, Ahead: 7}
}

// seconds returns the period in seconds, at least 1.
func (p MeshKeyPolicy) seconds() int64 { return max(int64(p.Period/time.Second), 1) }

// Epoch returns the epoch of now: its Unix seconds divided by the
// period's, rounded down.
func (p MeshKeyPolicy) Epoch(now time.Time) int64 {
	s, n := now.Unix(), p.seconds()
	e := s / n
	if s%n < 0 {
		e--
	}
	return e
}

// From returns when the key of epoch becomes the primary one.
func (p MeshKeyPolicy) From(epoch int64) time.Time {
	return time.Unix(epoch*p.seconds(), 0).UTC()
}

// Revision returns the revision of a meshkeys object sent in epoch (see
// wire.MeshKeys): the Unix second of its last key's From, which grows
// with the epoch.
func (p MeshKeyPolicy) Revision(epoch int64) int64 {
	return p.From(epoch + int64(p.Ahead)).Unix()
}

// Keys returns the meshkeys object of site sent in epoch: the keys of
// epochs epoch-1 through epoch+Ahead, each derived by derive.
func (p MeshKeyPolicy) Keys(site string, epoch int64, derive func(site string, epoch int64) []byte) *wire.MeshKeys {
	k := &wire.MeshKeys{Site: site, Keys: make([]wire.MeshKey, 0, p.Ahead+2)}
	for e := epoch - 1; e <= epoch+int64(p.Ahead); e++ {
		k.Keys = append(k.Keys, wire.MeshKey{From: p.From(e), Key: derive(site, e)})
	}
	return k
}

// Site returns the site of the node's Node as of the session's last
// result, "" for none. It changes when a result brings a change of the
// node's Node to another site, which wakes the session (Changed).
func (s *Session) Site() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.site
}

// MeshKeys is what one session knows of the meshkeys objects its node
// holds: it decides whether to send the keys of the node's site and which
// objects to delete. No I/O, no clock. It is not safe for concurrent use.
type MeshKeys struct {
	p    MeshKeyPolicy
	held map[wire.Key]int64 // the meshkeys the node holds, at their revisions
}

// NewMeshKeys returns what a node holds that listed held (wire.Hello's
// Tokens): entries of other resources are ignored.
func NewMeshKeys(p MeshKeyPolicy, held []wire.InventoryEntry) *MeshKeys {
	m := &MeshKeys{p: p, held: make(map[wire.Key]int64)}
	for _, e := range held {
		if e.Key.Resource == wire.ResourceMeshKeys && e.Key.Validate() == nil {
			m.held[e.Key] = e.Revision
		}
	}
	return m
}

// MeshKeysPlan is what a node's mesh keys need now.
type MeshKeysPlan struct {
	// Put, when set, says to send the node the keys of its site, of
	// Epoch (MeshKeyPolicy.Keys), at Revision. Report it with Sent.
	Put             bool
	Key             wire.Key
	Epoch, Revision int64
	// Delete lists the meshkeys objects the node holds of other sites,
	// sorted. Report each with Deleted once sent.
	Delete []wire.Key
	// Next is when to plan again even if the site does not change: the
	// start of the next epoch; zero for a node in no site.
	Next time.Time
}

// Plan returns what the mesh keys of a node in site ("" for none) need
// at now: the keys of the site unless the node holds them at the
// revision of now's epoch, and the deletion of those of any other site.
func (m *MeshKeys) Plan(site string, now time.Time) MeshKeysPlan {
	var plan MeshKeysPlan
	if site != "" {
		plan.Key = wire.MeshKeysKey(site)
		plan.Epoch = m.p.Epoch(now)
		plan.Revision = m.p.Revision(plan.Epoch)
		rev, ok := m.held[plan.Key]
		plan.Put = !ok || rev != plan.Revision
		plan.Next = m.p.From(plan.Epoch + 1)
	}
	for key := range m.held {
		if key != plan.Key {
			plan.Delete = append(plan.Delete, key)
		}
	}
	slices.SortFunc(plan.Delete, compareKeys)
	return plan
}

// Sent records that the node was sent the meshkeys object of key at rev.
func (m *MeshKeys) Sent(key wire.Key, rev int64) { m.held[key] = rev }

// Deleted records that the node was sent the deletion of key.
func (m *MeshKeys) Deleted(key wire.Key) { delete(m.held, key) }
