package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"time"

	"github.com/outpost-mesh/outpost/sync/stream"
	"github.com/outpost-mesh/outpost/sync/view"
	"github.com/outpost-mesh/outpost/sync/wire"
)

// progressInterval is how long a session stays silent while the hub's
// revision moves on without touching the node's view; then an empty Batch
// moves the edge's revision on, so that a later resume replays less.
const progressInterval = 10 * time.Minute

// session streams a node's view: the resume step, then changes as they
// come, until the stream or ctx ends.
func (s *Server) session(ctx context.Context, log *slog.Logger, node string, st *stream.Stream, hello *wire.Hello) {
	if hello.NodeName != node {
		st.Fail(wire.CodeForbidden, fmt.Sprintf("certificate of node %q cannot open a session for %q", node, hello.NodeName))
		return
	}
	version, ok := wire.Negotiate(hello.CapabilityVersion)
	if !ok {
		st.Fail(wire.CodeVersion, fmt.Sprintf("capability version %d is not spoken here (%d..%d)", hello.CapabilityVersion, wire.MinCapabilityVersion, wire.CapabilityVersion))
		return
	}
	s.stats.Sessions.Add(1)
	var tok *sessionTokens
	if s.cfg.Tokens != nil && version >= wire.TokensVersion {
		if len(hello.Tokens) > maxHeldTokens {
			st.Fail(wire.CodeTooLarge, fmt.Sprintf("hello lists %d pod tokens; at most %d", len(hello.Tokens), maxHeldTokens))
			return
		}
		tok = &sessionTokens{t: view.NewTokens(s.cfg.TokenPolicy, hello.Tokens, time.Now()), gen: ^uint64(0)}
	}
	var mesh *sessionMeshKeys
	if s.cfg.MeshKeys != nil && version >= wire.MeshKeysVersion {
		n := 0
		for _, e := range hello.Tokens {
			if e.Key.Resource == wire.ResourceMeshKeys {
				n++
			}
		}
		if n > maxHeldMeshKeys {
			st.Fail(wire.CodeTooLarge, fmt.Sprintf("hello lists %d mesh keys; at most %d", n, maxHeldMeshKeys))
			return
		}
		mesh = &sessionMeshKeys{k: view.NewMeshKeys(s.cfg.MeshKeyPolicy, hello.Tokens)}
	}

	sess, changes, rev, err := s.cfg.Views.Resume(node, hello.LastRevision)
	byInventory := errors.Is(err, view.ErrNeedInventory)
	switch {
	case byInventory:
		if err := st.Write(&wire.Welcome{CapabilityVersion: version, HubRevision: s.cfg.Views.Revision(), SendInventory: true}); err != nil {
			return
		}
		inv, err := s.readInventory(st)
		if err != nil {
			return
		}
		// The session keeps the tokens and mesh keys (from the Hello);
		// the views know nothing of them and would delete them.
		inv = slices.DeleteFunc(inv, func(e wire.InventoryEntry) bool {
			return tok != nil && e.Key.Resource == wire.ResourcePodTokens || mesh != nil && e.Key.Resource == wire.ResourceMeshKeys
		})
		sess, changes, rev = s.cfg.Views.ResumeFromInventory(node, inv)
		s.stats.Inventories.Add(1)
	case err != nil:
		st.Fail(wire.CodeInternal, err.Error())
		return
	default:
		if err := st.Write(&wire.Welcome{CapabilityVersion: version, HubRevision: s.cfg.Views.Revision()}); err != nil {
			sess.Close()
			return
		}
		s.stats.Resumes.Add(1)
	}
	defer sess.Close()
	log.Debug("session started", "last_revision", hello.LastRevision, "inventory", byInventory, "changes", len(changes), "revision", rev)

	s.sessionStarted(node)
	defer s.sessionEnded(node)

	// readAcks only reads: this goroutine is the stream's only writer
	// (wire.Writer and quic's Close must not run concurrently with a
	// write), so it tells the edge why the stream failed. It is waited
	// for, so that nothing of the session outlives it.
	ackErr := make(chan error, 1)
	acksDone := make(chan struct{})
	go func() {
		defer close(acksDone)
		ackErr <- s.readAcks(st)
	}()
	defer func() {
		st.CancelRead(0)
		<-acksDone
	}()

	before := st.BytesWritten()
	if err := s.sendChanges(ctx, log, st, changes, rev); err != nil {
		return
	}
	s.stats.ResumeBytes.Add(st.BytesWritten() - before)
	sent, lastSend := rev, time.Now()

	progress := time.NewTicker(progressInterval)
	defer progress.Stop()
	var tokenDue <-chan time.Time // fires when the node's tokens are due
	if tok != nil {
		tok.timer = time.NewTimer(time.Hour)
		tok.timer.Stop()
		defer tok.timer.Stop()
		tokenDue = tok.timer.C
	}
	var meshDue <-chan time.Time // fires when the epoch of the site's keys moves
	if mesh != nil {
		mesh.timer = time.NewTimer(time.Hour)
		mesh.timer.Stop()
		defer mesh.timer.Stop()
		meshDue = mesh.timer.C
	}
	for {
		select {
		case err := <-ackErr:
			s.acksEnded(log, st, err)
			return
		default:
		}
		changed := sess.Changed()
		changes, rev, err := sess.Next()
		if err != nil {
			// The session fell behind what the hub can replay: the edge
			// resumes again, from its inventory.
			code := wire.CodeInternal
			if errors.Is(err, view.ErrNeedInventory) {
				code = wire.CodeUnavailable
			}
			st.Fail(code, err.Error())
			return
		}
		if len(changes) > 0 {
			if err := s.sendChanges(ctx, log, st, changes, rev); err != nil {
				return
			}
			sent, lastSend = rev, time.Now()
			continue // there may be more
		}
		// The node is up to date through rev: see to its tokens.
		if tok != nil && tok.due(sess, time.Now()) {
			n, err := s.tokenRound(ctx, log, node, st, sess, tok, rev)
			if err != nil {
				return
			}
			if n > 0 {
				sent, lastSend = rev, time.Now()
			}
			continue
		}
		// And to its site's mesh keys.
		if mesh != nil && mesh.due(sess, time.Now()) {
			n, err := s.meshKeyRound(ctx, log, st, sess, mesh, rev)
			if err != nil {
				return
			}
			if n > 0 {
				sent, lastSend = rev, time.Now()
			}
			continue
		}
		select {
		case <-ctx.Done():
			st.Close()
			return
		case err := <-ackErr:
			s.acksEnded(log, st, err)
			return
		case <-changed:
		case <-tokenDue:
		case <-meshDue:
			mesh.rearm() // in case the wall clock went back
		case <-progress.C:
			if rev > sent && time.Since(lastSend) >= progressInterval {
				if err := s.sendChanges(ctx, log, st, nil, rev); err != nil {
					return
				}
				sent, lastSend = rev, time.Now()
			}
		}
	}
}

