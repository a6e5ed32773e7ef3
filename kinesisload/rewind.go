package kinesisload

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/tidemark/tidemark/scan"
)

// This file is the rewind of stored positions: an operator's move of a
// shard's committed position to another place (back, to read records
// again, or forward, to skip them), which no Save can make since a Save
// never moves a position back. The tidemark command (cmd/tidemark
// rewind) makes it on a journal directory no Loader holds
// ([JournalStore.Rewind]) or on a fleet's table while the hosts run
// (kinesisload/fleet.Rewind, fenced by the shard's lease epoch). Either
// way the rewind is recorded with who made it and when, and stays pending
// for a [TransactionalSink] until its checkpoints are set back too (see
// [Rewinder]).

// Rewind records one rewind of one shard: who moved it, when, from where
// to where. The rewinds of one operation share an ID.
type Rewind struct {
	// Shard is the shard's ID.
	Shard string `json:"shard"`
	// ID names the operation; every shard it rewound has the same ID.
	ID string `json:"id"`
	// By is who made it (the operator's name, or user@host).
	By string `json:"by"`
	// At is when it was made, on the operator's clock.
	At time.Time `json:"at"`
	// Reason is the operator's note; optional.
	Reason string `json:"reason,omitempty"`
	// From is the committed position it replaced; zero when unknown.
	From scan.Position `json:"from,omitzero"`
	// To is the position it stored: where reading the shard resumes.
	To scan.Position `json:"to"`
	// SinkPending is true until a Loader with a [TransactionalSink] has
	// set the Sink's checkpoint of the shard back too (or found it at or
	// before To): the Sink's checkpoints are its truth, and a Loader
	// takes the furthest of its store's and the Sink's, which would undo
	// the rewind. A Loader with a plain Sink clears it at once.
	SinkPending bool `json:"sink_pending,omitempty"`
}

// CheckRewindPosition reports whether p may be stored by a rewind: a
// valid, concrete position that is not SHARD_END (LATEST is never
// stored; a rewind "to now" resolves it first).
func CheckRewindPosition(p scan.Position) error {
	if err := p.Validate(); err != nil {
		return err
	}
	switch p.Kind {
	case scan.KindLatest:
		return errors.New("LATEST is never stored: resolve it to a concrete position first (tidemark rewind --to now)")
	case scan.KindShardEnd:
		return errors.New("SHARD_END cannot be set by a rewind: a shard is completed by reading it to its end")
	}
	return nil
}

// checkRewind validates a rewind operation's record.
func checkRewind(r Rewind) error {
	switch {
	case r.ID == "":
		return fmt.Errorf("%w: the rewind has no ID", ErrRewindRefused)
	case strings.TrimSpace(r.By) == "":
		return fmt.Errorf("%w: the rewind does not say who makes it (By)", ErrRewindRefused)
	case r.At.IsZero():
		return fmt.Errorf("%w: the rewind does not say when it is made (At)", ErrRewindRefused)
	}
	return nil
}

// PlanRewind checks a rewind of stored progress and returns one Rewind
// per shard of to, sorted by shard: r's ID, By, At and Reason, From the
// stored position, To the new one, SinkPending set. A shard that is not
// stored, is COMPLETED, or whose new position cannot be stored
// ([CheckRewindPosition]) refuses the whole rewind with an error wrapping
// [ErrRewindRefused] that names it. The fleet's rewind uses it too.
func PlanRewind(stored map[string]ShardProgress, r Rewind, to map[string]scan.Position) ([]Rewind, error) {
	if err := checkRewind(r); err != nil {
		return nil, err
	}
	if len(to) == 0 {
		return nil, fmt.Errorf("%w: no shard to rewind", ErrRewindRefused)
	}
	out := make([]Rewind, 0, len(to))
	for _, id := range slices.Sorted(maps.Keys(to)) {
		p, ok := stored[id]
		switch {
		case !ok:
			return nil, fmt.Errorf("%w: shard %s has no stored progress", ErrRewindRefused, id)
		case p.State == StateCompleted:
			return nil, fmt.Errorf("%w: shard %s is COMPLETED (its children may have been read: a rewind never reopens a shard; replay its records with Config.StopAt under another journal or table instead)", ErrRewindRefused, id)
		}
		if err := CheckRewindPosition(to[id]); err != nil {
			return nil, fmt.Errorf("%w: shard %s: %v", ErrRewindRefused, id, err)
		}
		rw := r
		rw.Shard, rw.From, rw.To, rw.SinkPending = id, p.Position, to[id], true
		out = append(out, rw)
	}
	return out, nil
}

