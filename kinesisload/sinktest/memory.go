package sinktest

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/tidemark/tidemark/kinesisload"
	"github.com/tidemark/tidemark/scan"
)

// ErrOverlap is wrapped by the error [Memory.Deliver] returns for check (d):
// a batch of the epoch that stored the shard's checkpoint overlaps that
// checkpoint. The error is permanent ([kinesisload.ErrPermanent]) and never
// wraps [kinesisload.ErrLeaseLost].
var ErrOverlap = errors.New("sinktest: batch overlaps the stored checkpoint at the same epoch")

// ErrBadBatch is wrapped by the error [Memory.Deliver] returns for a batch
// the Loader never makes: no stream or shard, a checkpoint that is not a
// stored position (LATEST, invalid), records out of shard order, or a
// checkpoint before its last record; and by the error of
// [Memory.DeliverMulti] for a call with two batches of one shard. The
// error is permanent ([kinesisload.ErrPermanent]).
var ErrBadBatch = errors.New("sinktest: malformed batch")

// Memory is an in-memory [kinesisload.TransactionalSink] that keeps the
// contract of TransactionalSink exactly, in its one-epoch form: the
// reference implementation, for tests and to read. It is a
// [kinesisload.TransactionalMultiSink] too ([Memory.DeliverMulti]): give
// it to a Loader as is and the Loader batches every shard into windows;
// hide DeliverMulti (kinesisload.SinkFunc(m.Deliver), or a type of your
// own) to deliver shard by shard. A zero Memory is not valid: use
// [NewMemory].
//
// It is one database shared by every host of a fleet: give each host's
// Loader the same Memory (or a wrapper of it that records who delivered).
// It is safe for concurrent use; one mutex plays the lock of the shard's
// row (SELECT ... FOR UPDATE), held for the whole of a Deliver, so a
// Deliver is one transaction: all of it is stored or none.
//
// Per shard (keyed by stream name and shard ID) it holds the records
// stored, in the order stored, and one row: the checkpoint and the epoch
// of the batch that stored it ([Checkpoint]).
type Memory struct {
	mu      sync.Mutex
	shards  map[shardKey]*shardRows
	refused []Refusal

	// flaws breaks the contract on purpose, for the package's tests that
	// prove the conformance suite catches each broken rule; always 0 in
	// a Memory from NewMemory.
	flaws flaw
}

var _ kinesisload.TransactionalMultiSink = (*Memory)(nil)

type shardKey struct{ stream, shard string }

// shardRows is what Memory holds for one shard.
type shardRows struct {
	row     Checkpoint
	records []Stored
	// removed says the row was removed ([Memory.RemoveCheckpoints]):
	// the records stay, and the next batch finds no row.
	removed bool
}

// Checkpoint is a shard's row: where reading resumes, and the epoch it was
// stored at, written in the same transaction as the records.
type Checkpoint struct {
	// Position is the Batch.Checkpoint of the last batch that stored
	// anything (a start batch included).
	Position scan.Position
	// Epoch is the Batch.Epoch of that batch: the one epoch of the
	// contract, compared in checks (b), (c) and (d).
	Epoch uint64
}

// Stored is a record as [Memory] stored it.
type Stored struct {
	kinesisload.Record
	// Epoch is the Batch.Epoch of the batch that stored the record.
	Epoch uint64
}

// Refusal is a batch [Memory] refused by check (b), with an error that
// wraps [kinesisload.ErrLeaseLost].
type Refusal struct {
	// Batch is the batch refused.
	Batch kinesisload.Batch
	// Held is the shard's row when it was refused: Held.Epoch is above
	// Batch.Epoch.
	Held Checkpoint
}

// NewMemory returns an empty Memory.
func NewMemory() *Memory { return &Memory{shards: map[shardKey]*shardRows{}} }

// Deliver stores b in one transaction: see [Memory.Store].
func (m *Memory) Deliver(ctx context.Context, b kinesisload.Batch) error {
	_, err := m.Store(ctx, b)
	return err
}