// sendChanges writes changes in Batch frames of at most MaxBatchBytes of
// objects each; only the last carries rev. It reads the objects of the
// puts that come without them a frame at a time, just before writing it,
// so that a session holds at most a frame of them, and drops those whose
// version is gone: the index is bound to receive the newer change, and the
// session to send it. When an object cannot be read, it ends the stream
// (the node resumes later) and returns the error.
func (s *Server) sendChanges(ctx context.Context, log *slog.Logger, st *stream.Stream, changes []view.Change, rev int64) error {
	var frame []wire.Change
	for {
		n, size := 0, 0
		for n < len(changes) {
			c := changes[n].Size + len(changes[n].Key.Name) + 64
			if n > 0 && size+c > s.cfg.MaxBatchBytes {
				break
			}
			size += c
			n++
		}
		var err error
		if frame, err = s.objects(ctx, frame[:0], changes[:n]); err != nil {
			if ctx.Err() == nil {
				log.Warn("session ends: cannot read an object of the view", "err", err)
			}
			st.Fail(wire.CodeUnavailable, err.Error())
			return err
		}
		last := n == len(changes)
		if len(frame) > 0 || last {
			b := &wire.Batch{Changes: frame}
			if last {
				b.Revision = rev
			}
			before := st.BytesWritten()
			if err := st.Write(b); err != nil {
				return err
			}
			s.stats.BatchBytes.Add(st.BytesWritten() - before)
		}
		clear(frame) // the objects read are not kept past their frame
		if last {
			return nil
		}
		changes = changes[n:]
	}
}