// Rewound returns the progress p after the rewind rw: its position
// replaced by rw.To (whatever their order), a DRAINING shard ACTIVE
// again (it reads to its end again); its lineage kept.
func Rewound(p ShardProgress, rw Rewind) ShardProgress {
	p.ShardID = rw.Shard
	p.Position = rw.To
	p.Parents = slices.Clone(p.Parents)
	if p.State == StateDraining {
		p.State = StateActive
	}
	return p
}

// rewindAck is the acknowledgement of a rewind in the journal
// (storeRecord.RewindAcks): the Sink is no longer pending.
type rewindAck struct {
	Shard string `json:"shard"`
	ID    string `json:"id"`
}

// applyRewinds applies a record's rewinds and acknowledgements to the
// stream's progress shards (of generation gen). s.mu must be held.
func (s *JournalStore) applyRewinds(rec storeRecord, shards map[string]ShardProgress, gen int) {
	if len(rec.Rewinds) == 0 && len(rec.RewindAcks) == 0 {
		return
	}
	if rec.Gen != gen {
		return // of a stream started over since: its archive keeps what it had
	}
	rws := s.rewinds[rec.Stream]
	if rws == nil {
		rws = map[string]Rewind{}
		s.rewinds[rec.Stream] = rws
	}
	for _, rw := range rec.Rewinds {
		shards[rw.Shard] = Rewound(shards[rw.Shard], rw)
		rws[rw.Shard] = rw
	}
	for _, ack := range rec.RewindAcks {
		if rw, ok := rws[ack.Shard]; ok && rw.ID == ack.ID {
			rw.SinkPending = false
			rws[ack.Shard] = rw
		}
	}
}

// Rewind moves the stored position of every shard of to, in one journal
// record: unlike a Save, it replaces the position whatever their order
// (a DRAINING shard becomes ACTIVE again), and records r (who, when, why)
// per shard, pending for a [TransactionalSink] (see [Rewind.SinkPending]).
// Every shard must be stored and not COMPLETED, and every position
// concrete (see [PlanRewind]): otherwise nothing is written and the error
// wraps [ErrRewindRefused]. It returns the rewinds it recorded.
//
// Rewind is for a journal no Loader runs on (cmd/tidemark opens the
// directory, whose lock keeps Loaders out): a Loader holding this store
// keeps its own view of the positions and would commit past the rewind.
// It waits for the Saves in flight and holds the next ones until it is
// durable.
func (s *JournalStore) Rewind(ctx context.Context, stream string, r Rewind, to map[string]scan.Position) ([]Rewind, error) {
	s.excl.Lock()
	defer s.excl.Unlock()
	stored, err := s.Load(ctx, stream)
	if err != nil {
		return nil, err
	}
	rws, err := PlanRewind(stored, r, to)
	if err != nil {
		return nil, fmt.Errorf("stream %s: %w", stream, err)
	}
	s.mu.Lock()
	rec := storeRecord{Stream: stream, Rewinds: rws, Gen: s.gen(stream)}
	s.mu.Unlock()
	if err := s.writeRecord(ctx, stream, rec); err != nil {
		return nil, err
	}
	return rws, nil
}

// Rewinds returns the last rewind of every shard of stream that was
// rewound since the stream's last start-over, keyed by shard ID: none,
// not an error, when none was.
func (s *JournalStore) Rewinds(ctx context.Context, stream string) (map[string]Rewind, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.rewinds[stream]), nil
}

