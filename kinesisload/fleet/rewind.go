package fleet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/tidemark/tidemark/kinesisload"
	"github.com/tidemark/tidemark/scan"
)

// This file is the fleet's rewind: an operator moves shards' positions
// (back, or forward) while the hosts run. A shard's position never moves
// back through the protocol (every commit merges forward), so a rewind is
// a write of its own, fenced like a change of owner: the shard's item gets
// the new position, no owner and the next epoch in one conditional write.
// The host that held the shard loses its lease at its next read of the
// table (nothing it commits counts from the write on: a state commit is
// conditional on owner and epoch, and a position it group-commits under
// the old epoch is never read), and the next owner starts at the new
// position. The rewind is
// recorded in the item (who, when, from, to: [kinesisload.Rewind]) and
// announced in the roster, so that every host reads the table at its next
// round instead of after ResyncInterval.

// rewindEntryPrefix names the roster entry that announces a rewind: a
// "host" that left at once, whose entry every host reads as a change (and
// collects like any host that left).
const rewindEntryPrefix = "tidemark-rewind-"

// Rewind moves the positions of stream's shards in table to to (shard ID
// to position), while the fleet's hosts run. For each shard it writes, in
// one write conditional on the item's version: the new position (a
// DRAINING shard is ACTIVE again), no owner and no handoff, the epoch
// after the item's, and r as the shard's last rewind (with Shard, From
// and To set, and SinkPending: see [kinesisload.Rewind]). Then it writes
// an entry into the generation's roster, so that every host reads the
// table at its next round: the host that held a shard loses its lease
// then (nothing it commits counts from the write on), and the first host
// whose Loader offers the shard takes it at the new position, at once. A
// host that cannot reach the table fences itself within LeaseDuration
// less FenceMargin, as always; until then it may still deliver records of
// the old position, which nothing commits.
//
// The stream's identity item must name the generation in force (one
// deleted by hand is restored first: [ErrIdentityMissing]), the stream
// must be initialised (its initialisation committed), every
// shard of to must have an item and not be COMPLETED, and every position
// must be concrete ([kinesisload.CheckRewindPosition]): otherwise nothing
// is written and the error wraps [kinesisload.ErrRewindRefused]. From is
// the position as [Inspect] shows it (the owner's last group-committed
// one, when further than the item's). A write refused because a host
// changed the item meanwhile is tried again on the item as it is; an
// unknown outcome is read back (the rewind's ID in the item says it
// landed). When a shard meets an error no retry fixes, or becomes
// COMPLETED or is deleted meanwhile, Rewind stops there: it returns the
// rewinds already written with the error. When only the announcement
// failed, it returns every rewind with an error wrapping
// [ErrNotAnnounced].
func Rewind(ctx context.Context, table Table, stream string, r kinesisload.Rewind, to map[string]scan.Position) ([]kinesisload.Rewind, error) {
	ident, err := generationInForce(ctx, table, stream)
	if err != nil {
		return nil, err
	}
	gen, part := ident.gen, partition(stream, ident.gen)
	rd := reader{table: table, stream: stream}
	shards, snap, _, err := rd.generation(ctx, gen)
	if err != nil {
		return nil, err
	}
	committed := snap.init.committed
	if committed == "" {
		return nil, fmt.Errorf("fleet: stream %s: %w: the fleet has not committed its initialisation yet (nothing is read before it: set the start with Config.StartPosition or Config.Shards instead)",
			stream, kinesisload.ErrRewindRefused)
	}
	stored := make(map[string]kinesisload.ShardProgress, len(shards))
	for id, sh := range shards {
		stored[id] = sh.Progress
	}
	plan, err := kinesisload.PlanRewind(stored, r, to)
	if err != nil {
		return nil, fmt.Errorf("fleet: stream %s: %w", stream, err)
	}
	var done []kinesisload.Rewind
	for _, rw := range plan {
		if err := rewindShard(ctx, table, part, gen, committed, rw); err != nil {
			return done, fmt.Errorf("fleet: stream %s: shard %s: %w", stream, rw.Shard, err)
		}
		done = append(done, rw)
	}
	if err := announce(ctx, table, part, r.ID); err != nil {
		return done, fmt.Errorf("%w (stream %s; hosts read it within their ResyncInterval): %w", ErrNotAnnounced, stream, err)
	}
	return done, nil
}