// objects appends to out the changes of in with their objects: read for
// the puts that came without them, from the index if another session
// filled it since or else from Objects, and handed to the index for the
// next session that needs them. Puts whose version is gone are left out.
func (s *Server) objects(ctx context.Context, out []wire.Change, in []view.Change) ([]wire.Change, error) {
	for _, c := range in {
		if c.Op != wire.OpPut || c.Object != nil {
			out = append(out, c.Change)
			continue
		}
		raw, ok := s.cfg.Views.Raw(c.Key, c.Revision)
		if !ok {
			var err error
			s.stats.ObjectReads.Add(1)
			raw, err = s.cfg.Objects.Object(ctx, c.Key, c.Revision)
			switch {
			case errors.Is(err, ErrObjectGone):
				s.stats.ObjectsGone.Add(1)
				continue
			case err != nil:
				return out, fmt.Errorf("read %s at revision %d: %w", c.Key, c.Revision, err)
			case len(raw) == 0:
				return out, fmt.Errorf("read %s at revision %d: no bytes", c.Key, c.Revision)
			}
			s.cfg.Views.Fill(c.Key, c.Revision, raw)
		}
		c.Object = raw
		out = append(out, c.Change)
	}
	return out, nil
}

// readInventory reads the edge's Inventory frames.
func (s *Server) readInventory(st *stream.Stream) ([]wire.InventoryEntry, error) {
	var inv []wire.InventoryEntry
	for {
		m, err := st.Read()
		if err != nil {
			st.ReadFailed(err)
			return nil, err
		}
		part, ok := m.(*wire.Inventory)
		if !ok {
			st.Fail(wire.CodeBadRequest, fmt.Sprintf("expected Inventory, got %v", m.Type()))
			return nil, fmt.Errorf("expected Inventory, got %v", m.Type())
		}
		if len(inv)+len(part.Entries) > s.cfg.MaxInventory {
			st.Fail(wire.CodeTooLarge, fmt.Sprintf("inventory of more than %d entries", s.cfg.MaxInventory))
			return nil, errors.New("inventory too large")
		}
		inv = append(inv, part.Entries...)
		if !part.More {
			return inv, nil
		}
	}
}

// errNotAck is returned by readAcks for a frame that is not an Ack.
var errNotAck = errors.New("expected Ack")

// readAcks reads Ack frames until the stream ends and returns why it did
// (io.EOF at its clean end). It does not write to the stream. The hub
// keeps no per-node acknowledged revision: a node resumes from what it
// says it applied.
func (s *Server) readAcks(st *stream.Stream) error {
	for {
		m, err := st.Read()
		if err != nil {
			return err
		}
		if _, ok := m.(*wire.Ack); !ok {
			return fmt.Errorf("%w, got %v", errNotAck, m.Type())
		}
	}
}

// acksEnded ends the session stream after readAcks returned err.
func (s *Server) acksEnded(log *slog.Logger, st *stream.Stream, err error) {
	if errors.Is(err, errNotAck) {
		st.Fail(wire.CodeBadRequest, err.Error())
	} else {
		st.ReadFailed(err)
	}
	if !errors.Is(err, io.EOF) {
		log.Debug("session ended", "err", err)
	}
}

// maxHeldTokens bounds the pod tokens a node may say it holds, which the
// session keeps: a node runs a few hundred pods at most.
const maxHeldTokens = 10_000

// sessionTokens is a session's part in its node's tokens.
type sessionTokens struct {
	t     *view.Tokens
	gen   uint64    // the view session's TokenGeneration last planned for
	next  time.Time // when to plan again; zero: not before the pods change
	timer *time.Timer
}

// due reports whether the node's tokens need a round at now: its pods
// changed since the last one, or the time it asked for came.
func (t *sessionTokens) due(sess *view.Session, now time.Time) bool {
	return sess.TokenGeneration() != t.gen || !t.next.IsZero() && !now.Before(t.next)
}