// Store is Deliver that also returns how many of b's records it stored:
// all of them for a batch that follows the stored checkpoint, fewer for a
// new owner's overlap (c), none for a batch stored already (a) or refused.
//
// Under the shard's lock it checks, in the order of the contract:
//
//   - (a) b.Checkpoint is not further than the stored checkpoint
//     ([scan.Compare] <= 0): b is stored already. A re-delivery after an
//     unknown outcome (the answer to a COMMIT was lost, or ctx ended
//     during it), a start batch for a shard that has a checkpoint, a new
//     owner whose lease lags the store, a batch after SHARD_END (SHARD_END
//     is last). Store nothing, change nothing (not even the epoch: a new
//     owner's next batch may still overlap what is stored, see (c)), and
//     return nil. It comes first, so an epoch-0 start batch is never
//     refused by (b).
//   - (b) b.Epoch is below the stored epoch: the sender lost the shard's
//     lease to a newer owner that stored a batch. Store nothing and return
//     an error wrapping [kinesisload.ErrLeaseLost]; the Loader stops that
//     shard at once (LostSinkFenced). The batch is kept in [Memory.Refused].
//   - (c) b.Epoch is above the stored epoch: a new owner, resuming from a
//     fleet table that may lag the store. Store only the records after the
//     stored checkpoint: record r is after checkpoint c when
//     scan.Compare(scan.AfterSequence(r.SequenceNumber), c) > 0 (a
//     checkpoint is always after a whole Kinesis record, so the user
//     records of one KPL aggregate are all after it or none is).
//   - (d) the same epoch (one lease, or no fleet: every epoch 0): b must
//     start after the stored checkpoint. A record at or before it is a bug
//     of the sender: store nothing and return an error wrapping
//     [ErrOverlap]; not ErrLeaseLost, so the Loader does not take it for a
//     lost lease: it retries, then stops with ErrSink naming the shard.
//
// Unless (a) or (b) returned, the records kept are appended and the row
// becomes (b.Checkpoint, b.Epoch), in the same transaction. A batch with
// no records (a shard's start, or SHARD_END) stores only its checkpoint.
//
// A malformed batch (see [ErrBadBatch]) stores nothing and returns an error
// naming the stream and shard; so does an ended ctx, before the
// transaction.
func (m *Memory) Store(ctx context.Context, b kinesisload.Batch) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, fmt.Errorf("sinktest: stream %s, shard %s: %w", b.Stream, b.ShardID, err)
	}
	if err := validate(b); err != nil {
		return 0, kinesisload.Permanent(fmt.Errorf("sinktest: stream %s, shard %s, batch ending at %v: %w", b.Stream, b.ShardID, b.Checkpoint, err))
	}
	if m.flaws.has(flawNoLock) {
		return m.unlocked(b)
	}
	if m.flaws.has(flawNoRowLock) {
		m.mu.Lock()
		_, found := m.shards[shardKey{b.Stream, b.ShardID}]
		m.mu.Unlock()
		if !found {
			return m.unlocked(b)
		}
	}
	m.mu.Lock() // SELECT ... FOR UPDATE of the shard's row
	defer m.mu.Unlock()
	key := shardKey{b.Stream, b.ShardID}
	var row *Checkpoint
	if s := m.shards[key]; s != nil && !s.removed {
		row = &s.row
	}
	keep, err := m.check(b, row)
	if err != nil || keep == nil {
		return 0, err
	}
	return m.apply(key, b, keep), nil
}

// DeliverMulti stores batches, of distinct shards, in one transaction:
// see [Memory.StoreMulti].
func (m *Memory) DeliverMulti(ctx context.Context, batches []kinesisload.Batch) error {
	_, err := m.StoreMulti(ctx, batches)
	return err
}