// generationInForce reads stream's identity item, which names the
// generation the hosts read. An absent item is generation 0 only when the
// fleet shows it never read the stream (see checkIdentityGone): otherwise
// the item was deleted by hand, and a rewind written to generation 0
// would reach no host (the error wraps [ErrIdentityMissing] and
// [kinesisload.ErrRewindRefused]).
func generationInForce(ctx context.Context, table Table, stream string) (identityItem, error) {
	for attempt := 0; ; attempt++ {
		it, err := table.Get(ctx, stream, keyIdentity)
		if err != nil {
			return identityItem{}, fmt.Errorf("fleet: stream %s: reading the identity item: %w", stream, err)
		}
		if it.Exists() {
			ii, err := decodeIdentity(it)
			if err != nil {
				return ii, err
			}
			switch err := checkBehind(ctx, table, stream, ii); {
			case errors.Is(err, errGenMoved) && attempt < 3:
				continue // started over meanwhile: read it again
			case errors.Is(err, ErrIdentityBehind):
				return identityItem{}, fmt.Errorf("%w: %w", kinesisload.ErrRewindRefused, err)
			case err != nil:
				return identityItem{}, err
			}
			return ii, nil
		}
		err = checkIdentityGone(ctx, table, stream)
		switch {
		case err == nil:
			return decodeIdentity(it)
		case errors.Is(err, errIdentityAppeared) && attempt < 3:
			continue // written meanwhile: read it
		case errors.Is(err, errIdentityAppeared):
			return identityItem{}, fmt.Errorf("fleet: stream %s: %w: the identity item was absent, then present, at each of %d reads; nothing was written, run the rewind again",
				stream, kinesisload.ErrRewindRefused, attempt+1)
		case errors.Is(err, ErrIdentityMissing):
			return identityItem{}, fmt.Errorf("%w: %w", kinesisload.ErrRewindRefused, err)
		}
		return identityItem{}, err
	}
}

// rewindShard writes one shard's rewind (see Rewind).
func rewindShard(ctx context.Context, table Table, part string, gen uint64, committed string, rw kinesisload.Rewind) error {
	raw, err := json.Marshal(rw)
	if err != nil {
		return err
	}
	for attempt := 0; ; attempt++ {
		if attempt >= 10 {
			return fmt.Errorf("gave up after %d attempts: the item changed at every try", attempt)
		}
		got, err := table.Get(ctx, part, prefixShard+rw.Shard)
		var s *shardItem
		if err == nil {
			s, err = decodeShard(got)
		}
		if err == nil {
			if prev, ok := decodeRewind(s); ok && prev.ID == rw.ID {
				return nil // landed (an answer lost)
			}
			v := s.visible(committed)
			switch {
			case !s.exists():
				return fmt.Errorf("%w: the shard's item was deleted", kinesisload.ErrRewindRefused)
			case v.State == kinesisload.StateCompleted:
				return fmt.Errorf("%w: the shard became COMPLETED", kinesisload.ErrRewindRefused)
			}
			next := s.with(kinesisload.Rewound(v, rw), committed)
			next.owner, next.handoff = "", ""
			next.epoch = max(s.epoch, epochBase(gen)) + 1
			next.rewind = string(raw)
			_, err = table.Put(ctx, next.encode(part))
			if err == nil {
				return nil
			}
		}
		if fatal(err) {
			return err
		}
		// A host changed the item, or the outcome is unknown: read it
		// again.
		if err := sleep(ctx, backoff(attempt)); err != nil {
			return err
		}
	}
}

// announce writes the rewind's roster entry: a host that left, new to
// every host, which reads the table at its next round (see observe).
func announce(ctx context.Context, table Table, part, id string) error {
	entry := rewindEntryPrefix + strings.ReplaceAll(id, "#", "-")
	var err error
	for attempt := range 5 {
		_, err = table.SetEntry(ctx, part, keyRoster, fieldBeats, entry, "", beat{changes: 1, left: true}.String())
		if err == nil || errors.Is(err, ErrConflict) {
			return nil // written, or written before (an answer lost)
		}
		if fatal(err) {
			return err
		}
		if serr := sleep(ctx, backoff(attempt)); serr != nil {
			return serr
		}
	}
	return err
}

// decodeRewind returns the shard's last rewind, if it has one that can be
// decoded (a rewind is a record, never a decision of the protocol: one
// that cannot be decoded is taken for none).
func decodeRewind(s *shardItem) (kinesisload.Rewind, bool) {
	if s == nil || s.rewind == "" {
		return kinesisload.Rewind{}, false
	}
	var rw kinesisload.Rewind
	if err := json.Unmarshal([]byte(s.rewind), &rw); err != nil || rw.To.Validate() != nil {
		return kinesisload.Rewind{}, false
	}
	rw.Shard = s.id
	return rw, true
}

// Rewinds returns the last rewind of every shard of stream's current
// generation that has one, keyed by shard ID, for tools: one read of the
// generation's partition, no write.
func Rewinds(ctx context.Context, table Table, stream string) (map[string]kinesisload.Rewind, error) {
	it, err := table.Get(ctx, stream, keyIdentity)
	if err != nil {
		return nil, fmt.Errorf("fleet: stream %s: reading the identity item: %w", stream, err)
	}
	ident, err := decodeIdentity(it)
	if err != nil {
		return nil, err
	}
	snap, err := query(ctx, table, partition(stream, ident.gen))
	if err != nil {
		return nil, fmt.Errorf("fleet: stream %s: reading generation %d: %w", stream, ident.gen, err)
	}
	out := map[string]kinesisload.Rewind{}
	for id, s := range snap.shards {
		if rw, ok := decodeRewind(s); ok {
			out[id] = rw
		}
	}
	return out, nil
}