// AckRewind records that the rewind id of shard no longer waits for the
// Sink (see [Rewind.SinkPending]): one journal record. It does nothing
// when the shard's last rewind is another, or is acknowledged already.
func (s *JournalStore) AckRewind(ctx context.Context, stream, shard, id string) error {
	s.mu.Lock()
	rw, ok := s.rewinds[stream][shard]
	rec := storeRecord{Stream: stream, RewindAcks: []rewindAck{{Shard: shard, ID: id}}, Gen: s.gen(stream)}
	s.mu.Unlock()
	if !ok || rw.ID != id || !rw.SinkPending {
		return nil
	}
	return s.write(ctx, stream, rec)
}

// RewindStore is an optional capability of a [PositionStore] that keeps
// the rewinds operators made ([JournalStore], and the stores of the fleet
// core, kinesisload/fleet): the Loader asks it which shards were rewound
// while a [TransactionalSink]'s checkpoint is still to be set back
// ([Rewind.SinkPending]), so that the Sink's further checkpoint does not
// undo the rewind.
type RewindStore interface {
	// Rewinds returns the last rewind of every shard of stream rewound
	// since the stream's last start-over, keyed by shard ID.
	Rewinds(ctx context.Context, stream string) (map[string]Rewind, error)
}

// RewindAcker is the part of a [RewindStore] that a single process (the
// default coordinator) acknowledges rewinds through: [JournalStore]
// implements it. In a fleet a lease acknowledges its shard's rewind
// ([RewindLease]), fenced by its epoch.
type RewindAcker interface {
	// AckRewind records that the rewind id of shard no longer waits for
	// the Sink; it does nothing for another rewind, or one acknowledged.
	AckRewind(ctx context.Context, stream, shard, id string) error
}

// RewindLease is an optional capability of a [Lease] of a fleet whose
// shards an operator may rewind while the hosts run (the fleet core
// implements it). A shard rewound since this session last read it
// resumes from the lease's [Lease.Progress], not from the furthest of
// that and the Loader's own view, which the rewind moved back.
type RewindLease interface {
	// Rewind returns the shard's last rewind, if it has one.
	Rewind() (Rewind, bool)
	// AckRewind records, under the lease's fence, that the rewind id no
	// longer waits for the Sink; a lost lease returns its
	// [*LeaseLostError].
	AckRewind(ctx context.Context, id string) error
}

// Rewinder is an optional capability of a [TransactionalSink]: it sets a
// shard's stored checkpoint back (or forward) when an operator rewound
// the shard (cmd/tidemark rewind). A TransactionalSink's checkpoints are
// its truth: the Loader resumes each shard from the furthest of its store
// and the Sink, so without this a rewind to an earlier position would be
// undone by the Sink's checkpoint, and the Sink would take the records
// delivered again for ones it holds (check (a) of [TransactionalSink]).
//
// Before it reads a rewound shard whose rewind is still pending for the
// Sink ([Rewind.SinkPending]), and whose Sink checkpoint is not the
// rewind's position, the Loader calls RewindCheckpoint, then records the
// rewind as done for the Sink; only then does it read. A crash in
// between calls it again with the same arguments: it must be idempotent.
// Without a Rewinder the Loader reads such a shard only when the Sink's
// checkpoint is not further than the rewind's position (a rewind
// forward), and otherwise stops Run with a [*RewindError] that names the
// shard, the rewind and the checkpoint to reset.
type Rewinder interface {
	// RewindCheckpoint stores to as the checkpoint of stream's shard,
	// whatever its order against the stored one, and epoch as the
	// epoch stored with it (the fencing epoch of the lease the shard
	// will be read under: 0 without a fleet), in one transaction. It
	// keeps the records stored: the ones after to are delivered again,
	// with their sequence and sub-sequence numbers (a Sink keyed on them
	// stores each once). A batch of an earlier epoch is refused as
	// before (check (b)).
	RewindCheckpoint(ctx context.Context, stream, shard string, to scan.Position, epoch uint64) error
}