// StoreMulti is DeliverMulti that also returns how many records of each
// batch it stored (as [Memory.Store] does for one).
//
// It is one transaction over every shard of the call, under the lock of
// all their rows: it runs the checks of [Memory.Store] on each batch
// against its shard's row, and then either stores what every batch keeps
// (the records and each shard's row; a batch stored already, (a), keeps
// nothing), or, when any check fails, nothing at all. When (b) refused one
// or more shards, the error is a [*kinesisload.ShardsFencedError] naming
// exactly those shards (it wraps [kinesisload.ErrLeaseLost]): the Loader
// then delivers the others again without them. Any other failure (an
// overlap (d), a malformed batch, two batches of one shard) is returned
// as Store returns it, and stores nothing either.
func (m *Memory) StoreMulti(ctx context.Context, batches []kinesisload.Batch) ([]int, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("sinktest: a call of %d batches: %w", len(batches), err)
	}
	seen := map[shardKey]bool{}
	for _, b := range batches {
		if err := validate(b); err != nil {
			return nil, kinesisload.Permanent(fmt.Errorf("sinktest: stream %s, shard %s, batch ending at %v: %w", b.Stream, b.ShardID, b.Checkpoint, err))
		}
		k := shardKey{b.Stream, b.ShardID}
		if seen[k] {
			return nil, kinesisload.Permanent(fmt.Errorf("sinktest: stream %s, shard %s: %w: two batches of the shard in one call", b.Stream, b.ShardID, ErrBadBatch))
		}
		seen[k] = true
	}
	if m.flaws.has(flawMultiOneByOne) || m.flaws.has(flawNoLock) {
		return m.oneByOne(ctx, batches)
	}
	m.mu.Lock() // the lock of every shard's row
	defer m.mu.Unlock()
	keeps := make([][]kinesisload.Record, len(batches))
	var fenced []string
	var fenceErrs []error
	for i, b := range batches {
		var row *Checkpoint
		if s := m.shards[shardKey{b.Stream, b.ShardID}]; s != nil && !s.removed {
			r := s.row // checked on a copy: nothing changes unless all pass
			row = &r
		}
		keep, err := m.check(b, row)
		switch {
		case errors.Is(err, kinesisload.ErrLeaseLost):
			fenced = append(fenced, b.ShardID)
			fenceErrs = append(fenceErrs, err)
		case err != nil:
			return nil, err
		}
		keeps[i] = keep
	}
	if len(fenced) > 0 {
		switch {
		case m.flaws.has(flawMultiStoresAroundFence):
			// Stores the others and says nothing of the fenced ones.
			for i, b := range batches {
				if keeps[i] != nil && !slices.Contains(fenced, b.ShardID) {
					m.apply(shardKey{b.Stream, b.ShardID}, b, keeps[i])
				}
			}
			return make([]int, len(batches)), nil
		case m.flaws.has(flawMultiFencesAll):
			fenced = fenced[:0]
			for _, b := range batches {
				fenced = append(fenced, b.ShardID)
			}
		case m.flaws.has(flawMultiUnnamedFence):
			return nil, errors.Join(fenceErrs...)
		}
		slices.Sort(fenced)
		return nil, &kinesisload.ShardsFencedError{Stream: batches[0].Stream, Shards: fenced, Err: errors.Join(fenceErrs...)}
	}
	n := make([]int, len(batches))
	for i, b := range batches {
		if keeps[i] == nil {
			continue // (a): stored already
		}
		if i > 0 && m.flaws.has(flawMultiFirstCheckpointOnly) {
			s := m.shards[shardKey{b.Stream, b.ShardID}]
			if s != nil && !s.removed {
				row := s.row
				n[i] = m.apply(shardKey{b.Stream, b.ShardID}, b, keeps[i])
				s.row = row // the records, not the checkpoint
				continue
			}
		}
		n[i] = m.apply(shardKey{b.Stream, b.ShardID}, b, keeps[i])
	}
	return n, nil
}

// oneByOne is the StoreMulti of a Memory broken by flawMultiOneByOne: a
// transaction per batch, so a call that fails part-way has stored the
// batches before the failure.
func (m *Memory) oneByOne(ctx context.Context, batches []kinesisload.Batch) ([]int, error) {
	n := make([]int, len(batches))
	for i, b := range batches {
		var err error
		if n[i], err = m.Store(ctx, b); err != nil {
			if errors.Is(err, kinesisload.ErrLeaseLost) {
				return nil, &kinesisload.ShardsFencedError{Stream: b.Stream, Shards: []string{b.ShardID}, Err: err}
			}
			return nil, err
		}
	}
	return n, nil
}

// none is the empty, non-nil slice of records: check's answer for a
// batch that stores only its checkpoint.
var none = []kinesisload.Record{}