// tokenRound mints the node's tokens that are due and deletes those of
// pods that left it, and sends them in one Batch at rev, the revision the
// node is at. It returns the changes sent, and an error when the stream
// failed (or ctx ended). A pod whose tokens cannot be minted is tried
// again after a back-off; the session goes on.
func (s *Server) tokenRound(ctx context.Context, log *slog.Logger, node string, st *stream.Stream, sess *view.Session, tok *sessionTokens, rev int64) (int, error) {
	pods, gen := sess.TokenPods()
	now := time.Now()
	plan := tok.t.Plan(pods, now)
	tok.gen = gen
	var changes []view.Change
	del := func(key wire.Key) {
		changes = append(changes, view.Change{Change: wire.Change{Op: wire.OpDelete, Key: key, Revision: rev}})
		tok.t.Deleted(key)
	}
	for _, key := range plan.Delete {
		del(key)
	}
	for _, p := range plan.Mint {
		key := p.TokensKey()
		toks, err := s.cfg.Tokens.MintPodTokens(ctx, node, p, now)
		if ctx.Err() != nil {
			return 0, ctx.Err()
		}
		var obj []byte
		if err == nil && len(toks) > 0 {
			if obj = wire.MarshalPodTokens(&wire.PodTokens{Pod: p.Key.Name, Tokens: toks}); len(obj) > wire.MaxPodTokensSize || len(toks) > wire.MaxPodTokens {
				err = fmt.Errorf("%d tokens in %d bytes, over the limits of %d tokens in %d", len(toks), len(obj), wire.MaxPodTokens, wire.MaxPodTokensSize)
			}
		}
		switch {
		case err != nil:
			s.stats.TokenFailures.Add(1)
			tok.t.Failed(key, now)
			if errors.Is(err, ErrPodGone) {
				log.Debug("no tokens for a pod the node no longer has", "pod", p.Key.String(), "err", err)
			} else {
				log.Warn("cannot mint a pod's service account tokens; trying again later", "pod", p.Key.String(), "err", err)
			}
		case len(toks) == 0:
			if tok.t.Empty(key, now) {
				del(key)
			}
		default:
			r := s.cfg.TokenPolicy.TokensRevision(toks)
			changes = append(changes, view.Change{Change: wire.Change{Op: wire.OpPut, Key: key, Revision: r, Object: obj}, Size: len(obj)})
			tok.t.Minted(key, time.Unix(r, 0))
			s.stats.TokenMints.Add(1)
		}
	}
	// Plan again at once after a round that did something: that plan
	// knows the refresh and retry times the round set.
	tok.next = plan.Next
	if len(plan.Mint) > 0 || len(plan.Delete) > 0 {
		tok.next = now
	}
	if !tok.next.IsZero() {
		tok.timer.Reset(max(time.Until(tok.next), 0))
	}
	if len(changes) == 0 {
		return 0, nil
	}
	log.Debug("pod tokens sent", "changes", len(changes), "revision", rev)
	return len(changes), s.sendChanges(ctx, log, st, changes, rev)
}

// maxHeldMeshKeys bounds the mesh keys a node may say it holds: one, but
// for a node moved between sites while it was away.
const maxHeldMeshKeys = 16

// sessionMeshKeys is a session's part in its node's mesh keys.
type sessionMeshKeys struct {
	k       *view.MeshKeys
	planned bool      // whether a round ran
	site    string    // the node's site at the last round
	next    time.Time // when to plan again if the site stays; zero: not before it changes
	timer   *time.Timer
}

// due reports whether the node's mesh keys need a round at now: none ran
// yet, the node moved to another site since the last, or the epoch moved.
func (m *sessionMeshKeys) due(sess *view.Session, now time.Time) bool {
	return !m.planned || sess.Site() != m.site || !m.next.IsZero() && !now.Before(m.next)
}

// rearm sets the timer for m.next, if there is one.
func (m *sessionMeshKeys) rearm() {
	if !m.next.IsZero() {
		m.timer.Reset(max(time.Until(m.next), 0))
	}
}

// meshKeyRound sends the node the keys of its site, unless it holds them
// as of now's epoch, and deletes those it holds of another site, in one
// Batch at rev, the revision the node is at. It returns the changes sent,
// and an error when the stream failed.
func (s *Server) meshKeyRound(ctx context.Context, log *slog.Logger, st *stream.Stream, sess *view.Session, mesh *sessionMeshKeys, rev int64) (int, error) {
	site := sess.Site()
	plan := mesh.k.Plan(site, time.Now())
	mesh.planned, mesh.site, mesh.next = true, site, plan.Next
	mesh.rearm()
	var changes []view.Change
	for _, key := range plan.Delete {
		changes = append(changes, view.Change{Change: wire.Change{Op: wire.OpDelete, Key: key, Revision: rev}})
		mesh.k.Deleted(key)
	}
	if plan.Put {
		keys := s.cfg.MeshKeyPolicy.Keys(site, plan.Epoch, s.cfg.MeshKeys)
		if err := keys.Validate(); err != nil {
			// A site label the API would refuse, or a bad derivation:
			// tried again when the site or the epoch changes.
			log.Warn("cannot send the site's mesh keys", "site", site, "err", err)
		} else {
			obj := wire.MarshalMeshKeys(keys)
			changes = append(changes, view.Change{Change: wire.Change{Op: wire.OpPut, Key: plan.Key, Revision: plan.Revision, Object: obj}, Size: len(obj)})
			mesh.k.Sent(plan.Key, plan.Revision)
		}
	}
	if len(changes) == 0 {
		return 0, nil
	}
	log.Debug("mesh keys sent", "site", site, "changes", len(changes), "revision", rev)
	return len(changes), s.sendChanges(ctx, log, st, changes, rev)
}