// RewindError stops Run when a shard an operator rewound is to be read
// while the [TransactionalSink]'s checkpoint of it is further than the
// rewind's position and the Sink is not a [Rewinder]: reading would
// deliver records the Sink takes for stored (its checkpoints are its
// truth), so the rewind would silently do nothing. Set the Sink's
// checkpoint of the shard to the rewind's position (or delete it), or
// implement Rewinder, and run again. errors.Is(err, ErrRewindPending)
// holds; Run returns it as the Err of a [*RunError] of class [ErrSink].
type RewindError struct {
	Stream string
	// Rewind is the shard's rewind: its Shard, To, By and At.
	Rewind Rewind
	// Checkpoint is the Sink's checkpoint of the shard.
	Checkpoint scan.Position
}

// Error names the stream, the shard, the rewind and the Sink's checkpoint.
func (e *RewindError) Error() string {
	return fmt.Sprintf("kinesisload: stream %s: shard %s was rewound to %v (rewind %s by %s at %s), but the transactional sink's checkpoint of it is %v, further along, "+
		"and the sink's checkpoints are its truth: set the sink's checkpoint of stream %s shard %s to %v (or delete it), or make the sink a kinesisload.Rewinder, then run again",
		e.Stream, e.Rewind.Shard, e.Rewind.To, e.Rewind.ID, e.Rewind.By, e.Rewind.At.UTC().Format(time.RFC3339), e.Checkpoint, e.Stream, e.Rewind.Shard, e.Rewind.To)
}

// Unwrap returns [ErrRewindPending].
func (e *RewindError) Unwrap() error { return ErrRewindPending }

// pendingRewinds returns the rewinds of the session's store still
// pending for the Sink, keyed by shard.
func (s *session) pendingRewinds(ctx context.Context, stream string) (map[string]Rewind, error) {
	rs, ok := s.store.(RewindStore)
	if !ok {
		return nil, nil
	}
	all, err := rs.Rewinds(ctx, stream)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, &RunError{Stream: stream, Op: "Load", Kind: ErrJournal, Err: fmt.Errorf("loading the rewinds: %w", err)}
	}
	out := map[string]Rewind{}
	for id, rw := range all {
		if rw.SinkPending {
			out[id] = rw
		}
	}
	return out, nil
}

// settleSink brings the Sink's checkpoint cp (ok: it has one) of a
// rewound shard to the rewind, before the shard is read: nothing to do
// without a TransactionalSink or when cp is the rewind's position; a
// Rewinder sets it; a Sink further along that is not one stops Run with
// a *RewindError.
func (s *session) settleSink(ctx context.Context, stream string, rw Rewind, cp scan.Position, ok bool, epoch uint64) error {
	l := s.l
	if l.tx == nil || !ok || cp.Equal(rw.To) {
		return nil
	}
	if r, isRewinder := l.tx.(Rewinder); isRewinder {
		cctx, cancel := context.WithTimeout(ctx, l.cfg.CallTimeout)
		err := r.RewindCheckpoint(cctx, stream, rw.Shard, rw.To, epoch)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return &RunError{Stream: stream, Shard: rw.Shard, Op: "RewindCheckpoint", Kind: ErrSink,
				Err: fmt.Errorf("setting the sink's checkpoint back to the rewind %s's position %v: %w", rw.ID, rw.To, err)}
		}
		l.log.Info("set the sink's checkpoint to a rewind's position", "shard", rw.Shard, "rewind", rw.ID, "by", rw.By, "from", cp, "to", rw.To, "epoch", epoch)
		return nil
	}
	if further(cp, rw.To) {
		return &RunError{Stream: stream, Shard: rw.Shard, Op: "Rewind", Kind: ErrSink, Err: &RewindError{Stream: stream, Rewind: rw, Checkpoint: cp}}
	}
	return nil
}