// check runs the checks of the contract on b against the shard's row (nil
// when the shard has none) and returns the records to store: nil to store
// nothing ((a), or an error), empty to store only the checkpoint.
func (m *Memory) check(b kinesisload.Batch, row *Checkpoint) ([]kinesisload.Record, error) {
	if len(b.Records) == 0 && m.flaws.has(flawNoEmpty) {
		return nil, nil
	}
	if row == nil {
		// No row: the shard's first batch stores all of itself.
		return append(none, b.Records...), nil
	}
	if !m.flaws.has(flawNoA) {
		// (a) Stored already: nothing to do.
		c, err := scan.Compare(b.Checkpoint, row.Position)
		if err != nil {
			return nil, m.fail(b, err)
		}
		if m.flaws.has(flawFloatSeq) && b.Checkpoint.Kind == scan.KindAfterSequence && row.Position.Kind == scan.KindAfterSequence {
			c = floatCompare(b.Checkpoint.Sequence, row.Position.Sequence)
		}
		if c < 0 || c == 0 && !m.flaws.has(flawAOnlyPast) {
			if m.flaws.has(flawARaisesEpoch) && b.Epoch > row.Epoch {
				row.Epoch = b.Epoch
			}
			return nil, nil
		}
	}
	if b.Epoch < row.Epoch && !m.flaws.has(flawNoB) {
		// (b) The sender lost the lease to a newer owner.
		if m.flaws.has(flawBNotLeaseLost) {
			return nil, m.fail(b, errors.New("fenced"))
		}
		m.refused = append(m.refused, Refusal{Batch: b, Held: *row})
		return nil, m.fail(b, fmt.Errorf("%w: the shard is held at epoch %d (checkpoint %v)", kinesisload.ErrLeaseLost, row.Epoch, row.Position))
	}
	// (c) or (d).
	keep, err := m.after(b, *row)
	if err != nil {
		return nil, m.fail(b, err)
	}
	return append(none, keep...), nil
}

// apply stores keep and b's checkpoint and epoch as the shard's row, and
// returns how many records it stored.
func (m *Memory) apply(key shardKey, b kinesisload.Batch, keep []kinesisload.Record) int {
	s := m.shards[key]
	if s == nil {
		s = &shardRows{}
		m.shards[key] = s
	}
	for i, r := range keep {
		if m.flaws.has(flawSeqKey) && i > 0 && r.SequenceNumber == keep[i-1].SequenceNumber {
			continue
		}
		s.records = append(s.records, Stored{Record: r, Epoch: b.Epoch})
	}
	epoch := b.Epoch
	if len(b.Records) == 0 && m.flaws.has(flawEmptyNoEpoch) {
		epoch = s.row.Epoch
	}
	s.row, s.removed = Checkpoint{Position: b.Checkpoint, Epoch: epoch}, false
	return len(keep)
}

// unlocked is the transaction of a Memory broken by flawNoLock: the checks
// and the write under two locks, with a pause between, so that another
// Deliver of the shard can run in between (check, then act).
func (m *Memory) unlocked(b kinesisload.Batch) (int, error) {
	key := shardKey{b.Stream, b.ShardID}
	m.mu.Lock()
	var row *Checkpoint
	if s := m.shards[key]; s != nil && !s.removed {
		r := s.row
		row = &r
	}
	keep, err := m.check(b, row)
	m.mu.Unlock()
	if err != nil || keep == nil {
		return 0, err
	}
	time.Sleep(time.Millisecond)
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.apply(key, b, keep), nil
}

// after returns the records of b after the stored row's checkpoint: for a
// new owner (c) it drops the others, for the same epoch (d) any such
// record is an error. b.Epoch is not below row.Epoch.
func (m *Memory) after(b kinesisload.Batch, row Checkpoint) ([]kinesisload.Record, error) {
	var keep []kinesisload.Record
	for _, r := range b.Records {
		c, err := scan.Compare(scan.AfterSequence(r.SequenceNumber), row.Position)
		if err != nil {
			return nil, err
		}
		if m.flaws.has(flawAtAsAfter) && row.Position.Kind == scan.KindAtSequence {
			c, _ = scan.Compare(scan.AfterSequence(r.SequenceNumber), scan.AfterSequence(row.Position.Sequence))
		}
		if m.flaws.has(flawTextSeq) && row.Position.Kind == scan.KindAfterSequence {
			c = strings.Compare(r.SequenceNumber, row.Position.Sequence)
		}
		if m.flaws.has(flawFloatSeq) && row.Position.Kind == scan.KindAfterSequence {
			c = floatCompare(r.SequenceNumber, row.Position.Sequence)
		}
		if m.flaws.has(flawCKeepsAtCheckpoint) {
			c++
		}
		switch {
		case c > 0 || m.flaws.has(flawCStoresAll) && b.Epoch > row.Epoch:
			keep = append(keep, r)
		case b.Epoch == row.Epoch && !m.flaws.has(flawNoD):
			// (d) The same lease overlaps what it stored: a bug no
			// retry fixes.
			err := fmt.Errorf("%w: record %s (sub-sequence %d) is at or before the checkpoint %v stored at epoch %d",
				ErrOverlap, r.SequenceNumber, r.SubSequenceNumber, row.Position, row.Epoch)
			if m.flaws.has(flawDNotPermanent) {
				return nil, err
			}
			return nil, kinesisload.Permanent(err)
		case m.flaws.has(flawCAsD):
			return nil, fmt.Errorf("%w: new owner", ErrOverlap)
		}
		// (c) A new owner's overlap: stored already, skip it.
	}
	return keep, nil
}