// Rewind returns the last rewind of the lease's shard, as the item the
// lease was taken on holds it: ok is false when the shard was never
// rewound. The Loader resumes a shard rewound since it last read it from
// the lease's progress, not from the furthest of it and its own view.
func (l *lease) Rewind() (kinesisload.Rewind, bool) {
	if l.isLost() {
		return kinesisload.Rewind{}, false
	}
	// The item as the take stored it, not the member's view of it now: a
	// round may have replaced that view (or not yet have one) by the time
	// the Loader asks, and a rewind it reports then would be ignored.
	return decodeRewind(&shardItem{id: l.shard, rewind: l.rewind})
}

// AckRewind records that the rewind id of the lease's shard no longer
// waits for a TransactionalSink (see [kinesisload.Rewind.SinkPending]):
// a write of the shard's item, conditional on owner and epoch being the
// lease's. It does nothing when the shard's last rewind is another or is
// acknowledged already, and returns the lease's *LeaseLostError when the
// lease is lost.
func (l *lease) AckRewind(ctx context.Context, id string) error {
	m := l.m
	l.wmu.Lock()
	defer l.wmu.Unlock()
	for attempt := 0; ; attempt++ {
		if err := l.Check(); err != nil {
			return err
		}
		got, err := m.c.table.Get(ctx, m.part, prefixShard+l.shard)
		var s *shardItem
		if err == nil {
			s, err = decodeShard(got)
		}
		if err == nil {
			if !s.exists() || s.owner != m.me || s.epoch != l.epoch {
				l.lose(kinesisload.LostCommitRefused, fmt.Sprintf("rewind acknowledgement refused: owner is %q at epoch %d", s.owner, s.epoch))
				return l.lostError()
			}
			rw, ok := decodeRewind(s)
			if !ok || rw.ID != id || !rw.SinkPending {
				return nil
			}
			rw.SinkPending = false
			raw, merr := json.Marshal(rw)
			if merr != nil {
				return merr
			}
			next := *s
			next.rewind = string(raw)
			var stored Item
			if stored, err = m.c.table.Put(ctx, next.encode(m.part)); err == nil {
				l.mu.Lock()
				l.acked = next.rewind
				l.mu.Unlock()
				if ns, derr := decodeShard(stored); derr == nil {
					m.mu.Lock()
					m.setShard(l.shard, ns)
					m.mu.Unlock()
				}
				return nil
			}
		}
		if fatal(err) {
			return fmt.Errorf("fleet: stream %s: shard %s: acknowledging rewind %s: %w", m.stream, l.shard, id, err)
		}
		if err := sleep(ctx, backoff(attempt)); err != nil {
			return err
		}
	}
}

var (
	_ kinesisload.RewindLease = (*lease)(nil)
	_ kinesisload.RewindStore = sharedStore{}
	_ kinesisload.RewindStore = stagingStore{}
)

// Rewinds implements [kinesisload.RewindStore]: one read of the stream's
// partition (taken as the member's view, as Load does).
func (st sharedStore) Rewinds(ctx context.Context, stream string) (map[string]kinesisload.Rewind, error) {
	if err := st.check(ctx, stream); err != nil {
		return nil, err
	}
	snap, err := st.m.snapshot(ctx)
	if err != nil {
		return nil, err
	}
	out := map[string]kinesisload.Rewind{}
	seen := make(map[string]string, len(snap.shards))
	for id, s := range snap.shards {
		seen[id] = ""
		if rw, ok := decodeRewind(s); ok {
			out[id] = rw
			seen[id] = rw.ID
		}
	}
	st.m.mu.Lock()
	st.m.rewindsSeen = seen
	st.m.mu.Unlock()
	return out, nil
}

// rewoundSince reports whether s, an item that exists, holds a rewind
// other than the one its shard had at the session's last read of the
// rewinds (sharedStore.Rewinds): positions the Loader took since from
// elsewhere (its Sink's checkpoints) predate it, and must not undo it.
func (m *member) rewoundSince(s *shardItem) bool {
	m.mu.Lock()
	was, ok := m.rewindsSeen[s.id]
	m.mu.Unlock()
	if !ok || !s.exists() {
		return false
	}
	rw, _ := decodeRewind(s)
	return rw.ID != was
}

// Rewinds implements [kinesisload.RewindStore] (as the shared store).
func (st stagingStore) Rewinds(ctx context.Context, stream string) (map[string]kinesisload.Rewind, error) {
	st.InitProgress()
	return st.shared().Rewinds(ctx, stream)
}