// settleRewinds settles, at a single process's initialisation (the
// default coordinator, whose store alone moves the positions), every
// rewind pending for the Sink: the Sink's checkpoints of those shards
// (cps) were left out of the start; each is set back or checked
// (settleSink), then the rewind is acknowledged in the store, all before
// any shard is read.
func (s *session) settleRewinds(ctx context.Context, stream string, pending map[string]Rewind, cps map[string]scan.Position) error {
	if len(pending) == 0 {
		return nil
	}
	acker, _ := s.store.(RewindAcker)
	for _, id := range sortedKeys(pending) {
		rw := pending[id]
		cp, ok := cps[id]
		if err := s.settleSink(ctx, stream, rw, cp, ok, 0); err != nil {
			return err
		}
		if acker != nil {
			if err := acker.AckRewind(ctx, stream, id, rw.ID); err != nil {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				return &RunError{Stream: stream, Shard: id, Op: "Save", Kind: ErrJournal, Err: fmt.Errorf("recording the rewind %s as settled: %w", rw.ID, err)}
			}
		}
		s.l.log.Info("reading a rewound shard", "shard", id, "rewind", rw.ID, "by", rw.By, "at", rw.At, "to", rw.To)
	}
	return nil
}

// leaseRewound handles a lease granted for a shard an operator rewound: a
// rewind this session has not applied yet replaces the topology's
// position by the lease's progress (the Loader's own view is from before
// the rewind), and a rewind pending for the Sink is settled (settleSink,
// with the lease's epoch) and acknowledged under the lease before the
// shard is read. It reports whether the Sink's checkpoint must be left
// out of the resume (it was settled now), and lost when the lease was
// lost meanwhile (the shard is not read).
func (s *session) leaseRewound(ctx context.Context, t *topology, ls Lease) (settled, lost bool, err error) {
	rl, ok := ls.(RewindLease)
	if !ok {
		return false, false, nil
	}
	rw, ok := rl.Rewind()
	if !ok {
		return false, false, nil
	}
	id := ls.Shard()
	if s.rewound == nil {
		s.rewound = map[string]string{}
	}
	if s.rewound[id] != rw.ID {
		t.rewind(ls.Progress())
		s.rewound[id] = rw.ID
		s.l.log.Info("resuming a rewound shard", "shard", id, "rewind", rw.ID, "by", rw.By, "at", rw.At, "to", ls.Progress().Position, "epoch", ls.Epoch())
	}
	if !rw.SinkPending {
		return false, false, nil
	}
	stream := t.stream
	if s.l.tx != nil {
		cctx, cancel := context.WithTimeout(ctx, s.l.cfg.CallTimeout)
		cps, err := s.checkpoints(cctx, stream)
		cancel()
		if err != nil {
			if isStuck(err) {
				return false, false, err
			}
			if ctx.Err() != nil {
				return false, false, ctx.Err()
			}
			return false, false, &RunError{Stream: stream, Shard: id, Op: "Checkpoints", Kind: ErrSink, Err: fmt.Errorf("loading the sink's checkpoints for a rewound shard: %w", err)}
		}
		cp, has := cps[id]
		if err := s.settleSink(ctx, stream, rw, cp, has, ls.Epoch()); err != nil {
			return false, false, err
		}
	}
	if err := rl.AckRewind(ctx, rw.ID); err != nil {
		if errors.Is(err, ErrLeaseLost) || ctx.Err() != nil {
			return true, true, nil
		}
		return false, false, &RunError{Stream: stream, Shard: id, Op: "Commit", Kind: ErrJournal, Err: fmt.Errorf("recording the rewind %s as settled: %w", rw.ID, err)}
	}
	return true, false, nil
}

// rewind replaces a node's position with a rewound lease's progress p (a
// DRAINING shard reads again), whatever their order.
func (t *topology) rewind(p ShardProgress) {
	n := t.nodes[p.ShardID]
	if n == nil || p.Position.Kind == 0 || n.State == StateCompleted {
		return
	}
	n.Position = p.Position
	if p.State != 0 && p.State < n.State {
		n.State = p.State
		n.saved = p.State
	}
}