// floatCompare compares two sequence numbers as float64: the break of
// flawFloatSeq.
func floatCompare(a, b string) int {
	fa, _ := strconv.ParseFloat(a, 64)
	fb, _ := strconv.ParseFloat(b, 64)
	switch {
	case fa < fb:
		return -1
	case fa > fb:
		return 1
	}
	return 0
}

// fail wraps err with the batch.
func (m *Memory) fail(b kinesisload.Batch, err error) error {
	return fmt.Errorf("sinktest: stream %s, shard %s, batch of %d records ending at %v at epoch %d: %w",
		b.Stream, b.ShardID, len(b.Records), b.Checkpoint, b.Epoch, err)
}

// validate checks what the Loader guarantees of every batch.
func validate(b kinesisload.Batch) error {
	if b.Stream == "" || b.ShardID == "" {
		return fmt.Errorf("%w: no stream name or shard ID", ErrBadBatch)
	}
	if err := b.Checkpoint.Validate(); err != nil {
		return fmt.Errorf("%w: checkpoint: %w", ErrBadBatch, err)
	}
	if b.Checkpoint.Kind == scan.KindLatest {
		return fmt.Errorf("%w: checkpoint LATEST has no fixed place", ErrBadBatch)
	}
	for i, r := range b.Records {
		if err := scan.ValidateSequence(r.SequenceNumber); err != nil {
			return fmt.Errorf("%w: record %d: %w", ErrBadBatch, i, err)
		}
		if i == 0 {
			continue
		}
		p := b.Records[i-1]
		c := scan.CompareSequence(p.SequenceNumber, r.SequenceNumber)
		if c > 0 || c == 0 && p.SubSequenceNumber >= r.SubSequenceNumber {
			return fmt.Errorf("%w: record %d (%s, sub-sequence %d) is not after record %d (%s, sub-sequence %d)",
				ErrBadBatch, i, r.SequenceNumber, r.SubSequenceNumber, i-1, p.SequenceNumber, p.SubSequenceNumber)
		}
	}
	if n := len(b.Records); n > 0 {
		last := b.Records[n-1].SequenceNumber
		if c, err := scan.Compare(scan.AfterSequence(last), b.Checkpoint); err != nil || c > 0 {
			return fmt.Errorf("%w: the checkpoint is before the last record %s", ErrBadBatch, last)
		}
	}
	return nil
}

// Checkpoints returns the checkpoint stored for every shard of stream: an
// empty map when none is.
func (m *Memory) Checkpoints(ctx context.Context, stream string) (map[string]scan.Position, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[string]scan.Position{}
	for k, s := range m.shards {
		if (k.stream == stream || m.flaws.has(flawAllStreams)) && !s.removed {
			out[k.shard] = s.row.Position
		}
	}
	return out, nil
}

// Checkpoint returns shard's row: its checkpoint and the epoch it was
// stored at; false when the shard has no row.
func (m *Memory) Checkpoint(stream, shard string) (Checkpoint, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.shards[shardKey{stream, shard}]
	if s == nil || s.removed {
		return Checkpoint{}, false
	}
	return s.row, true
}

// RemoveCheckpoints removes the row of every shard of stream, keeping its
// records: what an operator does to the Sink's store before the Loaders
// start over on a stream deleted and re-created under the name
// ([kinesisload.StreamRecreatedStartOver]), whose shard IDs repeat the old
// stream's. The next batch of such a shard finds no row, as its first.
func (m *Memory) RemoveCheckpoints(stream string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for k, s := range m.shards {
		if k.stream == stream {
			s.removed = true
		}
	}
}

// Stored returns the records stored for shard, in the order stored (shard
// order): a record stored twice would appear twice. The slice is a copy.
func (m *Memory) Stored(stream, shard string) []Stored {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.shards[shardKey{stream, shard}]
	if s == nil {
		return nil
	}
	return slices.Clone(s.records)
}

// Shards returns the IDs of the shards of stream that have records or a
// row, sorted.
func (m *Memory) Shards(stream string) []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []string
	for k := range maps.Keys(m.shards) {
		if k.stream == stream {
			out = append(out, k.shard)
		}
	}
	slices.Sort(out)
	return out
}

// Refused returns the batches refused by check (b), oldest first. The
// slice is a copy.
func (m *Memory) Refused() []Refusal {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.refused)
}
