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

// Errors of rewinds.
var (
	// ErrRewindRefused is wrapped by the error of a rewind that was
	// refused before anything was written: a shard unknown or
	// COMPLETED, a position that cannot be stored, a missing ID.
	ErrRewindRefused = errors.New("kinesisload: rewind refused")
)

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
